"""Plots of a run: objective, certified gap and accuracy against communication, with the paper's bounds."""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["plot_run"]


def plot_run(metrics: list[dict], path: Path, title: str = "", bound: dict | None = None,
             comm_unit: tuple[str, float] | None = None, eps: float | None = None) -> Path:
    """Three panels against communication (scalars, or the paper's unit such as k*d): the objective, the
    certified relative gap (log scale, with the target eps), and train/test accuracy. The bounds
    k(d + sqrt(d/eps)) and k*min(d, 1/eps) are drawn as vertical lines where they apply."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    ax.plot(x, col("objective"), marker=".", label="objective")
    if np.isfinite(col("hull_lower")).any() and "dual_objective" not in metrics[-1]:
        ax.plot(x, col("hull_lower"), marker=".", linestyle="--", label="lower bound (certified)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("objective")
    ax.legend(loc="best", fontsize=8)
    ax = axes[1]
    gap = col("rel_gap")
    ax.semilogy(x, np.where(gap > 0, gap, np.nan), marker=".", color="C3", label="certified relative gap")
    if eps:
        ax.axhline(eps, color="gray", linestyle=":", label=f"eps = {eps:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("relative gap")
    ax = axes[2]
    ax.plot(x, col("train_accuracy"), marker=".", label="train accuracy")
    if np.isfinite(col("test_accuracy")).any():
        ax.plot(x, col("test_accuracy"), marker=".", label="test accuracy")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy")
    if distributed and bound:
        for a in axes:
            a.axvline(bound["upper"] / unit, color="C2", linestyle="--", linewidth=1,
                      label="k(d+sqrt(d/eps)) bound")
            a.axvline(bound["lower"] / unit, color="C4", linestyle=":", linewidth=1, label="k min(d,1/eps) lower bound")
    for a in axes[1:]:
        a.legend(loc="best", fontsize=8)
    axes[0].legend(loc="best", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
