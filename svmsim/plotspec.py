"""What the run and sweep plots show, decided without drawing: pure functions from metrics rows to plot specs.

`run_figure` and `sweep_figure` return a `FigureSpec`: panels (`Panel`), each with its series (`Series`: the x and y
data that will be drawn, a shaded band if any), its axis scales, its reference lines (`RefLine`: targets, the
paper's bounds, rate references) and its notes (what is left out and why). `svmsim.report` draws a spec as it is,
so the tests read the decisions back from the spec instead of the pixels.

The rules, for every family:

* a positive series that spans at least two decades (`DECADES`) is drawn on a log axis, and so is x when it spans
  two decades or its evaluation points are spaced evenly in log; gaps, relative errors and consensus errors are
  always drawn on a log axis;
* x is the communication in the paper's unit for a distributed run, kernel evaluations for a single-machine run
  that counts them (paper 003's unit), the iteration otherwise;
* a certified lower bound is drawn as the best bound so far (its running maximum), which cannot decrease;
* a bound of the paper (an order, without its constants) is drawn as a vertical line only where it falls inside
  the plotted x range; otherwise the panel says where it lies and how far the measured cost is from it;
* an algorithm that declares its convergence rate (`AlgorithmInfo.rate`: Pragam O(1/k^2), BMRM O(1/k)) gets the
  reference C/k^p through its first point, labelled as an order;
* the spread across nodes (GADGET's per-node objective min/max, accuracy std) is drawn as a band, the consensus
  errors in a panel of their own;
* no panel is empty; in a sweep, a panel whose curves have one point each is left out (and named in a note), a
  panel identical to another is merged with it, and every panel is drawn in one absolute x unit on shared axes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .core.metrics import label as metric_label

__all__ = ["DECADES", "GAP_PANEL", "CONSENSUS_PANEL", "Series", "RefLine", "Panel", "FigureSpec", "run_figure",
           "sweep_figure", "spans_decades", "log_spaced", "running_max", "is_gap_metric"]

#: a positive series whose largest value is at least 10**DECADES times its smallest is drawn on a log axis
DECADES = 2.0
#: the relative measures of a run's gap panel, with their colours
GAP_PANEL = {"rel_gap": "C3", "gap_per_cn": "C5", "rel_dual": "C1", "rel_primal": "C2"}
#: the consensus measures of a gossip run's consensus panel, with their colours
CONSENSUS_PANEL = {"consensus_error": "C0", "consensus_rms": "C9", "model_disagreement": "C0",
                   "model_disagreement_max": "C4"}
#: the labels of the paper's bounds (`AlgorithmInfo` builds give them in scalars: an order, no constants)
BOUND_LABELS = {"upper": "k(d+sqrt(d/eps)), constants and logs left out",
                "lower": "k min(d,1/eps) lower bound, constants left out"}
_BOUND_NAMES = {"upper": "the bound k(d+sqrt(d/eps))", "lower": "the lower bound k min(d,1/eps)"}
#: x columns that count work and span decades by nature
_WORK_COLUMNS = ("kernel_evaluations", "inner_products")


@dataclass(frozen=True)
class Series:
    """One curve: `y` against `x` (NaN where nothing is drawn), with an optional shaded band `band` = (low, high)
    on the same x. ``markers_only``: a series of one point, drawn as a marker. `metric`: the metrics.csv column
    drawn, if it is one. ``role``: ``measured``,
    ``certified_lower`` (a running maximum), ``rate`` (a reference of an order) or ``mean`` (of trials)."""

    label: str
    x: np.ndarray
    y: np.ndarray
    color: str | None = None
    linestyle: str = "-"
    marker: str | None = "."
    role: str = "measured"
    band: tuple[np.ndarray, np.ndarray] | None = None
    band_label: str | None = None
    markers_only: bool = False
    metric: str | None = None

    def points(self) -> int:
        """How many points are drawn (finite x and y)."""
        return int(np.count_nonzero(np.isfinite(self.x) & np.isfinite(self.y)))


@dataclass(frozen=True)
class RefLine:
    """A reference line: ``axis = "x"`` a vertical line at x = `value`, ``"y"`` a horizontal one at y = `value`."""

    axis: str
    value: float
    label: str
    color: str = "gray"
    linestyle: str = ":"
    role: str = "target"


@dataclass
class Panel:
    """One panel: its series, scales, reference lines and notes. ``off_range``: the bound lines left out because
    they fall outside the plotted x range (each also has a note)."""

    key: str
    series: list[Series]
    xlabel: str = ""
    ylabel: str = ""
    title: str = ""
    xscale: str = "linear"
    yscale: str = "linear"
    lines: list[RefLine] = field(default_factory=list)
    off_range: list[RefLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    xunit: str = ""

    def xrange(self) -> tuple[float, float]:
        """The plotted x range (positive x only on a log axis; NaN, NaN without any point)."""
        xs = np.concatenate([s.x[np.isfinite(s.x) & np.isfinite(s.y)] for s in self.series] or [np.zeros(0)])
        if self.xscale == "log":
            xs = xs[xs > 0]
        return (float(xs.min()), float(xs.max())) if xs.size else (math.nan, math.nan)

    def points(self) -> int:
        return sum(s.points() for s in self.series)


@dataclass
class FigureSpec:
    """A figure: its panels in reading order, `ncols` a row, whether the panels share x and y, a title and the
    figure's notes (panels left out and why)."""

    panels: list[Panel]
    title: str = ""
    ncols: int = 1
    sharex: bool = False
    sharey: bool = False
    notes: list[str] = field(default_factory=list)
    panel_size: tuple[float, float] = (5.0, 4.2)


# ---------------------------------------------------------------------------------------------------------------
# decisions shared by run and sweep plots
# ---------------------------------------------------------------------------------------------------------------


def _positive(values) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    return v[np.isfinite(v) & (v > 0)]


def spans_decades(values, decades: float = DECADES) -> bool:
    """Whether the positive finite values span at least `decades` powers of ten."""
    v = _positive(values)
    return v.size > 1 and v.max() >= v.min() * 10.0 ** decades


def log_spaced(values) -> bool:
    """Whether the points are spaced evenly in log (as `eval_points` places them) over at least a decade: at
    least four increasing positive points whose steps in log differ by no more than a factor 3."""
    v = np.unique(_positive(values))
    if v.size < 4 or v.max() < 10.0 * v.min():
        return False
    steps = np.diff(np.log(v))
    return bool(steps.min() > 0 and steps.max() <= 3.0 * steps.min())


def is_gap_metric(name: str) -> bool:
    """Metrics always drawn on a log axis: relative errors, gaps, consensus errors (not classification errors,
    which paper 003 draws on a linear axis)."""
    if name in ("test_error", "train_error"):
        return False
    return (name.startswith("rel_") or name.endswith("_gap") or name.endswith("_error") or name.startswith("consensus")
            or name.startswith("model_disagreement"))


def running_max(values) -> np.ndarray:
    """The best (largest) value so far at every row, NaN before the first finite one: a certified lower bound
    as the run holds it (it cannot decrease)."""
    v = np.asarray(values, dtype=float)
    out = np.fmax.accumulate(np.where(np.isfinite(v), v, -np.inf)) if v.size else v
    return np.where(np.isfinite(out), out, np.nan)


def _log_scale(series: list[Series], always: bool = False) -> str:
    """``log`` when the panel's series are positive where finite and span two decades (or `always`, with a
    positive value to draw); ``linear`` otherwise."""
    ys = np.concatenate([s.y for s in series] + [b for s in series if s.band is not None for b in s.band]
                        or [np.zeros(0)])
    finite = ys[np.isfinite(ys)]
    if not (finite > 0).any():
        return "linear"
    if always:
        return "log"
    return "log" if (finite > 0).all() and spans_decades(finite) else "linear"


def _x_scale(xs: np.ndarray) -> str:
    return "log" if (spans_decades(xs) or log_spaced(xs)) else "linear"


def _mask_nonpositive(s: Series) -> Series:
    """A series for a log axis: values <= 0 are not drawn (NaN), its band likewise."""
    band = None if s.band is None else tuple(np.where(b > 0, b, np.nan) for b in s.band)
    return replace(s, y=np.where(s.y > 0, s.y, np.nan), band=band)


def _finish(panel: Panel, yscale: str) -> Panel:
    panel.yscale = yscale
    if yscale == "log":
        panel.series = [_mask_nonpositive(s) for s in panel.series]
    return panel


# ---------------------------------------------------------------------------------------------------------------
# the run plot
# ---------------------------------------------------------------------------------------------------------------


def _column(metrics: list[dict], name: str) -> np.ndarray:
    out = []
    for m in metrics:
        v = m.get(name)
        out.append(float(v) if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else np.nan)
    return np.array(out, dtype=float)


def _has(metrics: list[dict], name: str) -> bool:
    return bool(np.isfinite(_column(metrics, name)).any())


def run_x(metrics: list[dict], comm_unit: tuple[str, float] | None = None) -> tuple[np.ndarray, str, float | None]:
    """The x of a run's panels: (values, label, scalars per x unit or None). A distributed run: communication in
    the paper's unit (`comm_unit`, e.g. ``("kd", 20.0)``) or in scalars; a single-machine run that counts kernel
    evaluations: kernel evaluations (paper 003's unit); otherwise the iteration."""
    scalars = _column(metrics, "scalars")
    if scalars.size and np.nanmax(np.where(np.isfinite(scalars), scalars, 0.0)) > 0:
        name, unit = comm_unit if comm_unit else ("scalars", 1.0)
        return scalars / float(unit), f"communication ({name})", float(unit)
    kernel = _column(metrics, "kernel_evaluations")
    if (np.nan_to_num(kernel) > 0).any():
        return kernel, "kernel evaluations", None
    return _column(metrics, "iteration"), "iteration", None


def _objective_panel(metrics: list[dict], x: np.ndarray) -> Panel | None:
    objective = _column(metrics, "objective")
    if not np.isfinite(objective).any():
        return None
    series = []
    lo, hi = _column(metrics, "objective_min"), _column(metrics, "objective_max")
    spread = np.isfinite(lo).any() and np.isfinite(hi).any()
    series.append(Series("objective (mean over nodes)" if spread else "objective", x, objective, color="C0",
                         band=(lo, hi) if spread else None, band_label="min to max over nodes" if spread else None))
    if _has(metrics, "average_model_objective"):
        series.append(Series("objective of the nodes' average model", x, _column(metrics, "average_model_objective"),
                             color="C1", linestyle="--"))
    lower = _column(metrics, "gap_lower")
    if not np.isfinite(lower).any() and not _has(metrics, "dual_objective"):
        lower = _column(metrics, "hull_lower")
    upper = _column(metrics, "gap_upper")
    # a certified lower bound beside the objective when it bounds what is drawn: the objective is the certified
    # primal value P, or P is drawn beside it (not when the run reports its objective in another problem's units)
    if np.isfinite(lower).any() and not _has(metrics, "dual_objective"):
        same = np.isfinite(upper).any() and np.allclose(upper, objective, rtol=1e-9, equal_nan=True)
        if np.isfinite(upper).any() and not same:
            series.append(Series("primal value P of the certified iterate (gap_upper)", x, upper, color="C2",
                                 linestyle="-.", role="certified_upper"))
        series.append(Series("certified lower bound, best so far", x, running_max(lower), color="C3",
                             linestyle="--", role="certified_lower"))
    panel = Panel("objective", series, ylabel="objective")
    return _finish(panel, _log_scale([s for s in series if s.role == "measured"]))


def _measure_panel(metrics: list[dict], x: np.ndarray, key: str, names: dict[str, str], ylabel: str) -> Panel | None:
    series = []
    for name, color in names.items():
        values = _column(metrics, name)
        if (values > 0).any():
            series.append(Series(_metric_text(name), x, values, color=color, metric=name))
    if not series:
        return None
    return _finish(Panel(key, series, ylabel=ylabel), "log")


def _metric_text(name: str) -> str:
    """A column's legend text: the registry's label and the column name (the name alone when unregistered)."""
    text = metric_label(name)
    return f"{text} ({name})" if text != name else name


def _accuracy_panel(metrics: list[dict], x: np.ndarray) -> Panel | None:
    series = []
    for i, name in enumerate(("train_accuracy", "test_accuracy")):
        values = _column(metrics, name)
        if not np.isfinite(values).any():
            continue
        std = _column(metrics, f"{name}_std")
        band = (values - std, values + std) if np.isfinite(std).any() else None
        series.append(Series(metric_label(name) + (" (mean over nodes)" if band else ""), x, values, color=f"C{i}",
                             band=band, band_label="± std over nodes" if band else None))
    return Panel("accuracy", series, ylabel="accuracy") if series else None


def _rate_series(metrics: list[dict], x: np.ndarray, rate: tuple[str, float]) -> Series | None:
    """C/k^p through the first point of the rate's metric (k the iteration): an order, not a bound."""
    name, p = rate
    k, values = _column(metrics, "iteration"), _column(metrics, name)
    ok = np.flatnonzero(np.isfinite(k) & (k > 0) & np.isfinite(values) & (values > 0) & np.isfinite(x))
    if ok.size < 2:
        return None
    k0, y0 = k[ok[0]], values[ok[0]]
    y = np.full(len(metrics), np.nan)
    y[ok] = y0 * (k0 / k[ok]) ** p
    order = "k" if p == 1 else ("k²" if p == 2 else f"k^{p:g}")
    return Series(f"O(1/{order}) reference: C/{order} through the first {name} (an order, not a bound)", x, y,
                  color="k", linestyle="--", marker=None, role="rate")


def _bound_lines(panel: Panel, bound: dict, unit: float, x: np.ndarray, metrics: list[dict], eps: float | None,
                 unit_name: str) -> None:
    """The paper's bounds as vertical lines where they fall in the plotted range; a note for each one that does not
    (where it lies and how far the measured cost is from it)."""
    lo, hi = panel.xrange()
    reached = None
    gap = _column(metrics, "rel_gap")
    if eps:
        hit = np.flatnonzero(np.isfinite(x) & (gap <= eps))
        reached = ("rel_gap <= eps", x[hit[0]]) if hit.size else None
    if reached is None:
        fin = np.flatnonzero(np.isfinite(x))
        reached = ("the last point", x[fin[-1]]) if fin.size else None
    styles = {"upper": ("C2", "--"), "lower": ("C4", ":")}
    for which in ("upper", "lower"):
        value = bound.get(which)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            continue
        at = value / unit
        color, style = styles[which]
        line = RefLine("x", at, BOUND_LABELS[which], color=color, linestyle=style, role="bound")
        if lo <= at <= hi:
            panel.lines.append(line)
            continue
        panel.off_range.append(line)
        side = "left of" if at < lo else "right of"
        text = (f"{_BOUND_NAMES[which]} = {at:.3g} {unit_name} (an order, no constants) is {side} the plotted "
                "range")
        if reached is not None and reached[1] > 0:
            text += f"; measured at {reached[0]}: {reached[1]:.3g} {unit_name} = {reached[1] / at:.3g}x it"
        panel.notes.append(text)


def run_figure(metrics: list[dict], title: str = "", bound: dict | None = None,
               comm_unit: tuple[str, float] | None = None, eps: float | None = None,
               rate: tuple[str, float] | None = None, targets: dict[str, float] | None = None,
               certified: bool = True) -> FigureSpec:
    """The panels of a run's plot (`plot_run` draws them): objective (with the spread over nodes and the certified
    lower bound, best so far), the relative measures (`GAP_PANEL`, log; the target eps, the stop `targets`, the
    paper's bounds `bound` in scalars and the rate reference `rate` = (metric, p)), the consensus measures
    (`CONSENSUS_PANEL`, log), and accuracy; each only when the run reports it. ``certified=False``: the run's
    certificates do not hold (computed from compressed messages), so no label says "certified"."""
    x, xlabel, unit = run_x(metrics, comm_unit)
    xscale = _x_scale(x)
    panels = [p for p in (_objective_panel(metrics, x),
                          _measure_panel(metrics, x, "gap", GAP_PANEL, "relative measure"),
                          _measure_panel(metrics, x, "consensus", CONSENSUS_PANEL, "consensus"),
                          _accuracy_panel(metrics, x)) if p is not None and p.points() > 0]
    if not panels:                               # no empty figure: the objective axis, with a note
        panels = [Panel("objective", [Series("objective", x, _column(metrics, "objective"))], ylabel="objective",
                        notes=["the run reported no objective, gap or accuracy"])]
    by_key = {p.key: p for p in panels}
    for p in panels:
        p.xlabel, p.xscale = xlabel, xscale
    gap = by_key.get("gap")
    if gap is not None and eps:
        gap.lines.append(RefLine("y", float(eps), f"eps = {eps:g}"))
    for name, value in (targets or {}).items():
        home = next((p for p in panels if any(s.metric == name for s in p.series)), None)
        if home is not None and not any(ln.axis == "y" and ln.value == value for ln in home.lines):
            home.lines.append(RefLine("y", float(value), f"stop: {metric_label(name)} <= {value:g}",
                                      color="C7", linestyle="-."))
    if rate is not None:
        home = next((p for p in panels if any(s.metric == rate[0] for s in p.series)), None)
        line = _rate_series(metrics, x, rate) if home is not None else None
        if line is not None:
            home.series.append(line)
    if unit is not None and bound:               # once, where the target is read: the gap panel if there is one
        _bound_lines(gap or panels[0], bound, unit, x, metrics, eps, (comm_unit or ("scalars", 1.0))[0])
    if not certified:
        for p in panels:
            p.series = [replace(item, label=_uncertified_text(item.label)) if item.label else item for item in p.series]
            p.lines = [replace(item, label=_uncertified_text(item.label)) if item.label else item for item in p.lines]
    return FigureSpec(panels, title=title, ncols=len(panels))


def _uncertified_text(text: str) -> str:
    """A legend text without the word "certified" (a run whose certificates do not hold)."""
    return text.replace("certified ", "").replace(" (certified)", "")


# ---------------------------------------------------------------------------------------------------------------
# the sweep's curves
# ---------------------------------------------------------------------------------------------------------------


def _trial_band(curves: list[tuple[np.ndarray, np.ndarray]], log_x: bool):
    """Mean and min/max of several trials' curves on one x grid (interpolated in log x when `log_x`), over the x
    range every trial covers."""
    usable = [(x, y) for x, y in curves if (np.isfinite(x) & np.isfinite(y)).sum() > 1]
    if len(usable) < 2:
        return None
    lo = max(float(np.nanmin(x[np.isfinite(y)])) for x, y in usable)
    hi = min(float(np.nanmax(x[np.isfinite(y)])) for x, y in usable)
    if not hi > lo:
        return None
    grid = np.geomspace(lo, hi, 200) if (log_x and lo > 0) else np.linspace(lo, hi, 200)
    tx = np.log if (log_x and lo > 0) else (lambda v: v)
    ys = []
    for x, y in usable:
        ok = np.isfinite(x) & np.isfinite(y)
        order = np.argsort(x[ok], kind="stable")
        ys.append(np.interp(tx(grid), tx(x[ok][order]), y[ok][order]))
    Y = np.array(ys)
    return grid, Y.mean(axis=0), Y.min(axis=0), Y.max(axis=0), len(usable)


def _sweep_x(runs: list, x: str) -> tuple[str, str, list[str]]:
    """The column the sweep's panels are drawn against, its label and notes: communication in the paper's unit
    when every run has the same unit, in scalars (an absolute unit) when the runs' units differ (k d with several
    k), so that panels compare like with like."""
    if x != "comm_units":
        return x, _metric_text(x), []
    units = {tuple(u) if u else ("scalars", 1.0) for _, metrics, u in runs
             if (np.nan_to_num(_column(metrics, "scalars")) > 0).any()}
    if len(units) > 1:
        names = ", ".join(sorted(f"{n} = {v:g}" for n, v in units))
        return "scalars", "communication (scalars)", [f"x in scalars: the runs' paper units differ ({names})"]
    name = next(iter(units))[0] if units else "scalars"
    return "comm_units", f"communication ({name})", []


def _panel_text(key: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in key)


def _fingerprint(panel: Panel) -> tuple:
    return tuple((s.label, s.x.tobytes(), s.y.tobytes()) for s in panel.series)


def sweep_figure(runs: list, y: str = "objective", x: str = "comm_units", title: str = "", max_panels: int = 12,
                 trials: str | None = None, certified: bool = True) -> FigureSpec:
    """The panels of a sweep's curves (`plot_sweep_curves` draws them): one panel per grid point (the `trials` key
    apart: its runs share a panel, drawn as their mean with a min-to-max band), one curve per variant, metric `y`
    against `x` in one absolute unit on shared axes. `runs`: (point, metrics rows, comm unit) with ``point.values``
    (the grid coordinates) and ``point.variant``. Single-machine runs, which send nothing, are a horizontal line at
    their final value beside distributed runs, and drawn against wall time in a panel of their own. Panels whose curves have one point each are left out (a note names them; if every panel has one point,
    the runs' points are drawn together in one panel), identical panels are merged. ``certified=False`` (some run's
    certificates do not hold, e.g. computed from compressed messages): no label says "certified"."""
    column, xlabel, notes = _sweep_x(runs, x)
    grouped: dict[tuple, list] = {}
    for point, metrics, unit in runs:
        key = tuple((k, v) for k, v in point.values.items() if k != trials)
        grouped.setdefault(key, []).append((point.variant, metrics))
    work = x in _WORK_COLUMNS
    all_x = np.concatenate([_column(m, column) for _, m, _ in runs] or [np.zeros(0)])
    log_x = work or spans_decades(all_x) or log_spaced(all_x)
    gap = is_gap_metric(y)
    colour = {}                                  # one colour per variant in every panel
    for point, _, _ in runs:
        colour.setdefault(point.variant, f"C{len(colour) % 10}")
    panels: list[Panel] = []
    for key, members in grouped.items():
        silent = [(v, m) for v, m in members if column in ("comm_units", "scalars")
                  and not (np.nan_to_num(_column(m, column)) > 0).any()]     # single-machine runs: they send nothing
        sending = [(v, m) for v, m in members if not any(m is mm for _, mm in silent)]
        wall = not sending                       # a panel of single-machine runs only: against wall time
        curves: dict[str, list] = {}
        for variant, metrics in members if wall else sending:
            xs = _column(metrics, "wall_time" if wall else column)
            ys = _column(metrics, y)
            if gap:
                ys = np.where(ys > 0, ys, np.nan)
            curves.setdefault(variant, []).append((xs, ys))
        series: list[Series] = []
        for variant, cs in curves.items():
            band = _trial_band(cs, log_x and not wall) if (trials and len(cs) > 1) else None
            if band is not None:
                grid, mean, lo, hi, n = band
                series.append(Series(f"{variant} (mean of {n})", grid, mean, color=colour[variant], marker=None,
                                     role="mean", band=(lo, hi), band_label=f"min to max over {trials}"))
                continue
            for j, (xs, ys) in enumerate(cs):
                s = Series(variant if j == 0 else "", xs, ys, color=colour[variant],
                           marker="." if len(xs) < 60 else None)
                if s.points() == 0:                  # e.g. a run that failed before its first row: named, not drawn
                    s = replace(s, label=f"{s.label} (no points)" if s.label else "")
                elif s.points() == 1:
                    s = replace(s, label=f"{s.label} (one point)" if s.label else "", marker="o", markers_only=True)
                series.append(s)
        lines = [] if wall else _silent_lines(silent, y, colour)
        xunit = "wall time (s)" if wall else xlabel
        panels.append(Panel(_panel_text(key), series, xlabel=xunit, ylabel=_metric_text(y), title=_panel_text(key),
                            xunit=xunit, lines=lines))
    panels = [p for p in panels if p.points() > 0]
    single = [p for p in panels if all(s.points() <= 1 for s in p.series)]
    if single and len(single) < len(panels):
        notes.append("left out, one point per curve: " + "; ".join(p.title or "(the only point)" for p in single))
        panels = [p for p in panels if p not in single]
    elif single:                                 # every panel has one point a curve: one panel of all the points
        merged = [replace(s, label=f"{s.label}, {p.title}" if p.title else s.label) for p in single for s in p.series]
        panels = [Panel("points", merged, xlabel=xlabel, ylabel=single[0].ylabel,
                        title="one point per run", xunit=single[0].xunit)]
    unique: list[Panel] = []
    seen: dict[tuple, Panel] = {}
    for p in panels:                             # a panel identical to an earlier one is merged with it
        fp = _fingerprint(p)
        if fp in seen:
            seen[fp].title += f" | {p.title} (identical)"
            continue
        seen[fp] = p
        unique.append(p)
    if not unique:
        notes.append(f"no run reported {y} against {column}")
    if len(unique) > max_panels:
        notes.append(f"{len(unique) - max_panels} more panels not drawn (max_panels = {max_panels})")
        unique = unique[:max_panels]
    xscale = "log" if log_x else "linear"
    every = [s for p in unique for s in p.series]
    yscale = _log_scale(every, always=gap)
    for p in unique:
        p.xscale = xscale
        _finish(p, yscale)
        if not certified:
            p.ylabel = _uncertified_text(p.ylabel)
            p.series = [replace(item, label=_uncertified_text(item.label)) if item.label else item for item in p.series]
            p.lines = [replace(item, label=_uncertified_text(item.label)) if item.label else item for item in p.lines]
    sharex = len({p.xunit for p in unique}) == 1
    sharey = gap or _ranges_overlap(unique, yscale)
    cols = max(1, min(3, len(unique)))
    return FigureSpec(unique, title=title, ncols=cols, sharex=sharex, sharey=sharey, notes=notes,
                      panel_size=(5.2, 3.9))


def _silent_lines(silent: list, y: str, colour: dict) -> list[RefLine]:
    """Single-machine runs in a panel of communication: they have no place on its x axis, so each variant's final
    `y` (the mean over its runs, e.g. trials) is a horizontal line, labelled as such."""
    finals: dict[str, list[float]] = {}
    for variant, metrics in silent:
        ys = _column(metrics, y)
        ys = ys[np.isfinite(ys)]
        if ys.size:
            finals.setdefault(variant, []).append(float(ys[-1]))
    out = []
    for variant, values in finals.items():
        many = f", mean of {len(values)} runs" if len(values) > 1 else ""
        out.append(RefLine("y", float(np.mean(values)), f"{variant}: final {y} (sends nothing{many})",
                           color=colour[variant], linestyle="--", role="reference"))
    return out


def _ranges_overlap(panels: list[Panel], yscale: str) -> bool:
    """Whether sharing y keeps every panel readable: the panels' y ranges together span no more than a decade
    (log) or twice the widest panel's range (linear) beyond the widest panel's own."""
    spans = []
    for p in panels:
        ys = np.concatenate([s.y for s in p.series] or [np.zeros(0)])
        ys = ys[np.isfinite(ys) & ((ys > 0) if yscale == "log" else True)]
        if ys.size:
            spans.append((ys.min(), ys.max()))
    if len(spans) < 2:
        return True
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    if yscale == "log":
        widest = max(math.log10(b / a) for a, b in spans)
        return math.log10(hi / lo) <= widest + 1.0
    widest = max(b - a for a, b in spans)
    return (hi - lo) <= 3.0 * widest if widest > 0 else hi == lo
