"""svmsim's scikit-learn estimators against scikit-learn's own conformance suite, and what they say when they cannot
reach their target (the reduced hulls intersect, the data are not separable, the budget runs out)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import time
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import svmsim
from svmsim.algorithms.bqo import DualCDSVC
from svmsim.algorithms.bundle import BMRMSVC, PragamSVC
from svmsim.algorithms.gilbert import GilbertSVC
from svmsim.algorithms.pegasos import SGDSVC, PegasosSVC
from svmsim.algorithms.saddle.estimator import SaddleSVC
from svmsim.algorithms.sbp.estimator import (
    KernelPegasosClassifier,
    KernelPerceptron,
    KernelSDCAClassifier,
    SBPClassifier,
)

#: every estimator svmsim ships, at its defaults where they are quick, else with a smaller budget
SHIPPED = [
    SaddleSVC(), SaddleSVC(alpha=0.85), GilbertSVC(max_iter=20000), PegasosSVC(), PegasosSVC(eps=1e-3), SGDSVC(),
    PragamSVC(max_iter=2000), PragamSVC(fit_intercept=True, max_iter=2000), BMRMSVC(max_iter=300),
    BMRMSVC(solver="ls", max_iter=300), DualCDSVC(max_iter=2000),
    SBPClassifier(epochs=5), SBPClassifier(epochs=5, fit_intercept=True, nu=0.05),
    SBPClassifier(kernel="polynomial", degree=2, epochs=3, nu=0.1),
    KernelPegasosClassifier(epochs=5), KernelPerceptron(epochs=5), KernelSDCAClassifier(epochs=10),
]


@parametrize_with_checks(SHIPPED)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


def test_every_public_estimator_is_checked():
    """Any public class of svmsim that is a scikit-learn estimator with a fit is in SHIPPED."""
    found = set()
    for module in pkgutil.walk_packages(svmsim.__path__, "svmsim."):
        for name, obj in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if obj.__module__ == module.name and issubclass(obj, BaseEstimator) and not name.startswith("_") \
                    and callable(getattr(obj, "fit", None)):
                found.add(obj)
    assert len(found) >= 10
    assert found == {type(e) for e in SHIPPED}


# -- runs that cannot reach their target say why, and stop --------------------------------------------------------

def _random_labels(n=400, d=5, seed=0):
    """Two classes drawn from one distribution: their hulls intersect, and so do their reduced hulls at alpha 0.85."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), np.where(rng.random(n) < 0.5, 1, -1)


@pytest.mark.parametrize("make, expected", [
    (lambda: SaddleSVC(), "the convex hulls of the two classes intersect: the data are not linearly separable"),
    (lambda: SaddleSVC(alpha=0.85), "the reduced hulls intersect at alpha = 0.85 (nu = "),
    (lambda: GilbertSVC(), "the convex hulls of the two classes intersect"),
], ids=["saddle-hard", "saddle-nu", "gilbert"])
def test_intersecting_hulls_stop_within_seconds_with_the_reason(make, expected):
    X, y = _random_labels()
    started = time.perf_counter()
    with pytest.warns(ConvergenceWarning, match="stopped without reaching its target") as caught:
        est = make().fit(X, y)
    assert time.perf_counter() - started < 10
    assert est.stop_reason_.startswith(expected), est.stop_reason_
    assert est.stop_reason_ in str(caught[0].message)
    assert "allowed: " in est.stop_reason_


def test_heart_is_not_separable_and_the_hard_margin_says_so(shared_data_dir):
    from svmsim.data import load_dataset

    ds = load_dataset("heart_scale", data_dir=shared_data_dir)
    with pytest.warns(ConvergenceWarning):
        hard = SaddleSVC().fit(ds.X, ds.y)
    assert hard.stop_reason_.startswith("the convex hulls of the two classes intersect")
    assert hard.n_iter_ <= 20_000                           # 3 certificates without a lower bound, then the LP
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the nu-SVM on the same data certifies its gap
        nu = SaddleSVC(alpha=0.85).fit(ds.X, ds.y)
    assert nu.stop_reason_ == "certified gap" and nu.rel_gap_ <= 1e-3


def test_disjoint_hulls_are_tested_once_and_not_diagnosed():
    """Disjoint hulls: the LP answers 'no common point' once, and is not asked again."""
    from svmsim.algorithms.saddle.certificate import HullDiagnosis
    from svmsim.data.synthetic import make_separable

    X, y = make_separable(300, 20, beta=0.05, seed=3)
    diagnosis = HullDiagnosis(X, y, np.inf)
    assert [diagnosis.update(0.0) for _ in range(5)] == [None] * 5
    assert diagnosis.checked and diagnosis.verdict is False


# -- beta = "auto" --------------------------------------------------------------------------------------------------

def test_auto_beta_certifies_where_beta_one_stalls():
    """A margin of 5 % of the data's radius: OPT ~ 0.01, so beta = 1 violates Lemma 3 a hundredfold and its
    certified gap freezes near 5e-3; beta = "auto" notices the plateau, restarts with a smaller beta read off the
    certificate, and certifies 1e-3 in fewer iterations than beta = 1 spends failing."""
    from svmsim.data.synthetic import make_separable

    X, y = make_separable(300, 20, beta=0.05, seed=3)
    with pytest.warns(ConvergenceWarning, match="iteration budget"):
        fixed = SaddleSVC(beta=1.0, max_iter=150_000).fit(X, y)
    assert fixed.rel_gap_ > 3e-3
    assert max(h["rel_gap"] for h in fixed.history_[-100:]) > 3e-3        # a plateau, not a slow descent
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        auto = SaddleSVC().fit(X, y)
    assert auto.stop_reason_ == "certified gap" and auto.rel_gap_ <= 1e-3
    assert auto.n_iter_ < 150_000 and auto.restarts_ >= 1
    opt_low = 0.5 * (auto.hull_lower_ / auto.scale_) ** 2        # the certified lower bound on OPT
    opt_high = 0.5 * (auto.hull_distance_ / auto.scale_) ** 2
    assert opt_low <= auto.beta_ < 1.0 and auto.beta_ < 20 * opt_high
    assert [h["beta"] for h in auto.history_] == sorted((h["beta"] for h in auto.history_), reverse=True)
    again = SaddleSVC().fit(X, y)                                    # restarts are part of the seeded run
    assert np.array_equal(again.coef_, auto.coef_) and again.n_iter_ == auto.n_iter_


def test_auto_beta_certifies_a_sparse_imbalanced_tiny_margin_set():
    from svmsim.data.synthetic import make_tiny_margin

    X, y = make_tiny_margin(3000, 100, density=0.1, positive_fraction=0.1, max_norm=5.0, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = SaddleSVC(alpha=0.85).fit(X, y)
    assert est.stop_reason_ == "certified gap" and est.restarts_ >= 1


def test_auto_beta_leaves_a_plateau_alone_that_the_smoothing_cannot_cause():
    """A stall whose objective gap is far above eps*beta is not beta's doing: no restart."""
    est = SaddleSVC(eps=1e-3, tol=1e-3)
    info = {"hull_distance": 1.0, "hull_lower": 0.5, "rel_gap": 0.5}       # G = 0.375 >> 4 eps beta
    assert est._lower_beta(1.0, info, scale=1.0) is None
    info = {"hull_distance": 0.1, "hull_lower": 0.0999, "rel_gap": 1e-3 * 10}
    cut = est._lower_beta(1.0, info, scale=1.0)                              # G ~ 1e-5 << 4e-3: cut beta
    assert 0.5 * 0.0999**2 <= cut <= 0.5


@pytest.mark.parametrize("algorithm", ["saddle-dsvc", "saddle-svc", "dgilbert", "gilbert"])
def test_a_scenario_on_intersecting_hulls_stops_with_the_reason(algorithm, tmp_path):
    from svmsim import run

    raw = {"name": "overlap", "seed": 0, "data": {"name": "synthetic", "kind": "nonseparable", "n": 300, "d": 5,
                                                 "flip_band": 1.0},
           "algorithm": {"name": algorithm, **({"clients": 3} if algorithm.startswith(("saddle-d", "dg")) else {})},
           "stop": {"gap": 1e-3, "max_iterations": 10**6}, "output": {"progress": False, "eval_every": 200}}
    started = time.perf_counter()
    result = run(raw, write=False)
    assert time.perf_counter() - started < 30
    assert result.stop_reason.startswith("the convex hulls of the two classes intersect"), result.stop_reason
    assert all("diagnosis" not in row for row in result.metrics)
    assert result.metrics[-1]["iteration"] <= 3 * 200 + 200


@pytest.mark.parametrize("estimator, message", [
    (PegasosSVC(batch_size=0), "batch_size = 0; allowed: an integer >= 1"),
    (PegasosSVC(lam=float("inf")), "lam = inf; allowed: a finite number > 0"),
    (SGDSVC(eta0=-1.0), "eta0 = -1.0; allowed: None (Bottou's heuristic) or a finite number > 0"),
    (SGDSVC(bias_rate=-0.5), "bias_rate = -0.5; allowed: a finite number >= 0"),
    (SGDSVC(max_iter=None), "max_iter = None; allowed: an integer >= 1 (epochs)"),
    (SaddleSVC(beta="tiny"), "beta = 'tiny'; allowed: 'auto' or a number > 0"),
    (SaddleSVC(check_every=0), "check_every = 0; allowed: an integer >= 1 or None (the paper's T, at least 250)"),
    (SaddleSVC(refresh_every=2.5), "refresh_every = 2.5; allowed: an integer >= 1"),
    (GilbertSVC(tol=-1e-3), "tol = -0.001; allowed: a number >= 0"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 20 else None)
def test_bad_estimator_parameters_are_refused_with_what_is_allowed(estimator, message):
    X, y = _random_labels(40, 3)
    with pytest.raises(ValueError) as err:
        estimator.fit(X, y)
    assert str(err.value) == message
