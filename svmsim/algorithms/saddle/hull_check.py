"""Saddle-DSVC's certificate check (beta = "auto"): the server certifies the current iterate from the clients'
reports, the same certificate as the single machine's (`estimator.SaddleSVC._certificate`), so that both restart
at the same iterations with the same beta (`restarts`).

Upper bound: U = |S p| = |sum_c S_c p_c|, a reduce of one d-vector per client. Lower bound: per class the capped
minimum of u_j = <w, S_j> over the class's points (`certificate.capped_min`): cap times the sum of the k smallest
values plus the rest of the unit mass on the (k+1)-th, k = floor(1/cap). The points are spread over the clients, so
the server finds that order statistic by probing thresholds: at a threshold tau every client reports, per class,
how many of its values lie below tau and their sum, how many at or below, and the nearest values on either side
(`probe_report`); the server adds the counts and sums, takes the extremes, and narrows a bracket of data values by
interpolating the rank (bisecting when that stalls) until tau is the order statistic (`CappedMinSearch`).
"""
from __future__ import annotations

import math

import numpy as np

#: per class in a probe report: [count below tau, sum below tau, count at or below tau, largest value below tau,
#: smallest value above tau]; the server sums the first three and takes the max and min of the last two
PROBE_WIDTH = 5
#: per class in the first report of a check: [count, smallest value, largest value] and a probe report
FIRST_WIDTH = 3 + PROBE_WIDTH


def probe_report(values: np.ndarray, tau: float, out: np.ndarray) -> None:
    """One class's probe report of one client at threshold tau into out[:PROBE_WIDTH] (vectorised)."""
    below = values < tau
    low = values[below]
    high = values[values > tau]
    out[0] = low.size
    out[1] = low.sum()
    out[2] = np.count_nonzero(values <= tau)
    out[3] = low.max() if low.size else -math.inf
    out[4] = high.min() if high.size else math.inf


def first_report(values: np.ndarray, tau: float, out: np.ndarray) -> None:
    """One class's first report of a check into out[:FIRST_WIDTH]: [count, min, max] and a probe at tau."""
    out[0] = values.size
    out[1] = values.min() if values.size else math.inf
    out[2] = values.max() if values.size else -math.inf
    probe_report(values, tau, out[3:])


def combine_probes(rows: np.ndarray) -> np.ndarray:
    """The global probe report from the clients' rows (one row of PROBE_WIDTH per client)."""
    return np.array([rows[:, 0].sum(), rows[:, 1].sum(), rows[:, 2].sum(), rows[:, 3].max(), rows[:, 4].min()])


class CappedMinSearch:
    """The capped minimum of one class's values, spread over the clients, found by probing thresholds.

    The answer's threshold is the r-th smallest value, r = min(k+1, N): below it lie a < r values, at or below it
    b >= r. The bracket [lo, hi] always holds it and shrinks to data values on either side of every probe."""

    def __init__(self, cap: float, count: int, smallest: float, largest: float):
        self.cap = cap
        self.count = count
        self.k = min(int(math.floor(1.0 / cap + 1e-12)), count) if cap < 1.0 else 1
        self.rank = min(self.k + 1, count) if cap < 1.0 else 1
        self.lo, self.hi = smallest, largest
        self.lo_rank, self.hi_rank = 0, count      # values below lo; values at or below hi
        self.value: float | None = smallest if not cap < 1.0 else None    # cap >= 1: the plain minimum
        self.tau = smallest
        self.bisect = False

    @property
    def done(self) -> bool:
        return self.value is not None

    def update(self, tau: float, report: np.ndarray) -> None:
        """Take the global probe report at tau; sets `value` when tau is the order statistic, else the next tau."""
        if self.done:
            return
        below, total, at_or_below, largest_below, smallest_above = report
        if below < self.rank <= at_or_below:
            k, cap = self.k, self.cap
            # cap on each of the k smallest (those below tau, then copies of tau), the rest on the (k+1)-th = tau
            value = cap * (total + (k - below) * tau)
            rest = 1.0 - cap * k
            if k < self.count and rest > 0:
                value += rest * tau
            self.value = float(value)
            return
        if ((at_or_below < self.rank and not math.isfinite(smallest_above))
                or (below >= self.rank and not math.isfinite(largest_below))):
            # the counts put the order statistic beyond every value: some u_j is NaN (neither below, at nor above
            # any threshold), and the bracket would never close
            raise FloatingPointError(
                f"the certificate check cannot order the values u_j = <w, S_j>: at tau = {float(tau)!r}, {int(below)} lie "
                f"below and {int(at_or_below)} at or below of {self.count}, with no value beyond; the iterate w is "
                "not finite")
        width = self.hi_rank - self.lo_rank
        if at_or_below < self.rank:                       # the answer lies above tau
            self.lo, self.lo_rank = smallest_above, int(at_or_below)
        else:                                             # ... below tau
            self.hi, self.hi_rank = largest_below, int(below)
        # interpolate the rank between the bracket's ends; bisect after a step that did not halve the bracket
        stalled = 2 * (self.hi_rank - self.lo_rank) > width
        if self.lo >= self.hi:
            self.tau = self.lo
        elif self.bisect or stalled:
            self.tau = 0.5 * (self.lo + self.hi)
        else:
            frac = (self.rank - self.lo_rank - 0.5) / max(self.hi_rank - self.lo_rank, 1)
            self.tau = self.lo + min(max(frac, 0.0), 1.0) * (self.hi - self.lo)
        self.bisect = stalled and not self.bisect
