"""The registry of metric names: what a column of ``metrics.csv`` means, in every family that reports it.

A run's evaluation rows carry the metrics its algorithm reports. A name registered here means one thing wherever
it appears: its definition, its unit, whether it is a certificate (a bound the run proves from its own iterates,
not a measure against an optimum computed elsewhere or a heuristic), and the label that stop reasons, plots and
sweep tables print. A family that needs a measure of its own registers it under a name of its own instead of
reusing one with another meaning.

The certified relative duality gap is ``rel_gap = (gap_upper - gap_lower) / |gap_upper|`` (`relative_gap`): a
family that reports it also reports ``gap_upper`` (P, the primal value of the iterate it certifies) and
``gap_lower`` (D, a proven lower bound on the optimum), so a reader can recompute it from the same row.

`stop_reason(name, threshold)` is the text of a ``[stop]`` rule met on a metric; it says "certified" only of a
certificate, and not even then when the run says why its certificates do not hold (``uncertified``: e.g. they were
computed from compressed messages). `svmsim list metrics` prints the registry; ``docs/reference/metrics.md`` is
generated from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Metric", "METRICS", "WALL_CLOCK_METRICS", "metric", "is_registered", "label", "uncertified_label",
           "stop_reason", "FAR_FROM_OPTIMUM", "with_distance", "relative_gap"]


@dataclass(frozen=True)
class Metric:
    """One registered metric name.

    name: the column of ``metrics.csv``.
    definition: how it is computed (a formula over the run's own quantities).
    unit: its unit (``1`` for a ratio, ``objective`` for the family objective's units).
    certificate: True when the value is a proven bound (a stop on it is a certified stop).
    label: the short text of stop reasons, plot legends and axes.
    description: one line for listings and the reference page.
    families: the algorithm families that report it (for the listing; ``*`` for every run).
    """

    name: str
    definition: str
    unit: str
    certificate: bool
    label: str
    description: str
    families: tuple[str, ...] = ("*",)


METRICS: tuple[Metric, ...] = (
    # the certified relative duality gap and the two bounds it is made of
    Metric("rel_gap", "(gap_upper - gap_lower) / |gap_upper|", "1", True, "certified relative gap",
           "certified relative duality gap (P - D)/|P| of the reported iterate, D a proven lower bound on the "
           "optimum; what [stop] gap stops on", ("saddle", "references", "bqo", "bundle")),
    Metric("gap_upper", "P", "objective", True, "primal value P",
           "the primal value P of the iterate rel_gap certifies (an upper bound on the optimum)",
           ("saddle", "references", "bqo", "bundle")),
    Metric("gap_lower", "D", "objective", True, "certified lower bound D",
           "a proven lower bound D on the optimum (NaN while the method has none)",
           ("saddle", "references", "bqo", "bundle")),
    Metric("duality_gap", "P - D in the objective's units", "objective", True, "certified duality gap",
           "the absolute duality gap of the family's objective (paper 000 nu-SVM: in problem (5)'s units)",
           ("saddle", "references", "bqo")),
    # family measures under names of their own
    Metric("gap_per_cn", "(f^P(w_pocket) + f(alpha)) / (C n)", "1", True, "duality gap / (C n)",
           "paper 001 eq. 27: the duality gap of the pocket iterate over C n (certified, but not relative to the "
           "objective: it can be 1e-4 while rel_primal is 0.3)", ("bqo",)),
    Metric("consensus_error", "max_i |s_i/w_i - avg| / max_i |x_i - avg|", "1", False, "consensus error",
           "Push-Sum: the largest distance of a node's estimate to the true average, over the initial spread "
           "(measured against the known average; 1 at the start)", ("gossip",)),
    Metric("model_disagreement", "mean_i |w_i - w_bar|", "model norm", False, "model disagreement",
           "GADGET: the mean distance of the nodes' gossiped models to their (weighted) average, in the models' "
           "units (not a consensus error against a known value: the average moves as the nodes learn)",
           ("gadget",)),
    Metric("model_disagreement_max", "max_i |w_i - w_bar|", "model norm", False, "largest model disagreement",
           "GADGET: the largest distance of a node's gossiped model to the average", ("gadget",)),
    Metric("consensus_rms", "sqrt(mean_i |s_i/w_i - avg|^2) / max_i |x_i - avg|", "1", False, "consensus rms",
           "Push-Sum: the root mean square of the nodes' distances to the average, on consensus_error's scale",
           ("gossip",)),
    Metric("rel_primal", "(objective - P*) / |P*|", "1", False, "relative primal error",
           "relative error of the returned model's objective against a reference optimum P* computed before the "
           "run (Pragam-b, which has none: the bound gap / lower; GADGET: of the mean node objective, against "
           "J* of Eq. 1)", ("bqo", "bundle", "gadget", "pegasos")),
    Metric("rel_dual", "|f(alpha) - f*| / |f*|", "1", False, "relative dual error",
           "paper 001 eq. 28: relative error of the dual objective against the reference optimum f*",
           ("bqo",)),
    # columns most families share
    Metric("objective", "family-specific", "objective", False, "objective",
           "the family's objective at the returned model (hull distance, problem (5), the pocket primal, best J)"),
    Metric("hull_distance", "|z|, z a point of the Minkowski difference of the (reduced) hulls", "distance", True,
           "hull distance (upper bound)", "paper 000: an upper bound on the distance between the (reduced) hulls",
           ("saddle", "references")),
    Metric("hull_lower", "gap(v) / |v|", "distance", True, "hull distance (lower bound)",
           "paper 000: a proven lower bound on the distance between the (reduced) hulls", ("saddle", "references")),
    Metric("train_accuracy", "fraction of training points classified right", "1", False, "train accuracy",
           "accuracy of the returned model on the training points"),
    Metric("test_accuracy", "fraction of test points classified right", "1", False, "test accuracy",
           "accuracy of the returned model on the test split"),
    Metric("iteration", "count", "iterations", False, "iteration", "the algorithm's iteration at the row"),
    Metric("round", "count", "rounds", False, "round", "communication rounds so far"),
    Metric("messages", "count", "messages", False, "messages", "logical messages sent so far (the ledger's)"),
    Metric("scalars", "count", "scalars", False, "scalars", "scalars sent so far (the ledger's)"),
    Metric("bytes", "count", "B", False, "bytes", "bytes sent so far (the ledger's)"),
    Metric("comm_units", "scalars / the paper's unit", "paper unit", False, "communication (paper's unit)",
           "scalars so far in the paper's unit of communication (e.g. k*d)"),
    Metric("wall_time", "wall_time_total - compile_time", "s", False, "wall time",
           "wall-clock seconds of the run so far, numba's compilation left out (what the run's own work took)"),
    Metric("wall_time_total", "seconds since the run started", "s", False, "wall time with compilation",
           "wall-clock seconds of the run so far, numba's compilation included"),
    Metric("compile_time", "seconds under numba's compiler lock since the run started", "s", False,
           "compilation time", "seconds the run has spent so far in numba's compiler in this process: compiling "
           "afresh and loading from numba's disk cache (svmsim warmup fills the cache ahead); not seen on Ray "
           "hosts"),
)

#: the metrics that measure wall-clock time: they differ between two runs of the same scenario and seed, while
#: every other column is the same bit for bit
WALL_CLOCK_METRICS = frozenset({"wall_time", "wall_time_total", "compile_time"})

_BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """The registered metric called `name` (KeyError naming the registered ones otherwise)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not registered; known: {', '.join(_BY_NAME)}") from None


def is_registered(name: str) -> bool:
    return name in _BY_NAME


def label(name: str) -> str:
    """The label of a metric: the registry's, or the column name itself for an unregistered one."""
    m = _BY_NAME.get(name)
    return m.label if m is not None else name


def uncertified_label(name: str) -> str:
    """The label of a metric in a run whose certificates do not hold: without the word "certified" (the certified
    relative gap is then the "relative gap")."""
    return label(name).replace("certified ", "").replace(" (certified)", "")


def stop_reason(name: str, threshold: float, uncertified: str | None = None) -> str:
    """The stop reason of a rule met on metric `name`: ``"<label> (<name>) <= <threshold>"``; only a certificate's
    label says "certified". `uncertified`: why the run's certificates do not hold (e.g. ``"computed from compressed
    messages"``); a certificate's stop then reads ``"relative gap (rel_gap) <= 0.001, computed from compressed
    messages: not a certificate"``."""
    m = _BY_NAME.get(name)
    if m is None:
        return f"{name} <= {threshold:g}"
    if uncertified and m.certificate:
        return f"{uncertified_label(name)} ({name}) <= {threshold:g}, {uncertified}: not a certificate"
    return f"{m.label} ({name}) <= {threshold:g}"


#: a run that ends with rel_primal above this says so in its stop reason (unless it stopped on a rel_primal target)
FAR_FROM_OPTIMUM = 1e-2


def with_distance(reason: str, final: dict) -> str:
    """The stop reason, followed by how far from the reference optimum the run ended when that is more than
    FAR_FROM_OPTIMUM relative (``rel_primal`` of its last row): a rule that is not a certificate (the paper's |dF|
    rule, an iteration or time budget) may stop a run far from the optimum, and the reason then says so."""
    rel = final.get("rel_primal")
    if not isinstance(rel, (int, float)) or not math.isfinite(rel) or rel <= FAR_FROM_OPTIMUM \
            or "(rel_primal)" in reason:
        return reason
    return f"{reason}, {rel:.3g} relative above the optimum of its objective (rel_primal)"


def relative_gap(upper: float, lower: float) -> float:
    """``rel_gap``: (upper - lower) / |upper|; inf when upper is 0, NaN when there is no lower bound (NaN)."""
    if not upper:
        return math.inf
    return (upper - lower) / abs(upper)
