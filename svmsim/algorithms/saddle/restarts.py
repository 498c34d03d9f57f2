"""beta = "auto": when to restart Saddle-SVC / Saddle-DSVC with a smaller beta, and which beta (notes-000 section
6, Lemma 3: the certificate reaches eps only with beta <= OPT, which nobody knows before solving).

The single machine (`estimator.SaddleSVC`) and the server of Saddle-DSVC (`dsvc.SaddleServer`) both feed their
certified gaps to one `StallWatch` (the general stall test, `algorithms.stall`) and ask `lower_beta`, so the two restart at the same iterations with the same beta.
"""
from __future__ import annotations

from ..stall import STALL_CHECKS, STALL_FACTOR, StallWatch

__all__ = ["RESTART_MARGIN", "RESTART_RATIO", "SMOOTHING_REACH", "STALL_CHECKS", "STALL_FACTOR", "StallWatch",
           "lower_beta"]

#: a restart at least divides beta by RESTART_RATIO, aims RESTART_MARGIN below the gap asked for, and only follows a
#: plateau within SMOOTHING_REACH * eps * beta of the optimum
RESTART_RATIO = 2.0
RESTART_MARGIN = 0.5
SMOOTHING_REACH = 4.0


def lower_beta(beta: float, info: dict, scale: float, eps: float, asked: float) -> float | None:
    """The beta to restart with when the certificate has stalled at `beta`, or None when the stall is not beta's
    doing; `info` holds the certificate (hull_distance U, hull_lower L in the data's units, times `scale`, and
    rel_gap), `asked` the relative gap the run aims at.

    In unit-ball units the certified bounds L <= dist <= U give L^2/2 <= OPT <= U^2/2 and an objective gap
    G = (U^2 - L^2)/2. The entropy smoothing of weight gamma = eps*beta/(2 ln n) moves the optimum by at most
    eps*beta (Lemma 3), so a plateau with G above SMOOTHING_REACH*eps*beta is not beta's doing. A plateau that is
    scales with beta, so beta is cut by the ratio of the gap asked for to the gap reached (relative gaps r of the
    distance: G = U^2 r (2 - r)/2), with a margin, by at least RESTART_RATIO, and never below L^2/2, which already
    satisfies Lemma 3's beta <= OPT."""
    upper, lower = info["hull_distance"] / scale, info["hull_lower"] / scale
    opt_low, gap = 0.5 * lower * lower, 0.5 * (upper * upper - lower * lower)
    if not beta > opt_low or gap > SMOOTHING_REACH * eps * beta:
        return None
    reached = min(info["rel_gap"], 1.0)
    asked = min(asked, 1.0)
    cut = RESTART_MARGIN * asked * (2.0 - asked) / (reached * (2.0 - reached))
    return max(opt_low, beta * min(cut, 1.0 / RESTART_RATIO))
