"""The registry of fault kinds: named fault schedules with typed parameters, given in a scenario as a table
``[faults.<kind>]`` (or an array of tables ``[[faults.<kind>]]`` for several), registered in Python by
`register_fault`, or provided by an installed plugin through the entry-point group ``svmsim.faults``.

A kind says *what happens to which node when*, in the two effects both schedulers apply: outages (nodes down from
``start`` to ``end``, coming back with or without their state) and clock slow-downs (a node's steps take ``factor``
times longer; the gossip scheduler only). Its function is called once per run as
``schedule(n_nodes, rng, **params) -> FaultEffects`` with the parameters checked and defaults filled in and `rng` a
`numpy.random.Generator` seeded by the fault seed, the kind's name and the table's position, so a run replays
exactly. `svmsim.faults` applies the effects beside the flat ``[faults]`` keys (drop, crash, churn, ...).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import ScenarioError
from .params import ParamSpec, check_params, register_with_params

__all__ = ["Outage", "FaultEffects", "FaultKind", "FAULT_KINDS", "register_fault", "fault_kinds", "fault_kind",
           "resolve_fault_params", "kind_rng"]

#: every known fault kind: the built-in ones (below) and the registered ones
FAULT_KINDS: dict[str, "FaultKind"] = {}


@dataclass(frozen=True)
class Outage:
    """Nodes that go down at `start` and come back at `end` (inf: never), with or without their state."""

    nodes: tuple
    start: float
    end: float = math.inf
    keep_state: bool = True


@dataclass(frozen=True)
class FaultEffects:
    """What one fault kind does in a run: `outages` (a sequence of `Outage`) and `slowdown` (node -> factor >= 1:
    the node's clock runs that many times slower; gossip scheduler only)."""

    outages: Sequence[Outage] = ()
    slowdown: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultKind:
    """A registered fault kind.

    ``schedule(n_nodes, rng, **params) -> FaultEffects`` resolves it for one run. ``takes_nodes_down``: whether it
    may produce outages (time windows of deterministic gossip cannot yet apply those to algorithms that end by
    themselves). ``gossip_only``: True, or a function of the checked parameters returning True, when synchronous
    rounds cannot apply it (slow-downs, restarts without state).
    """

    name: str
    schedule: Callable[..., FaultEffects]
    description: str
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    takes_nodes_down: bool = True
    gossip_only: bool | Callable[[dict], bool] = False

    def signature(self) -> str:
        """Render as ``kind(p1: type = default, ...)`` for listings and error messages."""
        return f"{self.name}({', '.join(p.describe(n) for n, p in self.params.items())})"

    def needs_gossip(self, params: Mapping[str, Any]) -> bool:
        return bool(self.gossip_only(dict(params)) if callable(self.gossip_only) else self.gossip_only)


def register_fault(kind: FaultKind) -> FaultKind:
    """Make a fault kind known to scenarios (``[faults.<name>]``), `FaultModel` and the CLI; returns it.

    A plugin calls it when its module is imported (entry-point group ``svmsim.faults``, the entry point named after
    the kind). A kind registered again by another module is refused."""
    return register_with_params(FAULT_KINDS, kind, FaultKind, "register_fault", "fault kind", "schedule",
                                "schedule(n_nodes, rng, **params) -> FaultEffects")


def fault_kinds() -> list[str]:
    """Every fault kind a scenario may name: built in, registered, and installed plugins' (none imported)."""
    from .plugins import registered_names

    return registered_names("faults", FAULT_KINDS)


def fault_kind(name: str) -> FaultKind | None:
    """The kind `name`, loading its plugin on first use; None for a kind nothing provides."""
    from .plugins import find_registered

    return find_registered("faults", FAULT_KINDS, name, register_fault, FaultKind)


def resolve_fault_params(name: str, params: Any) -> dict[str, Any]:
    """Check one ``[faults.<name>]`` table: the kind exists, its parameters' names and types; defaults filled in."""
    kind = fault_kind(name)
    if kind is None:
        raise ScenarioError(f"unknown fault kind 'faults.{name}'; allowed: a key of [faults] or a fault kind: "
                            f"{', '.join(fault_kinds())}")
    if not isinstance(params, Mapping):
        raise ScenarioError(f"faults.{name} = {params!r} is not a table; allowed: a table [faults.{name}] (or an "
                            f"array of tables [[faults.{name}]]) with the parameters {kind.signature()}")
    return check_params(f"fault kind '{name}'", params, kind.params, ScenarioError)


def kind_rng(seed: int, name: str, index: int) -> np.random.Generator:
    """The random generator of the `index`-th table of fault kind `name` under fault seed `seed`."""
    return np.random.default_rng([int(seed), 0xFA17, zlib.crc32(name.encode()), int(index)])


# ----------------------------------------------------------------------------------------------------------------
# Built-in kinds
# ----------------------------------------------------------------------------------------------------------------


def _until(start: float, duration: float | None) -> float:
    return math.inf if duration is None else start + duration


def _outage(n_nodes: int, rng: np.random.Generator, nodes: list, start: float, duration: float | None,
            keep_state: bool) -> FaultEffects:
    return FaultEffects(outages=(Outage(tuple(nodes), start, _until(start, duration), keep_state),))


def _rack_failure(n_nodes: int, rng: np.random.Generator, racks: int, fail: int, start: float,
                  duration: float | None, keep_state: bool) -> FaultEffects:
    if not 1 <= fail <= racks <= n_nodes:
        raise ScenarioError(f"faults.rack_failure: racks = {racks}, fail = {fail} on {n_nodes} nodes; allowed: "
                            "1 <= fail <= racks <= the number of nodes")
    rack_of = np.arange(n_nodes) * racks // n_nodes          # contiguous blocks of nodes, as racks hold them
    down = np.sort(rng.choice(racks, size=fail, replace=False))
    nodes = tuple(int(v) for v in np.flatnonzero(np.isin(rack_of, down)))
    return FaultEffects(outages=(Outage(nodes, start, _until(start, duration), keep_state),))


_DOWN_FOR = ParamSpec(float, None, "how long the nodes stay down", "a number > 0", valid=lambda v: 0 < v < math.inf,
                      none_means="for good")
_START = ParamSpec(float, 0.0, "when they go down (virtual time; synchronous rounds: the round index)",
                   "a number >= 0", valid=lambda v: 0 <= v < math.inf)
_KEEP_STATE = ParamSpec(bool, True, "the nodes come back with their state (false: restarted from their initial "
                                    "state; gossip only)")

register_fault(FaultKind(
    "outage", _outage,
    "the listed nodes go down at start for duration (a maintenance window; several: [[faults.outage]])",
    {"nodes": ParamSpec(list, None, "the nodes that go down", "a non-empty list of node ids >= 0", required=True,
                        item=int, valid=lambda v: len(v) > 0 and min(v) >= 0),
     "start": _START,
     "duration": _DOWN_FOR, "keep_state": _KEEP_STATE},
    gossip_only=lambda p: p["duration"] is not None and not p["keep_state"]))

register_fault(FaultKind(
    "rack_failure", _rack_failure,
    "correlated failure: the nodes are split into racks of consecutive ids and `fail` racks (chosen by the fault "
    "seed) go down together at start",
    {"racks": ParamSpec(int, 4, "how many racks the nodes are split into", "1 <= racks <= the number of nodes",
                        valid=lambda v: v >= 1),
     "fail": ParamSpec(int, 1, "how many racks go down", "1 <= fail <= racks", valid=lambda v: v >= 1),
     "start": _START,
     "duration": _DOWN_FOR, "keep_state": _KEEP_STATE},
    gossip_only=lambda p: p["duration"] is not None and not p["keep_state"]))


def _availability_trace(n_nodes: int, rng: np.random.Generator, file: str, keep_state: bool) -> FaultEffects:
    """Outages read from a CSV file: a header with the columns node, start, end (an empty end: down for good), one
    row per window in which the node is unavailable (FedScale-like availability traces, inverted)."""
    from .csv_table import read_csv_table

    def bad(line, text):
        return ScenarioError(f"faults.availability_trace: file {file!r} line {line}: {text}")

    header, rows = read_csv_table(file, "faults.availability_trace: file",
                                  "a CSV file (a path relative to the working directory, or absolute)")
    if sorted(header) != ["end", "node", "start"]:
        raise bad(1, f"the columns are {header}; allowed: node, start, end (in any order)")
    col = {h: i for i, h in enumerate(header)}
    windows: dict[int, list] = {}
    outages = []
    for line, cells in rows:
        if len(cells) != 3:
            raise bad(line, f"{len(cells)} cells; allowed: three (node, start, end)")
        node, start, end = (cells[col[k]].strip() for k in ("node", "start", "end"))
        if not node.isdigit() or int(node) >= n_nodes:
            raise bad(line, f"node = {node!r} is not a node of the run; allowed: an integer in 0..{n_nodes - 1}")
        try:
            t0, t1 = float(start), (math.inf if end == "" else float(end))
        except ValueError:
            raise bad(line, f"start = {start!r}, end = {end!r}: not numbers; allowed: 0 <= start < end (end empty: "
                            "down for good)") from None
        if not (0 <= t0 < t1 and math.isfinite(t0)):
            raise bad(line, f"start = {start}, end = {end or 'empty'} is not a window; allowed: 0 <= start < end")
        for a, b in windows.get(int(node), []):
            if t0 < b and a < t1:
                raise bad(line, f"node {node}'s window {t0:g}..{t1:g} overlaps its window {a:g}..{b:g}; allowed: "
                                "windows of one node apart")
        windows.setdefault(int(node), []).append((t0, t1))
        outages.append(Outage((int(node),), t0, t1, keep_state))
    return FaultEffects(outages=tuple(outages))


register_fault(FaultKind(
    "availability_trace", _availability_trace,
    "nodes unavailable in the windows a CSV file lists (columns node, start, end; an empty end: for good), e.g. "
    "devices' availability from a trace",
    {"file": ParamSpec(str, None, "the CSV file (relative to the working directory, or absolute)", "a file path",
                       required=True),
     "keep_state": _KEEP_STATE},
    gossip_only=lambda p: not p["keep_state"]))

