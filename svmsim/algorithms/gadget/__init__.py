"""GADGET SVM (paper 002, Algorithm 2): every node runs Pegasos on its own data and gossips its model.

Modules: `params` (the ``[algorithm]`` keys; all that registering and validating import) and `methods` (the peers,
their numba kernels, the evaluation and the build; read its docstring beside notes-002.md). Every public name of
`methods` is available here.
"""
from __future__ import annotations

from ...core.plugins import deferred, lazy_attributes
from ...topology_specs import TOPOLOGIES
from ..registry import AlgorithmInfo, Conformance, register
from .params import GadgetParams


def _peer_topologies() -> tuple[str, ...]:
    """Every built-in topology kind but the star (a peer algorithm needs no hub)."""
    return tuple(k for k in TOPOLOGIES if k != "star")


#: the metrics gadget reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS = ("average_model_objective", "average_model_test_accuracy", "model_disagreement",
            "model_disagreement_max",
            "finished_nodes", "gossip_messages", "last_dF", "local_steps", "model_norm", "nodes", "nodes_scored",
            "objective", "objective_max", "objective_min", "objective_std", "steps_max", "steps_mean", "steps_min",
            "test_accuracy", "test_accuracy_all_nodes", "test_accuracy_shard", "test_accuracy_shard_std",
            "test_accuracy_std", "train_accuracy", "train_accuracy_std")


register(AlgorithmInfo(
    name="gadget", metrics=_METRICS, family="gadget", paper="002_a14c5840ff10f4b6.txt, Algorithm 2 (GADGET SVM)", distributed=True,
    Params=GadgetParams, build=deferred("svmsim.algorithms.gadget.methods:build_gadget"),
    memory=deferred("svmsim.algorithms.gadget.methods:gadget_memory"),
    description="GADGET SVM: per-node Pegasos steps on one local sample, Push-Sum or pairwise-averaging gossip",
    topologies=_peer_topologies(),
    scheduler="gossip", finishes_by_itself=True,
    exact_tail={"push": 1},            # a Push-Sum share's weight omega/2 after its d sums travels as sent
    conformance=Conformance(
        params={"nodes": 7, "lam": 0.01, "eps": 0.0, "iterations": 25},
        variants=({"gossip": "pairwise"},))))


# everything else of the family is in `methods`, imported on first use (the builds above are `deferred`)
__getattr__ = lazy_attributes(__name__, globals())
