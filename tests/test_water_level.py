"""Paper 003's water level: sort, selection and Newton agree with each other and with a linear program of the
definition (max gamma s.t. c_i + xi_i >= gamma, xi >= 0, sum xi <= V; with a bias, c_i + y_i b + xi_i >= gamma) on
10^4 random inputs: ties, n = 1, V = 0, tiny and huge volumes."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from svmsim.algorithms.sbp.water import (
    pick_lowest,
    water_level_bias,
    water_level_bias_select,
    water_level_newton,
    water_level_select,
    water_level_sorted,
)

N_CASES = 10_000
BLOCK = 200          # instances per linear program (independent blocks: the joint optimum is the sum)


def _cases(seed: int, n_cases: int, bias: bool = False):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n_cases):
        n = 1 if (t % 50 == 0 and not bias) else int(rng.integers(2 if bias else 1, 25))
        style = t % 4
        if style == 0:
            c = rng.normal(size=n)
        elif style == 1:
            c = rng.integers(-3, 4, size=n).astype(float)          # many ties
        elif style == 2:
            c = np.full(n, float(rng.normal()))                    # all equal
        else:
            c = rng.normal(size=n) * 10.0 ** rng.integers(-6, 4)
        vol = [0.0, 1e-12, float(rng.exponential()), float(rng.exponential() * n), 1e6][int(rng.integers(5))]
        y = None
        if bias:
            y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
            y[0], y[1] = 1.0, -1.0
        out.append((c, vol, y))
    return out


def _lp_levels(cases, bias: bool) -> np.ndarray:
    """The optimal gamma of each case, from one LP per block of cases."""
    levels = []
    for start in range(0, len(cases), BLOCK):
        block = cases[start:start + BLOCK]
        rows, cols, vals, rhs, ub_rows = [], [], [], [], 0
        var = 0
        gamma_at = []
        bounds = []
        for c, vol, y in block:
            n = c.shape[0]
            g = var
            b = var + 1 if bias else None
            xi = var + (2 if bias else 1)
            gamma_at.append(g)
            bounds += [(None, None)] + ([(None, None)] if bias else []) + [(0, None)] * n
            for i in range(n):                      # gamma - y_i b - xi_i <= c_i
                rows += [ub_rows, ub_rows]
                cols += [g, xi + i]
                vals += [1.0, -1.0]
                if bias:
                    rows.append(ub_rows)
                    cols.append(b)
                    vals.append(-y[i])
                rhs.append(c[i])
                ub_rows += 1
            rows += [ub_rows] * n                   # sum xi <= V
            cols += list(range(xi, xi + n))
            vals += [1.0] * n
            rhs.append(vol)
            ub_rows += 1
            var = xi + n
        A = sp.csr_matrix((vals, (rows, cols)), shape=(ub_rows, var))
        cost = np.zeros(var)
        cost[gamma_at] = -1.0
        res = linprog(cost, A_ub=A, b_ub=np.array(rhs), bounds=bounds, method="highs",
                      options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
        assert res.status == 0, res.message
        levels.extend(res.x[gamma_at])
    return np.array(levels)


def _close(a, b, scale):
    return abs(a - b) <= 1e-7 * (1.0 + scale)


def test_three_methods_agree_with_the_linear_program():
    cases = _cases(0, N_CASES)
    lp = _lp_levels(cases, bias=False)
    bad = []
    for (c, vol, _), g_lp in zip(cases, lp):
        work = np.empty_like(c)
        g_sort, top_sort = water_level_sorted(c, vol)
        g_sel, top_sel = water_level_select(c, vol, work)
        prev = float(np.random.default_rng(c.shape[0]).normal())        # any warm start
        g_new, bound, count, _ = water_level_newton(c, vol, prev, work)
        assert count == int((c < bound).sum()) and count >= 1
        scale = abs(g_lp) + np.abs(c).max() + vol
        # the sort and the selection agree to rounding, and each with the LP to its tolerance
        if not (_close(g_sort, g_lp, scale) and _close(g_sel, g_sort, 1e-3 * scale)
                and _close(g_new, g_sort, 1e-3 * scale)):
            bad.append((c, vol, g_lp, g_sort, g_sel, g_new))
            continue
        # the covered set: top is the largest covered value, the rest lies at or above the level
        for top in (top_sort, top_sel):
            assert top <= g_sort + 1e-9 * scale
            assert not ((c > top) & (c < g_sort - 1e-9 * scale)).any()
        if vol > 0:                               # the covered points hold the volume exactly
            k = int((c <= top_sort).sum())
            assert _close(k * g_sort - c[c <= top_sort].sum(), vol, scale * k)
    assert not bad, f"{len(bad)} of {N_CASES} cases disagree; first: {bad[0]}"


def test_volume_zero_is_the_minimum_and_n_one_is_exact():
    c = np.array([3.0, -1.0, -1.0, 2.0])
    work = np.empty(4)
    assert water_level_sorted(c, 0.0) == (-1.0, -1.0)
    assert water_level_select(c, 0.0, work) == (-1.0, -1.0)
    g, bound, count, _ = water_level_newton(c, 0.0, 5.0, work)
    assert g == -1.0 and count == 2 and (c < bound).sum() == 2
    one = np.array([0.25])
    assert water_level_sorted(one, 2.0) == (2.25, 0.25)
    assert water_level_select(one, 2.0, np.empty(1)) == (2.25, 0.25)
    assert water_level_newton(one, 2.0, -7.0, np.empty(1))[:3] == (2.25, 2.25, 1)


def test_newton_from_the_previous_level_needs_few_passes():
    rng = np.random.default_rng(3)
    c = rng.normal(size=20_000)
    vol = 0.05 * c.shape[0]
    work = np.empty_like(c)
    g0, _ = water_level_sorted(c, vol)
    c2 = c + 1e-3 * rng.normal(size=c.shape[0])              # one SBP step moves the responses a little
    g, _, _, passes = water_level_newton(c2, vol, g0, work)
    assert g == pytest.approx(water_level_sorted(c2, vol)[0], rel=1e-12)
    assert passes <= 6


def test_bias_level_matches_the_linear_program_and_b_is_optimal():
    cases = _cases(1, N_CASES // 5, bias=True)
    lp = _lp_levels(cases, bias=True)
    for (c, vol, y), g_lp in zip(cases, lp):
        g, b, k, pos, neg = water_level_bias(c, y, vol)
        scale = abs(g_lp) + np.abs(c).max() + vol
        assert _close(g, g_lp, scale), (c, y, vol, g, g_lp)
        # b attains the level: the plain water level of the shifted responses is gamma again
        shifted = c + y * b
        assert _close(water_level_sorted(shifted, vol)[0], g, scale), (c, y, vol, b)
        assert 1 <= k <= min(pos.shape[0], neg.shape[0])
        assert (y[pos] > 0).all() and (y[neg] < 0).all()
        assert (np.diff(c[pos]) >= 0).all() and (np.diff(c[neg]) >= 0).all()
        # the selection form gives the same level, bias and covered sets from any guess of k
        guess = int(np.random.default_rng(k).integers(1, 30))
        g2, b2, k2, a_k, d_k = water_level_bias_select(c, vol, np.sort(pos), np.sort(neg), guess,
                                                         np.full(4, np.nan))
        assert k2 == k and _close(g2, g, scale) and _close(b2, b, scale)
        assert a_k == c[pos[k - 1]] and d_k == c[neg[k - 1]]
        for side, kth in ((pos, a_k), (neg, d_k)):
            picked = {pick_lowest(c, np.sort(side), k, kth, (r + 0.5) / k) for r in range(k)}
            assert picked == set(side[:k].tolist())          # the stable sort's k lowest, each once
