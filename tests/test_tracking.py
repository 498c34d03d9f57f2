"""Experiment tracking (`svmsim.tracking`): runs and sweeps read back through MLflow's own client, equal to the run
directories; nothing imports MLflow when tracking is off; a tracker that cannot be used fails before any work."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

from svmsim.errors import ScenarioError
from svmsim.runner import read_run, run
from svmsim import load_scenario
from svmsim.sweep import run_sweep

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

IRIS = {"name": "tracked-iris", "seed": 0, "data": {"name": "iris"}, "partition": {"scheme": "stratified"},
        "algorithm": {"name": "saddle-dsvc", "clients": 3},
        "stop": {"max_iterations": 3000}, "output": {"eval_every": 100, "progress": False, "plots": False}}


def _tracked(tmp_path, **output):
    spec = {**IRIS, "output": {**IRIS["output"], "tracking": "mlflow",
                               "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", **output}}
    return spec, spec["output"]["tracking_uri"]


def _same_metrics(client, run_id, rows):
    """Every numeric cell of every metrics.csv row is the MLflow metric of that column at step = the row's index,
    and MLflow holds nothing else."""
    expected: dict[str, dict[int, float]] = {}
    for step, row in enumerate(rows):
        for column, value in row.items():
            if isinstance(value, (int, float)):
                expected.setdefault(column, {})[step] = float(value)
    logged = client.get_run(run_id).data.metrics
    assert set(logged) == set(expected)
    for column, by_step in expected.items():
        history = {m.step: m.value for m in client.get_metric_history(run_id, column)}
        assert history.keys() == by_step.keys(), column
        for step, value in by_step.items():
            assert history[step] == value or (math.isnan(value) and math.isnan(history[step])), (column, step)


def test_a_sweep_is_one_parent_and_a_child_per_point_equal_to_metrics_csv(tmp_path):
    spec, uri = _tracked(tmp_path, experiment="byo-study")
    client = MlflowClient(uri)
    spec["sweep"] = {"grid": {"algorithm.clients": [2, 3, 4, 5]}}
    res = run_sweep(spec, out=tmp_path / "sw", progress=False)
    assert not res.failed
    experiment = client.get_experiment_by_name("byo-study")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["sweep.algorithm.clients"] == "[2, 3, 4, 5]"
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"sweep.csv", "sweep.md"}
    by_name = {}
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        by_name[child.info.run_name] = child
    assert sorted(int(c.data.params["algorithm.clients"]) for c in children) == [2, 3, 4, 5]
    assert len(res.runs) == 4
    for result in res.runs:
        child = by_name[result.run_dir.name]            # a child is named by its point's run directory
        assert child.data.params["algorithm.clients"] == str(result.scenario.to_dict()["algorithm"]["clients"])
        recorded = read_run(result.run_dir)
        assert child.data.tags["svmsim.stop_reason"] == recorded.stop_reason
        assert child.data.tags["svmsim.run_dir"] == str(result.run_dir)
        _same_metrics(client, child.info.run_id, recorded.metrics)
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"metrics.csv", "summary.json", "scenario.resolved.toml", "ledger.json"} <= artifacts


def test_one_run_is_one_mlflow_run_with_the_resolved_scenario_as_parameters(tmp_path):
    spec, uri = _tracked(tmp_path)
    client = MlflowClient(uri)
    res = run(spec, out_dir=tmp_path / "run")
    (logged,) = client.search_runs([client.get_experiment_by_name("tracked-iris").experiment_id])
    assert logged.data.params["algorithm.clients"] == "3"
    assert logged.data.params["output.tracking"] == "mlflow"
    assert logged.data.params["seed"] == "0"
    assert logged.data.tags["svmsim.run_dir"] == str(res.run_dir)
    _same_metrics(client, logged.info.run_id, read_run(res.run_dir).metrics)
    assert (tmp_path / "mlruns").is_dir()          # a SQLite store's artifacts lie beside its database


def test_an_unusable_store_fails_before_any_work_and_leaves_no_run(tmp_path):
    spec, _ = _tracked(tmp_path)
    spec["output"]["tracking_uri"] = "no-such-store://here"
    from svmsim.tracking import TrackingError

    with pytest.raises(TrackingError, match="cannot be used.*allowed: .*sqlite:///FILE"):
        run(spec, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_a_missing_mlflow_is_one_clear_error(tmp_path, monkeypatch):
    for name in ("mlflow", "mlflow.tracking", "mlflow.exceptions"):
        monkeypatch.setitem(sys.modules, name, None)
    spec, _ = _tracked(tmp_path)
    from svmsim.tracking import TrackingError

    with pytest.raises(TrackingError, match=r"needs MLflow.*pip install 'svmsim\[mlflow\]'"):
        run(spec, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_unknown_tracker_is_refused_with_the_allowed_ones():
    with pytest.raises(ScenarioError, match="tracking = 'wandb' is not an experiment tracker; allowed: none, mlflow"):
        load_scenario({**IRIS, "output": {"tracking": "wandb"}})


def test_nothing_imports_mlflow_when_tracking_is_off(tmp_path):
    code = ("import sys, svmsim\n"
            f"svmsim.run({IRIS!r}, write=False)\n"
            "from svmsim.cli import main\n"
            "assert 'mlflow' not in sys.modules, 'mlflow imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_store_that_fails_after_the_run_says_the_run_finished_and_where(tmp_path, monkeypatch):
    from svmsim.tracking import Tracker, TrackingError

    def refuse(self, result, parent_id=None, name=None):
        raise TrackingError("logging run 'tracked-iris' to MLflow failed: the store went away")

    monkeypatch.setattr(Tracker, "log_run", refuse)
    spec, _ = _tracked(tmp_path)
    with pytest.raises(TrackingError, match="the store went away; the run itself finished and is in .*run"):
        run(spec, out_dir=tmp_path / "run")
    assert read_run(tmp_path / "run").metrics           # the run directory is complete
