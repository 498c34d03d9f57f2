"""Experiment tracking: runs and sweeps logged to MLflow (``[output] tracking = "mlflow"``).

A run is one MLflow run: the resolved scenario as parameters (dotted keys, ``algorithm.C``), every metrics row as one
step of every numeric column (step = the row's index in metrics.csv, the same values as its cells), the stop reason,
engine, seed and run directory as tags, and the run directory as artifacts. A sweep is a parent run (the grid as
parameters, the sweep's tables and figures as artifacts) with one child run per point, logged as above; a point that
failed is a child with status FAILED and its error as a tag.

MLflow is imported only here and only when tracking is on (``svmsim[mlflow]``): a scenario without tracking never
imports it. The store: ``tracking_uri`` in ``[output]``, else the ``MLFLOW_TRACKING_URI`` environment variable, else
MLflow's own default, a SQLite file ``mlflow.db`` in the working directory (``mlflow ui`` in that directory shows
it); a SQLite store keeps its artifacts in ``mlruns`` beside its database file. The experiment: ``[output]
experiment``, else the scenario's name. `Tracker.open` reaches the store and the experiment before the run does any
work, so a wrong URI or a missing MLflow fails at once (`TrackingError`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .errors import SvmsimError

__all__ = ["TrackingError", "Tracker", "DEFAULT_URI", "flat_params", "finished_anyway"]

#: MLflow's own default store (MLflow >= 3.7): a SQLite file in the working directory
DEFAULT_URI = "sqlite:///mlflow.db"


class TrackingError(SvmsimError):
    """Tracking was asked for and cannot be done (MLflow missing, the store unreachable, a logging call refused)."""


def flat_params(table: dict, prefix: str = "") -> dict[str, str]:
    """A nested scenario table as MLflow parameters: dotted keys, each value as TOML-like text (lists and tables of
    a list as their repr)."""
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, name + "."))
        else:
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _metric_name(column: str) -> str:
    """A metrics.csv column as an MLflow metric key (letters, digits, ``_ - . / space``; other characters as _)."""
    return "".join(ch if (ch.isalnum() or ch in "_-./ ") else "_" for ch in column)


def metric_steps(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """The numeric cells of metrics rows as MLflow metric histories: key -> [(step, value)], step = row index.
    Booleans become 0/1; text cells and empty cells are left out."""
    out: dict[str, list[tuple[int, float]]] = {}
    for step, row in enumerate(rows):
        for column, value in row.items():
            if isinstance(value, bool):
                value = float(value)
            elif isinstance(value, (int, float)) or hasattr(value, "dtype"):
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    continue
            else:
                continue
            out.setdefault(_metric_name(column), []).append((step, value))
    return out


class Tracker:
    """One MLflow store and experiment, opened before the work it will log (`open`), then `log_run` / `log_sweep`."""

    def __init__(self, client, uri: str, experiment_id: str, experiment: str):
        self.client, self.uri, self.experiment_id, self.experiment = client, uri, experiment_id, experiment

    @classmethod
    def open(cls, uri: str | None, experiment: str) -> "Tracker":
        """Reach the store at `uri` (None: MLFLOW_TRACKING_URI, else `DEFAULT_URI`) and the experiment named
        `experiment` (made when missing). Raises `TrackingError` naming what failed."""
        try:
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise TrackingError("[output] tracking = 'mlflow' needs MLflow, which is not installed; allowed: "
                                "pip install 'svmsim[mlflow]', or tracking = 'none'") from None
        uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
        try:
            client = MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(experiment)
            experiment_id = (found.experiment_id if found is not None
                             else client.create_experiment(experiment, artifact_location=_artifacts_beside(uri)))
        except (MlflowException, OSError, ValueError) as exc:
            raise TrackingError(f"MLflow's store at {uri!r} cannot be used: {_first_line(exc)}; allowed: "
                                "[output] tracking_uri = a store MLflow opens (sqlite:///FILE, http://HOST:PORT, "
                                "file:DIR)") from None
        return cls(client, uri, experiment_id, experiment)

    # -- runs -----------------------------------------------------------------------------------------------------
    def log_run(self, result, parent_id: str | None = None, name: str | None = None) -> str:
        """Log one finished run (a `RunResult`): parameters, metrics, tags and its directory; its MLflow run id."""
        return self._log(name or result.scenario.name, result.scenario.to_dict(), result.metrics,
                         {"svmsim.stop_reason": result.stop_reason, "svmsim.algorithm": result.scenario.algorithm.name,
                          "svmsim.engine": result.scenario.engine.name, "svmsim.seed": str(result.scenario.seed),
                          "svmsim.run_dir": str(result.run_dir or "")},
                         result.run_dir, parent_id, "FINISHED")

    def log_failed_point(self, scenario, error: str, parent_id: str, name: str) -> str:
        """A sweep point that failed: its parameters and error, status FAILED."""
        return self._log(name, scenario.to_dict(), [], {"svmsim.error": error[:4000]}, None, parent_id, "FAILED")

    def log_sweep(self, name: str, grid: dict[str, list], points: list[tuple], sweep_dir: Path | None) -> str:
        """A sweep: a parent run (the grid as parameters; sweep.csv, sweep.md and the figures as artifacts) and one
        child per point, ``points`` = [(name, scenario, `RunResult` or None, error or None)]. The parent's id."""
        params = {f"sweep.{key}": str(values) for key, values in grid.items()}
        files = sorted(p for p in sweep_dir.iterdir() if p.is_file()) if sweep_dir is not None else []
        parent = self._log(name, {}, [], {"svmsim.sweep_dir": str(sweep_dir or ""),
                                          "svmsim.points": str(len(points))}, None, None, None, extra=params)
        try:
            for point_name, scenario, result, error in points:
                if result is not None:
                    self.log_run(result, parent, point_name)
                else:
                    self.log_failed_point(scenario, error or "", parent, point_name)
            for path in files:
                self.client.log_artifact(parent, str(path))
            self.client.set_terminated(parent, "FINISHED")
        except Exception as exc:  # noqa: BLE001 - any store failure is one tracking error
            raise TrackingError(f"logging sweep {name!r} to MLflow at {self.uri!r} failed: {_first_line(exc)}") from None
        return parent

    def _log(self, name: str, scenario: dict, rows: list[dict], tags: dict[str, str], run_dir, parent_id,
             status: str | None, extra: dict[str, str] | None = None) -> str:
        from mlflow.entities import Metric, Param, RunTag

        tags = dict(tags)
        if parent_id is not None:
            tags["mlflow.parentRunId"] = parent_id
        try:
            run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
            run_id = run.info.run_id
            params = {**flat_params(scenario), **(extra or {})}
            now = int(time.time() * 1000)
            metrics = [Metric(key, value, now, step) for key, history in metric_steps(rows).items()
                       for step, value in history]
            self.client.log_batch(run_id, metrics=metrics,
                                  params=[Param(k, v[:6000]) for k, v in params.items()],
                                  tags=[RunTag("svmsim.tracked_by", "svmsim")])
            if run_dir is not None and Path(run_dir).is_dir():
                self.client.log_artifacts(run_id, str(run_dir))
            if status is not None:
                self.client.set_terminated(run_id, status)
        except Exception as exc:  # noqa: BLE001 - any store failure is one tracking error
            raise TrackingError(f"logging run {name!r} to MLflow at {self.uri!r} failed: {_first_line(exc)}") from None
        return run_id


def finished_anyway(exc: TrackingError, what: str, where: Path | None) -> TrackingError:
    """A logging failure after the work: the error, saying that the run or sweep itself finished and where."""
    return TrackingError(f"{exc}; the {what} itself finished" + (f" and is in {where}" if where is not None else ""))


def _artifacts_beside(uri: str) -> str | None:
    """A SQLite store's artifacts: ``mlruns`` beside its database file (MLflow's default, ``./mlruns`` of the working
    directory, would scatter them over every directory a run starts in); other stores: their own default."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri[len("sqlite:///"):]).resolve()
    return (database.parent / "mlruns").as_uri()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def tracker_for(output, name: str) -> Tracker | None:
    """The tracker an ``[output]`` section asks for (None when tracking is off)."""
    if output.tracking == "none":
        return None
    return Tracker.open(output.tracking_uri, output.experiment or name)

