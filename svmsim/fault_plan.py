"""A `svmsim.faults.FaultModel` resolved for one run (`FaultModel.bind`): which nodes crash or straggle, the outage
timeline, per-node random keys (`core.streams`), the synchronous rounds' `FaultPlan.apply`, and the `FaultTally` of
what the faults did. The model, the [faults] settings, is declared in `svmsim.faults` (no compiler there, so that
validating a scenario stays light); see its docstring for what each fault does.
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import Sequence

import numba
import numpy as np

from .comm.message import MessageBatch
from .errors import ScenarioError
from .core.fault_kinds import FaultEffects, Outage, fault_kind, kind_rng
from .core.streams import STREAM_CHURN, STREAM_FAULT, counter_uniform, stream_keys
from .core.timing import churn_gap, is_number

__all__ = ["FaultPlan", "FaultTally"]


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

    def __init__(self, model, n_nodes: int, seed: int):  # model: a svmsim.faults.FaultModel
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
        self.slowdown: dict[int, float] = {}      # node -> the fault kinds' slow-down (no per-node array until read)
        self.kind_effects = [(name, params, self._effects(name, params, index))
                             for index, (name, params) in enumerate(model.kinds)]
        for _, _, effects in self.kind_effects:
            outages += [(int(v), float(o.start), float(o.end), bool(o.keep_state))
                        for o in effects.outages for v in o.nodes]
            for node, factor in effects.slowdown.items():
                self.slowdown[int(node)] = self.slowdown.get(int(node), 1.0) * float(factor)
        self.outages = sorted(outages, key=lambda o: (o[1], o[0]))
        self.tally = FaultTally()
        # synchronous rounds' state: the per-node arrays are made at the first batch (`_start_rounds`), as a gossip
        # run reads none of them (nor `fault_keys` and `churn_keys`: its host keeps its own copy, `node_keys`)
        self._sent = self._outage_down = self._churn_down = self._churn_count = None
        self._mask_round = None  # pragma: no mutate (equivalent: no round equals "" either)
        self._mask = None  # pragma: no mutate (equivalent: read only once set)
        self._churn_next = None

    def _effects(self, name: str, params: dict, index: int) -> FaultEffects:
        """Run fault kind `name`'s schedule for this run and check what it returns."""
        n = self.n_nodes
        where = f"faults.{name}"
        effects = fault_kind(name).schedule(n, kind_rng(self.seed, name, index), **params)
        if not isinstance(effects, FaultEffects):
            raise ScenarioError(f"{where}: the fault kind's schedule returned {type(effects).__name__}; allowed: "
                                "FaultEffects(outages=..., slowdown=...)")
        for o in effects.outages:
            if not isinstance(o, Outage) or not (is_number(o.start) and is_number(o.end) and 0 <= o.start < o.end):
                raise ScenarioError(f"{where}: outage {o!r} is invalid; allowed: Outage(nodes, start, end) with "
                                    "0 <= start < end")
        nodes = [v for o in effects.outages for v in o.nodes] + list(effects.slowdown)
        bad = [v for v in nodes if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < n]
        if bad:
            raise ScenarioError(f"{where} names node {bad[0]!r}, but the topology has {n} nodes; allowed: node ids "
                                f"0..{n - 1}")
        slow = [f for f in effects.slowdown.values() if not (is_number(f) and 1 <= float(f) < math.inf)]
        if slow:
            raise ScenarioError(f"{where}: slow-down factor {slow[0]!r} is invalid; allowed: a number >= 1")
        return effects

    @property
    def straggler_factors(self) -> np.ndarray:
        """Each node's clock slow-down: straggler_factor for the stragglers times the fault kinds' slow-downs, 1 for
        the rest (made when read)."""
        factors = np.ones(self.n_nodes)
        factors[list(self.slowdown)] = list(self.slowdown.values())
        factors[self.straggler_nodes] *= float(self.model.straggler_factor)
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
        delivered = MessageBatch(batch.tag, src[keep], dst[keep], payload, batch.wire_bytes)
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
               "crashed_nodes": sorted({int(v) for v in self.crashed_nodes}
                                       | {int(v) for _, _, e in self.kind_effects for o in e.outages for v in o.nodes}),
               "permanent_crashes": sorted({o[0] for o in self.outages if math.isinf(o[2])}),
               "stragglers": [int(v) for v in self.straggler_nodes],
               "node_events": dict(sorted(tally.node_event_counts.items())),
               "node_event_log": [list(e) for e in tally.node_events]}
        if self.kind_effects:
            out["fault_kinds"] = [
                {"kind": name, "params": {k: v for k, v in params.items() if v is not None},
                 "down": [[list(map(int, o.nodes)), float(o.start), None if math.isinf(o.end) else float(o.end)]
                          for o in e.outages],
                 "slowdown": {str(int(k)): float(f) for k, f in sorted(e.slowdown.items())}}
                for name, params, e in self.kind_effects]
        if delayed is not None:
            out["delayed_messages"] = int(delayed)
        if down_now is not None:
            out["down_at_end"] = [int(v) for v in down_now]
        return out
