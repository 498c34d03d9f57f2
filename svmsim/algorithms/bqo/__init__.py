"""Paper 001 (Lee & Roth, ICML 2015): distributed box-constrained quadratic optimization (BQO) for the dual linear
SVM, and the baselines it is compared with (DisDCA, DSVM-AVE / CoCoA).

Read beside `001_52f94dd34c309c94.txt` and its digest `notes-001.md` (which fixes the printed eq. (16) typo, the
Table 3 caption's sign and the q = 0 case; notation: the paper's l points and n features are svmsim's n and d).

* the dual (2): min_alpha 1/2 alpha^T Qbar alpha - e^T alpha, 0 <= alpha_i <= U; L1 (hinge): s = 0, U = C;
  L2 (squared hinge): s = 1/(2C), U = inf; no bias term;
* Algorithm 1: each of K machines solves its block of the direction subproblem (5)-(7) by one shuffled
  coordinate-descent pass, one all-reduce sums Delta w and the step's scalars (eqs. 17-19), and the step is the
  exact line search (BQO-E, eqs. 20-21) or Armijo's (BQO-A, eqs. 9-12); the model is the pocket w;
* baselines on the same all-reduce: DisDCA's practical variant (H = K Q~ + sI, eta = 1) and DSVM-AVE / CoCoA
  (H = Q~, eta = 1/K), and distributed TRON on the primal of the L2 loss (one all-reduce per gradient and per
  conjugate-gradient step).

Modules, by concern:

=========== =====================================================================================================
local_cd    the local solver: shuffled dual coordinate descent over a CSR shard (numba)
protocol    the worker's compiled round step: pass, all-reduce, step size (eqs. 17-21), update
workers     the worker node programs (BQO and its baselines; TRON), the methods' constants, the all-reduce plan
tron        distributed TRON's compiled round step: trust-region Newton with CG (tron.cpp's constants)
objective   primal (1), dual (2), and a certified reference optimum f*
estimator   `DualCDSVC`, the single machine's dual coordinate descent as a scikit-learn estimator
params      scenario parameters (the ``[algorithm]`` keys; all that registering and validating import)
build       the deployment, the evaluator (pocket, relative primal / dual, eq. 27)
=========== =====================================================================================================
"""
from __future__ import annotations

import importlib

from ...core.plugins import deferred
from ..allreduce_params import WORKER_TOPOLOGIES
from ..registry import AlgorithmInfo, Conformance, register
from .params import BQOAParams, BQOParams, DistributedParams, DualCDParams, TronParams

#: the family's other public names -> their module, imported on first use (registering the algorithms and
#: validating a scenario of this family import no numerics: the builds are `deferred`)
_HOME = {"METHODS": "build", "build_distributed": "build", "build_dual_cd": "build", "DualCDSVC": "estimator"}
_build_distributed = deferred("svmsim.algorithms.bqo.build:build_distributed")

__all__ = ["METHODS", "BQOAParams", "BQOParams", "DistributedParams", "DualCDSVC", "build_distributed"]

_PAPER = "001_52f94dd34c309c94.txt"
#: the all-reduce's result, which a host keeps as one replicated w for all its workers (`AlgorithmInfo.exact_tags`)
_EXACT = ("total",)
#: the scalars after Delta w in a worker's all-reduce message (`AlgorithmInfo.exact_tail`): the line search's sums
#: and the box limit (BQO-E: e^T d, s||d||^2, s alpha^T d, lambda_min; BQO-A: the first three; TRON: f(w)), which a
#: codec must not round (a lambda_min quantised to 0 would make every step 0)
_TAIL_E, _TAIL_A, _TAIL_TRON = {"partial": 4}, {"partial": 3}, {"partial": 1}


def _builder(name):
    return lambda params, problem: _build_distributed(name, params, problem)


#: the metrics bqo-e, bqo-a, disdca, dsvm-ave report (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_BQO_E = ("dual", "duality_gap", "eta", "gap_lower", "gap_per_cn", "gap_upper", "objective",
                  "pocket_iteration", "primal", "rel_dual", "rel_gap", "rel_primal", "test_accuracy", "train_accuracy")
#: the metrics tron reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_TRON = ("allreduces", "cg_steps", "dual", "duality_gap", "gap_lower", "gap_per_cn", "gap_upper", "objective",
                 "pocket_iteration", "primal", "rel_dual", "rel_gap", "rel_primal", "test_accuracy", "train_accuracy",
                 "trust_region")
#: the metrics dual-cd reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_DUAL_CD = ("dual", "duality_gap", "gap_lower", "gap_per_cn", "gap_upper", "objective", "pocket_iteration",
                    "primal", "rel_dual", "rel_gap", "rel_primal", "test_accuracy", "time", "train_accuracy")


register(AlgorithmInfo(
    name="bqo-e", exact_tags=_EXACT, exact_tail=_TAIL_E, metrics=_METRICS_BQO_E,
    family="bqo", paper=f"{_PAPER}, Algorithm 1 with the exact step (eqs. 20-21)", distributed=True,
    Params=BQOParams, build=_builder("bqo-e"),
    description="BQO-E: K workers, one all-reduce of d + 4 scalars per iteration, exact line search",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4},
        variants=({"loss": "squared_hinge", "allreduce": "star"}, {"allreduce": "tree", "workers": 5}),
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="bqo-a", exact_tags=_EXACT, exact_tail=_TAIL_A, metrics=_METRICS_BQO_E,
    family="bqo", paper=f"{_PAPER}, Algorithm 1 with the Armijo step (eqs. 9-12)", distributed=True,
    Params=BQOAParams, build=_builder("bqo-a"),
    description="BQO-A: K workers, one all-reduce of d + 3 scalars per iteration, Armijo step",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="disdca", exact_tags=_EXACT, metrics=_METRICS_BQO_E,
    family="bqo", paper=f"{_PAPER}, baseline DisDCA (Yang 2013), practical variant",
    distributed=True, Params=DistributedParams, build=_builder("disdca"),
    description="DisDCA (practical; = CoCoA+): K workers, local curvature K Q~, step 1, one all-reduce of d",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="dsvm-ave", exact_tags=_EXACT, metrics=_METRICS_BQO_E,
    family="bqo", paper=f"{_PAPER}, baseline DSVM-AVE (Pechyony et al. 2011) / CoCoA",
    distributed=True, Params=DistributedParams, build=_builder("dsvm-ave"),
    description="DSVM-AVE / CoCoA: K workers, averaging (step 1/K), one all-reduce of d",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 3, "allreduce": "tree"},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="tron", exact_tags=_EXACT, exact_tail=_TAIL_TRON, metrics=_METRICS_TRON,
    family="bqo", paper=f"{_PAPER}, baseline distributed TRON (Zhuang et al. 2015), L2-SVM",
    distributed=True, Params=TronParams, build=_builder("tron"),
    description="distributed TRON (L2 loss): trust-region Newton, one all-reduce of d + 1 per gradient and CG step",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={"workers": 4},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))
register(AlgorithmInfo(
    name="dual-cd", metrics=_METRICS_DUAL_CD,
    family="bqo", paper=f"{_PAPER}, the local solver on one machine (Hsieh et al. 2008)",
    distributed=False, Params=DualCDParams, build=deferred("svmsim.algorithms.bqo.build:build_dual_cd"),
    description="dual coordinate descent on one machine (LIBLINEAR's method without shrinking; DualCDSVC)",
    topologies=WORKER_TOPOLOGIES,
    conformance=Conformance(
        params={},
        run={"data": {"name": "heart_scale"}, "topology": ("complete", {})})))


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
