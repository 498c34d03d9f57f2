"""Pegasos and SVM-SGD (paper 002's centralized baselines) against a NumPy transcription and LIBLINEAR on a9a."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.svm import LinearSVC

import svmsim
from svmsim.algorithms.pegasos import PegasosSVC, SGDSVC, next_index, primal_objective, seed_streams

LAM_A9A = 3.07e-5          # paper 002, Table 2 (Adult)


@pytest.fixture(scope="module")
def a9a(load):
    return load("a9a", test="auto")


@pytest.fixture(scope="module")
def a9a_optimum(a9a):
    """Eq. 1's minimum on a9a through LIBLINEAR: LinearSVC(hinge, C = 1/(lam N)) has the same minimiser."""
    ref = LinearSVC(loss="hinge", C=1.0 / (LAM_A9A * a9a.n), fit_intercept=False, tol=1e-6, max_iter=100_000)
    ref.fit(a9a.X, a9a.y)
    return primal_objective(ref.coef_[0], a9a.X, a9a.y, LAM_A9A), ref.score(a9a.X_test, a9a.y_test)


def _sample_stream(seed: int, n: int, count: int) -> np.ndarray:
    import numba

    @numba.njit
    def draw(state, n, count):
        out = np.empty(count, dtype=np.int64)
        for c in range(count):
            out[c] = next_index(state, 0, n)
        return out

    return draw(seed_streams(seed, [0]), n, count)


def _pegasos_by_hand(X, y, lam, T, k, seed, average):
    """Pegasos written out step by step from the paper (dense NumPy), with the estimator's sample stream."""
    draws = _sample_stream(seed, X.shape[0], T * k).reshape(T, k)
    w, total, count = np.zeros(X.shape[1]), np.zeros(X.shape[1]), 0
    for t in range(1, T + 1):
        A = draws[t - 1]
        violators = A[y[A] * (X[A] @ w) < 1]
        w = (1 - 1 / t) * w + (1 / (lam * t * k)) * (y[violators, None] * X[violators]).sum(axis=0)
        w *= min(1.0, (1 / math.sqrt(lam)) / max(np.linalg.norm(w), 1e-300))
        if average and t > T // 2:
            total += w
            count += 1
    return total / count if average else w


@pytest.mark.parametrize("k, average", [(1, False), (3, False), (1, True), (4, True)])
def test_pegasos_follows_the_update_rule_exactly(k, average):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=60) > 0, 1.0, -1.0)
    T = 400
    est = PegasosSVC(lam=0.02, max_iter=T, batch_size=k, average=average, random_state=11).fit(X, y)
    expected = _pegasos_by_hand(X, y, 0.02, T, k, 11, average)
    np.testing.assert_allclose(est.coef_[0], expected, rtol=1e-9, atol=1e-12)


def test_pegasos_reaches_liblinear_objective_and_accuracy_on_a9a(a9a, a9a_optimum):
    opt, ref_acc = a9a_optimum
    last = PegasosSVC(lam=LAM_A9A, max_iter=100 * a9a.n, random_state=0).fit(a9a.X, a9a.y)
    avg = PegasosSVC(lam=LAM_A9A, max_iter=30 * a9a.n, average=True, random_state=0).fit(a9a.X, a9a.y)
    for est in (last, avg):
        f = primal_objective(est.coef_[0], a9a.X, a9a.y, LAM_A9A)
        assert opt <= f <= 1.04 * opt
        assert 0.84 <= est.score(a9a.X_test, a9a.y_test) <= 0.86
        assert abs(est.score(a9a.X_test, a9a.y_test) - ref_acc) <= 0.01
        assert np.linalg.norm(est.coef_) <= 1 / math.sqrt(LAM_A9A) * (1 + 1e-12)   # projection (f)


def test_svm_sgd_reaches_liblinear_objective_without_bias_and_beats_sklearn_sgd(a9a, a9a_optimum):
    from sklearn.linear_model import SGDClassifier

    opt, _ = a9a_optimum
    est = SGDSVC(lam=LAM_A9A, max_iter=5, fit_intercept=False, random_state=0).fit(a9a.X, a9a.y)
    f = primal_objective(est.coef_[0], a9a.X, a9a.y, LAM_A9A)
    assert opt <= f <= 1.04 * opt
    assert est.t0_ == pytest.approx(1 / (LAM_A9A * est.eta0_))
    sk = SGDClassifier(loss="hinge", alpha=LAM_A9A, fit_intercept=False, max_iter=5, tol=None, random_state=0)
    sk.fit(a9a.X, a9a.y)
    assert f <= primal_objective(sk.coef_[0], a9a.X, a9a.y, LAM_A9A)
    assert est.score(a9a.X_test, a9a.y_test) >= 0.84
    with_bias = SGDSVC(lam=LAM_A9A, max_iter=5, random_state=1).fit(a9a.X, a9a.y)
    assert with_bias.intercept_[0] != 0.0
    assert with_bias.score(a9a.X_test, a9a.y_test) >= 0.835
    assert with_bias.n_epochs_ == 5 and with_bias.n_iter_ == 5 * a9a.n


def test_paper_stopping_rule_stops_early_and_can_be_switched_off(a9a):
    ruled = PegasosSVC(lam=LAM_A9A, max_iter=10 * a9a.n, eps=1e-3, random_state=0).fit(a9a.X, a9a.y)
    assert ruled.converged_ and ruled.stop_reason_ == "stopping rule"
    assert 10 <= ruled.n_iter_ < a9a.n
    free = PegasosSVC(lam=LAM_A9A, max_iter=5000, random_state=0).fit(a9a.X, a9a.y)
    assert not free.converged_ and free.n_iter_ == 5000
    sgd = SGDSVC(lam=LAM_A9A, max_iter=3, eps=1e-3, random_state=0).fit(a9a.X, a9a.y)
    assert sgd.converged_ and sgd.n_iter_ < 3 * a9a.n


@pytest.mark.parametrize("Est", [PegasosSVC, SGDSVC])
def test_dense_and_sparse_inputs_give_the_same_model(load, Est):
    ds = load("mushrooms")
    X = sp.csr_matrix(ds.X)
    kw = {"lam": 1e-3, "max_iter": 2000 if Est is PegasosSVC else 2, "random_state": 5}
    a = Est(**kw).fit(X, ds.y)
    b = Est(**kw).fit(X.toarray(), ds.y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    assert a.score(X, ds.y) == b.score(X.toarray(), ds.y) >= 0.95


def test_estimators_follow_the_scikit_learn_conventions(load):
    ds = load("mushrooms")
    labels = np.where(ds.y > 0, "edible", "poisonous")
    for est in (PegasosSVC(lam=1e-3, max_iter=3000, random_state=0), SGDSVC(lam=1e-3, max_iter=1, random_state=0)):
        fitted = clone(est).fit(ds.X, labels)
        assert set(fitted.predict(ds.X)) <= {"edible", "poisonous"}
        assert list(fitted.classes_) == ["edible", "poisonous"]
        assert fitted.coef_.shape == (1, ds.d) and fitted.intercept_.shape == (1,)
        assert np.array_equal(fitted.decision_function(ds.X) >= 0, fitted.predict(ds.X) == "poisonous")
        assert fitted.score(ds.X, labels) >= 0.95
        again = clone(est).fit(ds.X, labels)
        np.testing.assert_array_equal(fitted.coef_, again.coef_)      # seeded


def test_primal_objective_is_eq_1():
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = np.array([1.0, -1.0, 1.0])
    w = np.array([0.5, 0.25])
    hinge = [max(0, 1 - 0.5), max(0, 1 + 0.5), max(0, 1 - 0.75)]
    assert primal_objective(w, X, y, 0.1) == pytest.approx(0.05 * (0.25 + 0.0625) + np.mean(hinge))


@pytest.mark.parametrize("algorithm", ["pegasos", "svm-sgd"])
def test_scenario_algorithms_record_metrics(data_env, algorithm):
    res = svmsim.run({"name": f"{algorithm}-a9a", "data": {"name": "a9a", "test": "auto"},
                      "algorithm": {"name": algorithm, "lam": LAM_A9A, "eps": 0.0},
                      "stop": {"max_iterations": 3 * 32561}, "output": {"eval_every": 32561, "progress": False}},
                     write=False)
    assert [r["iteration"] for r in res.metrics] == [32561, 65122, 97683]
    for key in ("objective", "train_accuracy", "test_accuracy"):
        assert np.isfinite(res.column(key)).all()
    assert res.final["test_accuracy"] >= 0.80
    assert res.model["coef"].shape == (123,)
