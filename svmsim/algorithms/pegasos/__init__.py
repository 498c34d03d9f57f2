"""Centralized primal SGD baselines of paper 002: Pegasos (Shalev-Shwartz et al. 2007) and Bottou's SVM-SGD.

Modules: `params` (the ``[algorithm]`` keys and the paper's stopping rule; all that registering and validating
import) and `methods` (the numba kernels, the estimators `PegasosSVC` and `SGDSVC`, the builds; read its docstring
beside notes-002.md). Every public name of `methods` is available here.
"""
from __future__ import annotations

from ...core.plugins import deferred, lazy_attributes
from ..registry import AlgorithmInfo, Conformance, register
from .params import PegasosParams, SGDParams


#: the metrics pegasos reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_PEGASOS = ("objective", "test_accuracy", "time", "train_accuracy")
#: the metrics svm-sgd reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SVM_SGD = ("epoch", "objective", "test_accuracy", "time", "train_accuracy")


register(AlgorithmInfo(
    name="pegasos", metrics=_METRICS_PEGASOS, family="pegasos", paper="002_a14c5840ff10f4b6.txt, centralized baseline (Shalev-Shwartz et al.)",
    distributed=False, Params=PegasosParams, build=deferred("svmsim.algorithms.pegasos.methods:build_pegasos"),
    description="Pegasos: primal sub-gradient SVM, step 1/(lam t), projection onto 1/sqrt(lam) (single machine)",
    topologies=("star",),
    conformance=Conformance(
        params={"lam": 0.01, "iterations": 300},
        run={"iterations": 200, "observe_every": 50})))

register(AlgorithmInfo(
    name="svm-sgd", metrics=_METRICS_SVM_SGD, family="pegasos", paper="002_a14c5840ff10f4b6.txt, baseline (Bottou's SVM-SGD)",
    distributed=False, Params=SGDParams, build=deferred("svmsim.algorithms.pegasos.methods:build_svm_sgd"),
    description="SVM-SGD: hinge-loss SGD with eta = 1/(lam (t + t0)) and an optional bias (single machine)",
    topologies=("star",),
    conformance=Conformance(
        params={"lam": 0.01, "epochs": 2},
        run={"iterations": 150, "observe_every": 50})))


# everything else of the family is in `methods`, imported on first use (the builds above are `deferred`)
__getattr__ = lazy_attributes(__name__, globals())
