"""Saddle-SVC and Saddle-DSVC: SVM via saddle-point optimisation (paper 000, Jin, Huang & Li).

Read beside `000_ff8faf4b278c4a32.txt` and its digest `notes-000.md` (which corrects the printed mistakes):

* hard margin: max_w min_{eta, xi in simplices} w'A eta - w'B xi - |w|^2/2 (eq. 3), regularised by the entropy
  gamma*H (eq. 4); nu-SVM: the same over capped simplices, weights <= nu (eqs. 7-8, RC-Hull eq. 6);
* Algorithm 1 (preprocessing): scale by 1/max|x| (not 1/max|x|^2, notes section 7.2), zero-pad d to a power of
  two, rotate by the *normalised* randomized Hadamard transform H D;
* Algorithm 2 (one iteration): a random coordinate prox step on w (line 4, eq. 9) and a multiplicative-weights
  step on eta and xi (lines 5-6, closed form eqs. 10-11) with extrapolation theta on eta, xi and factor d on w;
  nu-projection by Rule 2 (sort, Lemma 11) or Rule 3 (the while-loop of eqs. 12-13);
* Algorithm 4 (Saddle-DSVC): one server and k clients, three rounds per iteration (+ Rule 3 rounds for nu).

This paper's nu is the cap on each point's weight (nu in [1/min(n1,n2), 1]); scikit-learn's NuSVC `nu` is
mu = 2/(n*nu) (notes section 1).

Modules, by concern:

============== ==================================================================================================
preprocess     Algorithm 1: rotation, constants, the nu cap, the shared coordinate stream
certificate    certificates of an iterate (capped minimum, hull lower bound, `SaddleEvaluator`)
restarts       beta = "auto": the stall test and the smaller beta a restart takes (single machine and server)
hull_check     Saddle-DSVC's certificate on the server: the clients' reports, the capped minimum by probes
simd           intrinsics and fastmath options of the numba kernels
mirror         the multiplicative-weights passes over a segment of points (eqs. 10-11)
projection     the nu-projection: Rule 2, Rule 3 (eqs. 12-13) and the warm-started Newton iteration
single         the single machine's compiled iterations (Algorithm 2)
rounds         the clients' per-round arithmetic of Algorithm 4
protocol       the compiled server and client steps of Algorithm 4 (tags, widths, named state)
estimator      `SaddleSVC`, the scikit-learn estimator
dsvc           `SaddleServer`, `SaddleClient` (node programs) and the message counts and bounds
params         scenario parameters (the ``[algorithm]`` keys; all that registering and validating import)
build          the runs the parameters build
============== ==================================================================================================

The numeric core is shared: the single-machine estimator runs it fused over all points, the clients run it per
segment over their shards, and both produce the same iterates for the same seed.
"""
from __future__ import annotations

import importlib

from ...core.plugins import deferred
from ..registry import AlgorithmInfo, Conformance, register
from .params import SaddleDSVCParams, SaddleParams

#: the family's other public names -> their module, imported on first use (registering the algorithms and
#: validating a scenario of this family import no numerics: the builds are `deferred`)
_HOME = {"build_saddle_svc": "build", "build_saddle_dsvc": "build", "SaddleEvaluator": "certificate",
         "capped_min": "certificate", "hull_lower_bound": "certificate", "SaddleClient": "dsvc",
         "SaddleServer": "dsvc", "dsvc_bound": "dsvc", "dsvc_check_scalars": "dsvc", "dsvc_scalars": "dsvc",
         "dsvc_scalars_per_iteration": "dsvc", "dsvc_setup_scalars": "dsvc", "CoordinateStream": "preprocess",
         "Rotation": "preprocess", "SaddleConstants": "preprocess", "resolve_cap": "preprocess",
         "saddle_constants": "preprocess", "SaddleSVC": "estimator"}

__all__ = [
    "SaddleSVC", "Rotation", "SaddleConstants", "saddle_constants", "resolve_cap", "CoordinateStream",
    "SaddleEvaluator", "SaddleServer", "SaddleClient", "dsvc_scalars_per_iteration", "dsvc_scalars",
    "dsvc_setup_scalars", "dsvc_check_scalars", "dsvc_bound", "hull_lower_bound", "capped_min", "SaddleParams",
    "SaddleDSVCParams", "build_saddle_svc", "build_saddle_dsvc",
]

#: the metrics saddle-svc reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SADDLE_SVC = ("beta", "duality_gap", "gap_lower", "gap_upper", "hull_distance", "hull_lower",
                       "iteration_time", "margin", "objective", "rel_gap", "test_accuracy", "time", "train_accuracy",
                       "w_norm")
#: the metrics saddle-dsvc reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_SADDLE_DSVC = ("beta", "cap_reports", "dual_objective", "duality_gap", "gap_lower", "gap_upper",
                        "hull_distance", "hull_lower", "margin", "objective", "rel_gap", "restarts", "test_accuracy",
                        "train_accuracy", "w_norm")


register(AlgorithmInfo(
    name="saddle-svc", family="saddle", paper="000_ff8faf4b278c4a32.txt, Algorithms 1-2", distributed=False,
    metrics=_METRICS_SADDLE_SVC,
    Params=SaddleParams, build=deferred("svmsim.algorithms.saddle.build:build_saddle_svc"),
    description="Saddle-SVC: hard-margin / nu-SVM by randomized primal-dual saddle steps (single machine)",
    topologies=("star",),
    conformance=Conformance(
        params={"eps": 0.05},
        run={"iterations": 60, "observe_every": 20})))
register(AlgorithmInfo(
    name="saddle-dsvc", family="saddle", paper="000_ff8faf4b278c4a32.txt, Algorithms 3-4", distributed=True,
    metrics=_METRICS_SADDLE_DSVC,
    # counts, the shared coordinate stream's index, flags and the certificate check's statistics: exact
    exact_tags=("setup", "coord", "stats", "check", "resume", "probe", "hull", "probe_stats"),
    Params=SaddleDSVCParams, build=deferred("svmsim.algorithms.saddle.build:build_saddle_dsvc"),
    description="Saddle-DSVC: one server, k clients, 9k scalars per iteration (+8k per nu-projection pass; "
                "+ a certificate check every check_every iterations with beta = 'auto')",
    topologies=("star",),
    conformance=Conformance(
        params={"clients": 5, "eps": 0.05},
        variants=({"alpha": 0.85},))))


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
