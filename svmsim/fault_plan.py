"""Fault models: lost, duplicated and delayed messages; crashed, restarted, slow and churning nodes.

A `FaultModel` is the configuration (a scenario's ``[faults]`` section, or built in Python); `bind(n_nodes, seed)`
resolves it for one run into a `FaultPlan`: which nodes crash or straggle, the outage timeline, per-node random
keys, and a `FaultTally` of what was lost. Every random decision is counter based (`core.streams`' SplitMix64
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
from functools import cached_property
from typing import Any, Sequence

import numba
import numpy as np

from .comm.message import MessageBatch
from .errors import ScenarioError
from .core.streams import STREAM_CHURN, STREAM_FAULT, counter_uniform, stream_keys
from .core.timing import Distribution, churn_gap, is_number

__all__ = ["FaultModel", "FaultPlan", "FaultTally", "Outage", "FAULT_KEYS", "GOSSIP_ONLY_KEYS", "declared_matches"]

#: the keys of a scenario's [faults] section, in order
FAULT_KEYS = ("drop", "duplicate", "delay", "delay_time", "crash", "crash_nodes", "crash_time", "recover_time",
              "recover_state", "stragglers", "straggler_nodes", "straggler_factor", "churn_rate", "churn_downtime",
              "churn_state", "seed")
#: faults that only the gossip scheduler can apply
GOSSIP_ONLY_KEYS = ("delay", "stragglers", "straggler_nodes")


@dataclass(frozen=True)
class Outage:
    """Nodes that go down at `start` and come back at `end` (inf: never), with or without their state."""

    nodes: tuple
    start: float
    end: float = math.inf
    keep_state: bool = True


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
        for o in self.outages:
            if not isinstance(o, Outage) or not 0 <= o.start < o.end:
                raise ScenarioError(f"faults.outages entry {o!r} is invalid; allowed: Outage(nodes, start, end) with "
                                    "0 <= start < end")

    @classmethod
    def from_config(cls, config: dict | None) -> "FaultModel":
        """From a [faults] table (unset keys take their defaults)."""
        config = {k: v for k, v in (config or {}).items() if v is not None}
        unknown = sorted(set(config) - set(FAULT_KEYS))
        if unknown:
            raise ScenarioError(f"unknown key 'faults.{unknown[0]}'; allowed keys: {', '.join(FAULT_KEYS)}")
        return cls(**config)

    def to_config(self) -> dict:
        """The non-default settings, as a [faults] table."""
        out = {}
        default = FaultModel()
        for key in FAULT_KEYS:
            value = getattr(self, key)
            if value != getattr(default, key):
                out[key] = value.to_config() if isinstance(value, Distribution) else (
                    list(value) if isinstance(value, tuple) else value)
        return out

    @property
    def is_empty(self) -> bool:
        """True when nothing can go wrong."""
        return not (self.drop or self.duplicate or self.delay or self.crash or self.crash_nodes or self.stragglers
                    or self.straggler_nodes or self.churn_rate or self.outages)

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
        if needs:
            raise ScenarioError("; ".join(needs) + " need the gossip scheduler; allowed with "
                                "synchronous rounds: drop, duplicate, crash/crash_nodes with recover_state = true, "
                                "churn with churn_state = true")

    def bind(self, n_nodes: int, seed: int) -> "FaultPlan":
        """Resolve fractions into node sets and draw the random keys for a run on `n_nodes` nodes."""
        return FaultPlan(self, int(n_nodes), int(self.seed if self.seed is not None else seed))


@numba.njit(cache=True)
def _uniforms(keys, counters):
    out = np.empty(keys.shape[0])
    for i in range(keys.shape[0]):
        out[i] = counter_uniform(keys[i], counters[i])
    return out


class FaultTally:
    """What the faults did: messages by (tag, fate, duplicate copy) and node events (time, node, kind)."""

    MAX_EVENTS_LISTED = 1000

    def __init__(self):
        self.by_fate: dict[tuple[str, str, bool], list[int]] = {}
        self.node_event_counts: dict[str, int] = {}
        self.node_events: list[tuple[float, int, str]] = []

    def messages(self, tag: str, fate: str, duplicate: bool, messages: int, scalars: int) -> None:
        rec = self.by_fate.setdefault((tag, fate, bool(duplicate)), [0, 0])
        rec[0] += int(messages)
        rec[1] += int(scalars)

    def node_event(self, time: float, node: int, kind: str) -> None:
        self.node_event_counts[kind] = self.node_event_counts.get(kind, 0) + 1
        if len(self.node_events) < self.MAX_EVENTS_LISTED:
            self.node_events.append((float(time), int(node), kind))

    def fate_table(self, fates: Sequence[str], duplicate: bool | None = None) -> dict:
        """``{fate: {tag: {"messages", "scalars"}}}`` for the given fates (optionally only copies or originals)."""
        out: dict[str, dict] = {}
        for (tag, fate, dup), (m, s) in sorted(self.by_fate.items()):
            if fate in fates and (duplicate is None or dup == duplicate):
                rec = out.setdefault(fate, {}).setdefault(tag, {"messages": 0, "scalars": 0})
                rec["messages"] += m
                rec["scalars"] += s
        return out


class FaultPlan:
    """A `FaultModel` resolved for one run: node sets, the outage timeline, random keys and the tally.

    Attributes read by the schedulers: drop, duplicate, delay, delay_distribution, churn_rate, churn_downtime,
    churn_state, straggler_factors (per node), outages (node, start, end, keep_state) sorted by (start, node),
    fault_keys and churn_keys (one uint64 per node), tally.
    """

    def __init__(self, model: FaultModel, n_nodes: int, seed: int):
        self.model = model
        self.n_nodes = n = n_nodes
        self.seed = seed
        for key in ("crash_nodes", "straggler_nodes"):
            bad = [v for v in getattr(model, key) if v >= n]
            if bad:
                raise ScenarioError(f"faults.{key} contains node {bad[0]}, but the topology has {n} nodes; allowed: "
                                    f"node ids 0..{n - 1}")
        self.drop, self.duplicate, self.delay = float(model.drop), float(model.duplicate), float(model.delay)
        self.delay_distribution = model.delay_time
        self.churn_rate, self.churn_downtime = float(model.churn_rate), float(model.churn_downtime)
        self.churn_state = bool(model.churn_state)
        self.crashed_nodes = self._choose(model.crash_nodes, model.crash, 1)
        self.straggler_nodes = self._choose(model.straggler_nodes, model.stragglers, 2)
        end = math.inf if model.recover_time is None else float(model.recover_time)
        outages = [(int(v), float(model.crash_time), end, bool(model.recover_state)) for v in self.crashed_nodes]
        for o in model.outages:
            for v in o.nodes:
                if not 0 <= int(v) < n:
                    raise ScenarioError(f"faults.outages names node {v}, but the topology has {n} nodes")
                outages.append((int(v), float(o.start), float(o.end), bool(o.keep_state)))
        self.outages = sorted(outages, key=lambda o: (o[1], o[0]))
        self.tally = FaultTally()
        # synchronous rounds' state: the per-node arrays are made at the first batch (`_start_rounds`), as a gossip
        # run reads none of them (nor `fault_keys` and `churn_keys`: its host keeps its own copy, `node_keys`)
        self._sent = self._outage_down = self._churn_down = self._churn_count = None
        self._mask_round = None  # pragma: no mutate (equivalent: no round equals "" either)
        self._mask = None  # pragma: no mutate (equivalent: read only once set)
        self._churn_next = None

    @property
    def straggler_factors(self) -> np.ndarray:
        """Each node's clock slow-down: straggler_factor for the stragglers, 1 for the rest (made when read)."""
        factors = np.ones(self.n_nodes)
        factors[self.straggler_nodes] = float(self.model.straggler_factor)
        return factors

    def node_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """(fault keys, churn keys): one uint64 per node each, made for the caller (a gossip host copies them into
        its own key table)."""
        return stream_keys(self.seed, STREAM_FAULT, self.n_nodes), stream_keys(self.seed, STREAM_CHURN, self.n_nodes)

    @cached_property
    def fault_keys(self) -> np.ndarray:
        """One uint64 per node, the key of its message faults' draws (made at the first read, then kept)."""
        return self.node_keys()[0]

    @cached_property
    def churn_keys(self) -> np.ndarray:
        """One uint64 per node, the key of its churn's draws (made at the first read, then kept)."""
        return self.node_keys()[1]

    def _start_rounds(self) -> None:
        """Make the synchronous rounds' per-node state, once."""
        if self._sent is not None:
            return
        n = self.n_nodes
        # pragma: no mutate start (equivalent: float counters draw the same uniforms; the outage mask is compared
        # to a bool mask, then replaced; float counts draw the same gaps)
        self._sent = np.zeros(n, dtype=np.int64)
        self._outage_down = np.zeros(n, dtype=bool)
        self._churn_down = np.zeros(n, dtype=bool)
        self._churn_count = np.zeros(n, dtype=np.int64)
        # pragma: no mutate end

    def _choose(self, nodes: Sequence[int], fraction: float, stream: int) -> np.ndarray:
        if nodes:
            return np.array(sorted(set(nodes)), dtype=np.int64)  # pragma: no mutate (equivalent: int64 is the default)
        if not fraction:
            return np.zeros(0, dtype=np.int64)
        k = max(1, int(round(fraction * self.n_nodes)))
        rng = np.random.default_rng([self.seed, 0xFA17, stream])
        # pragma: no mutate start (equivalent: replace=None reads as False)
        return np.sort(rng.choice(self.n_nodes, size=k, replace=False)).astype(np.int64)
        # pragma: no mutate end

    @property
    def is_empty(self) -> bool:
        return self.model.is_empty

    # -- scheduler checks -----------------------------------------------------------------------------------------
    def check_sync(self) -> None:
        """Raise if a fault needs the gossip scheduler (see `FaultModel.check_sync`)."""
        self.model.check_sync()

    # -- synchronous rounds -----------------------------------------------------------------------------------------
    def _down_in_round(self, round_: int) -> np.ndarray | None:
        """Nodes down in this round (None when no node ever goes down); logs transitions in the tally."""
        if not self.outages and not self.churn_rate:
            return None
        if self._mask_round == round_:
            return self._mask
        t = float(round_)
        outage = np.zeros(self.n_nodes, dtype=bool)
        for node, start, end, _ in self.outages:
            if start <= t < end:
                outage[node] = True
        for node in np.flatnonzero(outage != self._outage_down):
            self.tally.node_event(t, int(node), "crash" if outage[node] else "recover")
        self._outage_down = outage
        if self.churn_rate:
            if self._churn_next is None:
                # pragma: no mutate start (equivalent: counter 0 draws an up-time, which ignores the downtime)
                self._churn_next = np.array([churn_gap(self.churn_rate, self.churn_downtime, k, 0)
                                             for k in self.churn_keys])
                # pragma: no mutate end
            for node in np.flatnonzero(self._churn_next <= t):
                while self._churn_next[node] <= t:
                    c = self._churn_count[node]
                    if self._churn_down[node]:                       # join; next up-time has counter 2c+2
                        self._churn_count[node] = c + 1
                        # pragma: no mutate start (equivalent: an up-time ignores downtime)
                        gap = churn_gap(self.churn_rate, self.churn_downtime, self.churn_keys[node], 2 * c + 2)
                        # pragma: no mutate end
                    else:                                            # leave; down-time has counter 2c+1
                        gap = churn_gap(self.churn_rate, self.churn_downtime, self.churn_keys[node], 2 * c + 1)
                    self.tally.node_event(float(self._churn_next[node]), int(node),
                                          "join" if self._churn_down[node] else "leave")
                    self._churn_down[node] = not self._churn_down[node]
                    self._churn_next[node] += gap
        self._mask_round = round_  # pragma: no mutate (equivalent: only a cache)
        self._mask = outage | self._churn_down
        return self._mask

    def apply(self, round_: int, batch: MessageBatch) -> tuple[MessageBatch, MessageBatch | None]:
        """Synchronous rounds: split one batch sent in `round_` into (delivered, dropped) messages."""
        m = batch.n_messages
        if m == 0:
            return batch, None
        src = np.asarray(batch.src, dtype=np.int64)
        dst = np.asarray(batch.dst, dtype=np.int64)
        self._start_rounds()
        down = self._down_in_round(round_)
        dead_sender = down[src] if down is not None else np.zeros(m, dtype=bool)
        dead_receiver = (down[dst] & ~dead_sender) if down is not None else np.zeros(m, dtype=bool)
        lost = np.zeros(m, dtype=bool)
        duplicated = np.zeros(m, dtype=bool)
        if self.drop or self.duplicate:
            counters = self._sender_counters(src)
            keys = self.fault_keys[src]
            if self.drop:
                lost = (_uniforms(keys, counters * 8) < self.drop) & ~dead_sender
            if self.duplicate:
                duplicated = _uniforms(keys, counters * 8 + 1) < self.duplicate
        dead_receiver &= ~lost
        dropped = dead_sender | lost | dead_receiver
        duplicated &= ~dropped
        spm = batch.scalars_per_message
        for fate, mask in (("dead_sender", dead_sender), ("lost", lost), ("dead_receiver", dead_receiver)):
            k = int(mask.sum())
            if k:
                # pragma: no mutate start (equivalent: the tally stores bool(duplicate))
                self.tally.messages(batch.tag, fate, False, k, k * spm)
                # pragma: no mutate end
        k_dup = int(duplicated.sum())
        if k_dup:
            self.tally.messages(batch.tag, "delivered", True, k_dup, k_dup * spm)
        if not dropped.any() and not k_dup:
            return batch, None
        keep = np.flatnonzero(~dropped)
        if k_dup:
            keep = np.repeat(keep, 1 + duplicated[keep])
        payload = batch.payload if batch.is_broadcast else batch.payload[keep]
        delivered = MessageBatch(batch.tag, src[keep], dst[keep], payload)
        return delivered, (batch.select(dropped) if dropped.any() else None)

    def _sender_counters(self, src: np.ndarray) -> np.ndarray:
        """Index of each message among everything its sender has sent (the counter of its random draws)."""
        m = src.shape[0]
        order = np.argsort(src, kind="stable")  # pragma: no mutate (equivalent: sort kinds ignore case)
        s = src[order]
        starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
        rank_sorted = np.arange(m) - np.repeat(starts, np.diff(np.concatenate([starts, [m]])))
        rank = np.empty(m, dtype=np.int64)  # pragma: no mutate (equivalent: float ranks draw the same uniforms)
        rank[order] = rank_sorted
        counters = self._sent[src] + rank
        self._sent += np.bincount(src, minlength=self.n_nodes)
        return counters

    # -- reporting ----------------------------------------------------------------------------------------------------
    def summary(self, delayed: int | None = None, down_now: Sequence[int] | None = None) -> dict:
        """What was lost and what happened to the nodes, for the run summary."""
        tally = self.tally
        dropped = tally.fate_table(("lost", "dead_receiver", "dead_sender"))
        total = [0, 0]
        for per_tag in dropped.values():
            for rec in per_tag.values():
                total[0] += rec["messages"]
                total[1] += rec["scalars"]
        duplicated = tally.fate_table(("delivered", "dead_receiver", "in_flight_at_end"), duplicate=True)
        dup_by_tag: dict[str, dict] = {}
        for per_tag in duplicated.values():
            for tag, rec in per_tag.items():
                agg = dup_by_tag.setdefault(tag, {"messages": 0, "scalars": 0})
                agg["messages"] += rec["messages"]
                agg["scalars"] += rec["scalars"]
        out = {"model": self.model.to_config(), "seed": self.seed,
               "dropped": dropped, "dropped_total": {"messages": total[0], "scalars": total[1]},
               "duplicated": dup_by_tag,
               "in_flight_at_end": tally.fate_table(("in_flight_at_end",)).get("in_flight_at_end", {}),
               "crashed_nodes": [int(v) for v in self.crashed_nodes],
               "permanent_crashes": sorted({o[0] for o in self.outages if math.isinf(o[2])}),
               "stragglers": [int(v) for v in self.straggler_nodes],
               "node_events": dict(sorted(tally.node_event_counts.items())),
               "node_event_log": [list(e) for e in tally.node_events]}
        if delayed is not None:
            out["delayed_messages"] = int(delayed)
        if down_now is not None:
            out["down_at_end"] = [int(v) for v in down_now]
        return out


def declared_matches(declared: int | None, metered_scalars: int, faults: dict) -> bool | None:
    """Whether an algorithm's declared count holds under faults: what the programs sent plus the network's duplicates
    equals the delivered plus the dropped scalars (`faults`: a `FaultTally.summary`); None without a declared
    count."""
    if declared is None:
        return None
    duplicated = sum(rec["scalars"] for rec in faults["duplicated"].values())
    return bool(declared + duplicated == metered_scalars + faults["dropped_total"]["scalars"])
