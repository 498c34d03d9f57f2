"""Property-based invariants (hypothesis, derandomised: the same examples on every run; a bounded number in the
default suite): the ledger equals the closed-form count and every node the exact result for any collective,
pattern, k, d and grouping onto hosts; paper 004's projections are the Euclidean projections for any targets,
ties included; a distributed run's metrics rows move forward in iteration and communication; any valid scenario
round-trips through its resolved form unchanged; paper 000's capped-simplex projection meets the KKT conditions of
the KL projection and paper 003's water level holds its volume, ties included; Push-Sum's running-sum form
conserves mass under any fault plan."""
from __future__ import annotations

import numpy as np
import pytest
import tomllib
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_collectives import _run, _topology

from svmsim import load_scenario, run
from svmsim.algorithms.pushsum import mass
from svmsim.comm.collectives import OPS, PATTERNS, plan
from svmsim.comm.patterns import get_pattern
from svmsim.config import dump_toml

FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FAST
@given(pattern=st.sampled_from(PATTERNS), op=st.sampled_from(OPS), k=st.integers(1, 9), d=st.integers(1, 12),
       groups=st.integers(1, 3), compiled=st.booleans(), seed=st.integers(0, 2**16))
def test_any_collective_gives_the_exact_result_and_the_closed_form_ledger(pattern, op, k, d, groups, compiled,
                                                                          seed):
    assume(groups <= k)
    assume(op in get_pattern(pattern).ops)                      # the torus: all-reduce only
    assume(not (op == "allreduce" and d < get_pattern(pattern).min_width(k)))  # ring chunks need d >= K
    assume(not (pattern == "ring" and op == "reduce" and d < k))
    p = plan(op, pattern, np.arange(k), d)
    values = np.random.default_rng(seed).standard_normal((k, d))
    got, finished, ledger = _run(p, values, _topology(pattern, k) if k > 1 else None, compiled=compiled,
                                 groups=groups)
    want = p.reference(values)
    if op == "reduce":
        assert np.array_equal(got[p.root], want[p.root])
    else:
        assert np.array_equal(got, want) and finished.all()
    assert ledger.totals["messages"] == p.messages() and ledger.totals["scalars"] == p.scalars()


def _bisection_root(m, y, upper):
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if (y * np.clip(m + y * mid, 0, upper)).sum() >= 0 else (mid, hi)
    return hi


@FAST
@given(values=st.lists(st.sampled_from([-3.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0]), min_size=2, max_size=60),
       signs=st.lists(st.booleans(), min_size=2, max_size=60), warm=st.booleans())
def test_the_bias_projection_is_the_projection_for_any_targets_with_ties(values, signs, warm):
    """Targets drawn from a few values (so kinks tie) and both classes present: the result lies in {0 <= a <= U,
    y^T a = 0} and has the KKT form clip(m + y nu, 0, U) of the bisection's root, from a cold or a warm start."""
    from svmsim.algorithms.bundle.projection import project_bias

    n = min(len(values), len(signs))
    y = np.where(np.array(signs[:n]), 1.0, -1.0)
    assume(0 < (y > 0).sum() < n)
    upper = 1.0 / n
    m = np.array(values[:n]) / n
    out = np.empty(n)
    guess = 0.3 / n if warm else np.nan
    project_bias(m, y, upper, out, np.full(n, upper), np.empty(n, np.int64), np.empty(2 * n), guess)
    assert out.min() >= 0.0 and out.max() <= upper and abs(y @ out) <= 1e-12
    np.testing.assert_allclose(out, np.clip(m + y * _bisection_root(m, y, upper), 0, upper), atol=1e-12)


@FAST
@given(values=st.lists(st.sampled_from([-1.0, 0.0, 0.1, 0.3, 0.3, 0.7, 1.5]), min_size=1, max_size=40),
       capped=st.booleans())
def test_the_simplex_projection_is_the_closest_point_for_any_targets_with_ties(values, capped):
    """Against a linear-time characterisation: the projection onto {a >= 0, sum a = 1} is max(t - theta, 0) for
    the theta of the sorting method; the capped set keeps max(t, 0) when it sums to at most 1."""
    from svmsim.algorithms.bundle.projection import project_simplex

    t = np.array(values)
    n = t.size
    out = np.empty(n)
    project_simplex(t, out, np.ones(n), np.ones(n), np.empty(n, np.int64), np.empty(2 * n), capped)
    if capped and np.maximum(t, 0).sum() <= 1:
        np.testing.assert_array_equal(out, np.maximum(t, 0))
        return
    u = np.sort(t)[::-1]
    css = np.cumsum(u)
    r = np.nonzero(u * np.arange(1, n + 1) > css - 1)[0][-1]
    np.testing.assert_allclose(out, np.maximum(t - (css[r] - 1) / (r + 1.0), 0), atol=1e-12)
    assert abs(out.sum() - 1) <= 1e-12


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(alg=st.sampled_from(["pragam", "ls-bmrm", "qp-bmrm", "pegasos-n"]), workers=st.integers(1, 5),
       pattern=st.sampled_from(["star", "ring", "tree", "binomial"]), eval_every=st.integers(1, 7),
       iterations=st.integers(3, 40))
def test_metrics_rows_move_forward_and_the_ledger_is_declared(alg, workers, pattern, eval_every, iterations):
    assume(not (pattern == "ring" and workers > 4))      # iris: d = 4, a ring needs a chunk per worker
    raw = {"name": "p", "seed": 0, "data": {"name": "iris"}, "topology": {"kind": "complete"},
           "algorithm": {"name": alg, "lam": 1e-2, "workers": workers, "allreduce": pattern},
           "stop": {"max_iterations": iterations}, "output": {"eval_every": eval_every, "progress": False}}
    res = run(raw, write=False)
    its = [r["iteration"] for r in res.metrics]
    scalars = [r["scalars"] for r in res.metrics]
    assert its == sorted(set(its)) and scalars == sorted(scalars)
    assert res.final["iteration"] == iterations
    assert res.summary["ledger_matches_declared"] is True


@FAST
@given(alg=st.sampled_from(["pragam", "qp-bmrm", "saddle-dsvc", "bqo-e"]), n=st.integers(20, 200),
       d=st.integers(2, 30), k=st.integers(1, 6), lam=st.floats(1e-6, 1.0), seed=st.integers(0, 1000),
       iterations=st.integers(1, 10**6))
def test_a_valid_scenario_round_trips_through_its_resolved_form(alg, n, d, k, lam, seed, iterations):
    params = {"saddle-dsvc": {"clients": k, "eps": 0.05}, "bqo-e": {"workers": k, "C": 1.0 / lam},
              "pragam": {"workers": k, "lam": lam}, "qp-bmrm": {"workers": k, "lam": lam, "max_bundle": 50}}[alg]
    raw = {"name": "rt", "seed": seed, "data": {"name": "synthetic", "kind": "nonseparable", "n": n, "d": d},
           "algorithm": {"name": alg, **params}, "stop": {"max_iterations": iterations}}
    first = load_scenario(raw)
    again = load_scenario(tomllib.loads(dump_toml(first.to_dict())))
    assert again == first and again.to_dict() == first.to_dict()


@pytest.mark.slow
@settings(max_examples=500, deadline=None, derandomize=True)
@given(values=st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=300),
       signs=st.lists(st.booleans(), min_size=2, max_size=300))
def test_the_bias_projection_many_examples(values, signs):
    test_the_bias_projection_is_the_projection_for_any_targets_with_ties.hypothesis.inner_test(values, signs, False)


@FAST
@given(values=st.lists(st.sampled_from([0.01, 0.1, 0.1, 0.5, 1.0, 1.0, 3.0, 7.5]), min_size=2, max_size=50),
       cap_frac=st.floats(0.0, 1.0), warm=st.floats(0.5, 4.0))
def test_the_capped_simplex_projection_is_the_kl_projection_for_any_weights_with_ties(values, cap_frac, warm):
    """Paper 000's nu-projection: p = min(cap, c q) with one multiplier c is the KL projection onto {p >= 0,
    sum p = 1, p <= cap} (its KKT conditions); Rule 2 (sort), Newton from c = 1 and Newton warm-started agree."""
    from svmsim.algorithms.saddle import projection as K

    pr = np.array(values)
    m = pr.shape[0]
    cap = 1.0 / m + cap_frac * (1.0 - 1.0 / m)
    mult = 1.0 / pr.sum()
    c_sort = K.sort_multiplier(pr, 0, m, mult, cap)
    c_newton, _ = K.cap_multiplier(pr, 0, m, mult, cap, 1.0, m + 2)
    c_warm, _ = K.cap_multiplier(pr, 0, m, mult, cap, warm * c_sort, m + 2)
    p = np.minimum(cap, c_sort * mult * pr)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert (p >= 0).all() and p.max() <= cap * (1 + 1e-12)
    # KKT of min KL(p || q): log(p_j / q_j) is one constant on the uncapped entries, at least it on the capped ones
    free = p < cap * (1 - 1e-12)
    ratio = np.log(p / (mult * pr))
    if free.any():
        assert np.ptp(ratio[free]) <= 1e-9
        assert (ratio[~free] <= ratio[free].max() + 1e-9).all()
    for c in (c_newton, c_warm):
        assert np.minimum(cap, c * mult * pr) == pytest.approx(p, abs=1e-12)


@FAST
@given(values=st.lists(st.sampled_from([-2.0, -1.0, -1.0, 0.0, 0.0, 0.3, 1.0, 4.0]), min_size=1, max_size=40),
       volume=st.sampled_from([0.0, 1e-9, 0.5, 3.0, 1e3]), start=st.floats(-5.0, 5.0))
def test_the_water_level_holds_its_volume_for_any_responses_with_ties(values, volume, start):
    """Paper 003's water level, three ways: the level holds exactly the volume V (sum (gamma - c)_+ = V; the minimum
    when V = 0) and the covered set is the points below it."""
    from svmsim.algorithms.sbp.water import (
        water_level_newton,
        water_level_select,
        water_level_sorted,
    )

    c = np.array(values)
    g, top = water_level_sorted(c, volume)
    g_sel, _ = water_level_select(c, volume, np.empty_like(c))
    g_new, bound, count, _ = water_level_newton(c, volume, start, np.empty_like(c))
    scale = 1.0 + np.abs(c).max() + volume
    assert abs(g_sel - g) <= 1e-12 * scale and abs(g_new - g) <= 1e-12 * scale
    if volume > 0:
        assert np.maximum(g - c, 0.0).sum() == pytest.approx(volume, rel=1e-9, abs=1e-12 * scale)
    else:
        assert g == c.min()
    assert top <= g + 1e-12 * scale and count == int((c < bound).sum()) >= 1


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(nodes=st.integers(3, 25), drop=st.floats(0.0, 0.5), duplicate=st.floats(0.0, 0.3),
       delay=st.floats(0.0, 0.5), stragglers=st.floats(0.0, 0.3), seed=st.integers(0, 50),
       times=st.lists(st.floats(0.1, 15.0), min_size=1, max_size=4),
       compiled=st.booleans())
def test_running_sum_push_sum_conserves_mass_under_any_fault_plan(nodes, drop, duplicate, delay, stragglers,
                                                                   seed, times, compiled):
    """Push-Sum's running-sum form: the nodes' sums plus what the edge totals still owe equal the initial total at
    any instant, whatever the fault plan loses, duplicates, delays or slows down (compiled event loop or not)."""
    from test_gossip import pushsum_run, state_of

    from svmsim.data import make_dataset
    from svmsim.faults import FaultModel

    iris = make_dataset({"name": "iris"})
    extra = {"delay": delay, "delay_time": {"kind": "exponential", "mean": 0.3}} if delay > 0 else {}
    slow = {"stragglers": stragglers, "straggler_factor": 3.0} if stragglers > 0 else {}
    faults = FaultModel(drop=drop, duplicate=duplicate, **extra, **slow)
    sched, engine, _, _ = pushsum_run(iris, variant="running-sum", nodes=nodes, seed=seed, faults=faults,
                                      compiled=compiled)
    o = state_of(engine)
    s0, w0 = o["s0"].sum(axis=0), o["w0"].sum()
    for t in sorted(times):
        sched.run(max_time=t)
        s, w = mass([state_of(engine)])
        np.testing.assert_allclose(s, s0, rtol=0, atol=1e-12 * np.abs(o["s0"]).sum())
        assert abs(w - w0) <= 1e-12 * w0
