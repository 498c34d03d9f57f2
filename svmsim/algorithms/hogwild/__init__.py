"""HOGWILD! (Recht, Re, Wright and Niu, NIPS 2011) for the C-SVM: lock-free SGD on a parameter held by a server.

Modules: `params` (the ``[algorithm]`` keys; all that registering and validating import) and `methods` (the server
and client programs and the build; read its docstring beside notes-000.md). Every public name of `methods` is
available here.
"""
from __future__ import annotations

from ...core.plugins import deferred, lazy_attributes
from ..registry import AlgorithmInfo, Conformance, register
from .params import HogwildParams


#: the metrics hogwild reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS = ("epochs", "objective", "staleness_max", "staleness_mean", "step_size", "test_accuracy",
            "train_accuracy", "violator_fraction")


register(AlgorithmInfo(
    name="hogwild", metrics=_METRICS, family="hogwild", paper="000_ff8faf4b278c4a32.txt, baseline (Recht et al. 2011)",
    distributed=True, Params=HogwildParams, build=deferred("svmsim.algorithms.hogwild.methods:build_hogwild"),
    description="HOGWILD!: lock-free SGD for the C-SVM on a server, k clients in turns, sparse reads and writes",
    topologies=("star",),
    conformance=Conformance(
        params={"clients": 5, "steps_per_message": 4},
        run={"data": {"name": "heart_scale"}},
        skips={"compiled": "its node programs offer no compiled step (NodeProgram.kernel returns None), so there is no "
                        "compiled loop"})))


# everything else of the family is in `methods`, imported on first use (the builds above are `deferred`)
__getattr__ = lazy_attributes(__name__, globals())
