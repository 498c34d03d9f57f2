"""Unseen data with awkward shapes: a sparse set with 5% all-zero rows, duplicate rows and a constant feature
(`awkward_sparse`, the shapes of w8a and a9a). The reference optimum is LIBLINEAR's and certified, every dual method
of paper 001 with the L1 and the L2 loss certifies its target or names why within its budget, BMRM's relative
primal error against the reference agrees with its own certified gap, and a reference or a run whose certificate
fails says why."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import svmsim
from svmsim.algorithms.bqo import objective
from svmsim.algorithms.bqo.objective import LOSSES, as_csr, loss_constants, primal_objective, reference_optimum
from svmsim.data import make_dataset

AWKWARD = {"name": "synthetic", "kind": "awkward_sparse", "n": 300, "d": 40, "density": 0.1}


def _data():
    ds = make_dataset({**AWKWARD, "seed": 0})                            # the scenarios' seed
    return as_csr(ds.X), ds.y


def _liblinear_primal(X, y, C, loss):
    from sklearn.svm import LinearSVC

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lin = LinearSVC(C=C, loss=loss, dual=True, fit_intercept=False, tol=1e-10, max_iter=100_000,
                        random_state=0).fit(X, y)
    return primal_objective(X, y, lin.coef_[0], C, loss)


def test_the_awkward_set_has_its_shapes():
    from svmsim.data.synthetic import make_awkward_sparse

    X, y, info = make_awkward_sparse(300, 40, density=0.1, seed=0, return_info=True)
    empty = np.flatnonzero(np.diff(X.indptr) == 0)
    assert empty.size == 15 and np.array_equal(empty, info["zero_rows"])
    copy, original = info["duplicate_of"].T
    assert copy.size == 15 and (X[copy] != X[original]).nnz == 0 and np.array_equal(y[copy], y[original])
    column = X[:, info["constant_column"]].toarray().ravel()
    assert set(np.unique(column[np.diff(X.indptr) > 0])) == {0.5}
    assert set(np.unique(y)) == {-1.0, 1.0}


@pytest.mark.parametrize("loss", LOSSES)
def test_reference_is_liblinears_optimum_and_counts_the_all_zero_rows(loss):
    """An all-zero row has Q_ii = 0 (L1): its alpha_i belongs at C and the dual counts it; the certified reference
    equals LIBLINEAR's primal."""
    X, y = _data()
    objective._CACHE.clear()
    ref = reference_optimum(X, y, 1.0, loss)
    assert ref.certified and ref.rel_uncertainty <= 1e-8
    p_lib = _liblinear_primal(X, y, 1.0, loss)
    assert p_lib >= -ref.dual - 1e-10 * abs(ref.dual)                  # no primal beats the certificate
    assert abs(p_lib + ref.f_star) <= 1e-6 * abs(ref.f_star)
    empty = np.diff(X.indptr) == 0
    expected = 1.0 if loss == "hinge" else 2.0                          # L2: alpha_i = 2C xi_i, xi_i = 1
    assert np.allclose(ref.alpha[empty], expected, rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["bqo-e", "bqo-a", "disdca", "dsvm-ave"])
@pytest.mark.parametrize("loss", LOSSES)
def test_every_dual_method_certifies_its_target(algorithm, loss):
    """Each dual method reaches the certified relative gap (P - D)/|P| well within its budget, and its pocket primal is
    LIBLINEAR's optimum to within that gap; rel_dual against the reference agrees."""
    X, y = _data()
    res = svmsim.run({"name": "awkward", "seed": 0, "data": AWKWARD, "topology": {"kind": "complete"},
                      "algorithm": {"name": algorithm, "workers": 4, "loss": loss},
                      "stop": {"gap": 1e-6, "max_iterations": 4000},
                      "output": {"eval_every": 5, "progress": False, "plots": False}}, write=False)
    assert res.stop_reason == "certified relative gap (rel_gap) <= 1e-06", res.stop_reason
    final = res.final
    n = X.shape[0]
    p_lib = _liblinear_primal(X, y, 1.0, loss)
    assert final["objective"] - p_lib <= 1e-6 * n + 1e-9 * p_lib
    assert final["rel_dual"] <= 1e-6 * n / p_lib + 1e-8
    _, upper = loss_constants(loss, 1.0)
    alpha = res.model["alpha"]
    assert (alpha >= 0).all() and (alpha <= upper).all()


@pytest.mark.parametrize(("algorithm", "gap"), [("ls-bmrm", 1e-2), ("qp-bmrm", 1e-4)])
def test_bmrm_relative_primal_error_agrees_with_its_certified_gap(algorithm, gap):
    """J* (the reference, certified) lies below BMRM's objective by at most BMRM's own certified gap."""
    X, y = _data()
    lam = 1e-3
    res = svmsim.run({"name": "awkward", "seed": 0, "data": AWKWARD, "topology": {"kind": "complete"},
                      "algorithm": {"name": algorithm, "lam": lam},
                      "stop": {"gap": gap, "max_iterations": 2000},
                      "output": {"eval_every": 5, "progress": False, "plots": False}}, write=False)
    assert res.stop_reason == f"certified relative gap (rel_gap) <= {gap:g}", res.stop_reason
    f = res.final
    j_star = f["objective"] - f["primal_error"]
    slack = 1e-8 * abs(j_star)                                            # the reference's own uncertainty
    assert -slack <= f["primal_error"] <= f["gap"] + slack
    assert f["rel_primal"] <= f["rel_gap"] * f["objective"] / j_star + 1e-8
    n = X.shape[0]
    assert abs(j_star - lam * _liblinear_primal(X, y, 1.0 / (lam * n), "hinge")) <= 1e-6 * j_star


def test_a_reference_that_cannot_certify_names_the_cause_and_is_kept_as_a_failure(monkeypatch, tmp_path):
    """A reference solver that leaves the all-zero rows alone (the old defect) stalls; the warning names the stall
    and the rows that carry the gap, and the reference is not a target. The failure is kept apart from
    references (named by the solver's version), so the next call says so at once."""
    from svmsim.algorithms.bqo import local_cd

    X, y = _data()
    empty = np.diff(X.indptr) == 0
    original = local_cd.shrinking_epoch

    def skips_empty_rows(indptr, indices, data, yy, qd, alpha, *rest):
        kept = alpha[empty].copy()
        out = original(indptr, indices, data, yy, qd, alpha, *rest)
        alpha[empty] = kept
        return out

    monkeypatch.setattr(local_cd, "shrinking_epoch", skips_empty_rows)
    monkeypatch.setenv("SVMSIM_CACHE_DIR", str(tmp_path))
    objective._CACHE.clear()
    with pytest.warns(RuntimeWarning, match=r"not certified.*cause: certificate stalled.*15 all-zero rows "
                                             r"\(Q_ii = 0\) carry 100% of the gap.*not used as a target"):
        ref = reference_optimum(X, y, 1.0, "hinge")
    assert not ref.certified and ref.epochs < 10_000
    kept = list(tmp_path.rglob("*.npz"))
    assert len(kept) == 1 and "-failed-" in kept[0].name
    objective._CACHE.clear()                     # another process: the failure is read back, not recomputed
    monkeypatch.setattr(local_cd, "shrinking_epoch", None)
    with pytest.warns(RuntimeWarning, match=r"cause: certificate stalled.*found in the cache"):
        again = reference_optimum(X, y, 1.0, "hinge")
    assert not again.certified and again.epochs == ref.epochs and again.cause == ref.cause
    objective._CACHE.clear()


def test_a_stalled_certificate_stops_the_run_and_says_why(monkeypatch):
    """A dual iterate that cannot close the gap (here its all-zero rows are held at 0) while the primal has
    converged: the run stops with a diagnosis naming the stall and where the gap lies."""
    from svmsim.algorithms.bqo import build

    X, y = _data()
    empty = np.diff(X.indptr) == 0
    original = build.Evaluator.metrics

    def held(self, w, alpha, iteration, eta=None):
        alpha = alpha.copy()
        alpha[empty] = 0.0
        return original(self, w, alpha, iteration, eta)

    monkeypatch.setattr(build.Evaluator, "metrics", held)
    res = svmsim.run({"name": "awkward", "seed": 0, "data": AWKWARD, "topology": {"kind": "complete"},
                      "algorithm": {"name": "bqo-e", "workers": 4, "loss": "hinge"},
                      "stop": {"gap": 1e-6, "max_iterations": 5000},
                      "output": {"eval_every": 5, "progress": False, "plots": False}}, write=False)
    assert res.stop_reason.startswith("certificate stalled"), res.stop_reason
    assert "15 all-zero rows (Q_ii = 0) carry 100% of the gap" in res.stop_reason
    assert res.final["iteration"] < 1000
