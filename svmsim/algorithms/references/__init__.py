"""Paper 000's reference solvers: scikit-learn's SVC, NuSVC and LinearSVC (LIBSVM, LIBLINEAR).

Modules: `params` (the ``[algorithm]`` keys; all that registering and validating import) and `methods` (the runs
and the objectives they are measured by). Every public name of `methods` is available here.
"""
from __future__ import annotations

from ...core.plugins import deferred, lazy_attributes
from ..registry import AlgorithmInfo, Conformance, register
from .params import LinearSVCParams, NuSVCParams, SVCParams

_PAPER = "000_ff8faf4b278c4a32.txt, reference solvers (notes-000 section 4)"




#: the metrics sklearn-svc reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SKLEARN_SVC = ("duality_gap", "fit_time", "gap_lower", "gap_upper", "hull_distance", "hull_lower", "margin",
                        "n_support", "objective", "rel_gap", "test_accuracy", "train_accuracy")
#: the metrics sklearn-nusvc reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SKLEARN_NUSVC = ("dual_objective", "duality_gap", "fit_time", "gap_lower", "gap_upper", "hull_distance",
                          "hull_lower", "margin", "n_support", "objective", "rel_gap", "test_accuracy",
                          "train_accuracy")
#: the metrics sklearn-linearsvc reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SKLEARN_LINEARSVC = ("fit_time", "objective", "test_accuracy", "train_accuracy")


register(AlgorithmInfo(
    name="sklearn-svc", metrics=_METRICS_SKLEARN_SVC, family="references", paper=_PAPER, distributed=False, Params=SVCParams,
    build=deferred("svmsim.algorithms.references.methods:build_svc"),
    description="scikit-learn SVC (LIBSVM), linear kernel, huge C: the exact hard-margin reference",
    conformance=Conformance(
        params={},
        skips={"seed": "deterministic: its run does not depend on the seed (LIBSVM's SVC without probability "
                       "estimates draws no random numbers)"})))

register(AlgorithmInfo(
    name="sklearn-nusvc", metrics=_METRICS_SKLEARN_NUSVC, family="references", paper=_PAPER, distributed=False, Params=NuSVCParams,
    build=deferred("svmsim.algorithms.references.methods:build_nusvc"),
    description="scikit-learn NuSVC (LIBSVM), linear kernel, nu = 2/(n nu_paper): the nu-SVM reference",
    conformance=Conformance(
        params={"alpha": 0.85},
        skips={"seed": "deterministic: its run does not depend on the seed (LIBSVM's NuSVC without probability "
                       "estimates draws no random numbers)"})))

register(AlgorithmInfo(
    name="sklearn-linearsvc", metrics=_METRICS_SKLEARN_LINEARSVC, family="references", paper=_PAPER, distributed=False, Params=LinearSVCParams,
    build=deferred("svmsim.algorithms.references.methods:build_linearsvc"),
    description="scikit-learn LinearSVC (LIBLINEAR): the C-SVM users run today (paper 000 Table 4, C = 8)",
    conformance=Conformance(
        params={"max_iter": 200},
        skips={"seed": "deterministic: its run does not depend on the seed on the small data (random_state only "
                       "shuffles LIBLINEAR's dual coordinate descent, which dual='auto' does not choose when there "
                       "are more points than features)"})))


# everything else of the family is in `methods`, imported on first use (the builds above are `deferred`)
__getattr__ = lazy_attributes(__name__, globals())
