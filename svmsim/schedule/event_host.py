"""One host of the gossip event loop: the nodes it owns, their heap, their messages and what they cost.

An `EventHost` runs the events of the nodes that ``owner[node] == me`` gives it, through the compiled loop of
`event_kernels` when its program offers a `GossipKernel`, or through `_run_python`, the same loop written with
the programs' Python ``wake``/``receive`` methods (statement for statement the compiled loop, so both give the same
run). Where a message goes is the only thing that differs between engines: a message to a node of this host goes
on its heap; a message to another host's node waits in an outgoing buffer (`take_outgoing`) with its arrival
time, and the engine hands it to that host (`put_incoming`). The in-process engine runs one host that owns every
node; the Ray engine runs one per actor.

Metering. Every message is metered exactly once, when its fate is known, in the meter's round of its **send** time
(``floor(send_time / round_time)``): lost in the network (by the sender, at the send time), dropped at a receiver
that is down, or delivered (by the receiver); messages still held at the end are metered as delivered traffic and
listed as in flight at the end. Records are buffered and handed to the meter in batches of one kind and one round.
"""
from __future__ import annotations

import heapq
import itertools
import math
import warnings
from array import array

import numpy as np
from numba.core.errors import NumbaExperimentalFeatureWarning

from ..comm.message import MessageBatch, frozen_ids
from ..comm.meter import Meter
from ..core.streams import STREAM_CLOCK, STREAM_EDGE, STREAM_LATENCY, stream_keys
from ..core.timing import Clock, LatencyModel
from ..errors import ProtocolError, ScenarioError
from ..program import GossipProgram
from . import event_kernels as EK
from .event_kernels import (ARRIVAL, CAUSE_DEAD_RECEIVER, CAUSE_DELIVERED, CAUSE_IN_FLIGHT, CAUSE_LOST,
                            CAUSE_NAMES, CLOCK, COUNTERS, DROPPED_CAUSES, EVENT, FATE, HEAP_KEY, LIMITS, MODEL,
                            NO_LIMIT, NODE_CRASH, NODE_EVENT, NODE_EVENT_NAMES, NODE_JOIN, NODE_KEYS, NODE_LEAVE,
                            NODE_RECOVER, NODE_STATE, NODE_WORK, OUTGOING, P_CRASH, P_DELIVER, P_JOIN, P_LEAVE, P_RECOVER,
                            P_WAKE, POOL_ENTRY, ST_DONE, ST_DONE_CHANGE, ST_EVAL_MSG, ST_EVAL_TIME, ST_MESSAGES,
                            ST_QUIESCENT, ST_SCALARS, ST_TIME, ST_XFLUSH, ST_YIELD, churn_duration, next_tick,
                            send_fate)

__all__ = ["GossipSetting", "EventHost", "register_kind", "grow_pool"]

UNREAD_FLAG = 0    # the flag of a leave or join event, which the loop does not read


class GossipSetting:
    """The virtual-time model of one run, in the records the loop reads: clocks, the alpha-beta latency model, the
    fault plan and the meter's round length (`model`, one `event_kernels.MODEL` record), the seed's random keys per
    node and stream (`keys`, one `NODE_KEYS` record per node)."""

    def __init__(self, n_nodes: int, clock: Clock, latency: LatencyModel, plan, seed: int, round_time: float):
        n = self.n_nodes = int(n_nodes)
        self.clock, self.latency, self.plan = clock, latency, plan
        self.seed, self.round_time = int(seed), float(round_time)
        lat = latency.distribution
        delay = plan.delay_distribution
        model = np.zeros(1, MODEL)
        model["jitter"] = clock.jitter
        model["drop"] = plan.drop
        model["duplicate"] = plan.duplicate
        model["delay"] = plan.delay
        model["latency_a"], model["latency_b"] = lat.a, lat.b
        if delay is not None:                   # else delay = 0, and the loop reads no delay parameter
            model["delay_a"], model["delay_b"] = delay.a, delay.b
            model["delay_code"] = delay.code
        model["bandwidth"] = latency.bandwidth if latency.bandwidth is not None else math.inf
        model["edge_spread"] = latency.edge_spread
        model["round_time"] = self.round_time
        model["churn_rate"] = plan.churn_rate
        model["churn_downtime"] = plan.churn_downtime
        model["periodic"] = clock.kind == "periodic"
        model["latency_code"] = lat.code
        model["nodes"] = n
        model["churn_keeps_state"] = plan.churn_state
        keys = np.empty(n, NODE_KEYS)
        keys["clock"] = stream_keys(self.seed, STREAM_CLOCK, n)
        keys["latency"] = stream_keys(self.seed, STREAM_LATENCY, n)
        keys["fault"], keys["churn"] = plan.node_keys()
        self.model, self.keys = model, keys
        # pragma: no mutate start (equivalent: a stream's first key does not depend on how many are drawn)
        self.edge_key = stream_keys(self.seed, STREAM_EDGE, 1)[0]
        # pragma: no mutate end
        self.rates = clock.rate / plan.straggler_factors

    def initial_events(self, owned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Events pushed before the run, in push order (explicit crashes, their recoveries, the first churn
        departures, the first clock ticks), of the nodes where `owned` is True: (times, `EVENT` records), every
        node's in one compiled pass (`first_events`)."""
        plan = self.plan
        lead = [(start, P_CRASH, node, 1 if math.isinf(end) else 0) for node, start, end, keep in plan.outages]
        lead += [(end, P_RECOVER, node, 1 if keep else 0) for node, start, end, keep in plan.outages
                 if not math.isinf(end)]
        ticks, leaves = EK.first_events(self.model, self.keys, self.rates, plan.churn_rate > 0)
        # pragma: no mutate start (equivalent: a list of floats, or none, makes float64)
        times = np.concatenate([np.array([e[0] for e in lead], dtype=np.float64), leaves, ticks])
        # pragma: no mutate end
        events = np.concatenate([np.array([e[1:] for e in lead], dtype=EVENT),
                                 _every_node(P_LEAVE, UNREAD_FLAG, leaves.size), _every_node(P_WAKE, 0, ticks.size)])
        keep = owned[events["node"]]
        return times[keep], events[keep]


def _every_node(prio: int, flag: int, count: int) -> np.ndarray:
    """`EVENT` records of one kind for nodes 0..count-1."""
    events = np.empty(count, EVENT)
    events["prio"] = prio
    events["node"] = np.arange(count)
    events["flag"] = flag
    return events


def fates(bins, src, dst, code) -> np.ndarray:
    """`FATE` records from their columns."""
    out = np.empty(len(code), FATE)
    out["bin"], out["src"], out["dst"], out["code"] = bins, src, dst, code
    return out


def register_kind(kinds: list, kind_ids: dict, tag: str, spm: int, dtype) -> int:
    """The id of a message kind (tag, scalars per message, dtype) in a loop's kind table, added if new."""
    dtype = np.dtype(dtype)
    key = (tag, spm, dtype.str)
    kid = kind_ids.get(key)
    if kid is None:
        kid = kind_ids[key] = len(kinds)
        kinds.append((tag, spm, dtype))
    return kid


def grow_pool(mi, mp, free, ctr, ht, hk):
    """Double a compiled loop's message pool (`POOL_ENTRY` records mi, payloads mp, free list) and grow its heap
    (times ht, `HEAP_KEY` records hk) to match; the counters' `free` is updated. Returns the new (mi, mp, free, ht,
    hk)."""
    pool = mi.shape[0]
    new_mi = np.empty(2 * pool, POOL_ENTRY)
    new_mi[:pool] = mi
    new_mp = np.empty((2 * pool, mp.shape[1]))
    new_mp[:pool] = mp
    new_free = np.empty(2 * pool, dtype=np.int64)  # pragma: no mutate (equivalent: a larger list holds the same)
    nf = int(ctr[0]["free"])
    new_free[:nf] = free[:nf]
    # pragma: no mutate start (equivalent: nf <= pool, so nf - pool wraps to nf + pool in a list of 2 * pool)
    new_free[nf:nf + pool] = np.arange(2 * pool - 1, pool - 1, -1)
    # pragma: no mutate end
    ctr["free"] = nf + pool
    cap = ht.shape[0]
    new_ht = np.empty(cap + 2 * pool)
    new_hk = np.empty(cap + 2 * pool, HEAP_KEY)
    new_ht[:cap] = ht
    new_hk[:cap] = hk
    return new_mi, new_mp, new_free, new_ht, new_hk


def _program_sends(batches, sender: int, kind_id):
    """Every message of a Python program's outbox batches as (kind, scalars, bytes, src, dst, payload row), in
    order. A message must come from `sender`, the node whose event is being handled (ProtocolError otherwise)."""
    for batch in batches:
        src_ids = batch.src.tolist()
        dst_ids = batch.dst.tolist()
        m = len(src_ids)
        payload = batch.payload
        if payload.shape[0] != m:                       # a broadcast: each message carries its own copy of the row
            payload = np.repeat(payload.reshape(1, payload.size), m, axis=0)
        elif payload.ndim != 2:  # pragma: no mutate (equivalent: a row per message reshapes to itself)
            payload = payload.reshape(m, payload.size // max(m, 1))
        spm = payload.shape[1]
        nbytes = spm * payload.dtype.itemsize if batch.wire_bytes is None else batch.wire_bytes
        kind = kind_id(batch.tag, spm, payload.dtype)
        for i in range(m):
            s = src_ids[i]
            if s != sender:
                raise ProtocolError(f"message with tag {batch.tag!r} claims to come from node {s}, but the event "
                                    f"being handled is node {sender}'s; a gossip program sends only from the node "
                                    "that woke or received")
            yield kind, spm, nbytes, s, dst_ids[i], payload[i:i + 1]


class EventHost:
    """The event loop of the nodes ``owner == me`` (see the module docstring).

    programs / states: gid -> program and its state for the groups this host runs (`states` is updated in place,
        so the engine that owns it observes the current states). node_group: gid of every node (-1 if not here).
    setting: the run's `GossipSetting`; adj_ptr / adj: the topology's sorted neighbour lists (CSR).
    meter: where this host's messages are metered; its fault tally is ``setting.plan.tally``.
    compiled: True to require the compiled loop, False for the Python loop, None to use the compiled loop when the
        host runs one group whose program has a `GossipKernel`.
    xbatch_bytes: hand back to the engine once about this many bytes wait for other hosts (None: never).
    compression: a `comm.compression.Compressor` that encodes every message a program here sends (before the
        network's fate; its receivers read the decoded rows, the meter counts the encoding's bytes), or None. The
        compiled loop encodes with the built-in codecs' kernels (`Compressor.compiled_plans`), the error feedback's
        state in a row per edge; a codec without a compiled form, or a kernel that may send several messages per
        event (a broadcast is one encoding), leaves the host to the Python loop, and `python_reason` says why.
    """

    def __init__(self, programs: dict[int, GossipProgram], states, node_group: np.ndarray, owner: np.ndarray,
                 me: int, setting: GossipSetting, adj_ptr: np.ndarray, adj: np.ndarray, meter: Meter, *,
                 compiled: bool | None = None, xbatch_bytes: int | None = None,
                 yield_every: int = 4096, compression=None):  # pragma: no mutate (equivalent: where a slice hands back; same run)
        self.programs, self.states = programs, states
        # pragma: no mutate start (equivalent: the engines pass int64 arrays)
        self.node_group = np.asarray(node_group, dtype=np.int64)
        self.owner = np.ascontiguousarray(owner, dtype=np.int64)
        # pragma: no mutate end
        self.me = int(me)
        self.setting = setting
        self.plan = setting.plan
        self.n_nodes = setting.n_nodes
        self.round_time = setting.round_time
        self.adj_ptr, self.adj = adj_ptr, adj
        self.meter = meter
        owned = self.owner == self.me
        self.local = np.flatnonzero(owned)  # pragma: no mutate (read by Ray hosts only: test_ray_gossip.py)
        self._kinds: list[tuple[str, int, np.dtype]] = []
        self._kind_ids: dict[tuple, int] = {}
        self._stub_payloads: dict[int, np.ndarray] = {}
        self.compression = compression
        self.kernel = None
        self.python_reason: str | None = None     # why a host that encodes runs the Python loop
        self._codec_plans = None
        if compiled is not False and len(programs) == 1:
            gid = next(iter(programs))
            self.kernel = programs[gid].kernel(states[gid])
            if self.kernel is not None and compression is not None:
                self._codec_plans, self.python_reason = self._plans_for(self.kernel, compression)
                if self._codec_plans is None:
                    if compiled:
                        raise ScenarioError(f"compiled = true: the compiled gossip loop cannot encode this run's "
                                            f"messages: {self.python_reason}; allowed: compiled = false (or auto)")
                    self.kernel = None
        if compiled and self.kernel is None:
            raise ScenarioError("compiled = true needs a single group per host whose program provides a "
                                "GossipKernel; allowed: compiled = false")
        self.compiled = self.kernel is not None
        self.draining = False  # pragma: no mutate (equivalent: None is as false)
        self.return_on_done = xbatch_bytes is None    # a host among several leaves `done` to its engine
        # ... and, in time windows, hands back whenever its `done` changes
        self.pause_on_done = False  # pragma: no mutate (equivalent: only windows act on the pause, and set it)
        self.max_messages = self.max_scalars = self.next_eval_msg = NO_LIMIT
        self.next_eval = math.inf
        events = setting.initial_events(owned)
        pool = 4 * int(self.local.size) + 64  # pragma: no mutate (equivalent: the pool's first size; grow() doubles it)
        if self.compiled:
            self._init_compiled(events, pool, xbatch_bytes)
        else:
            self._init_python(events, xbatch_bytes, yield_every)

    # -- set-up -------------------------------------------------------------------------------------------------
    def kind_id(self, tag: str, spm: int, dtype) -> int:
        return register_kind(self._kinds, self._kind_ids, tag, spm, dtype)

    @staticmethod
    def _plans_for(kernel, compression) -> tuple[np.ndarray | None, str | None]:
        """The kernel's message kinds' `CODEC_PLAN` records, or (None, why the compiled loop cannot encode them)."""
        if kernel.max_out > 1:
            return None, (f"the program's kernel may send {kernel.max_out} messages per event, and a broadcast is one "
                          "encoding, which only the Python loop groups")
        return compression.compiled_plans(kernel.tags, kernel.widths)

    def _init_codec(self, k) -> None:
        """The compiled loop's encoding arrays: plans, error-feedback state (a row per kind that keeps one and edge
        of the topology; zero pages until written), uniforms drawn per kind and sender, messages encoded per kind,
        scratch."""
        plans = self._codec_plans
        width = int(self._widths.max())
        if plans is None:
            plans = np.zeros(len(k.tags), EK.CODEC_PLAN)
            plans["code"] = plans["state"] = -1
            plans["nbytes"] = 8 * self._widths
            n_state, edges, nodes = 1, 1, 1
            keys = np.zeros(1, dtype=np.uint64)
        else:
            n_state = max(1, int((plans["state"] >= 0).sum()))
            edges, nodes = max(1, int(self.adj.shape[0])), self.n_nodes
            keys = self.compression.stream_keys()
        self._codec = plans
        self._tag_bytes = np.ascontiguousarray(plans["nbytes"], dtype=np.int64)
        # pragma: no mutate start (equivalent: sizes of zeroed buffers that only grow what is read)
        self._codec_state = np.zeros((n_state, edges if self._codec_plans is not None else 1, width))
        self._codec_keys = keys
        self._codec_drawn = np.zeros((len(k.tags), nodes), dtype=np.int64)
        self._codec_sent = np.zeros(len(k.tags), dtype=np.int64)
        self._codec_counted = np.zeros(len(k.tags), dtype=np.int64)
        self._codec_buf = np.zeros((3, width))
        self._codec_idx = np.zeros(width, dtype=np.int64)
        # pragma: no mutate end

    def _count_encoded(self) -> None:
        """Hand what the compiled loop encoded since the last slice to the host's `Compressor`."""
        if self._codec_plans is None:
            return
        new = self._codec_sent - self._codec_counted
        if new.any():
            self.compression.count_compiled(self.kernel.tags, self._widths, new)
            self._codec_counted[:] = self._codec_sent

    def _init_compiled(self, events, pool: int, xbatch_bytes: int | None) -> None:
        k = self.kernel
        self._loop = EK.loop_for(k, remote=xbatch_bytes is not None, encoding=self._codec_plans is not None)
        self._loop_compiled = False  # pragma: no mutate (equivalent for every result: see advance)
        self._widths = np.asarray(k.widths, dtype=np.int64)  # pragma: no mutate (equivalent: widths are ints)
        for tag, w in zip(k.tags, self._widths):
            self.kind_id(tag, int(w), np.float64)  # pragma: no mutate (equivalent: np.dtype(None) is float64)
        self._tag_ids = {tag: i for i, tag in enumerate(k.tags)}
        self._init_codec(k)
        width = int(self._widths.max())
        # pragma: no mutate start (equivalent: buffer capacities, dtypes and the free slots' order; any larger buffer
        # and any slot order give the same run, grow() enlarges what fills up, numba compiles the loop for any dtype)
        times, initial = events
        cap = times.shape[0] + pool + 2 * k.max_out + 16
        self._ctr = np.zeros(1, COUNTERS)
        self._ni = np.zeros(self.n_nodes, NODE_STATE)
        self._ht, self._hk = np.empty(cap), np.empty(cap, HEAP_KEY)
        self._mi, self._mp = np.empty(pool, POOL_ENTRY), np.empty((pool, width))
        self._free = np.arange(pool, dtype=np.int64)[::-1].copy()
        self._rec = np.empty(65536, FATE)
        self._log_t, self._log_i = np.empty(4096), np.empty(4096, NODE_EVENT)
        self._fc = np.zeros(1, CLOCK)
        self._lim = np.zeros(1, LIMITS)
        self._out_dst = np.zeros(k.max_out, dtype=np.int64)
        self._out_tag = np.zeros(k.max_out, dtype=np.int64)
        self._out_pay = np.zeros((k.max_out, width))
        self._quantities = tuple(k.quantities)
        counts = np.zeros((0, self.n_nodes), dtype=np.int64) if k.counts is None else k.counts
        if (not isinstance(counts, np.ndarray) or counts.dtype != np.int64
                or counts.shape != (len(self._quantities), self.n_nodes)):
            raise ScenarioError(f"GossipKernel.counts must be an int64 array of shape (len(quantities), nodes) = "
                                f"({len(self._quantities)}, {self.n_nodes}); got "
                                f"{getattr(counts, 'dtype', type(counts).__name__)} {getattr(counts, 'shape', '')}")
        self._node_counts, self._seen = counts, counts.copy()
        self._work = np.empty(4096, NODE_WORK)
        # hand-back sizes: a batch for other hosts, a slice (the run is the same for any; tests/test_schedule_exact.py)
        xbatch = NO_LIMIT if xbatch_bytes is None else max(1, int(xbatch_bytes) // (8 * (6 + width)))
        rows = (0 if xbatch_bytes is None else xbatch) + 2 * k.max_out + 8
        self._xi = np.empty(rows, OUTGOING)
        self._xt, self._xp = np.empty(rows), np.empty((rows, width))
        self._lim["xbatch"] = xbatch
        self._lim["yield_every"] = 1 << 17 if xbatch_bytes is None else 4096
        # pragma: no mutate end
        self._ctr["free"] = pool
        self._ni["ticks"] = 1
        EK.push_events(self._ht, self._hk, self._ctr, times, initial)

    def _init_python(self, events, xbatch_bytes: int | None, yield_every: int) -> None:
        n = self.n_nodes
        self._heap: list[tuple] = []
        self._seq = itertools.count()    # heap entries that tie on (time, priority) pop in push order
        self._ni_py = np.zeros(n, NODE_STATE)
        self._ni_py["ticks"] = 1
        times, rows = events
        for t, (prio, a, b) in zip(times.tolist(), rows.tolist()):
            heapq.heappush(self._heap, (t, prio, next(self._seq), a, b))
        self._rec_py = array("q")  # pragma: no mutate (equivalent: records are never negative: q or Q alike)
        self._log: list[tuple[float, int, int]] = []
        self._work_py: list[tuple[int, int, str, object]] = []    # (round, node, quantity, amount)
        self._counts = {"wakes": 0, "sent": 0, "sent_scalars": 0, "events": 0, "delayed": 0, "late": 0}
        self._lateness = 0.0
        self._now = 0.0
        self._group_done = {gid: False for gid in self.programs}
        self._done_py = False
        self._one_ids = [frozen_ids([i]) for i in range(n)]
        self._adj_sets = [set(self.adj[self.adj_ptr[i]:self.adj_ptr[i + 1]].tolist()) for i in range(n)]
        self._xout: list[tuple] = []
        self._owner_list = self.owner.tolist()
        self._xbatch = NO_LIMIT if xbatch_bytes is None else max(1, int(xbatch_bytes) // 900)
        self._yield_every = yield_every if xbatch_bytes is None else 1024

    def warm_up(self) -> None:  # pragma: no mutate block (runs only in Ray actors; held by tests/test_ray_gossip.py)
        """Compile the loop now (a slice that handles nothing), so that the run's first slice does not."""
        if self.compiled:
            self._fc["max_time"] = -math.inf
            self.advance(-math.inf)

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """This host's virtual time: the time of the last event it handled."""
        return float(self._fc[0]["now"]) if self.compiled else self._now

    def set_now(self, t: float) -> None:
        if self.compiled:
            self._fc["now"] = max(self._fc[0]["now"], t)
        else:
            self._now = max(self._now, t)

    def heap_top(self) -> float:
        if self.compiled:
            return float(self._ht[0]) if self._ctr[0]["heap"] > 0 else math.inf
        return self._heap[0][0] if self._heap else math.inf

    @property
    def done(self) -> bool:
        return bool(self._ctr[0]["done"]) if self.compiled else self._done_py

    def counters(self) -> dict:
        """Clock ticks handled, events handled, messages and scalars sent, delayed copies, late arrivals (count and
        summed lateness), and whether every program here said it is done."""
        if self.compiled:
            c = self._ctr[0]
            out = {k: int(c[k]) for k in ("wakes", "events", "sent", "sent_scalars", "delayed", "late")}
            out.update(lateness=float(self._fc[0]["lateness"]), done=bool(c["done"]))
            return out
        c = self._counts
        out = {k: c[k] for k in ("wakes", "events", "sent", "sent_scalars", "delayed", "late")}
        out.update(lateness=self._lateness, done=self._done_py)
        return out

    def node_state(self) -> np.ndarray:
        """Per node: a `NODE_STATE` record (epoch, clock ticks drawn, messages sent, down count, dead flag, churn
        counter)."""
        return self._ni if self.compiled else self._ni_py

    def in_flight_rows(self) -> list[tuple[int, int, str, np.ndarray]]:
        """The messages on this host's heap now, as (src, dst, tag, payload row), in no particular order."""
        out = []
        if self.compiled:
            for slot in self._slots_in_flight().tolist():
                m = self._mi[slot]
                src, dst, tag = int(m["src"]), int(m["dst"]), int(m["tag"])
                out.append((src, dst, self.kernel.tags[tag], self._mp[slot, :self._widths[tag]].copy()))
        else:
            for e in self._heap:
                if e[1] == P_DELIVER:
                    src, dst, kind, _, _, payload = e[3]
                    out.append((src, dst, self._kinds[kind][0], payload[0].copy()))
        return out

    def pending(self) -> int:
        """Messages this host holds: on its heap and in its outgoing buffer."""
        if self.compiled:
            return int(self._slots_in_flight().size) + int(self._ctr[0]["out"])
        return sum(1 for e in self._heap if e[1] == P_DELIVER) + len(self._xout)

    def _slots_in_flight(self) -> np.ndarray:
        """The pool slots of the deliveries on the compiled loop's heap."""
        hk = self._hk[:int(self._ctr[0]["heap"])]
        return hk["subject"][hk["prio"] == P_DELIVER]

    # -- running --------------------------------------------------------------------------------------------------
    def advance(self, max_time: float) -> int:
        """Handle events up to `max_time` (and the other limits set on this host) until the loop hands back;
        returns its status (event_kernels.ST_*)."""
        if not self.compiled:
            return self._run_python(max_time)
        fc, lim = self._fc, self._lim
        fc["next_eval"] = self.next_eval
        fc["max_time"] = max_time
        lim["max_messages"] = self.max_messages
        lim["max_scalars"] = self.max_scalars
        lim["next_eval_msg"] = self.next_eval_msg
        lim["drain"] = 1 if self.draining else 0  # pragma: no mutate (equivalent: the loop tests it against 0)
        lim["pause_done"] = bool(self.pause_on_done)
        st = self.setting
        # pragma: no mutate start (equivalent for every result: only silences numba's warning at the first compile)
        if not self._loop_compiled:              # numba calls a loop bound to functions "experimental"; it is not
            self._loop_compiled = True
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NumbaExperimentalFeatureWarning)
                return self.advance(max_time)
        # pragma: no mutate end
        status = int(self._loop(self.kernel.arrays, self._widths, self._ht, self._hk, self._mi, self._mp,
                                self._free, self._ni, st.rates, st.keys, st.edge_key, st.model, self.adj_ptr,
                                self.adj, self.owner, self.me, self._rec, self._log_t, self._log_i, self._ctr, fc,
                                lim, self._out_dst, self._out_tag, self._out_pay, self._xi, self._xt, self._xp,
                                self._node_counts, self._seen, self._work, self._tag_bytes, self._codec,
                                self._codec_state, self._codec_keys, self._codec_drawn, self._codec_sent,
                                self._codec_buf, self._codec_idx))
        self._count_encoded()
        return status

    def grow(self, extra: int = 0) -> None:  # pragma: no mutate (equivalent: room for one more is still room)
        """Grow the compiled loop's message pool and heap until `extra` more messages (and a step's output) fit."""
        while not EK.has_room(self._ctr, self._ht, extra, self.kernel.max_out):
            self._mi, self._mp, self._free, self._ht, self._hk = grow_pool(self._mi, self._mp, self._free,
                                                                           self._ctr, self._ht, self._hk)

    def raise_bad_edge(self, s: int | None = None, d: int | None = None) -> None:
        if s is None:
            s, d = int(self._ctr[0]["bad_src"]), int(self._ctr[0]["bad_dst"])
        names = self.meter.node_names
        if not (0 <= d < self.n_nodes):
            raise ProtocolError(f"node {s} sent a message to node {d}, but node ids must lie in 0..{self.n_nodes - 1}")
        raise ProtocolError(f"node {s} ({names[s]}) sent a message to node {d} ({names[d]}), which are not "
                            "neighbours in the topology; gossip programs may only send along edges")

    def _run_python(self, limit: float) -> int:
        """One slice through the programs' Python methods: `event_kernels._event_loop`, statement for statement."""
        heap = self._heap
        heappush, heappop = heapq.heappush, heapq.heappop
        ni = self._ni_py
        rec = self._rec_py
        kinds = self._kinds
        programs, states = self.programs, self.states
        node_group = self.node_group.tolist()
        owner = self._owner_list
        me = self.me
        remote = not self.return_on_done
        one_ids = self._one_ids
        adj_sets = self._adj_sets
        group_done = self._group_done
        all_done, return_on_done = self._done_py, self.return_on_done
        pause_on_done = self.pause_on_done
        st = self.setting
        model, keys, rates, edge_key = st.model, st.keys, st.rates, st.edge_key
        round_time = self.round_time
        counts = self._counts
        seq = self._seq
        xout = self._xout
        xbatch = self._xbatch
        draining = self.draining
        wakes, sent, sent_scalars, events, delayed = (counts["wakes"], counts["sent"], counts["sent_scalars"],
                                                      counts["events"], counts["delayed"])
        now = self._now
        max_messages, max_scalars = self.max_messages, self.max_scalars
        next_eval, next_eval_msg = self.next_eval, self.next_eval_msg
        yield_every = self._yield_every
        encode = self.compression.apply if self.compression is not None else None
        since_yield = 0
        while True:
            if not heap:
                status = ST_QUIESCENT
                break
            t = heap[0][0]
            if not draining:
                if next_eval <= t and next_eval <= limit:
                    status = ST_EVAL_TIME
                    break
                if t > limit:
                    status = ST_TIME
                    break
            if len(xout) >= xbatch:
                status = ST_XFLUSH
                break
            if since_yield >= yield_every:
                status = ST_YIELD
                break
            since_yield += 1
            t, prio, _, a, b = heappop(heap)
            if draining and prio != P_DELIVER:
                continue
            if prio == P_WAKE:
                nstate = ni[a]
                if b != nstate["epoch"]:
                    continue
                now = t
                events += 1
                k = nstate["ticks"]
                nstate["ticks"] = k + 1
                heappush(heap, (t + next_tick(model, keys, rates, a, k), P_WAKE, next(seq), a, b))
                wakes += 1
                gid = node_group[a]
                states[gid], out = programs[gid].wake(states[gid], one_ids[a], np.array((t,)))
                sender = a
            elif prio == P_DELIVER:
                now = t
                events += 1
                src, dst, kind, bin_, dup, payload = a
                if ni[dst]["down"] > 0:
                    rec.extend((bin_, src, dst, kind * 16 + dup * 8 + CAUSE_DEAD_RECEIVER))
                    continue
                # pragma: no mutate start (equivalent: CAUSE_DELIVERED is 0, so + and - agree)
                rec.extend((bin_, src, dst, kind * 16 + dup * 8 + CAUSE_DELIVERED))
                # pragma: no mutate end
                gid = node_group[dst]
                batch = MessageBatch(kinds[kind][0], one_ids[src], one_ids[dst], payload)
                states[gid], out = programs[gid].receive(states[gid], batch, np.array((t,)))
                sender = dst
            else:
                now = t
                events += 1
                self._node_event(heap, seq, t, prio, a, b, ni[a], node_group[a])
                continue
            bin_ = int(t / round_time)
            if out.signals and out.signals.get("counts"):
                self._note_work(bin_, sender, out.signals["counts"])
            batches = out.batches if encode is None else [encode(b) for b in out.batches]
            for kind, spm, nbytes, s, d, row in _program_sends(batches, sender, self.kind_id):
                if d not in adj_sets[s]:                # (an id out of range is in no set)
                    self.raise_bad_edge(s, d)
                nstate = ni[s]
                c = nstate["sent"]
                nstate["sent"] = c + 1
                sent += 1
                sent_scalars += spm
                copies, dl, lat1, lat2 = send_fate(model, keys, edge_key, s, d, c, nbytes)
                if copies == 0:
                    rec.extend((bin_, s, d, kind * 16 + CAUSE_LOST))
                    continue
                delayed += dl
                for copy in range(copies):
                    arrive = t + (lat1 if copy == 0 else lat2)
                    if not remote or owner[d] == me:
                        heappush(heap, (arrive, P_DELIVER, next(seq), (s, d, kind, bin_, copy, row), UNREAD_FLAG))
                    else:
                        xout.append((owner[d], kind, s, d, bin_, copy, arrive, row))
            sig = out.signals
            was_done = all_done
            if sig and "done" in sig:
                group_done[node_group[sender]] = bool(sig["done"])
                all_done = all(group_done.values())
            if all_done and return_on_done:
                status = ST_DONE
                break
            if remote and pause_on_done and all_done != was_done:
                status = ST_DONE_CHANGE
                break
            if sent >= max_messages:
                status = ST_MESSAGES
                break
            if sent_scalars >= max_scalars:
                status = ST_SCALARS
                break
            if sent >= next_eval_msg:
                status = ST_EVAL_MSG
                break
        self._done_py = all_done
        counts.update(wakes=wakes, sent=sent, sent_scalars=sent_scalars, events=events, delayed=delayed)
        self._now = now
        return status

    def _node_event(self, heap: list, seq, t: float, prio: int, node: int, b: int, nstate, gid: int) -> None:
        """A crash, leave, recover or join of `node` in the Python loop (`event_kernels._node_event`'s twin):
        counts the node down or up, schedules its churn and clock, calls the program's crash or recover hook and
        logs the change. `seq`: the heap's sequence counter."""
        st = self.setting
        if prio == P_CRASH or prio == P_LEAVE:
            if prio == P_CRASH:
                if b == 1:
                    nstate["dead"] = 1
                event = NODE_CRASH
            else:
                if nstate["dead"] == 1:
                    return                                         # a dead node's churn ends
                c = nstate["churn"]
                heapq.heappush(heap, (t + churn_duration(st.model, st.keys[node]["churn"], 2 * c + 1), P_JOIN,
                                      next(seq), node, UNREAD_FLAG))
                event = NODE_LEAVE
            nstate["down"] += 1
            if nstate["down"] == 1:
                nstate["epoch"] += 1
                res = self.programs[gid].crash(self.states[gid], self._one_ids[node])
                if res is not None:
                    self.states[gid] = res
                self._log.append((t, node, event))
            return
        if prio == P_RECOVER:
            keep = b == 1
            event = NODE_RECOVER
        else:
            c = nstate["churn"]
            nstate["churn"] = c + 1
            heapq.heappush(heap, (t + churn_duration(st.model, st.keys[node]["churn"], 2 * c + 2), P_LEAVE,
                                  next(seq), node, UNREAD_FLAG))
            keep = st.model[0]["churn_keeps_state"] == 1
            event = NODE_JOIN
        if nstate["down"] > 0:  # pragma: no mutate (equivalent: a recover or join follows its crash or leave)
            nstate["down"] -= 1
            if nstate["down"] == 0 and nstate["dead"] == 0:
                nstate["epoch"] += 1
                k = nstate["ticks"]
                nstate["ticks"] = k + 1
                heapq.heappush(heap, (t + next_tick(st.model, st.keys, st.rates, node, k), P_WAKE,
                                      next(seq), node, nstate["epoch"]))
                res = self.programs[gid].recover(self.states[gid], self._one_ids[node], bool(keep))
                if res is not None:
                    self.states[gid] = res
                self._log.append((t, node, event))

    # -- messages between hosts ------------------------------------------------------------------------------------
    def take_outgoing(self) -> dict[int, list]:
        """The outgoing buffer as ``{host: [(tag, spm, dtype, arrivals, times, payload), ...]}`` (arrivals:
        `ARRIVAL` records; times: arrival times); empties it."""
        out: dict[int, list] = {}
        if self.compiled:
            x = int(self._ctr[0]["out"])
            if x == 0:
                return out
            xi, xt, xp = self._xi[:x], self._xt[:x], self._xp[:x]
            self._ctr["out"] = 0
            for dest in np.unique(xi["host"]).tolist():
                for_dest = xi["host"] == dest
                for tag in np.unique(xi["tag"][for_dest]).tolist():
                    sel = np.flatnonzero(for_dest & (xi["tag"] == tag))
                    w = int(self._widths[tag])
                    arrivals = np.empty(sel.size, ARRIVAL)
                    for field in ARRIVAL.names:
                        arrivals[field] = xi[field][sel]
                    out.setdefault(dest, []).append((self.kernel.tags[tag], w, "<f8", arrivals, xt[sel].copy(),
                                                     np.ascontiguousarray(xp[sel, :w])))
            return out
        if not self._xout:
            return out
        rows, self._xout = self._xout, []
        by: dict[tuple, list] = {}
        for r in rows:
            by.setdefault((r[0], r[1]), []).append(r)
        for (dest, kind), rs in by.items():
            tag, spm, dtype = self._kinds[kind]
            # pragma: no mutate start (equivalent: Python ints and floats make int64 and float64 arrays)
            arrivals = np.array([r[2:6] for r in rs], dtype=ARRIVAL)
            times = np.array([r[6] for r in rs], dtype=np.float64)
            # pragma: no mutate end
            payload = np.concatenate([r[7] for r in rs])         # rows of the kind's dtype
            out.setdefault(dest, []).append((tag, spm, dtype.str, arrivals, times, payload))
        return out

    def put_incoming(self, parts: list) -> None:
        """Put messages from another host (parts as `take_outgoing` gives them) on the heap at max(arrival time,
        now): on time when this host's clock has not reached the arrival time yet, late (at once) otherwise."""
        for tag, spm, dtype, arrivals, times, payload in parts:
            # unpickled arrays may be read-only views of a call's buffer; programs may write to what they get
            # pragma: no mutate start (equivalent: numpy reads the requirement letters in either case)
            arrivals, times, payload = (np.require(a, requirements=("C", "W")) for a in (arrivals, times, payload))
            # pragma: no mutate end
            if self.compiled:
                self.grow(arrivals.shape[0])
                EK.push_arrivals(self._ht, self._hk, self._ctr, self._fc, self._mi, self._mp, self._free,
                                 self._tag_ids[tag], arrivals, times, payload)
                continue
            kind = self.kind_id(tag, spm, dtype)
            now = self._now
            for r in range(arrivals.shape[0]):
                t = float(times[r])
                if t < now:
                    self._counts["late"] += 1
                    self._lateness += now - t
                    t = now
                m = arrivals[r]
                s, d, bin_, dup = int(m["src"]), int(m["dst"]), int(m["bin"]), int(m["copy"])
                heapq.heappush(self._heap, (t, P_DELIVER, next(self._seq), (s, d, kind, bin_, dup, payload[r:r + 1]),
                                            UNREAD_FLAG))

    def meter_parts_in_flight(self, parts: list) -> None:
        """Meter messages for another host that will not be sent (a sealed host) as in flight at the end."""
        recs = []
        for tag, spm, dtype, arrivals, times, payload in parts:
            kind = self.kind_id(tag, spm, dtype)
            recs.append(fates(arrivals["bin"], arrivals["src"], arrivals["dst"],
                              kind * 16 + arrivals["copy"] * 8 + CAUSE_IN_FLIGHT))
        if recs:
            self._meter_records(np.concatenate(recs))

    # -- metering ---------------------------------------------------------------------------------------------------
    def flush(self, extra: np.ndarray | None = None) -> None:
        """Hand the buffered records to the meter (one batch per kind, fate and round) and the fault tally."""
        if self.compiled:
            nr = int(self._ctr[0]["records"])
            recs = self._rec[:nr]
            if extra is not None:
                recs = np.concatenate([recs, extra])
            self._ctr["records"] = 0
            ng = int(self._ctr[0]["log"])
            log = [(float(t), int(e["node"]), int(e["event"])) for t, e in zip(self._log_t[:ng], self._log_i[:ng])]
            self._ctr["log"] = 0
            w = self._work[:int(self._ctr[0]["work"])]
            work = (w["bin"], w["node"], np.array(self._quantities, dtype=object)[w["quantity"]], w["amount"])
            self._ctr["work"] = 0
        else:
            recs = np.frombuffer(self._rec_py, dtype=FATE)
            if extra is not None:
                recs = np.concatenate([recs, extra])
            self._rec_py = array("q")  # pragma: no mutate (equivalent: records are never negative: q or Q alike)
            log, self._log = self._log, []
            rows, self._work_py = self._work_py, []
            work = tuple(np.array([r[i] for r in rows], dtype=object if i == 2 else None) for i in range(4)) \
                if rows else None
        for t, node, event in log:
            self.plan.tally.node_event(t, node, NODE_EVENT_NAMES[event])
        if recs.shape[0]:
            self._meter_records(recs)
        if work is not None and work[0].shape[0]:
            self._meter_work(*work)

    def _note_work(self, bin_: int, node: int, counts: dict) -> None:
        """Keep what a Python program's event reported as ``Outbox.signals["counts"]`` ({quantity: amount} for the
        event's node), to be metered in round `bin_` at the next flush."""
        for quantity, amount in counts.items():
            amount = np.asarray(amount).reshape(-1)
            if amount.shape[0] != 1:
                raise ProtocolError(f"a gossip event reported {amount.shape[0]} amounts of node quantity "
                                    f"{quantity!r}; allowed: one, for the node whose event it is (node {node})")
            self._work_py.append((bin_, node, quantity, amount[0]))

    def _meter_work(self, bins: np.ndarray, nodes: np.ndarray, quantities: np.ndarray, amounts: np.ndarray) -> None:
        """Meter node work (per row: the round, the node, the quantity's name, the amount): one call per quantity
        and round, in that order."""
        for quantity in sorted(set(quantities.tolist())):
            mine = np.flatnonzero(quantities == quantity)
            b = bins[mine]
            order = mine[np.argsort(b, kind="stable")]
            cuts = np.flatnonzero(np.diff(bins[order])) + 1
            for part in np.split(order, cuts):
                self.meter.record_node(int(bins[part[0]]), quantity, nodes[part].astype(np.int64), amounts[part])

    def meter_in_flight(self) -> None:
        """Meter every message still on the heap as in flight at the end (delivered traffic: it was sent) and
        empty the heap of deliveries; flushes all records."""
        if self.compiled:
            mi = self._mi[self._slots_in_flight()]
            rec = fates(mi["bin"], mi["src"], mi["dst"], mi["tag"] * 16 + mi["copy"] * 8 + CAUSE_IN_FLIGHT)
        else:
            rec = np.array([(a[3], a[0], a[1], a[2] * 16 + a[4] * 8 + CAUSE_IN_FLIGHT)
                            for _, prio, _, a, _ in self._heap if prio == P_DELIVER], dtype=FATE)
        self.flush(extra=rec)

    def end(self) -> None:
        """The run is over and its messages in flight are metered (`meter_in_flight`): let go of the event queue
        and the message pool (about 100 bytes a node), keeping the counters and the node state."""
        if self.compiled:
            self._ctr["heap"] = self._ctr["free"] = 0
            # pragma: no mutate start (equivalent: nothing advances the loop after end, so arrays of any small size
            # and dtype let the pool go alike)
            self._ht, self._hk = np.empty(0), np.empty(0, HEAP_KEY)
            self._mi, self._mp = np.empty(0, POOL_ENTRY), np.empty((0, self._mp.shape[1]))
            self._free = np.empty(0, dtype=np.int64)
            # pragma: no mutate end
        else:
            self._heap = []

    def _meter_records(self, recs: np.ndarray) -> None:
        """Meter `FATE` records: one batch per kind, fate and round."""
        code = recs["code"]
        cause = code & 7
        dropped = np.isin(cause, DROPPED_CAUSES)
        group = (code >> 4) * 2 + dropped
        order = np.lexsort((recs["bin"], group))  # pragma: no mutate (equivalent: the batches cut by round are fewer)
        group = group[order]
        bins = recs["bin"][order]
        src = recs["src"][order]
        dst = recs["dst"][order]
        cut = np.flatnonzero((np.diff(group) != 0) | (np.diff(bins) != 0)) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [group.shape[0]]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            g = int(group[s])
            kind = g >> 1
            tag, spm, dtype = self._kinds[kind]
            if kind not in self._stub_payloads:      # one payload row per kind, which the meter sizes and never reads
                self._stub_payloads[kind] = np.zeros((1, spm), dtype=dtype)  # pragma: no mutate (equivalent: as said)
            wire = None if self.compression is None else self.compression.encoded_bytes(tag, spm, dtype)
            batch = MessageBatch(tag, src[s:e], dst[s:e], self._stub_payloads[kind], wire)
            if g & 1:                                # the meter keeps lost traffic per tag and edge, not per round
                self.meter.record_dropped(int(bins[s]), batch)  # pragma: no mutate (equivalent: as said)
            else:
                self.meter.record(int(bins[s]), batch)
        codes, counts = np.unique(code, return_counts=True)
        for c, m in zip(codes.tolist(), counts.tolist()):
            tag, spm, _ = self._kinds[c >> 4]
            self.plan.tally.messages(tag, CAUSE_NAMES[c & 7], bool((c >> 3) & 1), m, m * spm)

