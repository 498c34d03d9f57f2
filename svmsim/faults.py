"""Fault models: lost, duplicated and delayed messages; crashed, restarted, slow and churning nodes.

A `FaultModel` is the configuration (a scenario's ``[faults]`` section, or built in Python); `bind(n_nodes, seed)`
resolves it for one run into a `FaultPlan` (`svmsim.fault_plan`): which nodes crash or straggle, the outage
timeline, per-node random keys, and a `FaultTally` of what was lost. Every random decision is counter based (`core.streams`' SplitMix64
streams keyed by the fault seed, the node and the message's index at its sender), so a run with faults replays
exactly, and changing the fault model does not reshuffle the latencies or clocks of the rest of the run.

What each fault does
--------------------
drop p: each message is lost in the network with probability p (0 <= p < 1); metered as dropped ("lost").
duplicate p: each message that is not lost is delivered twice with probability p (the copy has its own latency;
    both copies are metered; the summary counts the copies).
delay p, delay_time: with probability p a message copy gets an extra delay drawn from `delay_time` (a
    `Distribution`: constant, uniform, exponential or log-normal).
crash f / crash_nodes, crash_time, recover_time, recover_state: a fraction f of the nodes (chosen by the seed) or
    the listed nodes go down at crash_time: their clocks stop and messages that arrive while they are down are
    dropped ("dead_receiver"). Without recover_time the crash is permanent; with it they come back then, with
    their state (recover_state = true) or restarted from their initial state (false; the program's recover hook).
stragglers f / straggler_nodes, straggler_factor: those nodes' clocks run straggler_factor times slower.
churn_rate r, churn_downtime, churn_state: every node leaves after an exponential up-time of mean 1/r, stays away
    an exponential down-time of mean churn_downtime, and rejoins (with its state, or restarted).

Both schedulers take a plan. The gossip scheduler applies all of it in virtual time. Synchronous rounds use
`FaultPlan.apply(round_, batch) -> (delivered, dropped)` with virtual time = round index: drop, duplicate, crashes
(with recover_state = true) and churn (with churn_state = true) apply; messages from or to a node that is down in
that round are dropped ("dead_sender" / "dead_receiver"); delays, stragglers and restarts without state need the
gossip scheduler (`check_sync` says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .core.distributions import Distribution, is_number
from .errors import ScenarioError
from .core.fault_kinds import FaultEffects, Outage, fault_kind, fault_kinds, resolve_fault_params

if TYPE_CHECKING:
    from .fault_plan import FaultPlan

__all__ = ["FaultModel", "Outage", "FaultEffects", "FAULT_KEYS", "GOSSIP_ONLY_KEYS", "declared_matches"]

#: the keys of a scenario's [faults] section, in order
FAULT_KEYS = ("drop", "duplicate", "delay", "delay_time", "crash", "crash_nodes", "crash_time", "recover_time",
              "recover_state", "stragglers", "straggler_nodes", "straggler_factor", "churn_rate", "churn_downtime",
              "churn_state", "seed")
#: faults that only the gossip scheduler can apply
GOSSIP_ONLY_KEYS = ("delay", "stragglers", "straggler_nodes")


def _range_error(key: str, value: Any, allowed: str) -> ScenarioError:
    return ScenarioError(f"faults.{key} = {value!r} is out of range; allowed: {allowed}")


@dataclass(frozen=True)
class FaultModel:
    """The fault configuration (see the module docstring for what each key does). All defaults: no faults."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    delay_time: Any = None
    crash: float = 0.0
    crash_nodes: Sequence[int] = ()
    crash_time: float = 0.0
    recover_time: float | None = None
    recover_state: bool = True
    stragglers: float = 0.0
    straggler_nodes: Sequence[int] = ()
    straggler_factor: float = 4.0
    churn_rate: float = 0.0
    churn_downtime: float = 1.0
    churn_state: bool = True
    seed: int | None = None
    outages: Sequence[Outage] = ()
    #: fault kinds (`svmsim.core.fault_kinds`): (name, checked parameters) per [faults.<name>] table, in file order
    kinds: Sequence[tuple[str, dict]] = ()

    def __post_init__(self):
        probabilities = {"drop": (self.drop, "a number in [0, 1)", lambda v: 0 <= v < 1),
                         "duplicate": (self.duplicate, "a number in [0, 1)", lambda v: 0 <= v < 1),
                         "delay": (self.delay, "a number in [0, 1]", lambda v: 0 <= v <= 1),
                         "crash": (self.crash, "a number in [0, 1]", lambda v: 0 <= v <= 1),
                         "stragglers": (self.stragglers, "a number in [0, 1]", lambda v: 0 <= v <= 1),
                         "crash_time": (self.crash_time, "a number >= 0", lambda v: 0 <= v < math.inf),
                         "straggler_factor": (self.straggler_factor, "a number >= 1", lambda v: 1 <= v < math.inf),
                         "churn_rate": (self.churn_rate, "a number >= 0", lambda v: 0 <= v < math.inf),
                         "churn_downtime": (self.churn_downtime, "a number > 0", lambda v: 0 < v < math.inf)}
        for key, (value, allowed, ok) in probabilities.items():
            if not is_number(value) or math.isnan(float(value)) or not ok(float(value)):
                raise _range_error(key, value, allowed)
        if self.delay_time is not None:
            object.__setattr__(self, "delay_time", Distribution.from_config(self.delay_time, "faults.delay_time"))
        if self.delay > 0 and self.delay_time is None:
            raise ScenarioError(f"faults.delay = {self.delay!r} needs faults.delay_time, the extra delay's "
                                "distribution; allowed: a number or a table such as {kind = \"exponential\", "
                                "mean = 0.1}")
        if self.delay_time is not None and self.delay == 0:
            raise ScenarioError("faults.delay_time is given but faults.delay = 0, so no message is delayed; allowed: "
                                "set delay (the probability of an extra delay) in (0, 1], or remove delay_time")
        for key in ("crash_nodes", "straggler_nodes"):
            nodes = getattr(self, key)
            if isinstance(nodes, (str, bytes)) or not all(
                    isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in nodes):
                raise ScenarioError(f"faults.{key} = {nodes!r} is invalid; allowed: a list of node ids (integers >= 0)")
            object.__setattr__(self, key, tuple(int(v) for v in nodes))
        if self.crash and self.crash_nodes:
            raise ScenarioError("faults.crash and faults.crash_nodes are both given; allowed: a fraction of nodes "
                                "(crash) or a list of nodes (crash_nodes), not both")
        if self.stragglers and self.straggler_nodes:
            raise ScenarioError("faults.stragglers and faults.straggler_nodes are both given; allowed: a fraction "
                                "(stragglers) or a list of nodes (straggler_nodes), not both")
        crashing = bool(self.crash or self.crash_nodes)
        if self.recover_time is not None:
            if not is_number(self.recover_time) or not self.crash_time < float(self.recover_time) < math.inf:
                raise _range_error("recover_time", self.recover_time, f"a number > crash_time ({self.crash_time!r})")
            if not crashing:
                raise ScenarioError(f"faults.recover_time = {self.recover_time!r} is given but no node crashes; "
                                    "allowed: set crash or crash_nodes too")
        if not self.recover_state and self.recover_time is None:
            raise ScenarioError("faults.recover_state = false applies to crashed nodes that recover; allowed: set "
                                "recover_time (and crash or crash_nodes), or remove recover_state")
        if not self.churn_state and not self.churn_rate:
            raise ScenarioError("faults.churn_state = false applies to churn; allowed: set churn_rate > 0, or remove "
                                "churn_state")
        if self.seed is not None and (not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool)
                                      or self.seed < 0):
            raise _range_error("seed", self.seed, "an integer >= 0")
        kinds = []
        for entry in self.kinds:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
                raise ScenarioError(f"faults.kinds entry {entry!r} is invalid; allowed: (fault kind, parameters)")
            try:
                kinds.append((entry[0], resolve_fault_params(entry[0], entry[1])))
            except ScenarioError as exc:
                raise ScenarioError(f"faults.{entry[0]}: {exc}") from None
        object.__setattr__(self, "kinds", tuple(kinds))
        for o in self.outages:
            if not isinstance(o, Outage) or not 0 <= o.start < o.end:
                raise ScenarioError(f"faults.outages entry {o!r} is invalid; allowed: Outage(nodes, start, end) with "
                                    "0 <= start < end")

    @classmethod
    def from_config(cls, config: dict | None) -> "FaultModel":
        """From a [faults] table (unset keys take their defaults); a key that names a fault kind holds its table, or
        a list of tables for several."""
        config = {k: v for k, v in (config or {}).items() if v is not None}
        unknown = sorted(k for k in config if k not in FAULT_KEYS and fault_kind(k) is None)
        if unknown:
            raise ScenarioError(f"unknown key 'faults.{unknown[0]}'; allowed keys: {', '.join(FAULT_KEYS)}, or a "
                                f"fault kind's table: {', '.join(fault_kinds())}")
        kinds = []
        for key in [k for k in config if k not in FAULT_KEYS]:
            tables = config.pop(key)
            kinds += [(key, t) for t in (tables if isinstance(tables, list) else [tables])]
        return cls(**config, kinds=tuple(kinds))

    def to_config(self) -> dict:
        """The non-default settings, as a [faults] table."""
        out = {}
        default = FaultModel()
        for key in FAULT_KEYS:
            value = getattr(self, key)
            if value != getattr(default, key):
                out[key] = value.to_config() if isinstance(value, Distribution) else (
                    list(value) if isinstance(value, tuple) else value)
        for name, params in self.kinds:
            table = {k: v for k, v in params.items() if v is not None}
            out[name] = [*out[name], table] if isinstance(out.get(name), list) else (
                [out[name], table] if name in out else table)
        return out

    @property
    def is_empty(self) -> bool:
        """True when nothing can go wrong."""
        return not (self.drop or self.duplicate or self.delay or self.crash or self.crash_nodes or self.stragglers
                    or self.straggler_nodes or self.churn_rate or self.outages or self.kinds)

    def check_sync(self) -> None:
        """Raise if a fault needs the gossip scheduler."""
        m = self
        needs: list[str] = []
        if m.delay:
            needs.append("delay (synchronous rounds deliver every message in the next round)")
        if m.stragglers or m.straggler_nodes:
            needs.append("stragglers (synchronous rounds have no clocks)")
        if m.recover_time is not None and not m.recover_state:
            needs.append("recover_state = false (restarting a node calls a gossip program's recover hook)")
        if m.churn_rate and not m.churn_state:
            needs.append("churn_state = false (restarting a node calls a gossip program's recover hook)")
        if any(not o.keep_state for o in m.outages if not math.isinf(o.end)):
            needs.append("outages without state")
        for name, params in m.kinds:
            if fault_kind(name).needs_gossip(params):
                needs.append(f"[faults.{name}] as given (it slows nodes down or restarts them without state)")
        if needs:
            raise ScenarioError("; ".join(needs) + " need the gossip scheduler; allowed with "
                                "synchronous rounds: drop, duplicate, crash/crash_nodes with recover_state = true, "
                                "churn with churn_state = true")

    def bind(self, n_nodes: int, seed: int) -> "FaultPlan":
        """Resolve fractions into node sets and draw the random keys for a run on `n_nodes` nodes
        (`svmsim.fault_plan`, imported here: the model itself needs no compiler)."""
        from .fault_plan import FaultPlan

        return FaultPlan(self, int(n_nodes), int(self.seed if self.seed is not None else seed))


def declared_matches(declared: int | None, metered_scalars: int, faults: dict) -> bool | None:
    """Whether an algorithm's declared count holds under faults: what the programs sent plus the network's duplicates
    equals the delivered plus the dropped scalars (`faults`: a `FaultTally.summary`); None without a declared
    count."""
    if declared is None:
        return None
    duplicated = sum(rec["scalars"] for rec in faults["duplicated"].values())
    return bool(declared + duplicated == metered_scalars + faults["dropped_total"]["scalars"])
