"""When a certificate has stopped improving: one test for every family.

`StallWatch` keeps the certified gaps of a run and says when they have stopped falling (Saddle-SVC's beta = "auto"
restarts on it, paper 000). `CertificateStall` adds the primal: a certificate that stalls while the primal has
converged cannot close by running longer, so the run says so and stops (its evaluator returns the reason as the
row's ``diagnosis``), and a reference solver gives up with that cause instead of spending its budget.
`ObjectiveSettle` is the rule of a method without a certificate (SBP and the kernel baselines of paper 003): stop
once the objective has stopped moving, saying so.
"""
from __future__ import annotations

import math
from array import array

import numpy as np

__all__ = ["STALL_CHECKS", "STALL_FACTOR", "PRIMAL_SHARE", "CertificateStall", "ObjectiveSettle", "StallWatch"]

#: a stall needs at least STALL_CHECKS checks, and the best gap of the second half of the iterations (since the last
#: restart) above STALL_FACTOR times the best of the first half
STALL_CHECKS = 8
STALL_FACTOR = 0.9
#: the primal has converged when its best value fell by at most PRIMAL_SHARE of the current gap over that second half
PRIMAL_SHARE = 0.1


class StallWatch:
    """The certified gaps of a run since its last restart, and the test of a stall."""

    def __init__(self):
        self.iterations, self.gaps = array("d"), array("d")
        self.start = self.since = 0

    def add(self, iteration: int, gap: float) -> None:
        self.iterations.append(iteration)
        self.gaps.append(gap)

    def restart(self, iteration: int) -> None:
        self.start, self.since = len(self.gaps), iteration

    def halves(self, patience: int) -> int | None:
        """Where the second half of the checks since the last restart begins (an index past `start`), or None
        when there are fewer than STALL_CHECKS checks or `patience` iterations."""
        its = np.frombuffer(self.iterations)[self.start:]
        if its.size < STALL_CHECKS or its[-1] - self.since < patience:
            return None
        cut = int(np.searchsorted(its, self.since + (its[-1] - self.since) / 2, side="right"))
        return cut if 0 < cut < its.size else None

    def stalled(self, patience: int) -> bool:
        """Whether the gap has stopped improving since the last restart: after at least STALL_CHECKS checks and
        `patience` iterations, the best gap of the second half of them is above STALL_FACTOR times the best of the
        first half (a gap falling like 1/t halves when the iterations double, a geometric one falls further, a
        plateau does not move; the best of each half smooths the noise of single certificates)."""
        cut = self.halves(patience)
        if cut is None:
            return False
        gaps = np.frombuffer(self.gaps)[self.start:]
        return bool(gaps[cut:].min() > STALL_FACTOR * gaps[:cut].min())


class CertificateStall:
    """Says why a run cannot reach its certified target: its certified gap has stalled (`StallWatch`, after
    `patience` iterations) while its primal objective has converged (the best primal of the second half is within
    PRIMAL_SHARE of the gap of the first half's; gap and primal in the same units). `update` returns the reason once, then None; `explain` (optional,
    called with no argument when a stall is found) adds where the gap lies."""

    def __init__(self, patience: int, explain=None, unit: str = "iterations"):
        self.patience, self.explain, self.unit = int(patience), explain, unit
        self.watch = StallWatch()
        self.primals = array("d")
        self.said = False

    def update(self, iteration: int, gap: float, primal: float) -> str | None:
        if self.said or not (math.isfinite(gap) and math.isfinite(primal)):
            return None
        self.watch.add(iteration, gap)
        self.primals.append(primal)
        if not self.watch.stalled(self.patience):
            return None
        cut = self.watch.halves(self.patience)
        primals = np.frombuffer(self.primals)
        gaps = np.frombuffer(self.watch.gaps)
        moved = float(primals[:cut].min() - primals[cut:].min())
        if moved > PRIMAL_SHARE * float(gaps[cut:].min()):
            return None
        self.said = True
        its = np.frombuffer(self.watch.iterations)
        why = (f"certificate stalled: the certified gap has stayed at {gaps[cut:].min():.3g} (best of the last "
               f"{int(its[-1] - its[cut - 1])} {self.unit}; {gaps[:cut].min():.3g} before) while the primal has "
               f"converged (it moved by {max(moved, 0.0):.2g})")
        extra = self.explain() if self.explain is not None else None
        return f"{why}; {extra}" if extra else why


class ObjectiveSettle:
    """Says when an objective has settled: over each of the last `intervals` intervals between evaluation points it
    moved by at most `share` of its value per doubling of the iterations (a change over an interval from t to t'
    counts as change / log2(t'/t), so log-spaced and evenly spaced evaluation points are judged alike; an objective
    still falling like 1/t halves its excess every doubling and does not settle while that excess is above
    `share`). Not a certificate: the reason says how far the objective moved, not how far it is from the optimum.
    `update` returns the reason once, then None."""

    def __init__(self, share: float, intervals: int = 2, unit: str = "iterations"):
        self.share, self.intervals, self.unit = float(share), int(intervals), unit
        self.points: list[tuple[float, float]] = []
        self.said = False

    def update(self, iteration: float, objective: float) -> str | None:
        if self.said or not math.isfinite(objective) or iteration <= 0:
            return None
        self.points.append((float(iteration), float(objective)))
        if len(self.points) <= self.intervals:
            return None
        recent = self.points[-self.intervals - 1:]
        rates = []
        for (t0, f0), (t1, f1) in zip(recent, recent[1:]):
            if not (t1 > t0 and f1 != 0.0):
                return None
            rates.append(abs(f1 - f0) / abs(f1) / math.log2(t1 / t0))
        if max(rates) > self.share:
            return None
        self.said = True
        return (f"objective settled: it moved by at most {max(rates):.2g} of its value per doubling of the "
                f"{self.unit} over the last {self.intervals} evaluation intervals (settle = {self.share:g}; not a "
                "certificate)")
