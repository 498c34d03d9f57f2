"""Paper 003 (Cotter, Shalev-Shwartz & Srebro, ICML 2012): the kernelized Stochastic Batch Perceptron, its
baselines, and a distributed SBP. Cost is counted in kernel evaluations (`numerics.kernels`, the one place that
evaluates a kernel).

Read beside `003_abc85793f1499775.txt` and its digest `notes-003.md`, which corrects the printed water-level routine
(Algorithm 2 is off by one) and the bias variant (Algorithm 3 is corrupted); svmsim implements the corrected forms.

Modules, by concern:

================  ================================================================================================
water             the water level: sort, selection (Algorithm 2 corrected), warm-started Newton; with a bias
responses         the model and its maintained responses (train and test), one kernel row per step
methods           SBP (Algorithm 1, and with a bias), kernel Pegasos, the Perceptron, SDCA: compiled loops
reference         the certified no-bias SVM and nu = L(w*)/||w*|| (section 1.3 of the notes)
params            scenario parameters (the ``[algorithm]`` keys; all that registering and validating import)
kernel_problem    the kernel, lambda, nu, the budget and evaluation points from scenario keys
build             the single-machine runs of SBP and the response baselines
baselines_sklearn LIBSVM's SMO (`SVC`, evaluations estimated) and random Fourier features + LIBLINEAR
estimator         `SBPClassifier`, scikit-learn's interface
distributed       distributed SBP (notes-003 section 6, an extrapolation): server and clients, water level in rounds
================  ================================================================================================
"""
from __future__ import annotations

from ...core.plugins import deferred
from ..registry import AlgorithmInfo, Conformance, register
from .params import DSBPParams, LibsvmParams, PegasosParams, PerceptronParams, RFFParams, SBPParams, SDCAParams

__all__ = ["KernelPegasosClassifier", "KernelPerceptron", "KernelSDCAClassifier", "SBPClassifier"]

_PAPER = "003_abc85793f1499775.txt"
_SINGLE = ("star", "complete")
# the builds, imported when a run is built (registering the algorithms and validating a scenario import no numerics)
_build_baseline = deferred("svmsim.algorithms.sbp.build:build_baseline")

#: the metrics sbp reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SBP = ("epochs", "evaluator_kernel_evaluations", "hinge", "inner_products", "kernel_evaluations", "level",
                "level_positive", "norm", "objective", "primal_error", "rel_primal", "solver_time", "support",
                "test_accuracy", "test_error", "train_accuracy", "water_passes_per_iteration")
#: the metrics dsbp reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_DSBP = ("epochs", "evaluator_kernel_evaluations", "hinge", "level", "newton_trials", "norm", "objective",
                 "primal_error", "rel_primal", "support", "test_accuracy", "test_error", "train_accuracy")
#: the metrics kernel-pegasos, kernel-perceptron and kernel-sdca report (`AlgorithmInfo.metrics`)
_METRICS_KERNEL_PEGASOS = ("epochs", "evaluator_kernel_evaluations", "hinge", "inner_products",
                           "kernel_evaluations", "norm", "objective", "primal_error", "rel_primal", "solver_time",
                           "support", "test_accuracy", "test_error", "train_accuracy", "updates")
#: the metrics libsvm reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_LIBSVM = ("converged", "inner_products", "kernel_evaluations", "kernel_evaluations_lower",
                   "kernel_evaluations_upper", "libsvm_ns_per_evaluation", "solver_time", "support",
                   "test_accuracy", "test_error", "train_accuracy")
#: the metrics rff reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_RFF = ("features", "inner_products", "kernel_evaluations", "objective", "solver_time", "test_accuracy",
                "test_error", "train_accuracy")


register(AlgorithmInfo(
    name="sbp", family="sbp", paper=f"{_PAPER}, Algorithm 1 (Algorithm 3 with bias = true; both corrected)",
    metrics=_METRICS_SBP,
    distributed=False, Params=SBPParams, build=deferred("svmsim.algorithms.sbp.build:build_sbp"),
    description="the kernelized Stochastic Batch Perceptron: supergradient steps on the slack-constrained "
                "problem (2.3), one kernel row per iteration", topologies=_SINGLE,
    conformance=Conformance(
        params={"epochs": 2, "eval_points": 4},
        run={"data": {"name": "heart_scale"}, "iterations": 10 ** 9})))
register(AlgorithmInfo(
    name="dsbp", metrics=_METRICS_DSBP,
    family="sbp", paper=f"{_PAPER}, distributed SBP (notes-003 section 6: an extrapolation, not in the "
    "paper)", distributed=True, Params=DSBPParams, build=deferred("svmsim.algorithms.sbp.distributed:build_dsbp"),
    description="distributed SBP: clients hold shards of the responses; the water level by Newton rounds of scalars, "
                "the sampled point broadcast", topologies=("star",),
    conformance=Conformance(
        params={"clients": 3, "nu": 0.05, "epochs": 1},
        run={"data": {"name": "heart_scale"}},
        skips={"compiled": "its node programs offer no compiled step (NodeProgram.kernel returns None), so there is no "
                        "compiled loop"})))
register(AlgorithmInfo(
    name="kernel-pegasos", family="sbp", paper=f"{_PAPER}, baseline Pegasos (section 4)", distributed=False,
    metrics=_METRICS_KERNEL_PEGASOS,
    Params=PegasosParams, build=lambda p, pr: _build_baseline("kernel-pegasos", p, pr),
    description="kernel Pegasos: SGD on (2.2), step 1/(lam t), a kernel row per margin violation",
    topologies=_SINGLE,
    conformance=Conformance(
        params={"epochs": 2, "eval_points": 4},
        run={"data": {"name": "heart_scale"}, "iterations": 10 ** 9})))
register(AlgorithmInfo(
    name="kernel-perceptron", family="sbp", paper=f"{_PAPER}, baseline Perceptron (section 4)", distributed=False,
    metrics=_METRICS_KERNEL_PEGASOS,
    Params=PerceptronParams, build=lambda p, pr: _build_baseline("kernel-perceptron", p, pr),
    description="the online kernel Perceptron over several epochs, a kernel row per mistake", topologies=_SINGLE,
    conformance=Conformance(
        params={"epochs": 2, "eval_points": 4},
        run={"data": {"name": "heart_scale"}, "iterations": 10 ** 9})))
register(AlgorithmInfo(
    name="kernel-sdca", family="sbp", paper=f"{_PAPER}, baseline SDCA (Hsieh et al. 2008)", distributed=False,
    metrics=_METRICS_KERNEL_PEGASOS,
    Params=SDCAParams, build=lambda p, pr: _build_baseline("kernel-sdca", p, pr),
    description="dual coordinate ascent on the no-bias dual (4.1), a kernel row per moved coordinate",
    topologies=_SINGLE,
    conformance=Conformance(
        params={"epochs": 2, "eval_points": 4},
        run={"data": {"name": "heart_scale"}, "iterations": 10 ** 9})))
register(AlgorithmInfo(
    name="libsvm", family="sbp", paper=f"{_PAPER}, baseline SMO (LIBSVM, second-order working sets)",
    metrics=_METRICS_LIBSVM,
    distributed=False, Params=LibsvmParams, build=deferred("svmsim.algorithms.sbp.baselines_sklearn:build_libsvm"),
    description="scikit-learn's SVC (LIBSVM) on doubling SMO budgets; kernel evaluations estimated and bracketed",
    topologies=_SINGLE,
    conformance=Conformance(
        params={"first_budget": 8},
        run={"data": {"name": "heart_scale"}, "iterations": 10 ** 9},
        skips={"seed": "deterministic: its run does not depend on the seed (LIBSVM's SVC without probability estimates "
                    "draws no random numbers)"})))
register(AlgorithmInfo(
    name="rff", family="sbp", paper=f"{_PAPER}, Appendix A (random Fourier features)", distributed=False,
    metrics=_METRICS_RFF,
    Params=RFFParams, build=deferred("svmsim.algorithms.sbp.baselines_sklearn:build_rff"),
    description="random Fourier features k = 1, 2, 4, ... with the exact linear SVM (LinearSVC) on 2k features",
    topologies=_SINGLE,
    conformance=Conformance(
        params={"max_features": 8},
        run={"data": {"name": "heart_scale"}, "iterations": 10 ** 9})))


def __getattr__(name: str):
    if name in __all__:                             # the scikit-learn estimators, imported on first use
        from . import estimator

        return getattr(estimator, name)
    raise AttributeError(name)
