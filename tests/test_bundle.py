"""Paper 004's family: projections (Appendix B), the simplex QP of qp-BMRM, the corrected lower-bound instance
(Theorems 6-7), Pragam against certified optima and LIBSVM/LIBLINEAR, the distributed form against one machine,
and the clear errors."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import hadamard

from svmsim import load_scenario, run
from svmsim.algorithms.bqo.objective import as_csr
from svmsim.algorithms.bundle import BMRMSVC, PragamSVC
from svmsim.algorithms.bundle.objective import best_bias, objective, optimum
from svmsim.algorithms.bundle.projection import (
    PROBE_WIDTH,
    bias_probe,
    bias_root_step,
    project_bias,
    project_simplex,
)
from svmsim.algorithms.bundle.protocol import (
    DOMAIN_BOX,
    DOMAIN_SIMPLEX,
    LS_BMRM,
    PRAGAM,
    QP_BMRM,
    run_solo,
)
from svmsim.algorithms.bundle.simplex_qp import add_plane, solve_simplex_qp
from svmsim.algorithms.bundle.workers import solo_state
from svmsim.data import load_dataset
from svmsim.errors import InfeasibleParameterError, ScenarioError, TopologyError


def _heart():
    ds = load_dataset("heart_scale")
    return as_csr(ds.X), np.asarray(ds.y, np.float64)


def _solo(X, y, method, lam, domain=DOMAIN_BOX, offset=1.0, **kw):
    return solo_state(X, y, method, lam, domain=domain, offset=offset, **kw)


# ---------------------------------------------------------------------------------------------------------------
# Appendix B: the projections
# ---------------------------------------------------------------------------------------------------------------

def _bias_case(seed):
    """Random targets of Pragam-b's projection (n, labels, U = 1/n, m), with duplicate kinks (rounded targets)
    for odd seeds."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    y = rng.choice([-1.0, 1.0], n)
    y[:2] = [1.0, -1.0]
    m = rng.normal(0.0, 2.0 / n, n)
    if seed % 2:
        m = np.round(m * n * 4) / (n * 4)
    return n, y, 1.0 / n, m


@pytest.mark.parametrize("seed", range(40))
def test_bias_projection_is_the_bisection_root_and_feasible(seed):
    """Algorithm 2's root of sum_i y_i clip(m_i + y_i nu, 0, U) = 0 against 200-step bisection, with duplicate
    kinks (rounded targets) in every other case."""
    n, y, upper, m = _bias_case(seed)
    out = np.empty(n)
    project_bias(m, y, upper, out, np.full(n, upper), np.empty(n, np.int64), np.empty(2 * n))
    assert abs(y @ out) < 1e-12 and out.min() >= 0.0 and out.max() <= upper
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if (y * np.clip(m + y * mid, 0, upper)).sum() >= 0 else (mid, hi)
    assert np.abs(np.clip(m + y * hi, 0, upper) - out).max() < 1e-12


@pytest.mark.parametrize("capped", [True, False])
def test_simplex_projection_matches_the_sorting_method(capped):
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        t = rng.normal(0.05, 0.5, n)
        out = np.empty(n)
        project_simplex(t, out, np.ones(n), np.ones(n), np.empty(n, np.int64), np.empty(2 * n), capped)
        if capped and np.maximum(t, 0).sum() <= 1:
            np.testing.assert_array_equal(out, np.maximum(t, 0))
            continue
        u = np.sort(t)[::-1]
        css = np.cumsum(u)
        r = np.nonzero(u * np.arange(1, n + 1) > css - 1)[0][-1]
        np.testing.assert_allclose(out, np.maximum(t - (css[r] - 1) / (r + 1.0), 0), atol=1e-12)


def test_best_bias_minimises_the_mean_hinge():
    rng = np.random.default_rng(2)
    s, y = rng.normal(size=300), rng.choice([-1.0, 1.0], 300)
    b, r = best_bias(s, y)
    grid = np.linspace(-4, 4, 40001)
    brute = min(np.mean(np.maximum(0, 1 - y * (s + g))) for g in grid)
    assert r <= brute + 1e-12 and r == pytest.approx(np.mean(np.maximum(0, 1 - y * (s + b))))


# ---------------------------------------------------------------------------------------------------------------
# qp-BMRM's inner QP
# ---------------------------------------------------------------------------------------------------------------

def test_simplex_qp_reaches_the_optimum_of_a_generic_solver():
    from scipy.optimize import minimize

    rng = np.random.default_rng(3)
    d, t, lam = 6, 9, 0.3
    A, b = rng.normal(size=(t, d)), rng.normal(size=t)
    X = sp.csr_matrix(np.eye(3))
    st = _solo(X, np.ones(3), QP_BMRM, lam, max_bundle=t, qp_max_steps=10**6)
    st = st._replace(dim=d, planes=np.zeros((t, d)), w=np.zeros(d))
    for i in range(t):
        add_plane(st, A[i], b[i])
        solve_simplex_qp(st, 1e-14)
    alpha = st.bundle_alpha[:t]
    G = A @ A.T

    def f(a):
        return 0.5 / lam * a @ G @ a - b @ a

    ref = minimize(f, np.full(t, 1.0 / t), jac=lambda a: G @ a / lam - b, bounds=[(0, 1)] * t,
                   constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}], method="SLSQP",
                   options={"ftol": 1e-15, "maxiter": 1000})
    assert abs(alpha.sum() - 1) < 1e-12 and alpha.min() >= 0
    assert f(alpha) <= ref.fun + 1e-10


# ---------------------------------------------------------------------------------------------------------------
# the lower bound (section 3, corrected)
# ---------------------------------------------------------------------------------------------------------------

def _instance_run(alg, zero_plane=True, d=32, lam=0.5, iterations=40):
    raw = {"name": "instance", "seed": 0,
           "data": {"name": "synthetic", "kind": "bmrm_lower_bound", "d": d, "zero_plane": zero_plane},
           "algorithm": {"name": alg, "lam": lam}, "stop": {"max_iterations": iterations},
           "output": {"eval_every": 1, "progress": False}}
    return run(raw, write=False)


@pytest.mark.parametrize("alg", ["ls-bmrm", "qp-bmrm"])
@pytest.mark.parametrize("zero_plane", [True, False])
def test_bmrm_gap_on_the_corrected_instance_is_exactly_one_over_2_lam_t(alg, zero_plane):
    """Theorems 6-7 with t < d (notes-004 section 2.2): eps_t = 1/(2 lam t) and J(w_t) - J* = 1/(2 lam t)
    (+ 1/(2 lam d) without the zero plane, whose J* = -1/(2 lam d)); from t = d on the planes are spent."""
    d, lam = 32, 0.5
    rows = _instance_run(alg, zero_plane, d, lam).metrics
    for row in rows:
        t = row["iteration"]
        if 1 <= t < d:
            assert row["gap"] == pytest.approx(1 / (2 * lam * t), rel=1e-6)
            assert row["primal"] == pytest.approx(1 / (2 * lam * t), rel=1e-6)
            expected = 1 / (2 * lam * t) + (0.0 if zero_plane else 1 / (2 * lam * d))
            assert row["primal_error"] == pytest.approx(expected, rel=1e-6)
    assert rows[-1]["primal_error"] == pytest.approx(0.0, abs=1e-12)


def test_the_printed_instance_is_solved_in_two_iterations():
    """The instance as printed (A = [[H, -H], [-H, H]] / sqrt(d)): antipodal columns, so BMRM's model is
    |<a_1, w>| + lam/2 |w|^2 after two planes and the gap is 0 (notes-004 section 2.2)."""
    d, lam = 16, 1.0
    H = hadamard(d // 2)
    A = np.block([[H, -H], [-H, H]]) / np.sqrt(d)
    X = sp.csr_matrix(A.T)              # row i = column a_i
    st = _solo(X, -np.ones(d), QP_BMRM, lam, domain=DOMAIN_SIMPLEX, offset=0.0, max_bundle=8)
    run_solo(st, 2)
    assert st.j_best[0] - st.lower[0] == pytest.approx(0.0, abs=1e-12)


def test_pragam_on_the_instance_stays_under_its_bound():
    """Pragam on fix 1 (random alpha_{-1} on the simplex): J(w_k) - D(beta_k) under bound (26),
    4 L D2 / ((k+1)(k+2)) with L = 1/lam and D2 = 1/2 (the simplex), and J converges to -1/(2 lam d)."""
    d, lam = 32, 0.5
    rows = _instance_run("pragam", False, d, lam, iterations=60).metrics
    for row in rows[1:]:
        k = row["iteration"] - 1
        assert row["iterate_gap"] <= 4 * (1 / lam) * 0.5 / ((k + 1) * (k + 2)) * (1 + 1e-9) + 1e-15
    assert rows[-1]["primal_error"] < 1e-10


# ---------------------------------------------------------------------------------------------------------------
# Pragam and BMRM on data
# ---------------------------------------------------------------------------------------------------------------

def test_pragam_meets_bound_26_and_the_certified_optimum():
    X, y = _heart()
    lam = 1e-2
    st = _solo(X, y, PRAGAM, lam)
    L, n = st.lipschitz, X.shape[0]
    for k in range(600):
        run_solo(st, 1)
        assert st.j_last[0] - st.d_last[0] <= 4 * L / (2 * n) / ((k + 1) * (k + 2)) * (1 + 1e-9)
        assert st.d_last[0] <= st.j_last[0]
    J_star = optimum(X, y, lam).value
    est = PragamSVC(lam=lam, tol=1e-6, certificate="own").fit(X, y)
    assert est.lower_bound_ <= J_star * (1 + 1e-9) and est.objective_ >= J_star * (1 - 1e-9)
    assert (est.objective_ - J_star) / J_star <= 1e-6


def test_pragam_matches_liblinear_and_bmrm_matches_too():
    from sklearn.svm import LinearSVC

    X, y = _heart()
    lam, n = 1e-2, X.shape[0]
    pragam = PragamSVC(lam=lam, tol=1e-6).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ll = LinearSVC(C=1 / (lam * n), loss="hinge", fit_intercept=False, tol=1e-10, max_iter=100_000).fit(X, y)
    j_ll = objective(X, y, ll.coef_.ravel(), lam)[0]
    assert abs(pragam.objective_ - j_ll) / j_ll < 1e-4
    for solver in ("qp", "ls"):
        bm = BMRMSVC(lam=lam, solver=solver, tol=1e-4, max_iter=50_000).fit(X, y)
        assert abs(bm.objective_ - pragam.objective_) / pragam.objective_ < 1e-4


def test_pragam_b_matches_libsvm_with_a_bias():
    from sklearn.svm import SVC

    X, y = _heart()
    lam, n = 1e-2, X.shape[0]
    est = PragamSVC(lam=lam, fit_intercept=True, tol=1e-6).fit(X, y)
    svc = SVC(kernel="linear", C=1 / (lam * n), tol=1e-8).fit(X, y)
    w, b = np.asarray(sp.csr_matrix(svc.coef_).todense()).ravel(), float(svc.intercept_[0])
    j_svc = 0.5 * lam * w @ w + np.mean(np.maximum(0, 1 - y * (X @ w + b)))
    assert est.objective_ == pytest.approx(j_svc, rel=1e-5)
    assert est.lower_bound_ <= j_svc * (1 + 1e-9)
    assert est.intercept_[0] == pytest.approx(b, abs=2e-2)


def test_rates_pragam_one_over_k_squared_bmrm_one_over_t():
    """The fitted log-log slopes: Pragam's J(w_k) - D(beta_k) falls about as k^-2, ls-BMRM's eps_t about as
    t^-1 (heart_scale, lam = 1e-3, iterations 100..1000)."""
    X, y = _heart()
    lam = 1e-3
    slopes = {}
    for method in (PRAGAM, LS_BMRM):
        st = _solo(X, y, method, lam)
        ks, gaps = [], []
        for k in range(1, 1001):
            run_solo(st, 1)
            if k >= 100 and k % 50 == 0:
                ks.append(k)
                gaps.append(st.j_last[0] - st.d_last[0] if method == PRAGAM else st.j_best[0] - st.lower[0])
        slopes[method] = np.polyfit(np.log(ks), np.log(gaps), 1)[0]
    assert slopes[PRAGAM] < -1.7
    assert -1.4 < slopes[LS_BMRM] < -0.6


def test_distributed_pragam_is_the_single_machine_run_and_meters_what_it_declares():
    raw = {"name": "dist", "seed": 0, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
           "algorithm": {"name": "pragam", "lam": 1e-2, "workers": 1}, "stop": {"max_iterations": 200},
           "output": {"eval_every": 50, "progress": False}}
    one = run(raw, write=False)
    for pattern in ("ring", "tree", "star"):
        many = run(raw, write=False, overrides={"algorithm.workers": 5, "algorithm.allreduce": pattern})
        np.testing.assert_allclose(many.model["w_last"], one.model["w_last"], rtol=1e-10, atol=1e-13)
        assert many.summary["ledger_matches_declared"] is True
        assert many.final["scalars"] > 0


def _probed_root(m, y, upper, parts, guess=0.0):
    """The distributed root search as the workers run it: each part's probe row, their column-wise sum / max /
    min (what the probe all-reduce delivers), and the replicated step; returns (root, probes)."""
    bounds = np.linspace(0, m.size, parts + 1).astype(int)
    bracket = np.array([-np.inf, np.inf, 0.0])
    nu, probes = guess, 0
    while True:
        rows = np.empty((parts, PROBE_WIDTH))
        for p in range(parts):
            bias_probe(m, y, upper, nu, bounds[p], bounds[p + 1], rows[p])
        total = np.array([rows[:, 0].sum(), rows[:, 1].sum(), rows[:, 2].sum(), rows[:, 3].max(), rows[:, 4].min()])
        probes += 1
        found, nu = bias_root_step(total, nu, bracket)
        if found:
            return nu, probes
        assert probes < 200


@pytest.mark.parametrize("seed", range(40))
def test_the_distributed_bias_root_is_algorithm_2s(seed):
    """Pragam-b's root over K parts by probes (g, its slopes either side, the nearest kinks) equals Algorithm 2's
    on one machine, with duplicate kinks in every other case, from a cold and a warm start, in a few probes."""
    n, y, upper, m = _bias_case(seed)
    out = np.empty(n)
    exact = project_bias(m, y, upper, out, np.full(n, upper), np.empty(n, np.int64), np.empty(2 * n))
    for parts in (1, 3, 7):
        for guess in (0.0, exact + 0.3 * upper, exact - 2.0 * upper):
            nu, probes = _probed_root(m, y, upper, min(parts, n), guess)
            alpha = np.clip(m + y * nu, 0.0, upper)
            assert np.abs(alpha - out).max() < 1e-12 * (1 + n * upper)
            assert abs(y @ alpha) < 1e-12
            assert probes <= 40


def test_distributed_pragam_b_is_the_single_machine_run_and_meters_what_it_declares():
    """Pragam-b over K workers (its projections' roots found by probe all-reduces) follows the one machine's
    iterates (Algorithm 2's roots) to rounding, on every all-reduce pattern; the ledger is the main all-reduces plus
    every probe's closed-form count."""
    from svmsim.algorithms.allreduce import partial_steps
    from svmsim.algorithms.bundle.protocol import probe_plan
    from svmsim.algorithms.bundle.workers import bundle_plan

    raw = {"name": "dist-b", "seed": 0, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
           "algorithm": {"name": "pragam-b", "lam": 1e-2, "workers": 1}, "stop": {"max_iterations": 150},
           "output": {"eval_every": 50, "progress": False}}
    one = run(raw, write=False)
    d = 13
    for workers, pattern, probe_pattern in ((2, "ring", "ring"), (5, "ring", "ring"), (6, "ring", "binomial"),
                                            (4, "tree", "tree"), (3, "star", "star")):
        many = run(raw, write=False, overrides={"algorithm.workers": workers, "algorithm.allreduce": pattern})
        np.testing.assert_allclose(many.model["w_last"], one.model["w_last"], rtol=1e-10, atol=1e-13)
        assert many.final["objective"] == pytest.approx(one.final["objective"], rel=1e-12)
        assert many.summary["ledger_matches_declared"] is True
        probes = many.final["root_probes"]
        assert 2 * 150 < probes < 6 * 150                       # two searches per iteration, a few probes each
        assert many.summary["algorithm_info"]["probe_allreduce"] == probe_pattern
        main, probe = bundle_plan(pattern, workers, d, PRAGAM), probe_plan(probe_pattern, workers)
        # the run stops once iteration 150 is complete, with the next iteration's first probe under way: some first
        # steps of it sent
        rest = many.final["scalars"] - 150 * main.scalars() - probes * probe.scalars()
        assert rest in np.cumsum(partial_steps(probe))


def test_qp_bmrm_with_a_tiny_bundle_still_certifies():
    X, y = _heart()
    lam = 1e-2
    J_star = optimum(X, y, lam).value
    est = BMRMSVC(lam=lam, max_bundle=3, tol=1e-3, max_iter=20_000).fit(X, y)
    assert est.lower_bound_ <= J_star * (1 + 1e-9) and (est.objective_ - J_star) / J_star <= 1e-3


def test_an_inner_qp_at_its_step_limit_warns():
    raw = {"name": "qp", "seed": 0, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
           "algorithm": {"name": "qp-bmrm", "lam": 1e-3, "qp_max_steps": 1}, "stop": {"max_iterations": 40},
           "output": {"eval_every": 1, "progress": False}}
    with pytest.warns(RuntimeWarning, match="qp_max_steps"):
        res = run(raw, write=False)
    assert res.final["qp_failures"] > 0 and res.final["lower"] <= res.final["objective"]


def test_estimators_warn_when_the_budget_ends_first():
    from sklearn.exceptions import ConvergenceWarning

    X, y = _heart()
    with pytest.warns(ConvergenceWarning, match="did not certify"):
        PragamSVC(lam=1e-3, tol=1e-9, max_iter=20).fit(X, y)


# ---------------------------------------------------------------------------------------------------------------
# clear errors
# ---------------------------------------------------------------------------------------------------------------

def _raw(alg, data=None, **params):
    return {"name": "e", "seed": 0, "data": data or {"name": "heart_scale"}, "topology": {"kind": "complete"},
            "algorithm": {"name": alg, **params}, "stop": {"max_iterations": 5}, "output": {"progress": False}}


@pytest.mark.parametrize("lam", [0, -1.0])
def test_lambda_must_be_positive(lam):
    with pytest.raises(ScenarioError, match="lam"):
        load_scenario(_raw("pragam", lam=lam))


def test_unsupported_layouts_are_refused():
    inst = {"name": "synthetic", "kind": "bmrm_lower_bound", "d": 8}
    with pytest.raises(InfeasibleParameterError, match="probe_allreduce = star, tree or binomial"):
        run(_raw("pragam-b", workers=8, probe_allreduce="ring"), write=False)
    with pytest.raises(TopologyError, match="pragam-b's root probes: the binomial all-reduce over 8 workers needs "
                                            "the link 0-2"):
        run(dict(_raw("pragam-b", workers=8, allreduce="ring"), topology={"kind": "ring"}), write=False)
    with pytest.raises(InfeasibleParameterError, match="workers = 1"):
        run(_raw("ls-bmrm", data=inst, workers=2), write=False)
    with pytest.raises(InfeasibleParameterError, match="lower-bound instance"):
        run(_raw("pegasos-n", data=inst), write=False)
    with pytest.raises(ScenarioError, match="power of two"):
        run(_raw("ls-bmrm", data=dict(inst, d=12)), write=False)


def test_lower_bound_sweep_fits_slope_minus_one_and_draws_its_figures(tmp_path):
    """A sweep over the iteration budget prints BMRM's fitted slope of the gap against t (-1 on the instance) and
    draws every [[sweep.figures]] entry."""
    from svmsim.sweep import run_sweep

    raw = {"name": "lb", "seed": 0, "data": {"name": "synthetic", "kind": "bmrm_lower_bound", "d": 64},
           "algorithm": {"name": "ls-bmrm", "lam": 1.0}, "stop": {"max_iterations": 8},
           "output": {"eval_every": 1, "progress": False},
           "sweep": {"grid": {"stop.max_iterations": [4, 8, 16, 32]}, "against": "iterations",
                     "against_y": ["gap"], "plot": "gap", "x": "iteration",
                     "figures": [{"y": "primal_error", "x": "wall_time"}]}}
    res = run_sweep(raw, out=tmp_path / "sw", progress=False)
    (fit,) = res.scaling
    assert fit["slope"] == pytest.approx(-1.0, abs=1e-9) and fit["intercept"] == pytest.approx(math.log(0.5))
    assert (tmp_path / "sw" / "curves_primal_error_vs_wall_time.png").stat().st_size > 0


def test_a_warm_bias_projection_with_no_kink_in_its_bracket_is_still_exact():
    """The case property testing found: from the guess 0.075 the bracket [0.035, 0.065] holds no kink, so every
    point must be resolved against it before the linear piece gives the root 0.0625."""
    m = np.array([-3.0, -3.0, 0.5, 0.0]) / 4
    y = np.array([-1.0, -1.0, -1.0, 1.0])
    out = np.empty(4)
    nu = project_bias(m, y, 0.25, out, np.full(4, 0.25), np.empty(4, np.int64), np.empty(8), 0.075)
    assert nu == pytest.approx(0.0625) and abs(y @ out) < 1e-15


def test_band_certificate_is_refused_where_it_does_not_apply(data_env):
    import pytest as _pytest

    from svmsim.errors import InfeasibleParameterError

    with _pytest.raises(InfeasibleParameterError, match="band_certificate"):
        run({"name": "t", "data": {"name": "heart_scale"}, "algorithm": {"name": "pragam-b", "lam": 1e-2,
                                                                          "band_certificate": True},
             "stop": {"max_iterations": 5}}, write=False, progress=False)
    with _pytest.raises(InfeasibleParameterError, match="band_certificate"):
        run({"name": "t", "data": {"name": "synthetic", "kind": "bmrm_lower_bound", "d": 16},
             "algorithm": {"name": "pragam", "lam": 1.0, "band_certificate": True},
             "stop": {"max_iterations": 5}}, write=False, progress=False)


def test_pragam_runs_unchanged_on_the_torus():
    """Pragam over 6 workers on a periodic 2 x 3 grid with the 2D-torus all-reduce: the ledger equals the declared
    count (2w(2K - r - c) scalars per iteration, w the all-reduce's width), and the objective and iterate are the star's within 1e-9
    relative after the same iterations (the same numbers summed in another order)."""
    k, r, c = 6, 2, 3
    raw = {"name": "torus", "seed": 0, "data": {"name": "heart_scale"},
           "topology": {"kind": "grid", "periodic": True},
           "algorithm": {"name": "pragam", "lam": 1e-2, "workers": k, "allreduce": "torus"},
           "stop": {"max_iterations": 60}, "output": {"eval_every": 20, "progress": False}}
    torus = run(raw, write=False)
    info = torus.summary["algorithm_info"]
    assert info["allreduce"] == "torus"
    assert info["scalars_per_iteration"] == 2 * info["allreduce_width"] * (2 * k - r - c)
    assert torus.summary["ledger_matches_declared"] is True
    star = run({**raw, "topology": {"kind": "complete"}}, write=False, overrides={"algorithm.allreduce": "star"})
    assert torus.final["iteration"] == star.final["iteration"]
    assert abs(torus.final["objective"] - star.final["objective"]) <= 1e-9 * abs(star.final["objective"])
    np.testing.assert_allclose(torus.model["w_last"], star.model["w_last"], rtol=1e-9, atol=1e-12)
