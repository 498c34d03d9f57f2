"""Plots of a run and of a sweep: objective, certified gap, consensus and accuracy against communication, with the
paper's bounds; the cost against 1/eps; scaling fits.

What a run's and a sweep's curves show (scales, series, reference lines, panels left out) is decided by the pure
functions of `svmsim.plotspec`; this module draws their specs. Labels of metrics come from the registry
(`svmsim.core.metrics`): a curve is called "certified" only when the metric is a certificate."""
from __future__ import annotations

import copy
import functools
import re
import textwrap
from pathlib import Path

import numpy as np

from .core.metrics import label as metric_label, uncertified_label
from .plotspec import CONSENSUS_PANEL, GAP_PANEL, FigureSpec, Panel, run_figure, sweep_figure

__all__ = ["plot_run", "plot_cost_vs_eps", "plot_sweep_curves", "plot_scaling", "draw_figure", "GAP_PANEL",
           "CONSENSUS_PANEL"]


#: the resolution of every figure (pixels per inch): the figures are made at it, so that the layout's measurements of
#: the text are the drawing's (a figure made at another resolution than it is saved at measures every label twice)
DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_SUPERSCRIPT = str.maketrans("0123456789-", "\N{SUPERSCRIPT ZERO}\N{SUPERSCRIPT ONE}\N{SUPERSCRIPT TWO}"
                             "\N{SUPERSCRIPT THREE}\N{SUPERSCRIPT FOUR}\N{SUPERSCRIPT FIVE}\N{SUPERSCRIPT SIX}"
                             "\N{SUPERSCRIPT SEVEN}\N{SUPERSCRIPT EIGHT}\N{SUPERSCRIPT NINE}\N{SUPERSCRIPT MINUS}")


def plain_log_label(label: str) -> str:
    """A tick label of matplotlib's log axes, written for its mathtext parser (``$\\mathdefault{10^{-3}}$``,
    ``$\\mathdefault{2\\times10^{-3}}$``), as plain text with Unicode superscripts (``10⁻³``, ``2×10⁻³``): the same
    label without the parser, whose set-up takes a tenth of a second of a run's first figure. Any other label is
    returned as it is."""
    m = re.fullmatch(r"\$\\mathdefault\{(.*)\}\$", label)
    if m is None:
        return label
    body = re.sub(r"\^\{(-?\d+)\}", lambda e: e.group(1).translate(_SUPERSCRIPT), m.group(1).replace(r"\times", "×"))
    if re.search(r"[\\{}^$_]", body):
        return label
    return body.replace("-", "\N{MINUS SIGN}")


@functools.cache
def _plain_log_formatter() -> type:
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        """matplotlib's log axis labels, as `plain_log_label` writes them."""

        def __call__(self, x, pos=None):
            return plain_log_label(super().__call__(x, pos))

    return PlainLogFormatter


def _plain_log_labels(ax) -> None:
    """The tick labels of the log axes of `ax` as `plain_log_label` writes them: major and minor, the same ticks
    labelled as matplotlib's log scale labels them."""
    from matplotlib.ticker import LogFormatterSciNotation

    plain_class = _plain_log_formatter()
    for axis in (ax.xaxis, ax.yaxis):
        for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                         (axis.get_minor_formatter, axis.set_minor_formatter)):
            f = get()
            if type(f) is LogFormatterSciNotation:          # the log scale's own: the same settings, plain labels
                plain = copy.copy(f)
                plain.__class__ = plain_class
                put(plain)


def _save(plt, fig, path: Path) -> Path:
    """Lay `fig` out (tight), write it to `path` as PNG at `DPI` and close it."""
    fig.tight_layout()
    # the layout is done: tight_layout leaves a placeholder layout engine behind, for which savefig would draw the
    # whole figure once more, without rendering, before drawing it (a fifth of the quickstart's plot)
    fig.set_layout_engine(None)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return Path(path)


def draw_figure(spec: FigureSpec, path: Path) -> Path:
    """Draw a `FigureSpec` (`svmsim.plotspec`) as it is: every decision (scales, series, reference lines, notes) is
    the spec's; this only turns it into matplotlib calls and writes the PNG."""
    plt = _pyplot()
    n = len(spec.panels)
    if n == 0:                                   # nothing to draw: one bare axis under the notes that say why
        spec = FigureSpec([Panel("empty", [])], title=spec.title, notes=spec.notes or ["nothing to draw"],
                          panel_size=spec.panel_size)
        n = 1
    cols = max(1, min(spec.ncols, n))
    rows = int(np.ceil(n / cols))
    w, h = spec.panel_size
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False, dpi=DPI,
                             sharex=spec.sharex and n > 1, sharey=spec.sharey and n > 1)
    for ax, panel in zip(axes.ravel(), spec.panels):
        _draw_panel(ax, panel)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    text = "\n".join([spec.title] * bool(spec.title) + spec.notes)
    if text:
        small = len(text) > 9 * w * cols
        fig.suptitle("\n".join(textwrap.fill(line, int((14 if small else 10) * w * cols))
                               for line in text.split("\n")), fontsize=9 if small else 12)
    return _save(plt, fig, path)


def _draw_panel(ax, panel: Panel) -> None:
    ax.set_xscale(panel.xscale)
    ax.set_yscale(panel.yscale)
    _plain_log_labels(ax)
    for s in panel.series:
        if s.band is not None:
            ax.fill_between(s.x, s.band[0], s.band[1], color=s.color, alpha=0.2, linewidth=0,
                            label=s.band_label)
        ax.plot(s.x, s.y, color=s.color, linestyle="none" if s.markers_only else s.linestyle, marker=s.marker,
                label=s.label or None)
    for line in panel.lines:
        draw = ax.axvline if line.axis == "x" else ax.axhline
        draw(line.value, color=line.color, linestyle=line.linestyle, linewidth=1, label=line.label)
    if panel.notes:                              # under the panel, clear of the data
        ax.text(0.0, -0.2, "\n".join(textwrap.fill(t, 75) for t in panel.notes), transform=ax.transAxes,
                fontsize=6.5, va="top", ha="left", color="0.25")
    if panel.xscale == "linear":
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    if panel.title:
        ax.set_title(panel.title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    if any(s.label for s in panel.series) or panel.lines:
        ax.legend(loc="best", fontsize=7)


def plot_run(metrics: list[dict], path: Path, title: str = "", bound: dict | None = None,
             comm_unit: tuple[str, float] | None = None, eps: float | None = None,
             rate: tuple[str, float] | None = None, targets: dict[str, float] | None = None,
             certified: bool = True) -> Path:
    """A run's panels (`svmsim.plotspec.run_figure` decides them): the objective (with the spread over nodes and
    the certified lower bound, best so far), the relative measures (log, with the target eps, the stop `targets`,
    the paper's bounds where they fall in the plotted range and the rate reference `rate`), the consensus measures
    of a gossip run, and accuracy, each only when the run reports it, against communication (a distributed run),
    kernel evaluations (a single-machine run that counts them) or the iteration. ``certified=False`` (a run whose
    certificates do not hold, e.g. computed from compressed messages): no label says "certified"."""
    return draw_figure(run_figure(metrics, title=title, bound=bound, comm_unit=comm_unit, eps=eps, rate=rate,
                                  targets=targets, certified=certified), path)


def plot_cost_vs_eps(rows: list[dict], slopes: list[dict], path: Path, title: str = "",
                     group_keys: list[str] | None = None, metric: str = "rel_gap", certified: bool = True) -> Path:
    """Measured communication to `metric` <= eps (default: the certified relative gap) against 1/eps (log-log),
    one line per variant and
    grid group, with the fitted slope in the legend, the bound k(d+sqrt(d/eps)) and the lower bound
    k*min(d, 1/eps) of each group drawn as they are (no constants), and the bound's shape times the one constant
    that fits the group's points best (stated in the legend), to compare shapes. `group_keys`: the grid keys other than
    eps (default: every row key that is not a known result column)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=DPI)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if group_keys is not None:
            key = (("variant", r["variant"]),) + tuple((k, r.get(k)) for k in group_keys)
        else:
            key = tuple((k, v) for k, v in r.items() if k not in _ROW_RESULT_KEYS and k != "eps")
        groups.setdefault(key, []).append(r)
    slope_of = {tuple((k, v) for k, v in s.items() if k not in ("slope", "points", "bound_slope")): s["slope"]
                for s in slopes}
    drawn_bounds = set()
    for i, (key, rs) in enumerate(groups.items()):
        rs = sorted(rs, key=lambda r: -r["eps"])
        inv = np.array([1.0 / r["eps"] for r in rs])
        cost = np.array([r.get("cost_scalars", np.nan) for r in rs], dtype=float)
        label = ", ".join(f"{v}" if k == "variant" else f"{k}={v}" for k, v in key)
        slope = slope_of.get(key, np.nan)
        ax.loglog(inv, cost, marker="o", color=f"C{i % 10}",
                  label=f"{label} (slope {slope:.2f})" if np.isfinite(slope) else label)
        upper = np.array([r.get("bound_upper") or np.nan for r in rs], dtype=float)
        lower = np.array([r.get("bound_lower") or np.nan for r in rs], dtype=float)
        bkey = (tuple(np.round(upper, 6)), tuple(np.round(lower, 6)))
        if np.isfinite(upper).any() and bkey not in drawn_bounds:
            drawn_bounds.add(bkey)
            ax.loglog(inv, upper, linestyle="--", color=f"C{i % 10}", alpha=0.6, label=f"bound ({label})")
            ax.loglog(inv, lower, linestyle=":", color=f"C{i % 10}", alpha=0.6, label=f"lower bound ({label})")
            ok = np.isfinite(cost) & np.isfinite(upper) & (cost > 0) & (upper > 0)
            if ok.any():                         # the bound's shape times the constant that fits the points best
                c = float(np.exp(np.mean(np.log(cost[ok] / upper[ok]))))      # least squares in log space
                ax.loglog(inv, upper * c, linestyle="-.", color=f"C{i % 10}", alpha=0.5,
                          label=f"bound shape x {c:.3g} (constant fitted; {label})")
    ax.set_xlabel("1/eps")
    ax.set_ylabel(f"scalars to {(metric_label if certified else uncertified_label)(metric)} <= eps")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    _plain_log_labels(ax)
    return _save(plt, fig, path)


#: keys of a sweep row that are results, not grid coordinates
_ROW_RESULT_KEYS = {"algorithm", "stop_reason", "iterations", "rounds", "scalars", "comm_units", "wall_time",
                    "objective", "hull_distance", "margin", "rel_gap", "gap_per_cn", "train_accuracy", "test_accuracy",
                    "test_accuracy_std", "cost_scalars", "cost_iteration", "reached", "cost_units", "bound_upper",
                    "bound_lower", "cost_resolution", "scalars_vs_first", "messages", "virtual_time",
                    "dropped_messages", "dropped_scalars", "crashed_nodes", "objective_std", "train_accuracy_std",
                    "test_accuracy_shard", "test_accuracy_shard_std", "average_model_test_accuracy",
                    "consensus_error", "model_disagreement", "nodes_up", "test_accuracy_all_nodes", "nodes", "spectral_gap",
                    "inv_spectral_gap", "mixing_time", "diameter", "mean_degree", "spectral_gap_metropolis",
                    "target", "cost_messages", "cost_messages_per_node", "cost_rounds", "cost_virtual_time",
                    "cost_wall_time", "cost_round_resolution"}


_MARKERS = "osD^v<>phX*"


def plot_scaling(rows: list[dict], fits: list[dict], path: Path, x: str, ys: list[str], by: str | None = None,
                 title: str = "") -> Path:
    """One log-log panel per column in `ys` against column `x`: every run a point (colour by the grid key `by`,
    each colour's markers smaller than the last and drawn above them so that coinciding runs stay visible;
    marker by variant), the least-squares line of each variant with its slope in the legend, and a slope-1 guide
    through the points' geometric mean. Runs that did not reach the target (NaN cost) are left out."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(ys), figsize=(6.4 * len(ys), 4.8), squeeze=False, dpi=DPI)
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    colours = list(dict.fromkeys(r.get(by) for r in rows)) if by else variants
    for ax, y in zip(axes.ravel(), ys):
        allx, ally = [], []
        for r in rows:
            xv, yv = r.get(x), r.get(y)
            if not isinstance(xv, (int, float)) or not isinstance(yv, (int, float)):
                continue
            if not (np.isfinite(xv) and np.isfinite(yv) and xv > 0 and yv > 0):
                continue
            c = colours.index(r.get(by) if by else r["variant"])
            m = _MARKERS[variants.index(r["variant"]) % len(_MARKERS)]
            ax.loglog([xv], [yv], linestyle="none", marker=m, color=f"C{c % 10}", alpha=0.85,
                      markersize=_nested_size(c), zorder=3 + c)
            allx.append(xv)
            ally.append(yv)
        for i, c in enumerate(colours):                      # legend entries for the colours
            ax.plot([], [], linestyle="none", marker="o", color=f"C{i % 10}", markersize=_nested_size(i),
                    label=f"{by}={c}" if by else str(c))
        if allx:
            lo, hi = min(allx), max(allx)
            grid = np.geomspace(lo, hi, 50) if hi > lo else np.array([lo])
            for f in fits:
                if f["y"] != y or not np.isfinite(f.get("slope", np.nan)):
                    continue
                own = by is not None and by in f and f[by] in colours       # a line per colour
                name = f"{f['variant']}, {by}={f[by]}" if own else f["variant"]
                ax.loglog(grid, np.exp(f["intercept"]) * grid ** f["slope"], linestyle="--",
                          color=f"C{colours.index(f[by]) % 10}" if own else "k", alpha=0.7,
                          label=f"{name}: slope {f['slope']:.2f} (r² {f['r2']:.3f})")
            gx, gy = np.exp(np.mean(np.log(allx))), np.exp(np.mean(np.log(ally)))
            ax.loglog(grid, gy * grid / gx, linestyle=":", color="gray", alpha=0.8, label="slope 1")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        _plain_log_labels(ax)
    fig.suptitle(title)
    return _save(plt, fig, path)


def _nested_size(colour: int) -> float:
    """Marker size of the colour-th series: each smaller than the one before and drawn above it, so runs that
    land on the same point stay visible as nested markers."""
    return max(3.0, 10.0 - 1.75 * colour)


def plot_sweep_curves(runs: list, path: Path, y: str = "objective", x: str = "comm_units", title: str = "",
                      max_panels: int = 12, trials: str | None = None, certified: bool = True) -> Path:
    """One panel per grid point, one curve per variant: metric `y` against `x` (communication in the paper's unit
    by default, in scalars when the runs' units differ; single-machine runs, which send nothing, as a line at their
    final value, or against wall time in a panel of their own), on shared axes (`svmsim.plotspec.sweep_figure`
    decides them). With `trials` (a grid key whose values are repetitions, e.g. the seed), the trials share a
    panel: each variant is drawn as the mean over its trials with the band from their minimum to their maximum."""
    spec = sweep_figure(runs, y=y, x=x, title=title, max_panels=max_panels, trials=trials, certified=certified)
    if len(spec.panels) > 1 or trials:
        against = spec.panels[0].xlabel if spec.panels else x
        spec.title = f"{title}: {y} against {against}" + (f" (band: min to max over {trials})" if trials else "")
    elif spec.panels and not spec.panels[0].title:
        spec.panels[0].title, spec.title = title, ""
    return draw_figure(spec, path)
