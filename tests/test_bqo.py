"""Paper 001's methods: the step rules do what the paper says, the iterates stay feasible and consistent, the
optimum is LIBLINEAR's, the ledger equals the all-reduce's closed form, and bad input is refused clearly."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import svmsim
from svmsim.algorithms.bqo.local_cd import DualCD
from svmsim.algorithms.bqo.objective import (as_csr, dual_objective, loss_constants, primal_objective,
                                             reference_optimum)
from svmsim.algorithms.bqo.protocol import ARMIJO, EXACT, _armijo, step_size
from svmsim.data import make_dataset
from svmsim.errors import DataError, InfeasibleParameterError, ScenarioError, TopologyError

pytestmark = pytest.mark.usefixtures("data_env")


def _scenario(algorithm="bqo-e", data="heart_scale", **algo):
    return {"name": "bqo-test", "seed": 0, "data": {"name": data}, "topology": {"kind": "complete"},
            "algorithm": {"name": algorithm, "workers": 4, **algo}, "stop": {"max_iterations": 40},
            "output": {"eval_every": 1, "progress": False, "plots": False}}


def _quad(total, w, dim, s):
    """f(alpha + eta d) - f(alpha) as a function of eta, from the reduced sums (eqs. 18-19)."""
    dw = total[:dim]
    q = dw @ dw + total[dim + 1]
    g = w @ dw + total[dim + 2] - total[dim]
    return lambda eta: eta * g + 0.5 * eta * eta * q, g, q


def test_exact_step_minimises_the_quadratic_within_the_box():
    rng = np.random.default_rng(0)
    dim = 7
    for _ in range(200):
        w = rng.standard_normal(dim)
        dw = rng.standard_normal(dim)
        total = np.concatenate([dw, [rng.uniform(0, 5), rng.uniform(0, 2), rng.uniform(-1, 1),
                                     rng.uniform(1, 3)]])
        f, g, q = _quad(total, w, dim, 0.0)
        if g >= 0:
            continue
        last = np.zeros(4)
        eta = step_size(EXACT, total, w, dim, 0.0, 4.0, 0.5, 0.1, last)
        lam = total[dim + 3]
        assert 0 <= eta <= lam and last[0] == eta
        grid = np.linspace(0, lam, 2001)
        assert f(eta) <= f(grid).min() + 1e-12


def test_armijo_closed_form_equals_explicit_backtracking():
    rng = np.random.default_rng(1)
    for _ in range(5000):
        g = -10 ** rng.uniform(-6, 3)
        q = 10 ** rng.uniform(-6, 3)
        beta, sigma = 0.5, 0.1
        k = 0
        while k < 200 and (beta ** k) * g + 0.5 * (beta ** k) ** 2 * q > sigma * (beta ** k) * g:
            k += 1
        assert _armijo(g, q, beta, sigma) == beta ** k
    assert _armijo(-1.0, 0.0, 0.5, 0.1) == 1.0           # q = 0: the full step (notes 7.6)


def test_one_worker_averaging_is_one_dual_cd_epoch_bit_for_bit():
    """With K = 1 and tau = 0 the direction is one DCD epoch (notes 6.7): DSVM-AVE (step 1/K = 1) on one worker
    follows the single machine's epochs exactly."""
    res = svmsim.run(_scenario("dsvm-ave", workers=1, allreduce="star"), write=False)
    ds = make_dataset({"name": "heart_scale"})
    s, upper = loss_constants("hinge", 1.0)
    cd = DualCD(as_csr(ds.X), ds.y, s, upper, seed=0)
    for _ in range(40):
        cd.epoch()
    assert np.array_equal(res.model["w_last"], cd.w)
    assert np.array_equal(res.model["alpha"], cd.alpha)
    assert res.ledger.totals["messages"] == 0


@pytest.mark.parametrize("algorithm", ["bqo-e", "bqo-a", "disdca", "dsvm-ave"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_iterates_stay_feasible_consistent_and_descend(algorithm, loss):
    """alpha in [0, U]; w = X^T Y alpha up to round-off; the dual never rises for the line searches (g < 0 makes
    eta > 0 a descent step, Lemma 2.1 and Corollary 2.3)."""
    res = svmsim.run(_scenario(algorithm, loss=loss), write=False)
    ds = make_dataset({"name": "heart_scale"})
    alpha = res.model["alpha"]
    _, upper = loss_constants(loss, 1.0)
    assert (alpha >= 0).all() and (alpha <= upper).all()
    w = np.asarray(ds.X.T @ (ds.y * alpha)).ravel()
    assert np.allclose(res.model["w_last"], w, atol=1e-10 * max(1.0, np.abs(w).max()))
    duals = res.column("dual")
    if algorithm in ("bqo-e", "bqo-a"):
        assert (np.diff(duals) <= 1e-9 * np.abs(duals[1:])).all()
    assert duals[-1] < 0.5 * duals[1] < 0                     # it makes progress
    pocket = res.column("objective")
    assert (np.diff(pocket) <= 0).all()                      # the pocket keeps the best primal


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_reference_and_bqo_e_agree_with_liblinear(loss):
    """The certified reference optimum and BQO-E's final dual equal LIBLINEAR's (LinearSVC, dual CD, no bias)
    optimum to 1e-4 relative."""
    from sklearn.svm import LinearSVC

    ds = make_dataset({"name": "heart_scale"})
    X, y = as_csr(ds.X), ds.y
    ref = reference_optimum(X, y, 1.0, loss)
    assert ref.rel_uncertainty <= 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lin = LinearSVC(C=1.0, loss=loss, dual=True, fit_intercept=False, tol=1e-12, max_iter=200_000,
                        random_state=0).fit(X, y)
    p_lib = primal_objective(X, y, lin.coef_[0], 1.0, loss)
    assert p_lib >= -ref.dual - 1e-12 * abs(ref.dual)                  # no primal beats the certificate
    assert abs(p_lib + ref.f_star) <= 1e-4 * abs(ref.f_star)          # LIBLINEAR's primal = -f*
    scenario = _scenario("bqo-e", loss=loss)
    scenario["stop"] = {"below": {"rel_dual": 1e-5}, "max_iterations": 20_000}
    res = svmsim.run(scenario, write=False)
    assert res.stop_reason == "relative dual error (rel_dual) <= 1e-05"
    assert abs(res.final["dual"] + p_lib) <= 1e-4 * abs(p_lib)
    assert res.final["gap_per_cn"] >= 0                                # eq. (27) is certified
    assert res.final["rel_gap"] == (res.final["gap_upper"] - res.final["gap_lower"]) / abs(res.final["gap_upper"])


def _closed_form(pattern, k, width):
    if k == 1:
        return 0, 0
    if pattern == "ring":
        return 2 * (k - 1) * width, 2 * (k - 1) * k
    return 2 * (k - 1) * width, 2 * (k - 1)          # star, tree and binomial: up and down once per edge


@pytest.mark.parametrize("pattern", ["star", "ring", "tree", "binomial"])
@pytest.mark.parametrize("k", [2, 5, 8])
def test_ledger_equals_the_allreduce_closed_form(pattern, k):
    d = 13                                                     # heart_scale
    for algorithm, extra in (("bqo-e", 4), ("bqo-a", 3), ("disdca", 0), ("dsvm-ave", 0)):
        scenario = _scenario(algorithm, workers=k, allreduce=pattern)
        scenario["stop"] = {"max_iterations": 12}
        res = svmsim.run(scenario, write=False)
        scalars, messages = _closed_form(pattern, k, d + extra)
        assert res.summary["ledger_matches_declared"] is True
        assert res.ledger.totals["scalars"] == res.summary["declared_scalars"]
        it = res.final["iteration"]
        rows = res.ledger.iteration_rounds
        # each completed iteration: one all-reduce of d (+ its scalars); the ledger up to iteration 10's end
        # holds exactly ten of them
        end = int(rows[rows[:, 0] == 10, 1][0])
        upto = res.ledger.rounds[res.ledger.rounds[:, 0] < end]
        assert int(upto[:, 2].sum()) == 10 * scalars
        assert int(upto[:, 1].sum()) == 10 * messages
        assert it >= 12


def test_bad_input_is_refused_clearly():
    with pytest.raises(ScenarioError, match=r"C"):
        svmsim.run(_scenario(C=0.0), write=False)
    with pytest.raises(ScenarioError, match=r"loss"):
        svmsim.run(_scenario(loss="logistic"), write=False)
    with pytest.raises(InfeasibleParameterError, match=r"workers = 500 exceeds the number of training points"):
        svmsim.run(_scenario(workers=500), write=False)
    scenario = _scenario(allreduce="ring")
    scenario["topology"] = {"kind": "star"}
    with pytest.raises(TopologyError, match=r"ring all-reduce over 4 workers needs the link 1-2 .* which the star "
                                            r"topology lacks; allowed"):
        svmsim.run(scenario, write=False)
    scenario = _scenario()
    scenario["topology"] = {"kind": "grid"}
    with pytest.raises(TopologyError, match=r"allreduce = 'auto' has no pattern for topology kind 'grid'"):
        svmsim.run(scenario, write=False)
    scenario = _scenario(allreduce="binomial", workers=8)
    scenario["topology"] = {"kind": "ring"}
    with pytest.raises(TopologyError, match=r"binomial all-reduce over 8 workers needs the link 0-2 .* which the "
                                            r"ring topology lacks"):
        svmsim.run(scenario, write=False)


def test_a_hypercube_runs_the_binomial_allreduce():
    """allreduce = "auto" on a hypercube is the binomial tree: 2 log2 K rounds and 2 (K - 1) messages an
    iteration, and the same iterates as the ring (the sum's order differs only in rounding)."""
    cube = {**_scenario(workers=8), "topology": {"kind": "hypercube"}}
    res = svmsim.run(cube, write=False)
    assert res.summary["ledger_matches_declared"] is True
    assert (np.diff(res.ledger.iteration_rounds[:, 1]) == 2 * 3).all() and res.ledger.iteration_rounds[0, 1] == 6
    rounds = res.ledger.rounds
    assert int(rounds[rounds[:, 0] < 6 * 40, 1].sum()) == 40 * 2 * 7
    ring = svmsim.run(_scenario(workers=8, allreduce="ring"), write=False)
    assert res.final["iteration"] == ring.final["iteration"]
    assert abs(res.final["dual"] - ring.final["dual"]) <= 1e-9 * abs(ring.final["dual"])


def test_one_class_is_refused(tmp_path):
    path = tmp_path / "one_class.txt"
    path.write_text("".join(f"1 1:{i * 0.1} 2:{1 - i * 0.1}\n" for i in range(10)))
    scenario = _scenario(data=str(path), workers=2)
    with pytest.raises(DataError, match=r"not binary: found values 1 \(1 distinct\)"):
        svmsim.run(scenario, write=False)


def test_cli_bad_input_exit_2_and_no_run_dir(tmp_path):
    import subprocess
    import sys

    import tomli_w

    bad = _scenario(C=-1.0)
    bad["output"] = {"dir": str(tmp_path / "runs"), "progress": False, "plots": False}
    f = tmp_path / "bad.toml"
    f.write_bytes(tomli_w.dumps(bad).encode())
    out = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", str(f)], capture_output=True, text=True)
    assert out.returncode == 2 and "C" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_dual_cd_estimator_matches_linearsvc_and_warns():
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    from svmsim.algorithms.bqo import DualCDSVC

    ds = make_dataset({"name": "heart_scale"})
    est = DualCDSVC(C=1.0, loss="squared_hinge", tol=1e-9, max_iter=100_000).fit(ds.X, ds.y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lin = LinearSVC(C=1.0, loss="squared_hinge", fit_intercept=False, tol=1e-12, max_iter=100_000,
                        random_state=0).fit(ds.X, ds.y)
    p_lib = primal_objective(ds.X, ds.y, lin.coef_[0], 1.0, "squared_hinge")
    assert abs(est.primal_objective_ - p_lib) <= 1e-6 * p_lib
    assert (est.predict(ds.X) == lin.predict(ds.X)).mean() > 0.99
    assert est.gap_per_cn_ <= 1e-9 and est.intercept_.tolist() == [0.0]
    primal, dual = est.primal_objective_, est.dual_objective_
    assert est.rel_gap_ == pytest.approx((primal + dual) / primal)
    with pytest.warns(ConvergenceWarning, match="did not reach tol"):
        DualCDSVC(tol=1e-12, max_iter=2).fit(ds.X, ds.y)
    with pytest.raises(ValueError, match="Only binary classification"):
        DualCDSVC().fit(np.eye(3), [0, 1, 2])
    dense = DualCDSVC(tol=1e-4).fit(ds.X.toarray() if sp.issparse(ds.X) else ds.X, ds.y)
    sparse = DualCDSVC(tol=1e-4).fit(sp.csr_matrix(ds.X), ds.y)
    assert np.array_equal(dense.coef_, sparse.coef_)


def test_dual_objective_from_w_is_the_quadratic():
    rng = np.random.default_rng(2)
    X = sp.random(30, 6, density=0.5, random_state=3, format="csr")
    y = np.where(rng.random(30) < 0.5, -1.0, 1.0)
    for loss in ("hinge", "squared_hinge"):
        s, upper = loss_constants(loss, 2.0)
        alpha = rng.uniform(0, 2.0, 30)
        Q = (X.multiply(y[:, None])) @ (X.multiply(y[:, None])).T
        f = 0.5 * alpha @ (Q @ alpha + s * alpha) - alpha.sum()
        w = np.asarray(X.T @ (y * alpha)).ravel()
        assert math.isclose(dual_objective(w, alpha, s), f, rel_tol=1e-12)


def test_tron_reaches_the_l2_optimum_with_its_ledger():
    """Distributed TRON: the primal optimum of the L2-SVM (the dual point of its optimality conditions certifies
    it); every all-reduce carries d + 1 scalars, ledger = all-reduces x the ring's closed form."""
    scenario = _scenario("tron", workers=5, allreduce="ring")
    scenario["stop"] = {"below": {"rel_dual": 1e-9}, "max_iterations": 50}
    res = svmsim.run(scenario, write=False)
    assert res.stop_reason == "relative dual error (rel_dual) <= 1e-09"
    assert res.final["rel_primal"] <= 1e-9 and res.final["iteration"] <= 15
    assert res.summary["ledger_matches_declared"] is True
    scalars, _ = _closed_form("ring", 5, 13 + 1)
    rows = res.ledger.iteration_rounds
    end = int(rows[-1, 1])
    upto = res.ledger.rounds[res.ledger.rounds[:, 0] < end]
    assert int(upto[:, 2].sum()) == res.final["allreduces"] * scalars
    with pytest.raises(ScenarioError, match=r"loss"):
        svmsim.run(_scenario("tron", loss="hinge"), write=False)


def test_reference_is_kept_on_disk_and_read_back(tmp_path, monkeypatch):
    from svmsim.algorithms.bqo import objective

    monkeypatch.setenv("SVMSIM_CACHE_DIR", str(tmp_path))
    ds = make_dataset({"name": "heart_scale"})
    objective._CACHE.clear()
    first = reference_optimum(ds.X, ds.y, 0.5, "squared_hinge")
    files = list((tmp_path / "references").glob("*.npz"))
    assert len(files) == 1
    objective._CACHE.clear()
    again = reference_optimum(ds.X, ds.y, 0.5, "squared_hinge")
    assert again.dual == first.dual and np.array_equal(again.w, first.w) and again.epochs == first.epochs
    monkeypatch.setenv("SVMSIM_CACHE_DIR", "")           # switched off: nothing written
    objective._CACHE.clear()
    reference_optimum(ds.X, ds.y, 0.25, "squared_hinge")
    assert len(list((tmp_path / "references").glob("*.npz"))) == 1


def test_an_uncertified_reference_says_so():
    """A reference optimum that did not reach its certificate within its budget warns how far it is certified."""
    from svmsim.algorithms.bqo import objective

    ds = make_dataset({"name": "heart_scale"})
    objective._CACHE.clear()
    with pytest.warns(RuntimeWarning, match=r"certified only to .* after 10 epochs .*cause: its budget of "
                                             r"max_epochs = 10 epochs ran out"):
        ref = reference_optimum(ds.X, ds.y, 7.0, "hinge", max_epochs=10)
    assert ref.rel_uncertainty > 1e-8 and not ref.certified
    assert not objective._CACHE                                   # never kept


def test_line_topology_takes_the_ring_only_for_two_workers():
    res = svmsim.run({**_scenario(workers=2), "topology": {"kind": "line"}, "stop": {"max_iterations": 3}},
                     write=False)
    assert res.summary["algorithm_info"]["allreduce"] == "ring"
    with pytest.raises(TopologyError, match=r"allreduce = 'auto' has no pattern for topology kind 'line'"):
        svmsim.run({**_scenario(workers=4), "topology": {"kind": "line"}}, write=False)


def test_stop_below_an_unknown_metric_is_refused_and_leaves_no_run_dir(tmp_path):
    import subprocess
    import sys

    import tomli_w

    scenario = _scenario()
    scenario["stop"] = {"below": {"rel_dul": 1e-3}, "max_iterations": 5}
    scenario["output"] = {"dir": str(tmp_path / "runs"), "progress": False, "plots": False}
    f = tmp_path / "typo.toml"
    f.write_bytes(tomli_w.dumps(scenario).encode())
    out = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", str(f)], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = " ".join(out.stderr.split())
    assert "[stop] below names metric 'rel_dul', which algorithm 'bqo-e' never reports; allowed:" in said
    assert "rel_dual" in said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("k, shape", [(4, (2, 2)), (5, (1, 5)), (6, (2, 3))])
def test_bqo_e_runs_unchanged_on_the_torus(k, shape):
    """The 2D-torus all-reduce on a periodic grid (picked by auto there): the ledger equals the declared count
    (2(d + 4)(2K - r - c) scalars per iteration) and the objective is the star's within 1e-9 relative after the
    same iterations (the sums are the same numbers added in another order: not bit for bit)."""
    r, c = shape
    d = 13                                                    # heart_scale
    torus = _scenario("bqo-e", workers=k)
    torus["topology"] = {"kind": "grid", "periodic": True}
    torus["stop"] = {"max_iterations": 12}
    res = svmsim.run(torus, write=False)
    assert res.summary["algorithm_info"]["allreduce"] == "torus"
    assert res.summary["algorithm_info"]["scalars_per_iteration"] == 2 * (d + 4) * (2 * k - r - c)
    assert res.summary["ledger_matches_declared"] is True
    assert res.ledger.totals["scalars"] == res.summary["declared_scalars"]
    star = svmsim.run({**_scenario("bqo-e", workers=k, allreduce="star"), "stop": {"max_iterations": 12}},
                      write=False)
    assert res.final["iteration"] == star.final["iteration"]
    for key in ("primal", "dual", "objective"):
        assert abs(res.final[key] - star.final[key]) <= 1e-9 * abs(star.final[key])
    if k == 6:                 # the plain grid of 2 x 3 lacks the row's wrap-around link 0-2
        with pytest.raises(TopologyError, match=r"torus all-reduce over 6 workers needs the link 0-2 .* which the "
                                                r"grid topology lacks"):
            svmsim.run({**_scenario("bqo-e", workers=6, allreduce="torus"), "topology": {"kind": "grid"}},
                       write=False)
