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
from .event_kernels import (C_CHURN_KEEP, C_DELAY, C_LAT, C_N, C_PERIODIC, CAUSE_DEAD_RECEIVER, CAUSE_DELIVERED,
                            CAUSE_IN_FLIGHT, CAUSE_LOST, CAUSE_NAMES, DROPPED_CAUSES, E_BANDWIDTH, E_CHURN_DOWN,
                            E_CHURN_RATE, E_DELAY, E_DELAY_A, E_DELAY_B, E_DROP, E_DUP, E_JITTER, E_LAT_A, E_LAT_B,
                            E_ROUND_TIME, E_SPREAD, F_LATENESS, F_MAX_TIME, F_NEXT_EVAL, F_NOW, I_CHURN, I_DEAD,
                            I_DOWN, I_EPOCH, I_SENT, I_TICKS, K_CHURN, K_CLOCK, K_FAULT, K_LATENCY, L_DRAIN,
                            L_MAX_MESSAGES, L_MAX_SCALARS, L_NEXT_EVAL_MSG, L_PAUSE_DONE, L_XBATCH, L_YIELD,
                            N_BAD_DST, N_BAD_SRC, N_COUNTERS, N_DELAYED, N_DONE, N_EVENTS, N_FREE, N_HEAP, N_LATE,
                            N_LOG, N_OUT, N_REC, N_SENT, N_SENT_SCALARS, N_SETTINGS, N_WAKES, NO_LIMIT, NODE_CRASH,
                            NODE_EVENT_NAMES, NODE_JOIN, NODE_LEAVE, NODE_RECOVER, P_CRASH, P_DELIVER, P_JOIN,
                            P_LEAVE, P_RECOVER, P_WAKE, ST_DONE, ST_DONE_CHANGE, ST_EVAL_MSG, ST_EVAL_TIME,
                            ST_MESSAGES, ST_QUIESCENT, ST_SCALARS, ST_TIME, ST_XFLUSH, ST_YIELD, X_BIN, X_COPY, X_DST,
                            X_HOST, X_SRC, X_TAG,
                            churn_duration, next_tick, send_fate)

__all__ = ["GossipSetting", "EventHost", "register_kind", "grow_pool"]

UNREAD_FLAG = 0    # the flag of a leave or join event, which the loop does not read


class GossipSetting:
    """The virtual-time model of one run, in the arrays the loop reads: clocks, the alpha-beta latency model, the
    fault plan, the seed's random keys per node and stream, and the meter's round length."""

    def __init__(self, n_nodes: int, clock: Clock, latency: LatencyModel, plan, seed: int, round_time: float):
        n = self.n_nodes = int(n_nodes)
        self.clock, self.latency, self.plan = clock, latency, plan
        self.seed, self.round_time = int(seed), float(round_time)
        lat = latency.distribution
        delay = plan.delay_distribution
        env = np.zeros(16)  # pragma: no mutate (equivalent: spare slots are never read)
        env[E_JITTER] = clock.jitter
        env[E_DROP] = plan.drop
        env[E_DUP] = plan.duplicate
        env[E_DELAY] = plan.delay
        env[E_LAT_A], env[E_LAT_B] = lat.a, lat.b
        if delay is not None:                   # else delay = 0, and the loop reads no delay parameter
            env[E_DELAY_A], env[E_DELAY_B] = delay.a, delay.b
        env[E_BANDWIDTH] = latency.bandwidth if latency.bandwidth is not None else math.inf
        env[E_SPREAD] = latency.edge_spread
        env[E_ROUND_TIME] = self.round_time
        env[E_CHURN_RATE] = plan.churn_rate
        env[E_CHURN_DOWN] = plan.churn_downtime
        # pragma: no mutate start (equivalent: spare slots are never read; numba compiles the loop for any dtype)
        cfg = np.zeros(8, dtype=np.int64)
        keys = np.empty((n, 4), dtype=np.uint64)
        # pragma: no mutate end
        cfg[C_PERIODIC] = clock.kind == "periodic"
        cfg[C_LAT] = lat.code
        if delay is not None:
            cfg[C_DELAY] = delay.code
        cfg[C_N] = n
        cfg[C_CHURN_KEEP] = plan.churn_state
        keys[:, K_CLOCK] = stream_keys(self.seed, STREAM_CLOCK, n)
        keys[:, K_LATENCY] = stream_keys(self.seed, STREAM_LATENCY, n)
        keys[:, K_FAULT], keys[:, K_CHURN] = plan.node_keys()
        self.env, self.cfg, self.keys = env, cfg, keys
        # pragma: no mutate start (equivalent: a stream's first key does not depend on how many are drawn)
        self.edge_key = stream_keys(self.seed, STREAM_EDGE, 1)[0]
        # pragma: no mutate end
        self.rates = clock.rate / plan.straggler_factors

    def initial_events(self, owned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Events pushed before the run, in push order (explicit crashes, their recoveries, the first churn
        departures, the first clock ticks), of the nodes where `owned` is True: (times, rows (priority, node,
        flag)), every node's in one compiled pass (`first_events`)."""
        plan = self.plan
        lead = [(start, P_CRASH, node, 1 if math.isinf(end) else 0) for node, start, end, keep in plan.outages]
        lead += [(end, P_RECOVER, node, 1 if keep else 0) for node, start, end, keep in plan.outages
                 if not math.isinf(end)]
        ticks, leaves = EK.first_events(self.cfg, self.env, self.keys, self.rates, plan.churn_rate > 0)
        nodes = np.arange(self.n_nodes, dtype=np.int64)  # pragma: no mutate (equivalent: NumPy's default int64)
        firsts = [np.column_stack([np.full_like(nodes, prio), nodes, np.full_like(nodes, flag)])
                  for prio, flag, times in ((P_LEAVE, UNREAD_FLAG, leaves), (P_WAKE, 0, ticks)) if times.size]
        # pragma: no mutate start (equivalent: a list of floats, or none, makes float64; numpy reads any negative
        # size as -1)
        times = np.concatenate([np.array([e[0] for e in lead], dtype=np.float64), leaves, ticks])
        rows = np.concatenate([np.array([e[1:] for e in lead], dtype=np.int64).reshape(-1, 3)] + firsts)
        # pragma: no mutate end
        keep = owned[rows[:, 1]]
        return times[keep], rows[keep]


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
    """Double a compiled loop's message pool (ids mi, payloads mp, free list) and grow its heap (times ht, keys
    hk) to match; ctr[N_FREE] is updated. Returns the new (mi, mp, free, ht, hk)."""
    pool = mi.shape[0]
    new_mi = np.empty((2 * pool, 5), dtype=np.int64)
    new_mi[:pool] = mi
    new_mp = np.empty((2 * pool, mp.shape[1]))
    new_mp[:pool] = mp
    new_free = np.empty(2 * pool, dtype=np.int64)  # pragma: no mutate (equivalent: a larger list holds the same)
    nf = int(ctr[N_FREE])
    new_free[:nf] = free[:nf]
    # pragma: no mutate start (equivalent: nf <= pool, so nf - pool wraps to nf + pool in a list of 2 * pool)
    new_free[nf:nf + pool] = np.arange(2 * pool - 1, pool - 1, -1)
    # pragma: no mutate end
    ctr[N_FREE] = nf + pool
    cap = ht.shape[0]
    new_ht = np.empty(cap + 2 * pool)
    new_hk = np.empty((cap + 2 * pool, 4), dtype=np.int64)
    new_ht[:cap] = ht
    new_hk[:cap] = hk
    return new_mi, new_mp, new_free, new_ht, new_hk


def _program_sends(out, sender: int, kind_id):
    """Every message of a Python program's outbox as (kind, scalars, bytes, src, dst, payload row), in order. A
    message must come from `sender`, the node whose event is being handled (ProtocolError otherwise)."""
    for batch in out.batches:
        src_ids = batch.src.tolist()
        dst_ids = batch.dst.tolist()
        m = len(src_ids)
        payload = batch.payload
        if payload.shape[0] != m:                       # a broadcast: each message carries its own copy of the row
            payload = np.repeat(payload.reshape(1, payload.size), m, axis=0)
        elif payload.ndim != 2:  # pragma: no mutate (equivalent: a row per message reshapes to itself)
            payload = payload.reshape(m, payload.size // max(m, 1))
        spm = payload.shape[1]
        nbytes = spm * payload.dtype.itemsize
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
    """

    def __init__(self, programs: dict[int, GossipProgram], states, node_group: np.ndarray, owner: np.ndarray,
                 me: int, setting: GossipSetting, adj_ptr: np.ndarray, adj: np.ndarray, meter: Meter, *,
                 compiled: bool | None = None, xbatch_bytes: int | None = None,
                 yield_every: int = 4096):  # pragma: no mutate (equivalent: where a slice hands back; same run)
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
        self.kernel = None
        if compiled is not False and len(programs) == 1:
            gid = next(iter(programs))
            self.kernel = programs[gid].kernel(states[gid])
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

    def _init_compiled(self, events, pool: int, xbatch_bytes: int | None) -> None:
        k = self.kernel
        self._loop = EK.loop_for(k, remote=xbatch_bytes is not None)
        self._loop_compiled = False  # pragma: no mutate (equivalent for every result: see advance)
        self._widths = np.asarray(k.widths, dtype=np.int64)  # pragma: no mutate (equivalent: widths are ints)
        for tag, w in zip(k.tags, self._widths):
            self.kind_id(tag, int(w), np.float64)  # pragma: no mutate (equivalent: np.dtype(None) is float64)
        self._tag_ids = {tag: i for i, tag in enumerate(k.tags)}
        width = int(self._widths.max())
        # pragma: no mutate start (equivalent: buffer capacities, dtypes and the free slots' order; any larger buffer
        # and any slot order give the same run, grow() enlarges what fills up, numba compiles the loop for any dtype)
        times, ints = events
        cap = times.shape[0] + pool + 2 * k.max_out + 16
        self._ctr = np.zeros(N_COUNTERS, dtype=np.int64)
        self._ni = np.zeros((self.n_nodes, 6), dtype=np.int64)
        self._ht, self._hk = np.empty(cap), np.empty((cap, 4), dtype=np.int64)
        self._mi, self._mp = np.empty((pool, 5), dtype=np.int64), np.empty((pool, width))
        self._free = np.arange(pool, dtype=np.int64)[::-1].copy()
        self._rec = np.empty((65536, 4), dtype=np.int64)
        self._log_t, self._log_i = np.empty(4096), np.empty((4096, 2), dtype=np.int64)
        self._fc = np.zeros(N_SETTINGS)
        self._lim = np.zeros(N_SETTINGS, dtype=np.int64)
        self._out_dst = np.zeros(k.max_out, dtype=np.int64)
        self._out_tag = np.zeros(k.max_out, dtype=np.int64)
        self._out_pay = np.zeros((k.max_out, width))
        # hand-back sizes: a batch for other hosts, a slice (the run is the same for any; tests/test_schedule_exact.py)
        xbatch = NO_LIMIT if xbatch_bytes is None else max(1, int(xbatch_bytes) // (8 * (6 + width)))
        rows = (0 if xbatch_bytes is None else xbatch) + 2 * k.max_out + 8
        self._xi = np.empty((rows, 6), dtype=np.int64)
        self._xf = np.empty((rows, 1 + width))
        self._lim[L_XBATCH] = xbatch
        self._lim[L_YIELD] = 1 << 17 if xbatch_bytes is None else 4096
        # pragma: no mutate end
        self._ctr[N_FREE] = pool
        self._ni[:, I_TICKS] = 1
        EK.push_events(self._ht, self._hk, self._ctr, times, ints)

    def _init_python(self, events, xbatch_bytes: int | None, yield_every: int) -> None:
        n = self.n_nodes
        self._heap: list[tuple] = []
        self._seq = itertools.count()    # heap entries that tie on (time, priority) pop in push order
        self._ni_py = [[0] * 6 for _ in range(n)]        # per node: epoch, ticks, sent, down, dead, churn counter
        times, ints = events
        for t, (prio, a, b) in zip(times.tolist(), ints.tolist()):
            heapq.heappush(self._heap, (t, prio, next(self._seq), a, b))
        for node in range(n):
            self._ni_py[node][I_TICKS] = 1
        self._rec_py = array("q")  # pragma: no mutate (equivalent: records are never negative: q or Q alike)
        self._log: list[tuple[float, int, int]] = []
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
            self._fc[F_MAX_TIME] = -math.inf
            self.advance(-math.inf)

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """This host's virtual time: the time of the last event it handled."""
        return float(self._fc[F_NOW]) if self.compiled else self._now

    def set_now(self, t: float) -> None:
        if self.compiled:
            self._fc[F_NOW] = max(self._fc[F_NOW], t)
        else:
            self._now = max(self._now, t)

    def heap_top(self) -> float:
        if self.compiled:
            return float(self._ht[0]) if self._ctr[N_HEAP] > 0 else math.inf
        return self._heap[0][0] if self._heap else math.inf

    @property
    def done(self) -> bool:
        return bool(self._ctr[N_DONE]) if self.compiled else self._done_py

    def counters(self) -> dict:
        """Clock ticks handled, events handled, messages and scalars sent, delayed copies, late arrivals (count and
        summed lateness), and whether every program here said it is done."""
        if self.compiled:
            c = self._ctr
            return {"wakes": int(c[N_WAKES]), "events": int(c[N_EVENTS]), "sent": int(c[N_SENT]),
                    "sent_scalars": int(c[N_SENT_SCALARS]), "delayed": int(c[N_DELAYED]), "late": int(c[N_LATE]),
                    "lateness": float(self._fc[F_LATENESS]), "done": bool(c[N_DONE])}
        c = self._counts
        out = {k: c[k] for k in ("wakes", "events", "sent", "sent_scalars", "delayed", "late")}
        out.update(lateness=self._lateness, done=self._done_py)
        return out

    def node_state(self) -> np.ndarray:
        """Per node: epoch, clock ticks drawn, messages sent, down count, dead flag, churn counter."""
        if self.compiled:
            return self._ni
        return np.array(self._ni_py, dtype=np.int64).reshape(-1, 6)  # pragma: no mutate (equivalent: ints are int64)

    def in_flight_rows(self) -> list[tuple[int, int, str, np.ndarray]]:
        """The messages on this host's heap now, as (src, dst, tag, payload row), in no particular order."""
        out = []
        if self.compiled:
            nh = int(self._ctr[N_HEAP])
            for slot in self._hk[:nh][self._hk[:nh, 0] == P_DELIVER, 2]:
                src, dst, tag = (int(v) for v in self._mi[slot, :3])
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
            nh = int(self._ctr[N_HEAP])
            return int(np.count_nonzero(self._hk[:nh, 0] == P_DELIVER)) + int(self._ctr[N_OUT])
        return sum(1 for e in self._heap if e[1] == P_DELIVER) + len(self._xout)

    # -- running --------------------------------------------------------------------------------------------------
    def advance(self, max_time: float) -> int:
        """Handle events up to `max_time` (and the other limits set on this host) until the loop hands back;
        returns its status (event_kernels.ST_*)."""
        if not self.compiled:
            return self._run_python(max_time)
        fc, lim = self._fc, self._lim
        fc[F_NEXT_EVAL] = self.next_eval
        fc[F_MAX_TIME] = max_time
        lim[L_MAX_MESSAGES] = self.max_messages
        lim[L_MAX_SCALARS] = self.max_scalars
        lim[L_NEXT_EVAL_MSG] = self.next_eval_msg
        lim[L_DRAIN] = 1 if self.draining else 0  # pragma: no mutate (equivalent: the loop tests it against 0)
        lim[L_PAUSE_DONE] = bool(self.pause_on_done)
        st = self.setting
        # pragma: no mutate start (equivalent for every result: only silences numba's warning at the first compile)
        if not self._loop_compiled:              # numba calls a loop bound to functions "experimental"; it is not
            self._loop_compiled = True
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NumbaExperimentalFeatureWarning)
                return self.advance(max_time)
        # pragma: no mutate end
        return int(self._loop(self.kernel.arrays, self._widths, self._ht, self._hk, self._mi, self._mp, self._free,
                              self._ni, st.rates, st.keys, st.edge_key, st.env, st.cfg, self.adj_ptr, self.adj,
                              self.owner, self.me, self._rec, self._log_t, self._log_i, self._ctr, fc, lim,
                              self._out_dst, self._out_tag, self._out_pay, self._xi, self._xf))

    def grow(self, extra: int = 0) -> None:  # pragma: no mutate (equivalent: room for one more is still room)
        """Grow the compiled loop's message pool and heap until `extra` more messages (and a step's output) fit."""
        while not EK.has_room(self._ctr, self._ht, extra, self.kernel.max_out):
            self._mi, self._mp, self._free, self._ht, self._hk = grow_pool(self._mi, self._mp, self._free,
                                                                           self._ctr, self._ht, self._hk)

    def raise_bad_edge(self, s: int | None = None, d: int | None = None) -> None:
        if s is None:
            s, d = int(self._ctr[N_BAD_SRC]), int(self._ctr[N_BAD_DST])
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
        env, cfg, keys, rates, edge_key = st.env, st.cfg, st.keys, st.rates, st.edge_key
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
                if b != nstate[I_EPOCH]:
                    continue
                now = t
                events += 1
                k = nstate[I_TICKS]
                nstate[I_TICKS] = k + 1
                heappush(heap, (t + next_tick(cfg, env, keys, rates, a, k), P_WAKE, next(seq), a, b))
                wakes += 1
                gid = node_group[a]
                states[gid], out = programs[gid].wake(states[gid], one_ids[a], np.array((t,)))
                sender = a
            elif prio == P_DELIVER:
                now = t
                events += 1
                src, dst, kind, bin_, dup, payload = a
                if ni[dst][I_DOWN] > 0:
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
            for kind, spm, nbytes, s, d, row in _program_sends(out, sender, self.kind_id):
                if d not in adj_sets[s]:                # (an id out of range is in no set)
                    self.raise_bad_edge(s, d)
                nstate = ni[s]
                c = nstate[I_SENT]
                nstate[I_SENT] = c + 1
                sent += 1
                sent_scalars += spm
                copies, dl, lat1, lat2 = send_fate(env, cfg, keys, edge_key, s, d, c, nbytes)
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
                    nstate[I_DEAD] = 1
                event = NODE_CRASH
            else:
                if nstate[I_DEAD] == 1:
                    return                                         # a dead node's churn ends
                c = nstate[I_CHURN]
                heapq.heappush(heap, (t + churn_duration(st.env, st.keys[node, K_CHURN], 2 * c + 1), P_JOIN,
                                      next(seq), node, UNREAD_FLAG))
                event = NODE_LEAVE
            nstate[I_DOWN] += 1
            if nstate[I_DOWN] == 1:
                nstate[I_EPOCH] += 1
                res = self.programs[gid].crash(self.states[gid], self._one_ids[node])
                if res is not None:
                    self.states[gid] = res
                self._log.append((t, node, event))
            return
        if prio == P_RECOVER:
            keep = b == 1
            event = NODE_RECOVER
        else:
            c = nstate[I_CHURN]
            nstate[I_CHURN] = c + 1
            heapq.heappush(heap, (t + churn_duration(st.env, st.keys[node, K_CHURN], 2 * c + 2), P_LEAVE,
                                  next(seq), node, UNREAD_FLAG))
            keep = st.cfg[C_CHURN_KEEP] == 1
            event = NODE_JOIN
        if nstate[I_DOWN] > 0:  # pragma: no mutate (equivalent: a recover or join follows its crash or leave)
            nstate[I_DOWN] -= 1
            if nstate[I_DOWN] == 0 and nstate[I_DEAD] == 0:
                nstate[I_EPOCH] += 1
                k = nstate[I_TICKS]
                nstate[I_TICKS] = k + 1
                heapq.heappush(heap, (t + next_tick(st.cfg, st.env, st.keys, st.rates, node, k), P_WAKE,
                                      next(seq), node, nstate[I_EPOCH]))
                res = self.programs[gid].recover(self.states[gid], self._one_ids[node], bool(keep))
                if res is not None:
                    self.states[gid] = res
                self._log.append((t, node, event))

    # -- messages between hosts ------------------------------------------------------------------------------------
    def take_outgoing(self) -> dict[int, list]:
        """The outgoing buffer as ``{host: [(tag, spm, dtype, ints, times, payload), ...]}`` (ints rows: src, dst,
        round bin, duplicate copy; times: arrival times); empties it."""
        out: dict[int, list] = {}
        if self.compiled:
            x = int(self._ctr[N_OUT])
            if x == 0:
                return out
            xi, xf = self._xi[:x], self._xf[:x]
            self._ctr[N_OUT] = 0
            for dest in np.unique(xi[:, X_HOST]).tolist():
                for_dest = xi[:, X_HOST] == dest
                for tag in np.unique(xi[for_dest, X_TAG]).tolist():
                    sel = np.flatnonzero(for_dest & (xi[:, X_TAG] == tag))
                    w = int(self._widths[tag])
                    out.setdefault(dest, []).append((self.kernel.tags[tag], w, "<f8",
                                                     np.ascontiguousarray(xi[sel][:, [X_SRC, X_DST, X_BIN, X_COPY]]),
                                                     xf[sel, 0].copy(), np.ascontiguousarray(xf[sel, 1:][:, :w])))
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
            ints = np.array([r[2:6] for r in rs], dtype=np.int64)
            times = np.array([r[6] for r in rs], dtype=np.float64)
            # pragma: no mutate end
            payload = np.concatenate([r[7] for r in rs])         # rows of the kind's dtype
            out.setdefault(dest, []).append((tag, spm, dtype.str, ints, times, payload))
        return out

    def put_incoming(self, parts: list) -> None:
        """Put messages from another host (parts as `take_outgoing` gives them) on the heap at max(arrival time,
        now): on time when this host's clock has not reached the arrival time yet, late (at once) otherwise."""
        for tag, spm, dtype, ints, times, payload in parts:
            # unpickled arrays may be read-only views of a call's buffer; programs may write to what they get
            # pragma: no mutate start (equivalent: numpy reads the requirement letters in either case)
            ints, times, payload = (np.require(a, requirements=("C", "W")) for a in (ints, times, payload))
            # pragma: no mutate end
            if self.compiled:
                self.grow(ints.shape[0])
                EK.push_arrivals(self._ht, self._hk, self._ctr, self._fc, self._mi, self._mp, self._free,
                                 self._tag_ids[tag], ints, times, payload)
                continue
            kind = self.kind_id(tag, spm, dtype)
            now = self._now
            for r in range(ints.shape[0]):
                t = float(times[r])
                if t < now:
                    self._counts["late"] += 1
                    self._lateness += now - t
                    t = now
                s, d, bin_, dup = (int(v) for v in ints[r])
                heapq.heappush(self._heap, (t, P_DELIVER, next(self._seq), (s, d, kind, bin_, dup, payload[r:r + 1]),
                                            UNREAD_FLAG))

    def meter_parts_in_flight(self, parts: list) -> None:
        """Meter messages for another host that will not be sent (a sealed host) as in flight at the end."""
        recs = []
        for tag, spm, dtype, ints, times, payload in parts:
            kind = self.kind_id(tag, spm, dtype)
            recs.append(np.column_stack([ints[:, 2], ints[:, 0], ints[:, 1], kind * 16 + ints[:, 3] * 8
                                         + CAUSE_IN_FLIGHT]))
        if recs:
            self._meter_records(np.concatenate(recs).astype(np.int64))

    # -- metering ---------------------------------------------------------------------------------------------------
    def flush(self, extra: np.ndarray | None = None) -> None:
        """Hand the buffered records to the meter (one batch per kind, fate and round) and the fault tally."""
        if self.compiled:
            nr = int(self._ctr[N_REC])
            recs = self._rec[:nr]
            if extra is not None:
                recs = np.concatenate([recs, extra.astype(np.int64)])
            self._ctr[N_REC] = 0
            ng = int(self._ctr[N_LOG])
            log = [(float(self._log_t[i]), int(self._log_i[i, 0]), int(self._log_i[i, 1])) for i in range(ng)]
            self._ctr[N_LOG] = 0
        else:
            # pragma: no mutate start (equivalent: numpy reads any negative size as -1)
            recs = np.frombuffer(self._rec_py, dtype=np.int64).reshape(-1, 4)
            # pragma: no mutate end
            if extra is not None:
                recs = np.concatenate([recs, extra.astype(np.int64)])
            self._rec_py = array("q")  # pragma: no mutate (equivalent: records are never negative: q or Q alike)
            log, self._log = self._log, []
        for t, node, event in log:
            self.plan.tally.node_event(t, node, NODE_EVENT_NAMES[event])
        if recs.shape[0]:
            self._meter_records(recs)

    def meter_in_flight(self) -> None:
        """Meter every message still on the heap as in flight at the end (delivered traffic: it was sent) and
        empty the heap of deliveries; flushes all records."""
        if self.compiled:
            nh = int(self._ctr[N_HEAP])
            slots = self._hk[:nh][self._hk[:nh, 0] == P_DELIVER, 2]
            mi = self._mi[slots]
            rec = np.column_stack([mi[:, 3], mi[:, 0], mi[:, 1], mi[:, 2] * 16 + mi[:, 4] * 8 + CAUSE_IN_FLIGHT])
        else:
            rows = [(a[3], a[0], a[1], a[2] * 16 + a[4] * 8 + CAUSE_IN_FLIGHT)
                    for _, prio, _, a, _ in self._heap if prio == P_DELIVER]
            rec = np.array(rows, dtype=np.int64).reshape(-1, 4)  # pragma: no mutate (equivalent: ints make int64)
        self.flush(extra=rec)

    def end(self) -> None:
        """The run is over and its messages in flight are metered (`meter_in_flight`): let go of the event queue
        and the message pool (about 100 bytes a node), keeping the counters and the node state."""
        if self.compiled:
            self._ctr[N_HEAP] = self._ctr[N_FREE] = 0
            # pragma: no mutate start (equivalent: nothing advances the loop after end, so arrays of any small size
            # and dtype let the pool go alike)
            self._ht, self._hk = np.empty(0), np.empty((0, 4), dtype=np.int64)
            self._mi, self._mp = np.empty((0, 5), dtype=np.int64), np.empty((0, self._mp.shape[1]))
            self._free = np.empty(0, dtype=np.int64)
            # pragma: no mutate end
        else:
            self._heap = []

    def _meter_records(self, recs: np.ndarray) -> None:
        code = recs[:, 3]
        cause = code & 7
        dropped = np.isin(cause, DROPPED_CAUSES)
        group = (code >> 4) * 2 + dropped
        order = np.lexsort((recs[:, 0], group))  # pragma: no mutate (equivalent: the batches cut by round are fewer)
        group = group[order]
        bins = recs[order, 0]
        src = recs[order, 1]
        dst = recs[order, 2]
        cut = np.flatnonzero((np.diff(group) != 0) | (np.diff(bins) != 0)) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [group.shape[0]]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            g = int(group[s])
            kind = g >> 1
            tag, spm, dtype = self._kinds[kind]
            if kind not in self._stub_payloads:      # one payload row per kind, which the meter sizes and never reads
                self._stub_payloads[kind] = np.zeros((1, spm), dtype=dtype)  # pragma: no mutate (equivalent: as said)
            batch = MessageBatch(tag, src[s:e], dst[s:e], self._stub_payloads[kind])
            if g & 1:                                # the meter keeps lost traffic per tag and edge, not per round
                self.meter.record_dropped(int(bins[s]), batch)  # pragma: no mutate (equivalent: as said)
            else:
                self.meter.record(int(bins[s]), batch)
        codes, counts = np.unique(code, return_counts=True)
        for c, m in zip(codes.tolist(), counts.tolist()):
            tag, spm, _ = self._kinds[c >> 4]
            self.plan.tally.messages(tag, CAUSE_NAMES[c & 7], bool((c >> 3) & 1), m, m * spm)

