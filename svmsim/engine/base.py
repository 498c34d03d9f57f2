"""The engine interface: where node programs run. Engines move messages; they know no algorithm."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..comm.message import Inbox, Outbox
from ..program import Group, RoleSpec

__all__ = ["Engine", "split_roles"]


def split_roles(roles: list[RoleSpec], hosts_per_role: dict[str, int]) -> list[Group]:
    """Split every role's nodes into contiguous groups, one per host, named after the role.

    A role played by one node gets one host named after the role ("server"); a role split over several hosts
    gets hosts named by the range of role-local indices they carry ("client-0..9"); one node per host gives
    "client-3".
    """
    groups: list[Group] = []
    for spec in roles:
        n_hosts = max(1, min(int(hosts_per_role.get(spec.role, 1)), len(spec.node_ids)))
        for chunk in np.array_split(np.arange(len(spec.node_ids)), n_hosts):
            ids = spec.node_ids[chunk]
            if len(spec.node_ids) == 1:
                host = spec.role
            elif len(chunk) == 1:
                host = f"{spec.role}-{chunk[0]}"
            else:
                host = f"{spec.role}-{chunk[0]}..{chunk[-1]}"
            groups.append(Group(len(groups), spec.role, spec.program, ids, spec.data_for(ids), host))
    return groups


class Engine(ABC):
    """Hosts groups of nodes and steps them.

    `step` receives the inboxes of the groups that must run this round and returns their outboxes; routing and
    metering are the scheduler's job, so every engine produces the same ledger.
    """

    name = "engine"

    def plan(self, roles: list[RoleSpec]) -> list[Group]:
        """How this engine splits roles into groups (default: one group per role)."""
        return split_roles(roles, {})

    @abstractmethod
    def deploy(self, groups: list[Group], seed: int) -> None: ...

    @abstractmethod
    def step(self, round_: int, inboxes: dict[int, Inbox]) -> dict[int, Outbox]: ...

    @abstractmethod
    def observe(self, gids: list[int] | None = None) -> dict[int, Any]: ...

    def peek(self, gids: list[int] | None = None) -> dict[int, Any]:
        """`observe` through the programs' `peek`: valid until the groups' states next change (default: `observe`;
        an engine whose observations cross processes copies them anyway)."""
        return self.observe(gids)

    def hand_over(self, gids: list[int] | None = None) -> dict[int, Any]:
        """The groups' last observations, when their run is over: the programs' `hand_over`, which may give up the
        states' own arrays (default: `observe`)."""
        return self.observe(gids)

    def gossip(self, roles: list[RoleSpec], seed: int, topology, *, node_names: Sequence[str] | None = None,
               clock=None, latency=None, faults=None, round_time: float | None = None, compiled: bool | None = None,
               compression=None):
        """Host the roles' gossip programs on `topology` and return the run, a `schedule.gossip.GossipRun`, which
        the runner drives the same way on every engine (``run``, ``outcome``, ``groups``, ``close``). The clock,
        latency and fault models and the seed give the same draws on every engine. `compression` (passed only when
        the scenario has ``[compression]``): the run's `comm.compression.Compressor`; every host encodes its own
        senders' messages with it, or with one of the same spec and seed (`schedule.event_host.EventHost`), and an
        outcome returns the other hosts' counts in `GossipOutcome.codec_counts`."""
        from ..errors import ScenarioError

        raise ScenarioError(f"engine {self.name!r} does not run gossip; allowed: engine.name = \"inproc\" or \"ray\"")

    def time_steps(self) -> bool:
        """Start timing each group's step (`step_seconds`: gid -> the wall seconds of its last step), for the
        modelled time's ``compute = "measured"``; False when this engine cannot (its steps run elsewhere: the
        default)."""
        return False

    def kernels(self) -> list | None:
        """The groups' compiled steps (`SyncKernel`, indexed by gid) if this engine can let the scheduler run
        them in its own process, else None (the default: groups live elsewhere)."""
        return None

    def recovery(self) -> dict | None:
        """What keeping the run alive through lost hosts cost, and which were replaced (None: nothing to say)."""
        return None

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
