"""Gilbert's algorithm for the hard-margin SVM (paper 000's baseline; Gilbert 1966, Gärtner & Jaggi 2009), on one
machine and distributed (Liu et al. 2016).

Modules: `params` (the ``[algorithm]`` keys; all that registering and validating import) and `methods` (the
estimator `GilbertSVC`, the server and client programs and the builds; read its docstring beside notes-000.md).
Every public name of `methods` is available here.
"""
from __future__ import annotations

from ...core.plugins import deferred, lazy_attributes
from ..registry import AlgorithmInfo, Conformance, register
from .params import DGilbertParams, GilbertParams


#: the metrics gilbert reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_GILBERT = ("duality_gap", "gap_lower", "gap_upper", "hull_distance", "hull_lower", "margin", "objective",
                    "rel_gap", "test_accuracy", "time", "train_accuracy")
#: the metrics dgilbert reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS_DGILBERT = ("duality_gap", "gap_lower", "gap_upper", "hull_distance", "hull_lower", "margin", "objective",
                     "rel_gap", "test_accuracy", "train_accuracy")


register(AlgorithmInfo(
    name="gilbert", metrics=_METRICS_GILBERT, family="saddle", paper="000_ff8faf4b278c4a32.txt, baseline (notes-000 section 4)",
    distributed=False, Params=GilbertParams, build=deferred("svmsim.algorithms.gilbert.methods:build_gilbert"),
    description="Gilbert's algorithm: hard-margin SVM as the nearest point of the Minkowski difference",
    topologies=("star",),
    conformance=Conformance(
        params={"eps": 0.001},
        skips={"seed": "deterministic: its run does not depend on the seed (Gilbert's algorithm has no random "
                       "choice)"})))

register(AlgorithmInfo(
    name="dgilbert", metrics=_METRICS_DGILBERT, family="saddle", paper="000_ff8faf4b278c4a32.txt, baseline (Liu et al. 2016)",
    distributed=True, Params=DGilbertParams, build=deferred("svmsim.algorithms.gilbert.methods:build_dgilbert"),
    description="Distributed Gilbert: server + k clients, k*d + 2k + 2 + 2d scalars per iteration",
    topologies=("star",),
    conformance=Conformance(
        params={"clients": 5, "eps": 0.001},
        skips={"compiled": "its node programs offer no compiled step (NodeProgram.kernel returns None), so there is no "
                        "compiled loop"})))


# everything else of the family is in `methods`, imported on first use (the builds above are `deferred`)
__getattr__ = lazy_attributes(__name__, globals())
