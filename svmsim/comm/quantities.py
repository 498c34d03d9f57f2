"""The registry of quantities: what a run counts or models, by name, kind, unit and a one-line description.

Three kinds:

* ``message``: counted from a batch, for every message the meter sees (per tag, per directed edge, per round);
  `per_message(scalars, bytes)` is what one message adds. They are the ledger's columns, in registry order.
* ``node``: work a node did, reported by its program (``Outbox.signals["counts"]``) and kept per node and per
  round (`Meter.record_node`). A program may report a node quantity that is not registered; registered ones are
  documented here.
* ``derived``: computed from the others and the ``[network]`` model. Modelled time comes from the cluster clock
  (`schedule.cluster_time`); a quantity with `per_edge` is linear in the per-edge message quantities:
  ``per_edge(network, ptr, nbr)`` gives, per message quantity it depends on, a coefficient per directed edge id of
  the CSR adjacency (ptr, nbr), or None when the scenario does not model it (then it writes no column). Such a
  quantity is exact from the meter's per-edge counters, on the Python rounds and the compiled ones alike.

A derived quantity with `metric` set is a metrics column of that name (and a total in ``summary.json``); with
`cost` set, sweeps report its value at the target as ``cost_<name>``; `optional` ones appear only in runs that
model them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ScenarioError

__all__ = [
    "KINDS",
    "MESSAGE_QUANTITIES",
    "Quantity",
    "QUANTITIES",
    "by_kind",
    "edge_weighted_total",
    "linear_edge_weights",
    "quantity",
]

#: the kinds of quantity
KINDS = ("message", "node", "derived")


@dataclass(frozen=True)
class Quantity:
    """One quantity of the registry (see the module docstring for the kinds)."""

    name: str
    kind: str
    unit: str
    description: str
    per_message: Callable[[int, int], int] | None = None        # message: (scalars, bytes) of one -> its amount
    per_edge: Callable | None = None                             # derived, linear in the per-edge counts
    cost: bool = False                                           # a sweep's cost_<name> column
    optional: bool = False                                       # a column only in runs that model it

    @property
    def cost_column(self) -> str:
        return "cost_" + self.name


def _energy_per_edge(network, ptr: np.ndarray, nbr: np.ndarray) -> dict[str, np.ndarray] | None:
    """Joules per message and per byte of every directed edge: ``[network] energy_per_message`` and
    ``energy_per_byte`` (absent: 0), overridden per link by ``[[network.links]]``; None when none is set."""
    keys = ("energy_per_message", "energy_per_byte")
    if network is None or all(getattr(network, k, None) is None and
                              all(getattr(ln, k, None) is None for ln in network.links) for k in keys):
        return None
    base = {k: 0.0 if getattr(network, k) is None else float(getattr(network, k)) for k in keys}
    overrides = [((ln.a, ln.b), {k: getattr(ln, k) for k in keys}) for ln in network.links]
    per_message, per_byte = linear_edge_weights(ptr, nbr, base, overrides)
    return {"messages": per_message, "bytes": per_byte}


def linear_edge_weights(ptr: np.ndarray, nbr: np.ndarray, base: dict, overrides: list) -> list[np.ndarray]:
    """One coefficient array per key of `base` (in its order), per directed edge id of the CSR adjacency (ptr,
    nbr): the base value, or a link's own (`overrides`: ``((a, b), {key: value or None})``, both directions of
    the link a-b; None keeps the base). A link that is not an edge raises `ScenarioError`."""
    out = [np.full(nbr.shape[0], float(v)) for v in base.values()]
    for (s, d), values in overrides:
        for a, b in ((s, d), (d, s)):
            row = nbr[ptr[a]:ptr[a + 1]] if 0 <= a < ptr.shape[0] - 1 else nbr[:0]
            pos = int(np.searchsorted(row, b))
            if pos >= row.shape[0] or row[pos] != b:
                raise ScenarioError(f"[network] link {s}-{d} is not an edge of the topology; allowed: links between "
                                 "neighbours")
            for arr, key in zip(out, base):
                if values.get(key) is not None:
                    arr[ptr[a] + pos] = float(values[key])
    return out


def edge_weighted_total(edges: np.ndarray, weights: dict[str, np.ndarray]) -> float:
    """sum over message quantities q in `weights` and edges e of ``weights[q][e] * edges[q, e]``, with `edges` a
    (message quantities, n_edges) counter array in registry order (`Meter.edge_counts`)."""
    total = 0.0
    for q, w in weights.items():
        total += float(np.dot(edges[MESSAGE_QUANTITIES.index(q)].astype(np.float64), w))
    return total


QUANTITIES: tuple[Quantity, ...] = (
    Quantity("messages", "message", "messages", "logical messages sent", per_message=lambda spm, bpm: 1,
             cost=True),
    Quantity("scalars", "message", "scalars", "scalars sent", per_message=lambda spm, bpm: spm, cost=True),
    Quantity("bytes", "message", "B", "bytes sent", per_message=lambda spm, bpm: bpm),
    Quantity("kernel_evaluations", "node", "evaluations", "kernel evaluations a node's program did"),
    Quantity("operations", "node", "operations", "operations a step declares (Outbox.signals['work']), the "
             "modelled time's compute input"),
    Quantity("modelled_time", "derived", "s", "modelled cluster time under the [network] alpha-beta model",
             cost=True),
    Quantity("energy", "derived", "J", "joules of communication: per delivered message, energy_per_message + "
             "energy_per_byte x bytes of its link", per_edge=_energy_per_edge, cost=True, optional=True),
)


def by_kind(kind: str) -> tuple[Quantity, ...]:
    """The registered quantities of one kind, in registry order."""
    if kind not in KINDS:
        raise ValueError(f"quantity kind {kind!r} is unknown; allowed: {', '.join(KINDS)}")
    return tuple(q for q in QUANTITIES if q.kind == kind)


def quantity(name: str) -> Quantity:
    """The registered quantity called `name`."""
    for q in QUANTITIES:
        if q.name == name:
            return q
    raise KeyError(f"quantity {name!r} is not registered; known: {', '.join(q.name for q in QUANTITIES)}")


#: the quantities every message carries, in the order of the ledger's columns
MESSAGE_QUANTITIES: tuple[str, ...] = tuple(q.name for q in by_kind("message"))
