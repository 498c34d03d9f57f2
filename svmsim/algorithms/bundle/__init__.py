"""Paper 004 (Saha, Zhang & Vishwanathan 2009/2011): lower bounds for BMRM and Pragam, an O(1/sqrt(eps)) method for
the linear SVM, with their baselines (qp-BMRM, ls-BMRM, Pegasos-n, LIBLINEAR).

Read beside `004_042fe5751a405c12.txt` and its digest `notes-004.md`, which corrects the printed lower-bound
instance (its columns come in antipodal pairs: BMRM solves it in two steps; the instance here is the orthonormal
H_d/sqrt(d) with a zero plane, notes 2.2 fix 2) and reconstructs ls-BMRM from its one-sentence description.

* the objective: J(w) = lam/2 ||w||^2 + 1/n sum hinge (eq. 2; no bias), J_b with the bias minimised (Pragam-b);
* BMRM (section 2): cutting planes of the risk, the inner QP (10) over the simplex solved fully (qp-BMRM) or by a
  line search towards the newest plane (ls-BMRM); its certified gap eps_t (eq. 4) falls as O(1/t) and, on the
  lower-bound instance, no faster (Theorems 6-7: eps_t = 1/(2 lam t));
* Pragam (Algorithm 1): Nesterov's excessive gap technique on J and its adjoint D (eqs. 17-25), O(1/k^2);
  Pragam-b projects onto the box with one equality by Algorithm 2 (Appendix B);
* the distributed form (notes-004 section 6, an extrapolation): examples split over K workers, one all-reduce of d
  (+ 2 scalars) per iteration; the iterates are those of one machine up to summation order.

Modules, by concern:

=========== =====================================================================================================
projection  projections onto Q2: box, box + one equality (Algorithm 2, numba, expected O(n)), capped simplex
simplex_qp  qp-BMRM's inner QP over the simplex by SMO, and the bounded bundle
protocol    the worker's compiled step: local part, one all-reduce, update, for every method
workers     the worker node program and its all-reduce plan
objective   J, J with bias, the Lipschitz constant of grad D, the certified J*
estimator   `PragamSVC` and `BMRMSVC`, the single-machine forms as scikit-learn estimators
params      scenario parameters (the ``[algorithm]`` keys; all that registering and validating import)
build       the deployment, the evaluator (best iterate, err_t, certificates)
liblinear   LIBLINEAR (scikit-learn's LinearSVC) on a growing epoch budget, in J's units
=========== =====================================================================================================
"""
from __future__ import annotations

import importlib

from ...core.plugins import deferred
from ..allreduce_params import WORKER_TOPOLOGIES
from ..registry import AlgorithmInfo, Conformance, register
from .params import BMRMParams, LiblinearParams, PegasosNParams, PragamBParams, PragamParams, QPBMRMParams

#: the family's other public names -> their module, imported on first use (registering the algorithms and
#: validating a scenario of this family import no numerics: the builds are `deferred`)
_HOME = {"build_bundle": "build", "PragamSVC": "estimator", "BMRMSVC": "estimator"}
_build_bundle = deferred("svmsim.algorithms.bundle.build:build_bundle")

__all__ = ["BMRMSVC", "PragamSVC", "build_bundle"]

_PAPER = "004_042fe5751a405c12.txt"


#: the papers' rates in iterations (`AlgorithmInfo.rate`; notes-004 section 4): Pragam's duality gap O(1/k^2) (the
#: paper claims it unchanged with the bias), BMRM's O(1/k) (its O(1/eps) bound, tight by the Hadamard instance)
_RATE_PRAGAM = ("rel_gap", 2.0)
_RATE_BMRM = ("rel_gap", 1.0)


def _builder(name):
    return lambda params, problem: _build_bundle(name, params, problem)


#: the metrics pragam and ls-bmrm report (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_PRAGAM = ("band_gap", "best_iteration", "gap", "gap_lower", "gap_upper", "gap_x_t", "iterate_gap",
                   "iterate_gap_x_k2", "lower", "objective", "primal", "primal_error", "rel_band_gap", "rel_gap",
                   "rel_primal", "test_accuracy", "train_accuracy")
#: the metrics pegasos-n reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_PEGASOS_N = ("band_gap", "best_iteration", "gap", "gap_upper", "gap_x_t", "iterate_gap", "iterate_gap_x_k2",
                      "lower", "objective", "primal", "primal_error", "rel_band_gap", "rel_primal", "test_accuracy",
                      "train_accuracy")
#: the metrics pragam-b reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_PRAGAM_B = ("band_gap", "best_iteration", "gap", "gap_lower", "gap_upper", "gap_x_t", "iterate_gap",
                     "iterate_gap_x_k2", "lower", "objective", "primal", "primal_error", "rel_band_gap", "rel_gap",
                     "rel_primal", "root_probes", "test_accuracy", "train_accuracy")
#: the metrics qp-bmrm reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_QP_BMRM = ("band_gap", "best_iteration", "bundle_size", "compactions", "gap", "gap_lower", "gap_upper",
                    "gap_x_t", "iterate_gap", "iterate_gap_x_k2", "lower", "objective", "primal", "primal_error",
                    "qp_failures", "qp_gap", "qp_steps", "rel_band_gap", "rel_gap", "rel_primal", "test_accuracy",
                    "train_accuracy")
#: the metrics liblinear reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_LIBLINEAR = ("band_gap", "best_iteration", "gap", "gap_upper", "gap_x_t", "iterate_gap", "iterate_gap_x_k2",
                      "lower", "objective", "primal", "primal_error", "rel_band_gap", "rel_primal", "test_accuracy",
                      "time", "train_accuracy")

#: the all-reduces' results, which a host keeps as one replicated copy for all its workers, and Pragam-b's root
#: probes (5 scalars of a root search) (`AlgorithmInfo.exact_tags`)
_EXACT = ("total", "probe", "probe-total")
#: the two scalars after the d-vector of a worker's message (`AlgorithmInfo.exact_tail`): Pragam's R_k partial and
#: b^T beta partial, BMRM's R(w) partial and the plane's offset b^T alpha*: the objective, the certificate and the
#: cutting plane are computed from them, which a codec must not round
_TAIL = {"partial": 2}

register(AlgorithmInfo(
    name="pragam", rate=_RATE_PRAGAM, exact_tags=_EXACT, exact_tail=_TAIL, metrics=_METRICS_PRAGAM,
    family="bundle", paper=f"{_PAPER}, Algorithm 1 (no bias)", distributed=True,
    Params=PragamParams, build=_builder("pragam"),
    description="Pragam: Nesterov's excessive gap on the SVM dual, O(1/sqrt(eps)); one all-reduce of d + 2",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4, "lam": 0.01},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="pragam-b", rate=_RATE_PRAGAM, exact_tags=_EXACT, exact_tail=_TAIL, metrics=_METRICS_PRAGAM_B,
    family="bundle", paper=f"{_PAPER}, Algorithm 1 with the bias (Q2 with y^T alpha = 0, "
    "Algorithm 2)", distributed=True, Params=PragamBParams, build=_builder("pragam-b"),
    description="Pragam-b: Pragam with the SVM bias, projections by Algorithm 2's O(n) root finder (one machine)",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4, "lam": 0.01},
        variants=({"workers": 6, "allreduce": "ring"},),
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="ls-bmrm", rate=_RATE_BMRM, exact_tags=_EXACT, exact_tail=_TAIL, metrics=_METRICS_PRAGAM,
    family="bundle", paper=f"{_PAPER}, section 2 (BMRM with a line search; notes-004 1.5)",
    distributed=True, Params=BMRMParams, build=_builder("ls-bmrm"),
    description="ls-BMRM: cutting planes with a line search in the adjoint, O(1/eps); one all-reduce of d + 2",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 3, "lam": 0.01, "allreduce": "tree"},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="qp-bmrm", rate=_RATE_BMRM, exact_tags=_EXACT, exact_tail=_TAIL, metrics=_METRICS_QP_BMRM,
    family="bundle", paper=f"{_PAPER}, section 2 (BMRM solving the inner QP (10); Teo et al.)",
    distributed=True, Params=QPBMRMParams, build=_builder("qp-bmrm"),
    description="qp-BMRM: cutting planes with the full inner simplex QP (SMO), O(1/eps); one all-reduce of d + 2",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4, "lam": 0.01},
        variants=({"max_bundle": 3, "allreduce": "star"},),
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="pegasos-n", exact_tags=_EXACT, metrics=_METRICS_PEGASOS_N,
    family="bundle", paper=f"{_PAPER}, baseline pegasos-n (Shalev-Shwartz et al., all n "
    "examples per step)", distributed=True, Params=PegasosNParams, build=_builder("pegasos-n"),
    description="Pegasos with the whole data set per step (deterministic subgradient, step 1/(lam t)); one "
                "all-reduce of d", topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 2, "lam": 0.01},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="liblinear", family="bundle", paper=f"{_PAPER}, baseline liblinear (Hsieh et al. 2008)", distributed=False,
    metrics=_METRICS_LIBLINEAR,
    Params=LiblinearParams, build=deferred("svmsim.algorithms.bundle.liblinear:build_liblinear"),
    description="LIBLINEAR's dual coordinate descent (scikit-learn's LinearSVC, C = 1/(lam n), no bias) on a "
                "doubling epoch budget, in J's units", topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"lam": 0.01, "max_epochs": 64},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
