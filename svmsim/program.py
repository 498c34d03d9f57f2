"""Node programs: what a server, a client or a peer does, free of any transport.

A `NodeProgram` runs one role over a *group* of logical nodes of that role at once (struct of arrays: a
group's state holds every member's data and variables, so a step is one vectorised or numba pass over the
group's whole shard, never a Python loop over points). It is the optax-like pair

    state = program.init(node_ids, node_data, seed)
    state, outbox = program.step(state, inbox, round_)

An engine decides how a role's nodes are split into groups (the in-process engine keeps one group per role;
the Ray engine gives each host actor a slice), so a program must give the same per-node results for any split:
per-node quantities are computed per node, and reductions over senders read inbox rows in (src, dst) order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .comm.message import Inbox, Outbox

__all__ = ["NodeProgram", "RoleSpec", "Group"]


class NodeProgram:
    """Base class of node programs. Subclasses set `role` and implement `init`, `step`, `observe`."""

    role: str = "node"
    #: an initiator is stepped in round 0 with an empty inbox (e.g. the server that starts iteration 0)
    initiator: bool = False

    def init(self, node_ids: np.ndarray, node_data: list, seed: int) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def step(self, state: Any, inbox: Inbox, round_: int) -> tuple[Any, Outbox]:  # pragma: no cover
        raise NotImplementedError

    def observe(self, state: Any) -> Any:
        """A snapshot for the evaluator (the simulation's observer; not a message, never metered)."""
        return None


@dataclass
class RoleSpec:
    """The nodes that play one role, their data, and the program they run."""

    role: str
    program: NodeProgram
    node_ids: np.ndarray
    node_data: list = field(default_factory=list)  # one entry per node id, in the same order

    def data_for(self, ids: np.ndarray) -> list:
        pos = {int(n): i for i, n in enumerate(self.node_ids)}
        return [self.node_data[pos[int(n)]] for n in ids] if self.node_data else [None] * len(ids)


@dataclass
class Group:
    """A slice of one role's nodes that an engine hosts and steps together."""

    gid: int
    role: str
    program: NodeProgram
    node_ids: np.ndarray
    node_data: list
    host: str  # name of the host (actor name on Ray, "inproc" otherwise)
