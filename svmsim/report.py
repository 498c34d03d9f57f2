"""Plots of a run: objective, certified gap and accuracy against communication, with the paper's bounds.

Labels of metrics come from the registry (`svmsim.core.metrics`): a curve is called "certified" only when the
metric is a certificate and the run's certificates hold (not when computed from compressed messages)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .core.metrics import label as metric_label
from .core.metrics import uncertified_label

__all__ = ["plot_run", "plot_cost_vs_eps", "plot_sweep_curves", "plot_scaling", "GAP_PANEL"]

#: the metrics drawn in a run's panel of relative measures, with their colours
GAP_PANEL = {"rel_gap": "C3", "gap_per_cn": "C5", "rel_dual": "C1", "rel_primal": "C2", "consensus_error": "C0"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(metrics: list[dict], path: Path, title: str = "", bound: dict | None = None,
             comm_unit: tuple[str, float] | None = None, eps: float | None = None, certified: bool = True) -> Path:
    """Panels against communication (scalars, or the paper's unit such as k*d): the objective, the relative
    measures (log scale, with the target eps: the certified relative gap, paper 001's gap over C n, the relative
    dual and primal errors, Push-Sum's consensus error; `GAP_PANEL`, labelled by the metric registry), and
    train/test accuracy, each only when the run reports it (no empty panel). The bounds k(d + sqrt(d/eps)) and
    k*min(d, 1/eps) are drawn once, as vertical lines in the gap panel, labelled as the orders they are (no
    constants). ``certified=False`` (a run whose certificates do not hold, e.g. computed from compressed
    messages): no label says "certified"."""
    plt = _pyplot()
    name_of = metric_label if certified else uncertified_label

    def col(name):
        return np.array([m.get(name, np.nan) if m.get(name) is not None else np.nan for m in metrics], dtype=float)

    scalars = col("scalars")
    distributed = np.nanmax(scalars) > 0 if scalars.size else False
    if distributed:
        unit_name, unit = comm_unit if comm_unit else ("scalars", 1.0)
        x = scalars / unit
        xlabel = f"communication ({unit_name})" if unit_name != "scalars" else "communication (scalars)"
    else:
        unit = 1.0
        x = col("iteration")
        xlabel = "iteration"
    relative = {name: col(name) for name in GAP_PANEL}
    has = {"objective": np.isfinite(col("objective")).any(), "gap": any((v > 0).any() for v in relative.values()),
           "accuracy": np.isfinite(col("train_accuracy")).any() or np.isfinite(col("test_accuracy")).any()}
    shown = [k for k in ("objective", "gap", "accuracy") if has[k]] or ["objective"]   # no empty panel
    fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 4.2), squeeze=False)
    axes = list(axes[0])
    panel = dict(zip(shown, axes))
    if "objective" in panel:
        ax = panel["objective"]
        ax.plot(x, col("objective"), marker=".", label="objective")
        if np.isfinite(col("hull_lower")).any() and "dual_objective" not in metrics[-1]:
            ax.plot(x, col("hull_lower"), marker=".", linestyle="--",
                    label="lower bound (certified)" if certified else "lower bound (not certified)")
        ax.set_ylabel("objective")
    if "gap" in panel:
        ax = panel["gap"]
        for (name, color), values in zip(GAP_PANEL.items(), relative.values()):
            if (values > 0).any():
                ax.semilogy(x, np.where(values > 0, values, np.nan), marker=".", color=color,
                            label=f"{name_of(name)} ({name})")
        if eps:
            ax.axhline(eps, color="gray", linestyle=":", label=f"eps = {eps:g}")
        ax.set_ylabel("relative measure")
    if "accuracy" in panel:
        ax = panel["accuracy"]
        ax.plot(x, col("train_accuracy"), marker=".", label="train accuracy")
        if np.isfinite(col("test_accuracy")).any():
            ax.plot(x, col("test_accuracy"), marker=".", label="test accuracy")
        ax.set_ylabel("accuracy")
    for a in axes:
        a.set_xlabel(xlabel)
    if distributed and bound:                    # once, where the target is read: the gap panel if there is one
        a = panel.get("gap", axes[0])
        a.axvline(bound["upper"] / unit, color="C2", linestyle="--", linewidth=1,
                  label="k(d+sqrt(d/eps)), constants and logs left out")
        a.axvline(bound["lower"] / unit, color="C4", linestyle=":", linewidth=1,
                  label="k min(d,1/eps) lower bound, constants left out")
    for a in axes:
        a.legend(loc="best", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_cost_vs_eps(rows: list[dict], slopes: list[dict], path: Path, title: str = "",
                     group_keys: list[str] | None = None, metric: str = "rel_gap") -> Path:
    """Measured communication to `metric` <= eps (default: the certified relative gap) against 1/eps (log-log),
    one line per variant and
    grid group, with the fitted slope in the legend, the bound k(d+sqrt(d/eps)) and the lower bound
    k*min(d, 1/eps) of each group drawn as they are (no constants), and the bound's shape times the one constant
    that fits the group's points best (stated in the legend), to compare shapes. `group_keys`: the grid keys other than
    eps (default: every row key that is not a known result column)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
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
    ax.set_ylabel(f"scalars to {metric_label(metric)} <= eps")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


#: keys of a sweep row that are results, not grid coordinates
_ROW_RESULT_KEYS = {"algorithm", "stop_reason", "iterations", "rounds", "scalars", "comm_units", "wall_time",
                    "objective", "hull_distance", "margin", "rel_gap", "gap_per_cn", "train_accuracy", "test_accuracy",
                    "test_accuracy_std", "cost_scalars", "cost_iteration", "reached", "cost_units", "bound_upper",
                    "bound_lower", "cost_resolution", "scalars_vs_first", "messages", "virtual_time",
                    "dropped_messages", "dropped_scalars", "crashed_nodes", "objective_std", "train_accuracy_std",
                    "test_accuracy_shard", "test_accuracy_shard_std", "average_model_test_accuracy",
                    "consensus_error", "nodes_up", "test_accuracy_all_nodes", "nodes", "spectral_gap",
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
    fig, axes = plt.subplots(1, len(ys), figsize=(6.4 * len(ys), 4.8), squeeze=False)
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
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _nested_size(colour: int) -> float:
    """Marker size of the colour-th series: each smaller than the one before and drawn above it, so runs that
    land on the same point stay visible as nested markers."""
    return max(3.0, 10.0 - 1.75 * colour)


def _is_gap(name: str) -> bool:
    """Metrics drawn on a log axis: relative errors, gaps, consensus errors."""
    if name in ("test_error", "train_error"):     # classification errors: a linear axis, as paper 003 draws them
        return False
    return name.startswith("rel_") or name.endswith("_gap") or name.endswith("_error")


def _spans_decades(ax, decades: float = 2.0) -> bool:
    """Whether the positive x data of the axes' lines span at least `decades` powers of ten."""
    xs = np.concatenate([np.asarray(line.get_xdata(), dtype=float) for line in ax.get_lines()] or [np.zeros(0)])
    xs = xs[np.isfinite(xs) & (xs > 0)]
    return xs.size > 1 and xs.max() / xs.min() >= 10.0 ** decades


def _trial_band(curves: list[tuple[np.ndarray, np.ndarray]], log_x: bool):
    """Mean and min/max of several trials' curves on one x grid (interpolated in log x when `log_x`), over the x
    range every trial covers."""
    lo = max(float(np.nanmin(x)) for x, _ in curves)
    hi = min(float(np.nanmax(x)) for x, _ in curves)
    if not hi > lo:
        return None
    grid = np.geomspace(lo, hi, 200) if (log_x and lo > 0) else np.linspace(lo, hi, 200)
    tx = np.log if (log_x and lo > 0) else (lambda v: v)
    ys = []
    for x, y in curves:
        ok = np.isfinite(x) & np.isfinite(y)
        order = np.argsort(x[ok], kind="stable")
        ys.append(np.interp(tx(grid), tx(x[ok][order]), y[ok][order]))
    Y = np.array(ys)
    return grid, Y.mean(axis=0), Y.min(axis=0), Y.max(axis=0)


def plot_sweep_curves(runs: list, path: Path, y: str = "objective", x: str = "comm_units", title: str = "",
                      max_panels: int = 12, trials: str | None = None) -> Path:
    """One panel per grid point, one curve per variant: metric `y` against `x` (communication in the paper's
    unit by default; single-machine runs, which send nothing, are drawn against wall time instead). With `trials`
    (a grid key whose values are repetitions, e.g. the seed), the trials share a panel: each variant is drawn as
    the mean over its trials with the band from their minimum to their maximum."""
    plt = _pyplot()
    panels: dict[tuple, list] = {}
    for point, metrics, unit in runs:
        key = tuple((k, v) for k, v in point.values.items() if k != trials)
        panels.setdefault(key, []).append((point.variant, metrics, unit))
    keys = list(panels)[:max_panels]
    cols = min(3, len(keys))
    nrows = int(np.ceil(len(keys) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.9 * nrows), squeeze=False)
    for ax, key in zip(axes.ravel(), keys):
        by_variant: dict[str, list] = {}
        for variant, metrics, unit in panels[key]:
            xs = np.array([m.get(x, np.nan) for m in metrics], dtype=float)
            xlabel = x if x != "comm_units" else f"communication ({unit[0] if unit else 'scalars'})"
            if x in ("comm_units", "scalars") and not (np.nan_to_num(xs) > 0).any():
                xs = np.array([m.get("wall_time", np.nan) for m in metrics], dtype=float)
                variant = f"{variant} (wall time, s)"
            ys = np.array([m.get(y, np.nan) if m.get(y) is not None else np.nan for m in metrics], dtype=float)
            if _is_gap(y):
                ys = np.where(ys > 0, ys, np.nan)
            by_variant.setdefault(variant, []).append((xs, ys))
            ax.set_xlabel(xlabel)
        log_x = x in ("kernel_evaluations", "inner_products")
        for variant, curves in by_variant.items():
            band = _trial_band(curves, log_x) if (trials and len(curves) > 1) else None
            if band is None:
                for i, (xs, ys) in enumerate(curves):
                    ax.plot(xs, ys, marker="." if len(xs) < 60 else None, label=variant if i == 0 else None)
                continue
            grid, mean, lo, hi = band
            line, = ax.plot(grid, mean, label=f"{variant} (mean of {len(curves)})")
            ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        if _is_gap(y):
            ax.set_yscale("log")                 # gaps and relative errors span decades
        if log_x or (x in ("iteration", "wall_time", "modelled_time", "solver_time") and _spans_decades(ax)):
            ax.set_xscale("log")                 # iterations, times and kernel evaluations span decades
        else:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        ax.set_ylabel(y)
        ax.set_title(", ".join(f"{k}={v}" for k, v in key) or ("" if trials else title), fontsize=9)
        ax.legend(fontsize=7, loc="best")
    for ax in axes.ravel()[len(keys):]:
        ax.set_visible(False)
    if len(keys) > 1 or trials:                  # one panel already carries the title
        import textwrap

        full = f"{title}: {y} against {x}" + (f" (band: min to max over {trials})" if trials else "")
        fig.suptitle("\n".join(textwrap.wrap(full, 48 * min(3, len(keys)) + 20)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
