"""Gossip averaging: Push-Sum (Kempe, Dobra & Gehrke 2003; paper 002's Algorithm 1), its loss-tolerant
running-sum form, and randomised pairwise averaging (Boyd et al. 2006).

Modules: `params` (the ``[algorithm]`` keys; all that registering and validating import) and `methods` (the peers,
their numba kernels, the topology's facts and the build; read its docstring beside notes-002.md). Every public
name of `methods` is available here.
"""
from __future__ import annotations

from ...core.plugins import deferred, lazy_attributes
from ..registry import ANY_TOPOLOGY, AlgorithmInfo, Conformance, register
from .params import PushSumParams


#: the metrics pushsum reports (`AlgorithmInfo.metrics`; [stop] below is checked against them)
_METRICS = ("consensus_error", "consensus_rms", "objective", "weight_at_nodes")


register(AlgorithmInfo(
    name="pushsum", metrics=_METRICS, family="gossip", paper="002_a14c5840ff10f4b6.txt, Algorithm 1 (Kempe et al. 2003); notes-002 s. 2",
    distributed=True, Params=PushSumParams, build=deferred("svmsim.algorithms.pushsum.methods:build_pushsum"),
    memory=deferred("svmsim.algorithms.pushsum.methods:pushsum_memory"),
    description="Push-Sum gossip averaging (also running-sum and pairwise averaging), d+1 scalars per push",
    topologies=ANY_TOPOLOGY,
    scheduler="gossip", finishes_by_itself=lambda params: params.max_wakes is not None,
    exact_tail={"push": 1, "push_cumulative": 1},      # the weight after the d sums travels as sent
    conformance=Conformance(
        params={"nodes": 9, "values": "random", "dim": 3, "max_wakes": 25},
        variants=({"variant": "pairwise"}, {"variant": "running-sum"}))))


# everything else of the family is in `methods`, imported on first use (the builds above are `deferred`)
__getattr__ = lazy_attributes(__name__, globals())
