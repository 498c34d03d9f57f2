"""What a sweep measures from its runs: the cost columns at a target, the fitted slopes and the trials table.

Each row of ``sweep.csv`` is built here from one run (`sweep_row`): the final metrics, the topology facts of peer
algorithms, and the *cost* columns read from the first evaluation point whose metric reaches the target (eps, or
``[sweep] target`` / ``targets``). `eps_slopes` and `scaling_fits` fit log-log lines through those costs;
`aggregate_trials` averages seeded repetitions. Planning, running and writing a sweep live in `svmsim.sweep`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .comm.quantities import QUANTITIES, quantity

__all__ = [
    "AGAINST_COLUMNS",
    "COST_COLUMNS",
    "FINAL_COLUMNS",
    "INFO_COLUMNS",
    "OPTIONAL_COST_COLUMNS",
    "OPTIONAL_FINAL_COLUMNS",
    "TARGET_COLUMNS",
    "against_y",
    "aggregate_trials",
    "compare_to_first_variant",
    "costs_at",
    "eps_slopes",
    "first_reaching",
    "fit_loglog",
    "fit_slope",
    "parse_target_column",
    "scaling_fits",
    "sweep_row",
]

def fit_slope(inv_eps: np.ndarray, cost: np.ndarray) -> float:
    """Least-squares slope of log(cost) against log(1/eps) (NaN with fewer than two usable points)."""
    inv_eps, cost = np.asarray(inv_eps, dtype=float), np.asarray(cost, dtype=float)
    ok = np.isfinite(cost) & (cost > 0) & np.isfinite(inv_eps) & (inv_eps > 0)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(inv_eps[ok]), np.log(cost[ok]), 1)[0])


def fit_loglog(x, y) -> dict:
    """Least-squares line of log(y) against log(x): slope, intercept (y ~ exp(intercept) x^slope), r2 and the
    number of points used (finite and positive); slope NaN with fewer than two."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    out = {"points": int(ok.sum()), "slope": math.nan, "intercept": math.nan, "r2": math.nan}
    if ok.sum() < 2 or np.ptp(np.log(x[ok])) == 0:
        return out
    lx, ly = np.log(x[ok]), np.log(y[ok])
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + intercept)
    total = float(((ly - ly.mean()) ** 2).sum())
    out.update(slope=float(slope), intercept=float(intercept),
               r2=float(1.0 - (resid ** 2).sum() / total) if total > 0 else math.nan)
    return out


def first_reaching(metrics: list[dict], threshold: float, metric: str = "rel_gap") -> dict | None:
    """The first evaluation point whose `metric` is <= threshold (None if there is none)."""
    for m in metrics:
        v = m.get(metric)
        if v is not None and v <= threshold:
            return m
    return None


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def costs_at(metrics: list[dict], threshold: float, metric: str) -> dict:
    """The cost columns at the first evaluation point with `metric` <= threshold (NaN where none reached it)."""
    m = first_reaching(metrics, threshold, metric)
    if m is None:
        out = {c: math.nan for c in COST_COLUMNS}
        out["reached"] = False
        return out
    out = {column: _num(m.get(metric)) for column, metric in _COST_METRICS}
    out.update({q.cost_column: _num(m.get(q.name)) for q in _OPTIONAL_COSTS if q.name in m})
    out["reached"] = True
    return out


FINAL_COLUMNS = ("objective", "hull_distance", "margin", "rel_gap", "gap_per_cn", "rel_dual", "rel_primal",
                 "modelled_time", "primal_error", "gap", "iterate_gap", "rel_band_gap", "train_accuracy",
                 "test_accuracy", "test_accuracy_std", "objective_std", "train_accuracy_std", "test_accuracy_shard",
                 "test_accuracy_shard_std", "average_model_test_accuracy", "consensus_error", "model_disagreement", "nodes_up",
                 "test_accuracy_all_nodes", "test_error", "kernel_evaluations", "inner_products",
                 "kernel_evaluations_lower", "kernel_evaluations_upper", "solver_time", "level", "norm", "hinge",
                 "support")
#: topology facts copied from a run's algorithm_info into its row (peer algorithms: pushsum, gadget)
INFO_COLUMNS = ("nodes", "spectral_gap", "inv_spectral_gap", "mixing_time", "diameter", "mean_degree",
                "spectral_gap_metropolis")
#: the cost columns repeated for each of ``[sweep] targets`` (as ``cost_rounds@1e-3``, ...)
TARGET_COLUMNS = ("cost_iteration", "cost_rounds", "cost_scalars", "cost_modelled_time", "cost_wall_time")
#: (cost column, metrics column) read at the first evaluation point that reaches the target: the registry's
#: quantities with a cost column (`comm.quantities`) and the run's progress measures, in this order
_COST_METRICS = ((quantity("scalars").cost_column, "scalars"), (quantity("messages").cost_column, "messages"),
                 ("cost_rounds", "round"), ("cost_virtual_time", "virtual_time"), ("cost_wall_time", "wall_time"),
                 ("cost_iteration", "iteration"), (quantity("modelled_time").cost_column, "modelled_time"))
#: the registry's optional quantities with a cost column: a ``cost_<name>`` column only in runs that model them
_OPTIONAL_COSTS = tuple(q for q in QUANTITIES if q.cost and q.optional)
#: the cost columns every row has (NaN where no evaluation reached the target)
COST_COLUMNS = ("cost_scalars", "cost_messages", "cost_rounds", "cost_virtual_time", "cost_wall_time",
                "cost_iteration", "cost_messages_per_node", "cost_modelled_time")
#: the optional cost columns (`_OPTIONAL_COSTS`), placed after ``cost_modelled_time``
OPTIONAL_COST_COLUMNS = tuple(q.cost_column for q in _OPTIONAL_COSTS)
#: the final metrics of the registry's optional quantities, copied into a row when a run has them
OPTIONAL_FINAL_COLUMNS = tuple(q.name for q in QUANTITIES if q.optional)
#: row columns that `against` may name besides the grid keys (and the final metrics of the algorithm)
AGAINST_COLUMNS = INFO_COLUMNS + ("iterations", "rounds", "messages", "scalars", "comm_units", "wall_time",
                                   "virtual_time", "target")


def target_column(column: str, metric: str, threshold: float, target_metric: str) -> str:
    """The name of a cost column at one of ``[sweep] targets``: ``cost_rounds@0.001`` for the sweep's
    target_metric, ``cost_rounds@rel_primal<=0.001`` for another of ``table_metrics``."""
    return f"{column}@{threshold:g}" if metric == target_metric else f"{column}@{metric}<={threshold:g}"


def parse_target_column(name: str) -> tuple[str, str | None, float]:
    """(cost column, metric or None for the target_metric, threshold) of a `target_column` name."""
    column, at = name.split("@", 1)  # pragma: no mutate (equivalent: one '@'; metric names are identifiers)
    metric, _, threshold = at.rpartition("<=")
    return column, metric or None, float(threshold)


def sweep_row(point, result, spec=None) -> dict:
    """One row of ``sweep.csv``: a `SweepPoint`'s grid values, its run's final metrics and totals, the topology
    facts of peer algorithms, and the cost columns at eps (an eps grid), ``[sweep] target`` and each of ``targets``
    (`result` is a `RunResult`; `spec` the sweep's `SweepSpec`, or None for a plain run)."""
    final = result.final
    summary = result.summary
    row: dict[str, Any] = {"variant": point.variant, **point.values, "algorithm": point.scenario.algorithm.name,
                           "stop_reason": result.stop_reason, "iterations": final.get("iteration"),
                           "rounds": summary.get("rounds"), "scalars": final.get("scalars", 0),
                           "comm_units": final.get("comm_units", 0.0), "wall_time": final.get("wall_time")}
    if final.get("bytes") is not None:               # the encodings' sizes under [compression] (`sweep_tables`)
        row["bytes"] = final["bytes"]
    totals = result.ledger.totals if result.ledger is not None else summary.get("ledger")
    if totals is not None:                           # a run read back from its directory has the totals only
        row["messages"] = totals["messages"]
    if summary.get("virtual_time") is not None:
        row["virtual_time"] = summary["virtual_time"]
    faults = summary.get("faults")
    if faults and faults.get("model"):
        row.update(dropped_messages=faults["dropped_total"]["messages"],
                   dropped_scalars=faults["dropped_total"]["scalars"],
                   crashed_nodes=len(faults.get("crashed_nodes", [])))
    for c in FINAL_COLUMNS + OPTIONAL_FINAL_COLUMNS:
        if final.get(c) is not None:
            row[c] = final[c]
    info = summary.get("algorithm_info") or {}
    for c in INFO_COLUMNS:
        if isinstance(info.get(c), (int, float)) and not isinstance(info.get(c), bool):
            row[c] = info[c]
    metric = spec.target_metric if spec is not None else "rel_gap"
    threshold = float(point.values["eps"]) if "eps" in point.values else (spec.target if spec is not None else None)
    if threshold is not None:
        if "eps" not in point.values:
            row["target"] = threshold
        row.update(costs_at(result.metrics, threshold, metric))
        unit = summary.get("comm_unit")
        if unit and np.isfinite(row["cost_scalars"]):
            row["cost_units"] = row["cost_scalars"] / unit[1]
        if row.get("nodes"):
            row["cost_messages_per_node"] = row["cost_messages"] / row["nodes"]
        evals = [m.get("scalars", 0) for m in result.metrics]
        row["cost_resolution"] = float(np.max(np.diff([0] + evals))) if evals else math.nan
        rounds = [m.get("round") for m in result.metrics if m.get("round") is not None]
        if rounds:
            row["cost_round_resolution"] = float(np.max(np.diff([0] + rounds)))
    for name in (spec.table_metrics or [metric]) if spec is not None else []:
        for t in spec.targets:                       # Tables 2/3 style: the cost to each of several targets
            costs = costs_at(result.metrics, float(t), name)
            for c in TARGET_COLUMNS:
                row[target_column(c, name, t, metric)] = costs[c]
    if "eps" in point.values:
        bound = summary.get("bound")
        if bound:
            row.update(bound_upper=bound.get("upper"), bound_lower=bound.get("lower"))
    return row


def compare_to_first_variant(rows: list[dict], keys: list[str]) -> None:
    """Add `scalars_vs_first`: a run's scalars over the first variant's at the same grid point (e.g. 3.0 means
    three times the communication of the first variant; at eps points the cost to eps is compared)."""
    first: dict[tuple, float] = {}
    label = rows[0]["variant"] if rows else None
    for r in rows:
        if r["variant"] == label:
            first[tuple(r.get(k) for k in keys)] = r.get("cost_scalars", r["scalars"])
    for r in rows:
        ref = first.get(tuple(r.get(k) for k in keys))
        mine = r.get("cost_scalars", r["scalars"])
        if ref and mine and np.isfinite(ref) and np.isfinite(mine):
            r["scalars_vs_first"] = mine / ref


def eps_slopes(rows: list[dict], keys: list[str]) -> list[dict]:
    """Slope of cost against 1/eps per variant and per combination of the other grid keys."""
    if "eps" not in keys:
        return []
    others = [k for k in keys if k != "eps"]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"],) + tuple(r[k] for k in others), []).append(r)
    out = []
    for key, rs in groups.items():
        # pragma: no mutate start (equivalent: a factor of 1/eps leaves the slope)
        inv = np.array([1.0 / r["eps"] for r in rs])
        # pragma: no mutate end
        # pragma: no mutate start (equivalent: floats or NaN)
        cost = np.array([r.get("cost_scalars", math.nan) for r in rs], dtype=float)
        # pragma: no mutate end
        entry = {"variant": key[0], **dict(zip(others, key[1:])), "slope": fit_slope(inv, cost),
                 "points": int(np.isfinite(cost).sum())}
        # pragma: no mutate start (equivalent: floats)
        upper = np.array([r.get("bound_upper") or math.nan for r in rs], dtype=float)
        # pragma: no mutate end
        if np.isfinite(upper).sum() >= 2:
            entry["bound_slope"] = fit_slope(inv, upper)
        out.append(entry)
    return out


def against_y(spec, rows: list[dict]) -> list[str]:
    if spec.against_y:
        return list(spec.against_y)
    return ["cost_rounds"] if any(np.isfinite(_num(r.get("cost_rounds"))) for r in rows) else ["cost_scalars"]


def scaling_fits(spec, rows: list[dict]) -> list[dict]:
    """Per variant (and value of `against_by` with ``against_fit = "by"``: each colour its own line) and y
    column: the log-log fit of y against the `against` column."""
    if spec.against is None:
        return []
    # pragma: no mutate start (equivalent: colouring by "variant" groups as the variants already do)
    by = spec.against_by if spec.against_fit == "by" and spec.against_by != "variant" else None
    # pragma: no mutate end
    out = []
    for y in against_y(spec, rows):
        # pragma: no mutate start (equivalent: r.get(None) is None)
        for label, value in dict.fromkeys((r["variant"], r.get(by) if by else None) for r in rows):
        # pragma: no mutate end
            rs = [r for r in rows if r["variant"] == label and (by is None or r.get(by) == value)]
            xs = np.array([_num(r.get(spec.against)) for r in rs])
            ys = np.array([_num(r.get(y)) if not isinstance(r.get(y), str) else math.nan for r in rs])
            fit = fit_loglog(xs, ys)
            ok = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & (ys > 0)
            # pragma: no mutate start (equivalent: the median of nothing is NaN too)
            ratio = float(np.median(ys[ok] / xs[ok])) if ok.any() else math.nan
            # pragma: no mutate end
            out.append({"variant": label, **({by: value} if by else {}), "x": spec.against, "y": y, **fit,
                        "median_y_over_x": ratio,
                        "not_reached": int(sum(1 for r in rs if r.get("reached") is False))})
    return out


#: columns that a trials table never averages
_NOT_AVERAGED = {"variant", "algorithm", "stop_reason", "reached"}


def aggregate_trials(rows: list[dict], keys: list[str], trials_key: str) -> list[dict]:
    """Mean and std over the values of grid key `trials_key`, per variant and combination of the other grid keys.

    Every numeric column c gets ``c_mean`` and ``c_std`` (population std over trials). When the rows also have
    ``c_std`` (a std over nodes reported by the run, e.g. ``test_accuracy_std``), the spread is split:
    ``c_std_nodes`` = sqrt(mean over trials of the node variance), ``c_std_trials`` = std of the trial means, and
    ``c_std`` = sqrt(c_std_nodes^2 + c_std_trials^2), the std over all (node, trial) pairs when every trial has
    the same number of nodes."""
    others = [k for k in keys if k != trials_key]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"],) + tuple(r.get(k) for k in others), []).append(r)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    out = []
    for key, rs in groups.items():
        agg: dict[str, Any] = {"variant": key[0], **dict(zip(others, key[1:])), "trials": len(rs),
                               trials_key + "_values": [r.get(trials_key) for r in rs]}
        if all(r.get("reached") is not None for r in rs):
            agg["reached"] = sum(bool(r.get("reached")) for r in rs)
        for c in columns:
            if c in _NOT_AVERAGED or c in keys or c.endswith("_std") and c[:-4] in columns:
                continue
            vals = [r.get(c) for r in rs]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals if v is not None):
                continue
            v = np.array([_num(x) for x in vals], dtype=float)  # pragma: no mutate (equivalent: _num gives floats)
            v = v[np.isfinite(v)]
            if v.size == 0:
                continue
            mean, std_trials = float(v.mean()), float(v.std())
            agg[c + "_mean"] = mean
            # pragma: no mutate start (equivalent: floats)
            node_std = np.array([_num(r.get(c + "_std")) for r in rs], dtype=float)
            # pragma: no mutate end
            if (c + "_std") in columns and np.isfinite(node_std).all():
                std_nodes = float(np.sqrt(np.mean(node_std ** 2)))
                agg.update({c + "_std_nodes": std_nodes, c + "_std_trials": std_trials,
                            c + "_std": float(math.hypot(std_nodes, std_trials))})
            else:
                agg[c + "_std"] = std_trials
        out.append(agg)
    return out
