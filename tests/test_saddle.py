"""Saddle-SVC and Saddle-DSVC (paper 000) against exact references, and the distributed form against the
single-machine one."""
from __future__ import annotations

import math

import numpy as np
import pytest

from svmsim.algorithms.saddle import projection as K
from svmsim.algorithms.saddle import (Rotation, SaddleDSVCParams, SaddleSVC, build_saddle_dsvc, capped_min,
                                      dsvc_check_scalars, dsvc_scalars_per_iteration, dsvc_setup_scalars,
                                      resolve_cap)
from svmsim.comm import Meter
from svmsim.deployment import Problem
from svmsim.engine import InProcessEngine
from svmsim.errors import InfeasibleParameterError
from svmsim.reference import exact_hull_distance, nusvc_reduced_hull
from svmsim.schedule import SyncScheduler


def rel(a, b):
    return abs(a - b) / abs(b)


# -- building blocks ---------------------------------------------------------------------------------------------

def test_rotation_is_orthogonal_and_maps_back(load):
    ds = load("heart_scale")
    rot = Rotation.from_seed(ds.d, seed=5)
    Y = rot.rotate_rows(ds.X, np.arange(ds.n))
    X = ds.X.toarray()
    assert Y.shape == (ds.n, 16)
    np.testing.assert_allclose(Y @ Y.T, X @ X.T, atol=1e-10)           # Gram matrix kept: OPT unchanged
    w = np.random.default_rng(0).normal(size=16)
    np.testing.assert_allclose(Y @ w, X @ rot.to_original(w), atol=1e-10)   # decision values identical


def test_capped_min_matches_linear_program():
    from scipy.optimize import linprog

    rng = np.random.default_rng(1)
    for m, cap in [(7, 0.2), (40, 1 / 23), (10, 1.0), (12, 0.09)]:
        v = rng.normal(size=m)
        lp = linprog(v, A_eq=np.ones((1, m)), b_eq=[1.0], bounds=[(0, min(cap, 1.0))] * m)
        assert capped_min(v, cap) == pytest.approx(lp.fun, abs=1e-9)


def test_projection_rules_agree_and_satisfy_invariants():
    rng = np.random.default_rng(2)
    for m, cap in [(500, 1 / 300), (1000, 0.01), (64, 0.05)]:
        pr = rng.lognormal(sigma=2.0, size=m)
        mult = 1.0 / pr.sum()
        c_newton, _ = K.cap_multiplier(pr, 0, m, mult, cap, 1.0, m + 2)
        c_warm, _ = K.cap_multiplier(pr, 0, m, mult, cap, 3.0 * c_newton, m + 2)
        c_sort = K.sort_multiplier(pr, 0, m, mult, cap)
        assert c_newton == pytest.approx(c_sort, rel=1e-12)
        assert c_warm == pytest.approx(c_sort, rel=1e-12)
        p = np.minimum(cap, c_sort * mult * pr)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert p.max() <= cap * (1 + 1e-12) and c_sort >= 1.0
        assert np.all(np.diff(p[np.argsort(pr)]) >= -1e-15)               # order preserved
        again = K.sort_multiplier(p, 0, m, 1.0, cap)                      # idempotent
        assert again == pytest.approx(1.0, abs=1e-12)


def test_infeasible_nu_is_rejected_with_the_allowed_range():
    with pytest.raises(InfeasibleParameterError, match=r"nu >= 1/min\(n1, n2\)"):
        resolve_cap(100, 40, nu=0.01, alpha=None)
    assert resolve_cap(100, 40, None, None) == math.inf
    assert resolve_cap(100, 40, None, 0.5) == pytest.approx(1 / 20)


# -- single machine against references ---------------------------------------------------------------------------

def test_hard_margin_iris_matches_exact_hull_distance(load):
    ds = load("iris")
    ref = exact_hull_distance(ds.X, ds.y)
    assert ref.distance == pytest.approx(0.8300, abs=1e-4)            # notes-000: exact distance 0.8300
    m = SaddleSVC(tol=1e-4, max_iter=200_000).fit(ds.X, ds.y)
    assert m.rel_gap_ <= 1e-4
    assert rel(m.hull_distance_, ref.distance) <= 1e-3
    assert m.hull_lower_ <= ref.distance * (1 + 1e-9) <= m.hull_distance_ * (1 + 1e-9)   # certificate brackets it
    cos = m.coef_[0] @ ref.coef / np.linalg.norm(m.coef_[0]) / np.linalg.norm(ref.coef)
    assert cos > 0.9999
    assert m.score(ds.X, ds.y) == 1.0


def test_hard_margin_mushrooms_matches_exact_hull_distance(load):
    ds = load("mushrooms")
    ref = exact_hull_distance(ds.X, ds.y)
    assert ref.distance == pytest.approx(0.5139161, rel=1e-6)
    m = SaddleSVC(tol=1e-3, beta=0.01, max_iter=2_000_000, check_every=2500).fit(ds.X, ds.y)
    assert m.rel_gap_ <= 1e-3                                          # certified
    assert rel(m.hull_distance_, ref.distance) <= 1e-3
    assert rel(m.hull_lower_, ref.distance) <= 1e-3
    assert m.score(ds.X, ds.y) == 1.0


# a9a is the paper's size: NuSVC alone fits it in about a minute (slow; `benchmarks/bench_saddle_vs_sklearn.py`
# makes the same comparison on it)
@pytest.mark.parametrize("name", ["phishing", pytest.param("a9a", marks=pytest.mark.slow)])
def test_nu_svm_matches_nusvc(load, name):
    ds = load(name)
    ref = nusvc_reduced_hull(ds.X, ds.y, alpha=0.85)
    m = SaddleSVC(alpha=0.85, tol=1e-3, max_iter=500_000).fit(ds.X, ds.y)
    assert m.rel_gap_ <= 1e-3
    assert rel(m.hull_distance_, ref.distance) <= 1e-3
    # nu-SVM objective (5) from both sides brackets NuSVC's -|z|^2/8
    assert m.objective_ >= -ref.distance ** 2 / 8 * (1 + 1e-9)
    cos = m.coef_[0] @ ref.coef / np.linalg.norm(m.coef_[0]) / np.linalg.norm(ref.coef)
    assert cos > 0.99


def test_projection_rules_give_the_same_iterates(load):
    ds = load("phishing")
    ws = [SaddleSVC(alpha=0.85, seed=4, stop="iterations", max_iter=400, check_every=400, projection=p)
          .fit(ds.X, ds.y).w_ for p in ("newton", "rule3", "sort")]
    for w in ws[1:]:
        assert np.linalg.norm(w - ws[0]) <= 1e-12 * np.linalg.norm(ws[0])


def test_estimator_api(load):
    ds = load("heart_scale")
    ylab = np.where(ds.y > 0, "sick", "healthy")
    m = SaddleSVC(alpha=0.85, tol=1e-2).fit(ds.X, ylab)
    assert set(m.predict(ds.X)) <= {"sick", "healthy"}
    assert m.decision_function(ds.X).shape == (ds.n,)
    assert m.score(ds.X, ylab) > 0.75
    assert m.get_params()["alpha"] == 0.85


# -- distributed: same iterates, exact ledger ------------------------------------------------------------------

def _run_dsvc(ds, k, T, seed, compiled=True, **kw):
    dep = build_saddle_dsvc(SaddleDSVCParams(clients=k, **kw), Problem(ds, seed=seed, partition_scheme="iid"))
    eng = InProcessEngine()
    groups = eng.plan(dep.roles)
    eng.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = SyncScheduler(eng, groups, meter, dep.n_nodes, compiled=compiled)
    sched.run(max_iterations=T, observe_every=T // 3, on_iteration=lambda it, rnd: False)
    obs = {}
    for gid, o in eng.observe().items():
        obs.setdefault(groups[gid].role, []).append(o)
    return dep, meter, obs


@pytest.mark.parametrize("name,kw,T", [("mushrooms", {}, 1500), ("phishing", {"alpha": 0.85}, 600),
                                       ("phishing", {"alpha": 0.85, "projection": "newton"}, 600)])
def test_dsvc_follows_saddle_svc_iterates(load, name, kw, T):
    ds = load(name)
    dep, meter, obs = _run_dsvc(ds, 20, T, seed=7, **kw)
    single = SaddleSVC(seed=7, stop="iterations", max_iter=T, check_every=T, **kw).fit(ds.X, ds.y)
    w = obs["client"][0]["w"]
    assert np.linalg.norm(w - single.w_) <= 1e-9 * np.linalg.norm(single.w_)
    metrics = dep.evaluate(obs)
    assert metrics["hull_distance"] == pytest.approx(single.hull_distance_, rel=1e-9)


@pytest.mark.parametrize("kw", [{}, {"alpha": 0.85}, {"alpha": 0.85, "projection": "newton"},
                                {"alpha": 0.85, "check_every": 40}, {"check_every": 40}])
def test_dsvc_compiled_rounds_equal_python_rounds(load, kw):
    ds = load("heart_scale")
    runs = [_run_dsvc(ds, 6, 300, seed=2, compiled=c, **kw) for c in (False, True)]
    (_, m0, o0), (_, m1, o1) = runs
    assert m0.ledger().equals(m1.ledger())
    assert np.array_equal(o0["client"][0]["w"], o1["client"][0]["w"])
    assert np.array_equal(o0["client"][0]["p"], o1["client"][0]["p"])
    assert o0["server"] == o1["server"]


@pytest.mark.parametrize("kw", [{}, {"alpha": 0.85}, {"alpha": 0.85, "projection": "newton"}])
def test_dsvc_ledger_equals_declared_count(load, kw):
    ds = load("heart_scale")
    k, T = 6, 300
    dep, meter, obs = _run_dsvc(ds, k, T, seed=1, **kw)
    ledger = meter.ledger()
    srv = obs["server"][0]
    assert srv["iteration"] == T
    assert ledger.totals["scalars"] == dep.declared_scalars(obs)
    tags = {t: v[1] for t, v in ledger.by_tag.items()}
    assert tags["stats"] == tags["setup"] == 4 * k
    assert tags["coord"] == k * T
    assert tags["delta"] == tags["delta_sum"] == 2 * k * T
    # beta = "auto": a certificate check every check_every iterations (250 here), each probe of the capped minimum
    C, P, d_pad = srv["checks"], srv["probes"], dep.info["d_pad"]
    assert C == T // 250 and tags["check"] == 3 * k * C and tags["resume"] == 2 * k * C
    assert tags["hull"] == k * (d_pad + 17) * C
    assert tags.get("probe", 0) == 2 * k * P and tags.get("probe_stats", 0) == 10 * k * P
    assert (P == 0) == (not kw)                    # the hard margin's capped minimum is the plain minimum
    checks = dsvc_check_scalars(k, d_pad, C, P)
    if kw.get("projection") != "newton":
        assert tags["z"] == tags["z_sum"] == 2 * k * T
    if kw.get("projection") == "newton":
        R = srv["cap_reports"]
        assert tags["mass"] == 10 * k * R and tags["scale"] == 7 * k * R and "cap" not in tags
        assert tags["z_guess"] == 8 * k * T and tags["z_scale"] == 4 * k * T and "z" not in tags
        assert T <= R <= 2 * T                     # warm-started: about one pass per iteration
        assert ledger.totals["scalars"] == dsvc_setup_scalars(k) + 17 * k * T + 17 * k * R + checks
    elif kw:
        R = srv["cap_reports"]
        assert tags["cap"] == 4 * k * R and tags.get("cap_sum", 0) == 4 * k * (R - T)
        assert ledger.totals["scalars"] == dsvc_setup_scalars(k) + sum(
            dsvc_scalars_per_iteration(k, True, 1) for _ in range(T)) + 8 * k * (R - T) + checks
    else:
        assert ledger.totals["scalars"] == dsvc_setup_scalars(k) + T * dsvc_scalars_per_iteration(k, False) + checks
        assert "cap" not in tags
    # every message travels on a star edge, and each client sends and receives the same amount
    by_node = ledger.by_node()
    sent = {by_node[f"client-{i}"]["sent"]["scalars"] for i in range(k)}
    assert len(sent) == 1


@pytest.mark.parametrize("alpha,shape,eps,k,T,restarts", [(None, (300, 20, 0.05, 3), 0.01, 4, 600, 1),
                                                         (0.85, (100, 5, 0.05, 2), 0.03, 5, 3300, 2),
                                                         (None, (300, 20, 0.05, 3), 0.01, 4, 20_100, 1)])
def test_dsvc_auto_beta_restarts_where_saddle_svc_does(alpha, shape, eps, k, T, restarts):
    """beta = "auto" on Saddle-DSVC: the server certifies the iterate every check_every iterations from the
    clients' reports and restarts at the same iterations, with the same beta, as the single machine; the iterates
    stay the same (past the re-read of u after U_REFRESH_EVERY iterations too), every message of the checks is in
    the ledger, and the compiled rounds equal the Python ones."""
    import scipy.sparse as sp

    from svmsim.data.registry import Dataset
    from svmsim.data.synthetic import make_separable

    n, d, margin, seed = shape
    X, y = make_separable(n, d, beta=margin, seed=seed)
    kw = {"alpha": alpha} if alpha else {}
    single = SaddleSVC(seed=7, eps=eps, check_every=50, stop="iterations", max_iter=T, **kw).fit(X, y)
    ds = Dataset(name="separable", X=sp.csr_matrix(X), y=y)
    dep, meter, obs = _run_dsvc(ds, k, T, seed=7, eps=eps, check_every=50, **kw)
    srv = obs["server"][0]
    assert single.restarts_ == srv["restarts"] == restarts
    assert srv["beta"] == pytest.approx(single.beta_, rel=1e-9) and single.beta_ < 1.0
    w = obs["client"][0]["w"]
    # the long run spends 20 000 iterations at beta = 1e-3, which amplifies round-off (1.3e-9 before the re-read)
    assert np.linalg.norm(w - single.w_) <= (1e-8 if T > 5000 else 1e-9) * np.linalg.norm(single.w_)
    assert srv["checks"] == (T - 1) // 50 and (srv["probes"] >= srv["checks"]) == bool(alpha)
    assert meter.ledger().totals["scalars"] == dep.declared_scalars(obs)
    if T > 5000:
        return
    _, python_meter, python_obs = _run_dsvc(ds, k, T, seed=7, compiled=False, eps=eps, check_every=50, **kw)
    assert python_meter.ledger().equals(meter.ledger()) and python_obs["server"] == obs["server"]
    assert np.array_equal(python_obs["client"][0]["w"], w)


def test_capped_min_by_probes_equals_capped_min():
    """The server's search (hull_check) over values split among clients finds certificate.capped_min: random
    values and many ties, caps from 1/n to above 1, cold and warm first thresholds; a few probes each."""
    from svmsim.algorithms.saddle.hull_check import (FIRST_WIDTH, PROBE_WIDTH, CappedMinSearch, combine_probes,
                                                     first_report, probe_report)

    rng = np.random.default_rng(11)
    probes = []
    for trial in range(80):
        n = int(rng.integers(1, 300))
        values = rng.normal(size=n) if trial % 2 else rng.integers(-4, 4, size=n).astype(float)
        cap = [np.inf, 1.0, 1.0 / n, 1.0 / rng.uniform(1.0, n), 1.0 / int(rng.integers(1, n + 1))][trial % 5]
        parts = np.array_split(rng.permutation(values), int(rng.integers(1, 7)))
        tau = float(rng.normal()) if trial % 3 else 0.0
        rows = np.zeros((len(parts), FIRST_WIDTH))
        for row, part in zip(rows, parts):
            first_report(part, tau, row)
        search = CappedMinSearch(cap, int(rows[:, 0].sum()), rows[:, 1].min(), rows[:, 2].max())
        search.update(tau, combine_probes(rows[:, 3:]))
        count = 0
        while not search.done:
            count += 1
            assert count <= 64
            rows = np.zeros((len(parts), PROBE_WIDTH))
            for row, part in zip(rows, parts):
                probe_report(part, search.tau, row)
            search.update(search.tau, combine_probes(rows))
        probes.append(count)
        assert search.value == pytest.approx(capped_min(values, cap), rel=1e-12, abs=1e-12)
    assert np.mean(probes) < 8


def test_the_capped_min_search_refuses_values_it_cannot_order():
    """A NaN value is neither below, at nor above any threshold: the probes' counts then put the order statistic
    beyond every value, and the search says so instead of probing for ever (a Saddle-DSVC iterate that overflowed,
    e.g. on compressed messages)."""
    bad = math.nan
    from svmsim.algorithms.saddle.hull_check import (FIRST_WIDTH, PROBE_WIDTH, CappedMinSearch, combine_probes,
                                                     first_report, probe_report)

    values = np.array([0.5, bad, bad, bad, -0.25, bad])
    cap = 1.0 / 4                                     # the 5th smallest of 6: beyond the two finite values
    row = np.zeros((1, FIRST_WIDTH))
    first_report(values, 0.0, row[0])
    search = CappedMinSearch(cap, int(row[0, 0]), row[0, 1], row[0, 2])
    with pytest.raises(FloatingPointError, match="cannot order the values"):
        for _ in range(64):
            search.update(search.tau, combine_probes(row[:, 3:]) if _ == 0 else combine_probes(probe))
            probe = np.zeros((1, PROBE_WIDTH))
            probe_report(values, search.tau, probe[0])


def test_dsvc_reaches_certified_gap_on_mushrooms_with_k20(data_env):
    # 2e-3 keeps this under a minute; the slow suite runs scenarios/saddle_dsvc_mushrooms.toml to 1e-3
    import svmsim

    res = svmsim.run({"name": "dsvc-mushrooms-test", "seed": 0, "data": {"name": "mushrooms"},
                      "algorithm": {"name": "saddle-dsvc", "clients": 20, "beta": 0.01},
                      "stop": {"gap": 2e-3, "max_iterations": 400_000},
                      "output": {"eval_every": 5000, "progress": False}}, write=False)
    assert res.final["rel_gap"] <= 2e-3
    assert rel(res.final["hull_distance"], 0.5139161) <= 2e-3
    assert res.summary["ledger_matches_declared"]


def test_same_bits_whether_the_kernels_are_compiled_or_loaded_from_the_cache(tmp_path, shared_data_dir):
    """Same seed, same bits, whatever numba's cache holds: one fit in a process that compiles the kernels (an empty
    cache directory) and one in a process that loads them from that cache."""
    import os
    import subprocess
    import sys

    code = ("import hashlib, numpy as np; from svmsim.data import load_dataset; "
            "from svmsim.algorithms.saddle import SaddleSVC; "
            f"ds = load_dataset('mushrooms', data_dir={str(shared_data_dir)!r}); "
            "m = SaddleSVC(seed=0, stop='iterations', max_iter=300, check_every=300).fit(ds.X, ds.y); "
            "print(hashlib.sha256(np.ascontiguousarray(m.coef_).tobytes()).hexdigest())")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    fresh, cached = (subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip() for _ in range(2))
    assert fresh == cached


def test_distributed_run_gives_the_same_bits_compiled_or_loaded_from_the_cache(tmp_path, shared_data_dir):
    """Saddle-DSVC's client and server steps call the kernels of `rounds`, `mirror` and `projection`: a process
    that compiles them all (an empty cache) and one that loads the steps from that cache give the same objective
    to the last bit (with fastmath's ``nsz`` beside ``reassoc`` they did not: `svmsim.core.jit`)."""
    import os
    import subprocess
    import sys

    code = ("import svmsim; r = svmsim.run({'name': 'bits', 'seed': 0, 'data': {'name': 'iris'}, "
            "'algorithm': {'name': 'saddle-dsvc', 'clients': 3, 'eps': 0.01}, "
            "'stop': {'max_iterations': 200, 'gap': 1e-9}, "
            "'output': {'eval_every': 25, 'progress': False, 'plots': False}}, write=False); "
            "print([repr(row['objective']) for row in r.metrics])")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "SVMSIM_CACHE_DIR": str(tmp_path / "svmsim"),
           "SVMSIM_DATA_DIR": str(shared_data_dir)}
    fresh, cached = (subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip() for _ in range(2))
    assert fresh == cached and fresh.count("'") >= 2 * 8
