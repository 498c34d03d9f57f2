"""The command line and the Python API end to end: runs, reproducibility, and every bad-input path."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import svmsim
from svmsim.cli import main
from svmsim.errors import ScenarioError, TopologyError
from svmsim.core.metrics import WALL_CLOCK_METRICS

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "scenarios" / "quickstart.toml"


def small(name="t", **algorithm):
    alg = {"name": "saddle-dsvc", "clients": 4, **algorithm}
    return {"name": name, "seed": 3, "data": {"name": "iris"}, "algorithm": alg,
            "stop": {"max_iterations": 400}, "output": {"eval_every": 100, "progress": False}}


def test_quickstart_writes_a_complete_run_directory(tmp_path):
    out = tmp_path / "qs"
    assert main(["run", str(QUICK), "--out", str(out), "--no-progress"]) == 0
    for f in ("scenario.resolved.toml", "metrics.csv", "ledger.json", "ledger_edges.csv", "ledger_rounds.csv",
              "model.npz", "summary.json", "convergence.png"):
        assert (out / f).is_file(), f
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"].startswith("certified relative gap")
    assert summary["final"]["rel_gap"] <= 1e-3
    assert summary["ledger_matches_declared"] is True
    assert summary["ledger"]["scalars"] == summary["declared_scalars"]
    rounds = np.loadtxt(out / "ledger_rounds.csv", delimiter=",", skiprows=1, dtype=np.int64)
    assert rounds[:, 1:].sum(axis=0).tolist() == [summary["ledger"][k] for k in ("messages", "scalars", "bytes")]
    assert (np.diff(rounds[:, 0]) > 0).all()
    # the resolved scenario is itself a valid scenario
    assert svmsim.load_scenario(out / "scenario.resolved.toml").name == "quickstart"
    assert not list(tmp_path.glob(".*incomplete"))


def test_same_scenario_and_seed_give_the_same_numbers():
    a = svmsim.run(small(), write=False)
    b = svmsim.run(small(), write=False)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS | {"time"}} for r in rows]
    assert strip(a.metrics) == strip(b.metrics)
    assert a.ledger.equals(b.ledger)
    np.testing.assert_array_equal(a.model["coef"], b.model["coef"])
    c = svmsim.run(small(), overrides={"seed": 4}, write=False)
    assert not np.array_equal(a.model["coef"], c.model["coef"])


def test_python_api_accepts_a_networkx_graph():
    # labels other than 0..N-1 are relabelled in sorted order: here the hub "a-server" becomes node 0
    G = nx.relabel_nodes(nx.star_graph(4), {0: "a-server", 1: "x", 2: "y", 3: "z", 4: "w"})
    res = svmsim.run(small(), topology=G, write=False)
    assert res.ledger.totals["scalars"] == res.summary["declared_scalars"]
    G = nx.relabel_nodes(nx.star_graph(4), {0: "z-server", 1: "a", 2: "b", 3: "c", 4: "d"})
    with pytest.raises(TopologyError, match="server at node 0"):
        svmsim.run(small(), topology=G, write=False)            # here the hub sorts last
    res = svmsim.run(small(), topology=nx.star_graph(4), write=False)
    assert res.ledger.totals["scalars"] == res.summary["declared_scalars"]
    with pytest.raises(TopologyError):
        svmsim.run(small(), topology=nx.cycle_graph(5), write=False)


def run_cli(*args, env_extra=None, cwd=None):
    import os

    env = dict(os.environ, **(env_extra or {}))
    r = subprocess.run([sys.executable, "-m", "svmsim.cli", *args], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=300)
    r.stderr = " ".join(r.stderr.split())          # the CLI wraps long messages
    return r


def write_scenario(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


BASE = """
name = "bad"
[data]
name = "{data}"
[algorithm]
name = "saddle-dsvc"
clients = 3
{extra}
[stop]
max_iterations = 50
[output]
dir = "{out}"
progress = false
"""


@pytest.mark.parametrize("data,extra,needle", [
    ("iris", "epss = 1", "unknown key 'epss'"),
    ("iris", "eps = \"small\"", "wrong type"),
    ("iris", "nu = 0.0001", "infeasible"),
    ("no_such_set", "", "no_such_set"),
    ("iris", "alpha = 0.5\nnu = 0.1", "either nu or alpha"),
])
def test_bad_input_is_one_clear_error_and_leaves_nothing(tmp_path, data_env, data, extra, needle):
    out = tmp_path / "runs"
    p = write_scenario(tmp_path, BASE.format(data=data, extra=extra, out=out))
    r = run_cli("run", str(p))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_non_binary_and_malformed_data_files(tmp_path, data_env):
    multi = tmp_path / "three.txt"
    multi.write_text("1 1:0.5\n2 1:0.1\n3 1:0.9\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("1 1:0.5\n-1 1:zz\n")
    for f, needle in ((multi, "not binary"), (bad, "malformed")):
        p = write_scenario(tmp_path, BASE.format(data=f, extra="", out=tmp_path / "runs"))
        r = run_cli("run", str(p))
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_toml_syntax_error_and_missing_file(tmp_path):
    p = write_scenario(tmp_path, "name = \n")
    r = run_cli("validate", str(p))
    assert r.returncode == 2 and "not valid TOML" in r.stderr
    r = run_cli("run", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "missing.toml" in r.stderr


def test_failed_run_leaves_no_directory(tmp_path, monkeypatch):
    from svmsim.algorithms import saddle

    def broken(*a, **k):
        raise RuntimeError("evaluation exploded")

    monkeypatch.setattr(saddle.SaddleEvaluator, "__call__", broken)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        svmsim.run(small(), out_dir=out)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_existing_run_directory_is_not_overwritten(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(ScenarioError, match="already exists"):
        svmsim.run(small(), out_dir=out)


def test_two_runs_in_one_second_get_directories_of_their_own(tmp_path, monkeypatch):
    """A run directory named by the scenario, seed and second is never taken twice: the second run in the same
    second gets the name with -2 (an explicit --out that exists is still refused, above)."""
    import datetime

    from svmsim.config import schema

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 28, 0, 0, 0)

    monkeypatch.setattr(schema._dt, "datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    first = svmsim.run(small())
    second = svmsim.run(small())
    assert first.run_dir == Path("runs/t-3-20261128-000000")
    assert second.run_dir == Path("runs/t-3-20261128-000000-2")
    assert (first.run_dir / "summary.json").is_file() and (second.run_dir / "summary.json").is_file()


def test_validate_list_and_help(shared_data_dir):
    assert main(["validate", str(QUICK)]) == 0
    assert main(["list", "algorithms"]) == 0
    r = run_cli("--help")
    assert r.returncode == 0 and "scenario" in r.stdout
    r = run_cli("list", "datasets", "--data-dir", str(shared_data_dir))
    assert "a9a" in r.stdout


def test_list_engines_explains_every_engine_key(capsys):
    from svmsim.config.sections import EngineSection
    from svmsim.engine.kinds import RAY_KEYS

    assert main(["list", "engines"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "engines ([engine] name = NAME, and the engine's keys):"
    assert [line.split()[0] for line in said[1:4]] == ["inproc", "ray", "ray-cgraph"]
    assert said[4] == "  Ray keys of [engine]:"
    keys = {line.split()[0]: line for line in said[5:]}
    assert list(keys) == list(RAY_KEYS) == [k for k in EngineSection.model_fields if k != "name"]
    assert "deterministic (time windows: the in-process run bit for bit" in keys["gossip"]
    assert keys["actors"].startswith("    actors           (default 2) Ray: host actors")


def test_list_algorithms_name_explains_every_key(capsys):
    from svmsim.algorithms.registry import get_algorithm

    assert main(["list", "algorithms", "saddle-svc"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[1].startswith("  paper 000, Algorithms 1-2; one machine")
    keys = {line.split()[0]: line for line in said if line.startswith("    ") and not line.startswith("     ")}
    assert list(keys) == list(get_algorithm("saddle-svc").Params.model_fields)
    assert keys["eps"].endswith("default 0.001; allowed: a number in (0, 1)")
    assert keys["q"].endswith('default "data"; allowed: "data", "log" or a number')
    assert keys["projection"].endswith('default "newton"; allowed: "newton", "rule3", "sort"')
    assert main(["list", "algorithms"]) == 0
    assert ".txt" not in capsys.readouterr().out                      # the papers are cited, not their files
    assert main(["list", "algorithms", "no-such"]) == 2
    assert "is not a known algorithm; allowed: bqo-a" in capsys.readouterr().err
    assert main(["list", "topologies", "ring"]) == 2


def test_the_progress_bar_follows_the_rule_that_stops_first():
    """The bar's fraction is the largest of: iterations over the budget, and the certified gap's way from its first
    value to the target on a log scale -- so a run that stops on its gap ends near 100 %, not at 0.1 % of a
    budget it was never going to use."""
    from svmsim.runner import _Progress

    bar = _Progress(False, total=1_000_000, desc="x", gap=1e-3)
    assert bar.fraction(100, {"rel_gap": 1.0}) == pytest.approx(1e-4)            # the first gap: 0 of the way
    assert bar.fraction(200, {"rel_gap": 1e-2}) == pytest.approx(2 / 3)           # two of three decades
    assert bar.fraction(300, {"rel_gap": 1e-3}) == 1.0
    assert bar.fraction(900_000, {"rel_gap": 0.5}) == pytest.approx(0.9)          # the budget binds
    counting = _Progress(False, total=None, desc="x")
    assert not counting.fraction_known


def test_the_scenarios_progress_setting_is_kept_by_the_cli(monkeypatch, tmp_path):
    import svmsim.runner

    seen = {}

    def fake_run(scenario, out_dir=None, progress=None, **kw):
        seen["progress"] = progress
        raise SystemExit(0)

    monkeypatch.setattr(svmsim.runner, "run", fake_run)
    with pytest.raises(SystemExit):
        main(["run", str(QUICK)])
    assert seen["progress"] is None                         # None: the scenario's [output] progress decides
    with pytest.raises(SystemExit):
        main(["run", str(QUICK), "--no-progress"])
    assert seen["progress"] is False
