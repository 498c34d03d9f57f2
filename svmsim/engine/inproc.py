"""The in-process engine: every group lives in this process; deterministic and cheap."""
from __future__ import annotations

import time
from typing import Any

from ..comm.message import Inbox, Outbox
from ..program import Group
from .base import Engine

__all__ = ["InProcessEngine"]


class InProcessEngine(Engine):
    name = "inproc"

    def __init__(self, timed: bool = False):
        self.groups: list[Group] = []
        self.states: list[Any] = []
        self.timed = timed                 # record each group's step time (modelled time, compute = "measured")
        self.step_seconds: dict[int, float] = {}

    def deploy(self, groups: list[Group], seed: int) -> None:
        self.groups = groups
        self.states = [g.program.init(g.node_ids, g.node_data, seed) for g in groups]

    def step(self, round_: int, inboxes: dict[int, Inbox]) -> dict[int, Outbox]:
        out = {}
        states = self.states
        groups = self.groups
        if self.timed:
            self.step_seconds = {}
            for gid, inbox in inboxes.items():
                t0 = time.perf_counter()
                states[gid], out[gid] = groups[gid].program.step(states[gid], inbox, round_)
                self.step_seconds[gid] = time.perf_counter() - t0
            return out
        for gid, inbox in inboxes.items():
            states[gid], out[gid] = groups[gid].program.step(states[gid], inbox, round_)
        return out

    def gossip(self, roles, seed, topology, *, node_names=None, clock=None, latency=None, faults=None,
               round_time=None, compiled=None, compression=None):
        """One event loop for every node, in this process (`schedule.gossip.GossipScheduler`), metered by a meter
        that checks every message against the topology (its edges as CSR: memory O(edges) for any N)."""
        from ..comm.meter import Meter
        from ..schedule.gossip import GossipScheduler
        from ..topology import neighbour_csr

        groups = self.plan(roles)
        self.deploy(groups, seed)
        n = topology.number_of_nodes()
        meter = Meter(n, neighbour_csr(topology), node_names)
        return GossipScheduler(self, groups, meter, topology, clock=clock, latency=latency, faults=faults, seed=seed,
                               round_time=round_time, compiled=compiled, compression=compression)

    def time_steps(self) -> bool:
        self.timed = True
        return True

    def kernels(self) -> list | None:
        kernels = []
        for group, state in zip(self.groups, self.states):
            kernel = group.program.kernel(state)
            if kernel is None:
                return None
            kernels.append(kernel)
        return kernels

    def observe(self, gids: list[int] | None = None) -> dict[int, Any]:
        gids = range(len(self.groups)) if gids is None else gids
        return {g: self.groups[g].program.observe(self.states[g]) for g in gids}

    def peek(self, gids: list[int] | None = None) -> dict[int, Any]:
        gids = range(len(self.groups)) if gids is None else gids
        return {g: self.groups[g].program.peek(self.states[g]) for g in gids}

    def hand_over(self, gids: list[int] | None = None) -> dict[int, Any]:
        gids = range(len(self.groups)) if gids is None else gids
        return {g: self.groups[g].program.hand_over(self.states[g]) for g in gids}
