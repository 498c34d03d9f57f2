"""Asynchronous gossip on Ray: the gossip node programs run in Ray actors that send to each other directly.

The peers are split over `actors` host actors ("peer-0..499", "peer-500..999": named after the nodes they carry,
so the Ray dashboard shows them). Each host runs the same node programs as the in-process gossip scheduler
(`svmsim.schedule.gossip`): its nodes' clocks, latencies and faults come from the same counter-based streams,
and it drives the programs through their compiled `GossipKernel` when they have one (Push-Sum and GADGET do;
the host's event loop is the in-process compiled loop, with the GIL released) or through their Python
``wake``/``receive`` methods otherwise (``compiled = False``).

Event loop and virtual time
---------------------------
Every host has its own event heap keyed by (time, priority, sequence) and its **own virtual clock**: the time of
the last event it handled. It handles its nodes' clock ticks, crashes, recoveries and churn, and the messages
addressed to its nodes. A message between two nodes of one host goes on that host's heap, exactly as in the
in-process scheduler. A message to a node of another host gets its fate (loss, duplication, extra delay) and its
arrival time ``send time + latency`` at the sender, and waits in an outgoing buffer; buffers are sent as one
``handle.deliver.remote(...)`` call per destination host (fire-and-forget: the sender never waits for the
receiver) when they hold about ``batch_bytes`` of messages, every ``flush_interval`` seconds of wall time, and
whenever the host runs out of work. The receiving host queues incoming batches and, between two slices of its
event loop, puts each message on its heap at ``max(arrival time, its own now)``: on time when the receiver's
clock has not reached the arrival time yet, *late* (at once) when it has. That is the real asynchrony; the run
summary counts late deliveries and their mean lateness.

Hosts are not kept in lockstep, but their clocks are kept close: each call carries the sender's *published time*
(the time of the next event on its heap; infinity once it has no event it will handle by itself), and a host
does not handle events later than ``min(published times of the other hosts) + max_skew`` (``max_skew`` is given
in rounds of virtual time, ``round_time``; default 0.5; ``None`` lets hosts run freely). A host that has to wait
sends its own published time to the others, so two hosts never wait for each other. ``max_skew`` bounds how
late a message can be, at the price of waiting: a host learns the others' times from their calls, and calls are
what Ray is slow at (about 1.5e3 per second on a 2-core machine), so a small skew makes the hosts take turns.
Measured on the project machine (1000 Push-Sum nodes, d = 100, 2 hosts, ``benchmarks/bench_ray_gossip.py``;
ranges over runs while other jobs shared the 2 cores): 0.5 rounds 1.0e5-1.4e5 messages/s, with 85% of the
cross-host messages late, by 0.23 rounds on average; 0.25 rounds 6e4-1.1e5/s (late by 0.11 rounds); 0.1 rounds
about 6e4/s (0.03 rounds); 1 round 1.2e5-1.5e5/s (0.5 rounds); no bound 1.1e5-1.8e5/s, but the hosts' clocks
drift hundreds of rounds apart. (Announcing the clock between batches, to let the hosts run side by side, was
slower: more calls.) The in-process compiled loop runs 1.2e6-1.3e6 messages/s in one process.

Metering and the merged ledger
------------------------------
Every host keeps its own `Meter` and `FaultTally`, with the in-process scheduler's convention: a message is
metered exactly once, when its fate is known, in the round of its **send** time: lost in the network (by the
sender, at the send time), dropped at a receiver that is down, or delivered (by the receiver). The driver merges
the hosts' ledgers exactly (`merge_ledgers`: totals, tags and dropped tags summed; edges summed by (src, dst);
rounds summed by round) and their fault tallies, so the merged ledger counts every message the programs sent,
once: declared + duplicated = delivered + dropped, as in-process. Per-round totals are the in-process ones only
in sum (which messages are sent depends on the interleaving, which differs from the in-process run).

Stop, drain and finish
----------------------
The driver polls the hosts every ``poll_interval`` seconds (counters; the snapshots taken at evaluation times).
It stops the run when every host has finished (the programs' ``done`` signal), when every host has reached the
virtual-time budget ``max_time`` or its share of the message or scalar budget (the budgets are split over hosts
in proportion to their nodes) or has no events left, when the observer says stop, or at the wall-clock budget.
Then it **drains**: every host stops its clocks (no more ticks, crashes or churn) and delivers every message
still in flight, in time order (replies that deliveries cause are sent and delivered too). The drain ends when
every host is idle with nothing pending and the hosts' counts of messages sent to and received from each other
are equal and unchanged over two consecutive polls. The hosts are then *sealed* (anything a host would still
send to another is metered as in flight at the end), the driver waits until every sealed message has been
received, and each host meters what it still holds as ``in_flight_at_end`` (nothing after a full drain) and
returns its ledger, tally, counters and final observation. A drain that does not end within ``drain_timeout``
seconds (a program that answers forever) is cut short the same way.

Evaluation. With ``eval_time``, every host takes a snapshot (its groups' ``observe()`` and its counters) when its
own clock reaches each point ``eval_time, 2*eval_time, ...``; the driver evaluates a point once every host has
reached it, so a metrics row at virtual time T combines each host's state at its own time T (messages between
hosts at that instant are in no node's state; a row's ``in_flight`` counts what the hosts held, not what was in
a Ray call). The final state is the one after the drain (in-process, a run leaves its last messages in flight).

Failures. The driver never waits without a timeout: a host that fails raises its program's exception (with a
note naming the host), a host that dies or does not answer within ``call_timeout`` raises `SvmsimError`, and so
do hosts that all sit idle with nothing handled for ``call_timeout`` seconds (a stall).

Ray. Hosts are plain actors (``num_cpus=0``) whose event loop runs in a thread of their own, in slices under a
lock; the actor's methods (``deliver`` from the other hosts; ``status``, ``stop_clocks``, ``seal``, ``finish``
from the driver) run on the actor's thread between slices. The programs and their data travel pickled in one
bytes object, so that their arrays arrive writable, as in-process. Compiling a host's loop for a program's kernel
takes a few seconds per host and run (numba cannot cache a loop bound to functions); ``deploy`` does it before
the run starts. Ray is started as the synchronous Ray engine does (a local instance unless one is running or
``address`` is given) and stopped by `close` only if this engine started it. A scenario with ``[engine] name =
"ray"`` and the gossip scheduler runs here (`run_scenario`); ``ray-cgraph`` is refused for gossip. Live
``ray.util.metrics`` are not exported for gossip runs yet.
"""
from __future__ import annotations

import collections
import heapq
import math
import os
import pickle
import threading
import time
import traceback
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable

import networkx as nx
import numba
import numpy as np

from ..comm.message import MessageBatch, frozen_ids
from ..comm.meter import Ledger, Meter
from ..errors import ProtocolError, ScenarioError, SvmsimError
from ..faults import FaultModel, FaultPlan, FaultTally
from ..program import Group, RoleSpec
from ..schedule.gossip import (CAUSE_DEAD_RECEIVER, CAUSE_DELIVERED, CAUSE_IN_FLIGHT, CAUSE_LOST, E_ROUND_TIME,
                               F_MAX_TIME, F_NEXT_EVAL, F_NOW, I_DOWN, I_EPOCH, I_SENT, I_TICKS, L_MAX_MESSAGES,
                               L_MAX_SCALARS, L_YIELD, NODE_EVENT_NAMES, N_BAD_DST, N_BAD_SRC, N_DELAYED, N_DONE,
                               N_EVENTS, N_FREE, N_HEAP, N_LOG, N_REC, N_SENT, N_SENT_SCALARS, N_WAKES, P_DELIVER,
                               P_WAKE, ST_BAD_EDGE, ST_EVAL_TIME, ST_FLUSH, ST_GROW, ST_MESSAGES, ST_QUIESCENT,
                               ST_SCALARS, ST_TIME, ST_YIELD, Clock, GossipProgram, GossipProgress, GossipScheduler,
                               GossipStopReason, LatencyModel, EventLoopArrays, grow_pool, program_sends,
                               python_node_event, register_kind, _enqueue,
                               _handle_event, _heap_pop, _heap_push, _next_tick, _no_room, _send,
                               _send_fate)
from ..topology import check_connected, neighbours
from .base import split_roles

__all__ = ["RayGossipEngine", "RayGossipResult", "RayGossipProgress", "GossipHost", "merge_ledgers",
           "merge_tallies", "run_scenario"]

_NO_LIMIT = np.iinfo(np.int64).max
_DEFAULT_OBJECT_STORE_BYTES = 512 * 1024**2
_PICKLE = pickle.HIGHEST_PROTOCOL

# counters, float slots and limits of the host loop beyond the in-process loop's (which use 0..12, 0..2, 0..3)
X_OUT, X_LATE = 13, 14
F_LATENESS = 3
L_DRAIN, L_XBATCH = 4, 5
ST_XFLUSH = 16
_YIELD_EVENTS = 4096
_WIRE_INTS = 4          # per remote message: src, dst, round bin, duplicate copy


# ----------------------------------------------------------------------------------------------------------------
# The host's compiled event loop: `schedule.gossip._kernel_loop` plus remote destinations, late arrivals, draining
# ----------------------------------------------------------------------------------------------------------------

@numba.njit(nogil=True, _nrt=False)
def _host_kernel_loop(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk, mi, mp, free, ni, rates,
                      keys, edge_key, env, cfg, adj_ptr, adj, owner, me, rec, log_t, log_i, ctr, fc, lim, out_dst,
                      out_tag, out_pay, xi, xf):
    """One slice of a host's event loop (`schedule.gossip._kernel_loop`, with the same event handling helpers,
    except that a
    message to another host's node goes to the outgoing buffer (xi, xf) instead of this heap, `done` is recorded
    rather than returned, and while draining only deliveries are handled: ticks and node events are dropped)."""
    max_out = out_dst.shape[0]
    round_time = env[E_ROUND_TIME]
    draining = lim[L_DRAIN] != 0
    since_yield = 0
    while True:
        if ctr[N_HEAP] == 0:
            return ST_QUIESCENT
        t = ht[0]
        if not draining:
            if fc[F_NEXT_EVAL] <= t and fc[F_NEXT_EVAL] <= fc[F_MAX_TIME]:
                return ST_EVAL_TIME
            if t > fc[F_MAX_TIME]:
                return ST_TIME
        status = _no_room(ctr, ht, rec, log_t, max_out)
        if status >= 0:
            return status
        if ctr[X_OUT] + 2 * max_out > xi.shape[0] or ctr[X_OUT] >= lim[L_XBATCH]:
            return ST_XFLUSH
        if since_yield >= lim[L_YIELD]:
            return ST_YIELD
        since_yield += 1
        t, prio, a, b = _heap_pop(ht, hk, ctr)
        if draining and prio != P_DELIVER:
            continue                                       # the clocks have stopped: only deliveries remain
        ran, n_out, done, sender = _handle_event(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk,
                                                 mi, mp, free, ni, rates, keys, env, cfg, rec, log_t, log_i, ctr,
                                                 fc, out_dst, out_tag, out_pay, t, prio, a, b)
        if not ran:
            continue
        for k in range(n_out):
            d = out_dst[k]
            tag = out_tag[k]
            copies, lat1, lat2, bin_ = _send(env, cfg, keys, edge_key, adj_ptr, adj, widths, ni, rec, ctr,
                                             round_time, t, sender, d, tag)
            if copies < 0:
                return ST_BAD_EDGE
            w = widths[tag]
            for copy in range(copies):
                arrive = t + (lat1 if copy == 0 else lat2)
                if owner[d] == me:
                    _enqueue(ht, hk, ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w, arrive)
                else:                                      # another host's node: into the outgoing buffer
                    x = ctr[X_OUT]
                    ctr[X_OUT] = x + 1
                    xi[x, 0] = owner[d]
                    xi[x, 1] = sender
                    xi[x, 2] = d
                    xi[x, 3] = tag
                    xi[x, 4] = bin_
                    xi[x, 5] = copy
                    xf[x, 0] = arrive
                    for q in range(w):
                        xf[x, 1 + q] = out_pay[k, q]
        ctr[N_DONE] = 1 if done else 0
        if ctr[N_SENT] >= lim[L_MAX_MESSAGES]:
            return ST_MESSAGES
        if ctr[N_SENT_SCALARS] >= lim[L_MAX_SCALARS]:
            return ST_SCALARS


_HOST_LOOPS: dict[tuple, Callable] = {}


def _host_loop_for(kernel) -> Callable:
    """`_host_kernel_loop` with the kernel's functions bound (compiled once per process, about a second)."""
    key = (kernel.wake, kernel.receive, kernel.crash, kernel.recover)
    loop = _HOST_LOOPS.get(key)
    if loop is None:
        wake, receive, crash, recover = key

        @numba.njit(nogil=True)
        def loop(prog, widths, ht, hk, mi, mp, free, ni, rates, keys, edge_key, env, cfg, adj_ptr, adj, owner, me,
                 rec, log_t, log_i, ctr, fc, lim, out_dst, out_tag, out_pay, xi, xf):
            return _host_kernel_loop(wake, receive, crash, recover, prog, widths, ht, hk, mi, mp, free, ni, rates,
                                     keys, edge_key, env, cfg, adj_ptr, adj, owner, me, rec, log_t, log_i, ctr, fc,
                                     lim, out_dst, out_tag, out_pay, xi, xf)

        loop = _HOST_LOOPS[key] = loop
    return loop


@numba.njit(nogil=True, cache=True)
def _push_remote(ht, hk, ctr, fc, mi, mp, free, tag, ints, times, payload):
    """Put messages that arrived from another host on the heap at max(arrival time, now); count the late ones."""
    now = fc[F_NOW]
    w = payload.shape[1]
    for r in range(ints.shape[0]):
        ctr[N_FREE] -= 1
        slot = free[ctr[N_FREE]]
        mi[slot, 0] = ints[r, 0]
        mi[slot, 1] = ints[r, 1]
        mi[slot, 2] = tag
        mi[slot, 3] = ints[r, 2]
        mi[slot, 4] = ints[r, 3]
        for q in range(w):
            mp[slot, q] = payload[r, q]
        t = times[r]
        if t < now:
            ctr[X_LATE] += 1
            fc[F_LATENESS] += now - t
            t = now
        _heap_push(ht, hk, ctr, t, P_DELIVER, slot, 0)


# ----------------------------------------------------------------------------------------------------------------
# The host actor
# ----------------------------------------------------------------------------------------------------------------

class _Setting:
    """The virtual-time model of a run, in the attribute names `GossipScheduler`'s set-up methods read (so that a
    host builds its environment, keys and initial events with exactly the in-process scheduler's code)."""

    def __init__(self, n_nodes, clock, latency, faults: FaultPlan, seed, round_time):
        self.n_nodes, self.clock, self.latency, self.faults = n_nodes, clock, latency, faults
        self.seed, self.round_time = int(seed), float(round_time)
        GossipScheduler._build_environment(self)

    def initial_events(self):
        return GossipScheduler._initial_events(self)


class _HostState:
    """What a gossip host actor does (the Ray actor `GossipHost` wraps it; tests may drive it directly).

    A background thread runs the event loop in slices; the actor's methods (called by the driver and by the
    other hosts) run on the actor's own thread and share the state under a lock.
    """

    def __init__(self, name: str, index: int):
        self.name = name
        self.index = int(index)
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._incoming: collections.deque = collections.deque()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._error_text = ""
        self._stop = False
        self._draining = False
        self._sealed = False
        self._capped = ""
        self._finished = False
        self._idle = False
        self._snapshots: list[dict] = []

    # -- set-up -------------------------------------------------------------------------------------------------
    def deploy(self, groups: list[tuple] | bytes, seed: int, n_nodes: int, owner: np.ndarray, adj_ptr: np.ndarray,
               adj: np.ndarray, clock: Clock, latency: LatencyModel, faults: FaultModel, round_time: float,
               compiled: bool | None, node_names: list[str], options: dict) -> dict:
        """Initialise this host's groups ``(gid, program, node_ids, node_data)`` and its event loop.

        The driver sends the groups pickled in one bytes object: unpickled here, the programs' and data's arrays
        are writable copies, as in-process (Ray hands numpy arguments over as read-only views).
        """
        if isinstance(groups, (bytes, bytearray)):
            groups = _ray().cloudpickle.loads(groups)
        self.n_nodes = n = int(n_nodes)
        self.n_hosts = int(options["n_hosts"])
        self.owner = np.ascontiguousarray(owner, dtype=np.int64)
        self.adj_ptr, self.adj = adj_ptr, adj
        self._adj_sets = None
        self.meter = Meter(n, None, node_names)
        self.plan = faults.bind(n, seed)
        self.setting = _Setting(n, clock, latency, self.plan, seed, round_time)
        self.round_time = float(round_time)
        self.max_skew = options.get("max_skew")
        self.batch_bytes = int(options.get("batch_bytes", 90_000))
        self.flush_interval = float(options.get("flush_interval", 0.005))
        self.programs: dict[int, GossipProgram] = {}
        self.states: dict[int, Any] = {}
        for gid, program, node_ids, node_data in sorted(groups, key=lambda t: t[0]):
            if not isinstance(program, GossipProgram):
                raise ScenarioError(f"role runs {type(program).__name__}, which is not a gossip program")
            self.programs[gid] = program
            try:
                self.states[gid] = program.init(node_ids, node_data, seed)
            except Exception as err:
                _note(err, self.name)
                raise
        self.local = np.flatnonzero(self.owner == self.index).astype(np.int64)
        self.node_group = np.full(n, -1, dtype=np.int64)
        for gid, _, node_ids, _ in groups:
            self.node_group[np.asarray(node_ids, dtype=np.int64)] = gid
        self._kinds: list[tuple[str, int, np.dtype]] = []
        self._kind_ids: dict[tuple, int] = {}
        self._stub_payloads: dict[int, np.ndarray] = {}
        self.faults = self.plan              # the attribute name `GossipScheduler._meter_records` reads
        self.peer_pub = np.zeros(self.n_hosts)
        self.peer_pub[self.index] = math.inf
        self.pub_sent = np.full(self.n_hosts, -math.inf)
        self.x_sent = np.zeros(self.n_hosts, dtype=np.int64)
        self.x_received = np.zeros(self.n_hosts, dtype=np.int64)
        self.x_calls = 0
        self.x_bytes = 0
        self.peers: list = []
        self._max_time = math.inf
        self._eval_time = math.inf
        self._next_eval = math.inf
        self._eval_index = 0
        self._last_send = time.perf_counter()
        kernel = None
        if compiled is not False and len(self.programs) == 1:
            gid = next(iter(self.programs))
            kernel = self.programs[gid].kernel(self.states[gid])
        if compiled and kernel is None:
            raise ScenarioError("compiled = true needs a single group per host whose program provides a "
                                "GossipKernel; allowed: compiled = false")
        self._kernel = kernel
        self.compiled = kernel is not None
        events = [e for e in self.setting.initial_events() if self.owner[e[2]] == self.index]
        if self.compiled:
            self._init_compiled(events)
        else:
            self._init_python(events)
        return {"name": self.name, "nodes": int(self.local.size), "compiled": self.compiled}

    def _kind_id(self, tag: str, spm: int, dtype) -> int:
        return register_kind(self._kinds, self._kind_ids, tag, spm, dtype)

    def _init_compiled(self, events) -> None:
        k = self._kernel
        n = self.n_nodes
        self._loop = _host_loop_for(k)
        self._widths = np.asarray(k.widths, dtype=np.int64)
        for tag, w in zip(k.tags, self._widths):
            self._kind_id(tag, int(w), np.float64)
        self._tag_ids = {tag: i for i, tag in enumerate(k.tags)}
        width = int(self._widths.max())
        a = EventLoopArrays.allocate(n, 4 * int(self.local.size) + 64, events, k.max_out, width, n_counters=24,
                                     n_settings=8)
        (self._ht, self._hk, self._mi, self._mp, self._free, self._ni, self._rec, self._log_t, self._log_i,
         self._ctr, self._fc, self._lim, self._out_dst, self._out_tag, self._out_pay) = (
            a.ht, a.hk, a.mi, a.mp, a.free, a.ni, a.rec, a.log_t, a.log_i, a.ctr, a.fc, a.lim, a.out_dst, a.out_tag,
            a.out_pay)
        self._fc[F_NEXT_EVAL] = math.inf
        self._lim[L_MAX_MESSAGES] = _NO_LIMIT
        self._lim[L_MAX_SCALARS] = _NO_LIMIT
        self._lim[L_YIELD] = _YIELD_EVENTS
        self._xbatch = max(1, self.batch_bytes // (8 * (_WIRE_INTS + 1 + width)))
        self._lim[L_XBATCH] = self._xbatch
        self._xi = np.empty((self._xbatch + 2 * k.max_out + 8, 6), dtype=np.int64)
        self._xf = np.empty((self._xbatch + 2 * k.max_out + 8, 1 + width))
        # compile now (a slice that handles nothing), so that the run's first slice does not
        self._fc[F_MAX_TIME] = -math.inf
        self._call_loop()
        self._fc[F_MAX_TIME] = math.inf

    def _init_python(self, events) -> None:
        n = self.n_nodes
        self._heap: list[tuple] = []
        self._seq = 0
        self._ni_py = [[0] * 6 for _ in range(n)]
        for t, prio, a, b in events:
            heapq.heappush(self._heap, (t, prio, self._seq, a, b))
            self._seq += 1
        for node in range(n):
            self._ni_py[node][I_TICKS] = 1
        self._rec_py = array("q")
        self._log: list[tuple[float, int, int]] = []
        self._counts = {"wakes": 0, "sent": 0, "sent_scalars": 0, "events": 0, "delayed": 0, "late": 0}
        self._lateness = 0.0
        self._now = 0.0
        self._group_done = {gid: False for gid in self.programs}
        self._done_py = False
        self._one_ids = [frozen_ids([i]) for i in range(n)]
        self._adj_sets = [set(self.adj[self.adj_ptr[i]:self.adj_ptr[i + 1]].tolist()) for i in range(n)]
        self._xout: list[tuple] = []
        self._xbatch = max(1, self.batch_bytes // 900)
        self._py_max_messages = _NO_LIMIT
        self._py_max_scalars = _NO_LIMIT

    def connect(self, peers: list) -> bool:
        """Handles of every host, this one included (by index)."""
        self.peers = list(peers)
        return True

    # -- running ------------------------------------------------------------------------------------------------
    def start(self, max_time: float | None, max_messages: int | None, max_scalars: int | None,
              eval_time: float | None) -> bool:
        """Start the event loop thread (budgets are this host's share)."""
        with self._lock:
            self._max_time = math.inf if max_time is None else float(max_time)
            if eval_time is not None:
                self._eval_time = float(eval_time)
                self._next_eval = self._eval_time
            mm = _NO_LIMIT if max_messages is None else int(max_messages)
            ms = _NO_LIMIT if max_scalars is None else int(max_scalars)
            if self.compiled:
                self._lim[L_MAX_MESSAGES] = mm
                self._lim[L_MAX_SCALARS] = ms
                self._fc[F_NEXT_EVAL] = self._next_eval
            else:
                self._py_max_messages, self._py_max_scalars = mm, ms
        self._thread = threading.Thread(target=self._run_thread, name=f"svmsim-gossip-{self.name}", daemon=True)
        self._thread.start()
        return True

    def _run_thread(self) -> None:
        try:
            while not self._stop:
                with self._lock:
                    if self._stop:
                        break
                    work = self._slice()
                if not work:
                    self._wakeup.wait(0.02)
                    self._wakeup.clear()
        except BaseException as err:  # noqa: BLE001 - reported to the driver by status()
            _note(err, self.name)
            self._error = err
            self._error_text = "".join(traceback.format_exception(type(err), err, err.__traceback__))

    def _limit(self) -> float:
        limit = self._max_time
        if self.max_skew is not None and self.n_hosts > 1:
            limit = min(limit, float(self.peer_pub.min()) + self.max_skew)
        return limit

    def _slice(self) -> bool:
        """Take in what arrived, run the loop for a while, send what is due. False when there was nothing to do."""
        took = self._take_incoming()
        if self.compiled:
            self._fc[F_MAX_TIME] = self._limit()
            self._lim[L_DRAIN] = 1 if self._draining else 0
            status = self._call_loop()
        else:
            status = self._run_python(self._limit(), self._draining)
        if status == ST_EVAL_TIME:
            self._snapshot()
        elif status == ST_FLUSH or (status == ST_YIELD and not self.compiled):
            self._flush()
        elif status == ST_GROW:
            self._grow(0)
        elif status == ST_XFLUSH:
            self._send_out()
        elif status == ST_BAD_EDGE:
            s, d = int(self._ctr[N_BAD_SRC]), int(self._ctr[N_BAD_DST])
            names = self.meter.node_names
            raise ProtocolError(f"node {s} ({names[s]}) sent a message to node {d} ({names[d]}), which are not "
                                "neighbours in the topology; gossip programs may only send along edges")
        elif status in (ST_MESSAGES, ST_SCALARS):
            self._cap("messages" if status == ST_MESSAGES else "scalars")
        idle = status in (ST_TIME, ST_QUIESCENT) and not self._incoming
        if idle or time.perf_counter() - self._last_send >= self.flush_interval:
            self._send_out()
        if idle:
            self._flush()
            self._send_times()
        self._idle = idle and not took
        return not self._idle

    def _cap(self, what: str) -> None:
        """This host's share of the message or scalar budget is spent: its clocks stop at the current time."""
        self._capped = what
        self._max_time = self.now
        if self.compiled:
            self._lim[L_MAX_MESSAGES] = _NO_LIMIT
            self._lim[L_MAX_SCALARS] = _NO_LIMIT
        else:
            self._py_max_messages = self._py_max_scalars = _NO_LIMIT

    def _call_loop(self) -> int:
        return int(self._loop(self._kernel.arrays, self._widths, self._ht, self._hk, self._mi, self._mp, self._free,
                              self._ni, self.setting._rates, self.setting._keys, self.setting._edge_key,
                              self.setting._env, self.setting._cfg, self.adj_ptr, self.adj, self.owner, self.index,
                              self._rec, self._log_t, self._log_i, self._ctr, self._fc, self._lim, self._out_dst,
                              self._out_tag, self._out_pay, self._xi, self._xf))

    def _grow(self, extra: int) -> None:
        """Grow the message pool and the heap until `extra` more messages fit (compiled loop)."""
        k = self._kernel
        while True:
            nh = int(self._ctr[N_HEAP])
            if int(self._ctr[N_FREE]) >= extra + 2 * k.max_out and self._ht.shape[0] >= nh + extra + 2 * k.max_out + 2:
                if extra or int(self._ctr[N_FREE]) >= 2 * k.max_out:
                    return
            self._mi, self._mp, self._free, self._ht, self._hk = grow_pool(self._mi, self._mp, self._free,
                                                                           self._ctr, self._ht, self._hk)

    @property
    def now(self) -> float:
        return float(self._fc[F_NOW]) if self.compiled else self._now

    def _heap_top(self) -> float:
        if self.compiled:
            return float(self._ht[0]) if self._ctr[N_HEAP] > 0 else math.inf
        return self._heap[0][0] if self._heap else math.inf

    def _published(self) -> float:
        """The time of this host's next event: what the others may run ahead of (inf when it has none it will
        handle by itself: no events, or none before its time budget or the time its share of a budget ran out)."""
        top = self._heap_top()
        return top if top <= self._max_time else math.inf

    # -- the Python event loop ---------------------------------------------------------------------------------
    def _run_python(self, limit: float, draining: bool) -> int:
        """One slice through the programs' Python methods (`GossipScheduler._run_python` plus remote sends)."""
        heap = self._heap
        heappush, heappop = heapq.heappush, heapq.heappop
        ni = self._ni_py
        rec = self._rec_py
        programs, states = self.programs, self.states
        node_group = self.node_group
        owner = self.owner
        me = self.index
        one_ids = self._one_ids
        adj_sets = self._adj_sets
        st = self.setting
        env, cfg, keys, rates, edge_key = st._env, st._cfg, st._keys, st._rates, st._edge_key
        round_time = self.round_time
        counts = self._counts
        seq = self._seq
        xout = self._xout
        wakes, sent, sent_scalars, events, delayed = (counts["wakes"], counts["sent"], counts["sent_scalars"],
                                                      counts["events"], counts["delayed"])
        now = self._now
        next_eval = self._next_eval
        since = 0
        status = ST_QUIESCENT
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
            if since >= 1024:
                status = ST_YIELD
                break
            if len(xout) >= self._xbatch:
                status = ST_XFLUSH
                break
            since += 1
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
                heappush(heap, (t + _next_tick(cfg, env, keys, rates, a, k), P_WAKE, seq, a, b))
                seq += 1
                wakes += 1
                gid = int(node_group[a])
                states[gid], out = programs[gid].wake(states[gid], one_ids[a], np.array((t,)))
                sender = a
            elif prio == P_DELIVER:
                now = t
                events += 1
                src, dst, kind, bin_, dup, payload = a
                if ni[dst][I_DOWN] > 0:
                    rec.extend((bin_, src, dst, kind * 16 + dup * 8 + CAUSE_DEAD_RECEIVER))
                    continue
                rec.extend((bin_, src, dst, kind * 16 + dup * 8 + CAUSE_DELIVERED))
                gid = int(node_group[dst])
                batch = MessageBatch(self._kinds[kind][0], one_ids[src], one_ids[dst], payload)
                states[gid], out = programs[gid].receive(states[gid], batch, np.array((t,)))
                sender = dst
            else:
                now = t
                events += 1
                seq = python_node_event(heap, seq, t, prio, a, b, ni[a], int(node_group[a]), programs, states,
                                        one_ids, env, keys, cfg, rates, self._log)
                continue
            bin_ = int(t / round_time)
            for kind, spm, nbytes, s, d, row in program_sends(out, sender, self._kind_id):
                if not 0 <= d < self.n_nodes or d not in adj_sets[s]:
                    names = self.meter.node_names
                    raise ProtocolError(f"node {s} ({names[s]}) sent a message to node {d}, which is not a "
                                        "neighbour in the topology; gossip programs may only send along edges")
                nstate = ni[s]
                c = nstate[I_SENT]
                nstate[I_SENT] = c + 1
                sent += 1
                sent_scalars += spm
                copies, dl, lat1, lat2 = _send_fate(env, cfg, keys, edge_key, s, d, c, nbytes)
                if copies == 0:
                    rec.extend((bin_, s, d, kind * 16 + CAUSE_LOST))
                    continue
                delayed += dl
                for copy in range(copies):
                    arrive = t + (lat1 if copy == 0 else lat2)
                    if owner[d] == me:
                        heappush(heap, (arrive, P_DELIVER, seq, (s, d, kind, bin_, copy, row), 0))
                        seq += 1
                    else:
                        xout.append((int(owner[d]), kind, s, d, bin_, copy, arrive, row))
            sig = out.signals
            if sig and "done" in sig:
                self._group_done[int(node_group[sender])] = bool(sig["done"])
                self._done_py = all(self._group_done.values())
            if sent >= self._py_max_messages:
                status = ST_MESSAGES
                break
            if sent_scalars >= self._py_max_scalars:
                status = ST_SCALARS
                break
        self._seq = seq
        counts.update(wakes=wakes, sent=sent, sent_scalars=sent_scalars, events=events, delayed=delayed)
        self._now = now
        return status

    # -- messages between hosts ----------------------------------------------------------------------------------
    def deliver(self, sender: int, count: int, published: float, data: bytes | None) -> None:
        """Called by another host (fire-and-forget): queue a batch of messages for the loop thread."""
        self.peer_pub[sender] = published
        if count:
            self.x_received[sender] += count
            self._incoming.append(data)
        self._wakeup.set()

    def _take_incoming(self) -> bool:
        """Put the queued messages of other hosts on the heap."""
        took = False
        while self._incoming:
            data = self._incoming.popleft()
            took = True
            for tag, spm, dtype, ints, times, payload in pickle.loads(data):
                # unpickled arrays may be read-only views of the call's buffer; programs may write to what they get
                ints, times, payload = (np.require(a, requirements=("C", "W")) for a in (ints, times, payload))
                if self.compiled:
                    m = ints.shape[0]
                    self._grow(m)
                    _push_remote(self._ht, self._hk, self._ctr, self._fc, self._mi, self._mp, self._free,
                                 self._tag_ids[tag], ints, times, payload)
                else:
                    kind = self._kind_id(tag, spm, dtype)
                    now = self._now
                    for r in range(ints.shape[0]):
                        t = float(times[r])
                        if t < now:
                            self._counts["late"] += 1
                            self._lateness += now - t
                            t = now
                        s, d, bin_, dup = (int(v) for v in ints[r])
                        heapq.heappush(self._heap, (t, P_DELIVER, self._seq, (s, d, kind, bin_, dup,
                                                                              payload[r:r + 1]), 0))
                        self._seq += 1
        return took

    def _outgoing(self) -> dict[int, list]:
        """The outgoing buffer as ``{host: [(tag, spm, dtype, ints, times, payload), ...]}``; empties it."""
        out: dict[int, list] = {}
        if self.compiled:
            x = int(self._ctr[X_OUT])
            if x == 0:
                return out
            xi, xf = self._xi[:x], self._xf[:x]
            self._ctr[X_OUT] = 0
            for dest in np.unique(xi[:, 0]).tolist():
                for_dest = xi[:, 0] == dest
                for tag in np.unique(xi[for_dest, 3]).tolist():
                    sel = np.flatnonzero(for_dest & (xi[:, 3] == tag))
                    w = int(self._widths[tag])
                    out.setdefault(dest, []).append((self._kernel.tags[tag], w, "<f8",
                                                     np.ascontiguousarray(xi[sel][:, [1, 2, 4, 5]]),
                                                     xf[sel, 0].copy(), np.ascontiguousarray(xf[sel, 1:1 + w])))
            return out
        if not self._xout:
            return out
        rows, self._xout = self._xout, []
        by: dict[tuple, list] = {}
        for r in rows:
            by.setdefault((r[0], r[1]), []).append(r)
        for (dest, kind), rs in by.items():
            tag, spm, dtype = self._kinds[kind]
            ints = np.array([r[2:6] for r in rs], dtype=np.int64).reshape(-1, _WIRE_INTS)
            times = np.array([r[6] for r in rs], dtype=np.float64)
            payload = np.concatenate([r[7] for r in rs]).astype(dtype, copy=False).reshape(len(rs), spm)
            out.setdefault(dest, []).append((tag, spm, dtype.str, ints, times, payload))
        return out

    def _send_out(self) -> None:
        """Send the outgoing buffer: one fire-and-forget call per destination host (metered in flight once
        sealed)."""
        self._last_send = time.perf_counter()
        out = self._outgoing()
        if not out:
            return
        for dest, parts in out.items():
            count = sum(p[3].shape[0] for p in parts)
            if self._sealed:
                self._record_in_flight(parts)
                continue
            data = pickle.dumps(parts, protocol=_PICKLE)
            pub = self._published()
            self.peers[dest].deliver.remote(self.index, count, pub, data)
            self.pub_sent[dest] = pub
            self.x_sent[dest] += count
            self.x_calls += 1
            self.x_bytes += len(data)

    def _send_times(self) -> None:
        """Tell the other hosts this host's published time when it changed (so that nobody waits for it)."""
        if self._sealed or self.max_skew is None:
            return
        pub = self._published()
        for dest, handle in enumerate(self.peers):
            if dest != self.index and self.pub_sent[dest] != pub:
                handle.deliver.remote(self.index, 0, pub, None)
                self.pub_sent[dest] = pub

    def _record_in_flight(self, parts: list) -> None:
        recs = []
        for tag, spm, dtype, ints, times, payload in parts:
            kind = self._kind_id(tag, spm, dtype)
            codes = kind * 16 + ints[:, 3] * 8 + CAUSE_IN_FLIGHT
            recs.append(np.column_stack([ints[:, 2], ints[:, 0], ints[:, 1], codes]))
        if recs:
            self._meter(np.concatenate(recs).astype(np.int64))

    # -- metering ------------------------------------------------------------------------------------------------
    def _flush(self) -> None:
        """Hand the buffered records to the meter and the fault tally."""
        if self.compiled:
            nr = int(self._ctr[N_REC])
            recs = self._rec[:nr].copy()
            self._ctr[N_REC] = 0
            ng = int(self._ctr[N_LOG])
            log = [(float(self._log_t[i]), int(self._log_i[i, 0]), int(self._log_i[i, 1])) for i in range(ng)]
            self._ctr[N_LOG] = 0
        else:
            recs = np.frombuffer(self._rec_py, dtype=np.int64).reshape(-1, 4).copy() if len(self._rec_py) else \
                np.zeros((0, 4), dtype=np.int64)
            self._rec_py = array("q")
            log, self._log = self._log, []
        for t, node, event in log:
            self.plan.tally.node_event(t, node, NODE_EVENT_NAMES[event])
        self._meter(recs)

    def _meter(self, recs: np.ndarray) -> None:
        if recs.shape[0]:
            GossipScheduler._meter_records(self, recs)

    def _pending(self) -> int:
        """Messages this host still holds: on its heap, queued from other hosts, in its outgoing buffer."""
        queued = len(self._incoming)
        if self.compiled:
            nh = int(self._ctr[N_HEAP])
            return int(np.count_nonzero(self._hk[:nh, 0] == P_DELIVER)) + int(self._ctr[X_OUT]) + queued
        return sum(1 for e in self._heap if e[1] == P_DELIVER) + len(self._xout) + queued

    def _counters(self) -> dict:
        if self.compiled:
            c = self._ctr
            out = {"wakes": int(c[N_WAKES]), "events": int(c[N_EVENTS]), "sent": int(c[N_SENT]),
                   "sent_scalars": int(c[N_SENT_SCALARS]), "delayed": int(c[N_DELAYED]), "late": int(c[X_LATE]),
                   "lateness": float(self._fc[F_LATENESS]), "done": bool(c[N_DONE])}
        else:
            c = self._counts
            out = {k: c[k] for k in ("wakes", "events", "sent", "sent_scalars", "delayed", "late")}
            out.update(lateness=self._lateness, done=self._done_py)
        out.update(time=self.now, messages=self.meter.messages, scalars=self.meter.scalars, bytes=self.meter.bytes)
        return out

    def _snapshot(self) -> None:
        """The state at evaluation point `_next_eval` of this host's clock."""
        self._flush()
        at = self._next_eval
        snap = self._counters()
        snap.update(index=self._eval_index, time=at, in_flight=self._pending(), observations=self._observe())
        self._snapshots.append(snap)
        self._eval_index += 1
        self._next_eval = at + self._eval_time
        if self.compiled:
            self._fc[F_NEXT_EVAL] = self._next_eval

    def _observe(self) -> dict:
        out = {}
        for gid in sorted(self.programs):
            try:
                out[gid] = self.programs[gid].observe(self.states[gid])
            except Exception as err:
                _note(err, self.name)
                raise
        return out

    # -- driver calls --------------------------------------------------------------------------------------------
    def status(self) -> dict:
        """Counters, flags and the snapshots taken since the last call."""
        if self._error is not None:
            return {"error": self._error, "error_text": self._error_text}
        with self._lock:
            heap_top = self._heap_top()
            out = self._counters()
            out.update(error=None, pending=self._pending(), idle=self._idle, draining=self._draining,
                       capped=self._capped, heap_top=heap_top,
                       ended=(not self._draining and not self._incoming
                              and (heap_top > self._max_time or math.isinf(heap_top))),
                       x_sent=self.x_sent.copy(), x_received=self.x_received.copy(), x_calls=self.x_calls,
                       x_bytes=self.x_bytes, snapshots=self._snapshots, alive=self._thread is not None
                       and self._thread.is_alive())
            self._snapshots = []
        if self._error is not None:          # the loop failed while this call waited for the lock
            return {"error": self._error, "error_text": self._error_text}
        return out

    def observe(self) -> dict:
        with self._lock:
            return self._observe()

    def stop_clocks(self) -> bool:
        """Start the drain: no more ticks or node events; every message still in flight is delivered."""
        self._draining = True
        self._wakeup.set()
        return True

    def seal(self) -> np.ndarray:
        """Stop sending to other hosts (from now on such messages are metered in flight at the end); returns how
        many messages this host sent to each host."""
        with self._lock:
            self._send_out()
            self._sealed = True
            return self.x_sent.copy()

    def finish(self) -> dict:
        """Stop the loop, meter what is still held as in flight at the end, and return this host's results."""
        self._stop = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout=60.0)
        if self._error is not None:
            raise self._error
        with self._lock:
            self._sealed = True
            self._take_incoming()
            self._send_out()                      # sealed: metered as in flight
            self._flush()
            if self.compiled:
                nh = int(self._ctr[N_HEAP])
                slots = self._hk[:nh][self._hk[:nh, 0] == P_DELIVER, 2]
                mi = self._mi[slots]
                rec = np.column_stack([mi[:, 3], mi[:, 0], mi[:, 1], mi[:, 2] * 16 + mi[:, 4] * 8 + CAUSE_IN_FLIGHT])
                self._ctr[N_HEAP] = 0
                ni = self._ni
            else:
                rows = [(a[3], a[0], a[1], a[2] * 16 + a[4] * 8 + CAUSE_IN_FLIGHT)
                        for _, prio, _, a, _ in self._heap if prio == P_DELIVER]
                rec = np.array(rows, dtype=np.int64).reshape(-1, 4)
                self._heap = []
                ni = np.array(self._ni_py, dtype=np.int64).reshape(-1, 6)
            self._meter(rec.astype(np.int64))
            self._finished = True
            tally = self.plan.tally
            local = self.local
            return {"ledger": self.meter.ledger(), "counters": self._counters(), "observations": self._observe(),
                    "tally": {"by_fate": dict(tally.by_fate), "node_event_counts": dict(tally.node_event_counts),
                              "node_events": list(tally.node_events)},
                    "down": local[ni[local, I_DOWN] > 0], "sent_per_node": ni[local, I_SENT].copy(),
                    "x_sent": self.x_sent.copy(), "x_received": self.x_received.copy(), "x_calls": self.x_calls,
                    "x_bytes": self.x_bytes, "time": self.now}

    def ping(self) -> bool:
        return True


def _note(err: BaseException, host: str) -> None:
    if hasattr(err, "add_note") and not getattr(err, "_svmsim_noted", False):
        err.add_note(f"(raised on Ray gossip host {host!r})")
        try:
            err._svmsim_noted = True
        except Exception:  # noqa: BLE001 - some exceptions take no attributes
            pass


def _ray():
    import ray

    return ray


_GOSSIP_HOST = None


def GossipHost():  # noqa: N802 - a class factory: Ray is imported only when a Ray run is made
    """The Ray actor class of a gossip host (`_HostState` as a plain, ordered actor that needs no CPU)."""
    global _GOSSIP_HOST
    if _GOSSIP_HOST is None:
        _GOSSIP_HOST = _ray().remote(num_cpus=0)(_HostState)
    return _GOSSIP_HOST


# ----------------------------------------------------------------------------------------------------------------
# Merging the hosts' ledgers and tallies
# ----------------------------------------------------------------------------------------------------------------

def _sum_rows(tables: list[np.ndarray], key_cols: int, width: int) -> np.ndarray:
    tables = [np.asarray(t, dtype=np.int64).reshape(-1, width) for t in tables]
    rows = np.concatenate(tables) if tables else np.zeros((0, width), dtype=np.int64)
    if rows.shape[0] == 0:
        return rows.copy()
    keys, inv = np.unique(rows[:, :key_cols], axis=0, return_inverse=True)
    inv = inv.ravel()
    sums = np.column_stack([np.bincount(inv, rows[:, c], minlength=keys.shape[0]) for c in range(key_cols, width)])
    return np.column_stack([keys, sums.astype(np.int64)]).astype(np.int64)


def _sorted_rows(tables: list[np.ndarray]) -> np.ndarray:
    """The rows of (iteration, round) tables together, in lexicographic order."""
    rows = np.concatenate([np.asarray(t, dtype=np.int64).reshape(-1, 2) for t in tables])
    return rows[np.lexsort((rows[:, 1], rows[:, 0]))]


def merge_ledgers(ledgers: list[Ledger]) -> Ledger:
    """One ledger from several meters' (exact: totals, tags and dropped tags summed; edges summed by (src, dst),
    sorted; rounds summed by round)."""
    if not ledgers:
        raise ValueError("no ledgers to merge")

    def add(dicts):
        out: dict = {}
        for d in dicts:
            for k, v in d.items():
                acc = out.setdefault(k, [0] * len(v))
                for i, x in enumerate(v):
                    acc[i] += int(x)
        return {k: out[k] for k in sorted(out)}

    totals = {k: sum(int(lg.totals[k]) for lg in ledgers) for k in ledgers[0].totals}
    return Ledger(totals=totals, by_tag=add(lg.by_tag for lg in ledgers),
                  dropped_by_tag=add(lg.dropped_by_tag for lg in ledgers),
                  edges=_sum_rows([lg.edges for lg in ledgers], 2, 5),
                  dropped_edges=_sum_rows([lg.dropped_edges for lg in ledgers], 2, 5),
                  rounds=_sum_rows([lg.rounds for lg in ledgers], 1, 4),
                  iteration_rounds=_sorted_rows([lg.iteration_rounds for lg in ledgers]),
                  node_names=list(ledgers[0].node_names))


def merge_tallies(tallies: list[dict]) -> FaultTally:
    """One `FaultTally` from the hosts' (messages by fate summed; node events in time order)."""
    out = FaultTally()
    events = []
    for t in tallies:
        for key, (m, s) in t["by_fate"].items():
            out.messages(key[0], key[1], key[2], m, s)
        for kind, c in t["node_event_counts"].items():
            out.node_event_counts[kind] = out.node_event_counts.get(kind, 0) + c
        events.extend(t["node_events"])
    out.node_events = sorted(events)[:FaultTally.MAX_EVENTS_LISTED]
    out.node_event_counts = dict(sorted(out.node_event_counts.items()))
    return out


# ----------------------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class RayGossipProgress(GossipProgress):
    """`GossipProgress` summed over the hosts, plus what their meters have settled (messages, scalars, bytes).
    ``time`` is the evaluation point (rows) or the latest host clock (end)."""

    messages: int = 0
    scalars: int = 0
    bytes: int = 0


@dataclass
class RayGossipResult:
    """What a Ray gossip run produced."""

    reason: str
    ledger: Ledger
    faults: dict                      # the fault summary (as `GossipScheduler.fault_summary`)
    observations: dict                # gid -> final observation (after the drain)
    progress: RayGossipProgress
    stats: dict = field(default_factory=dict)


class RayGossipEngine:
    """Runs gossip node programs in Ray actors that send to each other directly (see the module docstring).

    Parameters
    ----------
    actors: number of host actors (each role played by several nodes is split into this many groups).
    address: a running Ray cluster to join; None starts a local Ray unless Ray is already initialised here.
    init_options: extra keyword arguments for ``ray.init``.
    namespace: Ray namespace of the host actors (default ``svmsim-<8 hex digits>``).
    max_skew: how far a host may run ahead of the other hosts' published times, in rounds of virtual time
        (round_time); None: no bound.
    batch_bytes: a host sends a buffer to another host once it holds about this many bytes (kept under Ray's
        100 KiB inline limit by default).
    flush_interval: ... or once this many seconds of wall time have passed since its last send.
    poll_interval: seconds between the driver's polls of the hosts.
    call_timeout: seconds the driver waits for any one call (deploy waits 5x as long: it compiles the loop).
    drain_timeout: seconds the drain may take before what is left is metered as in flight at the end.
    """

    name = "ray"

    def __init__(self, actors: int = 2, address: str | None = None, init_options: dict | None = None,
                 namespace: str | None = None, max_skew: float | None = 0.5, batch_bytes: int = 90_000,
                 flush_interval: float = 0.005, poll_interval: float = 0.05, call_timeout: float = 60.0,
                 drain_timeout: float = 30.0):
        if int(actors) < 1:
            raise ScenarioError(f"engine actors = {actors!r} is not a number of Ray actors; allowed: an integer >= 1")
        if not (max_skew is None or (isinstance(max_skew, (int, float)) and not isinstance(max_skew, bool)
                                     and 0 <= max_skew < math.inf)):
            raise ScenarioError(f"max_skew = {max_skew!r} is out of range; allowed: a number of rounds >= 0, or None")
        self.actors = int(actors)
        self.address = address
        self.init_options = dict(init_options or {})
        self.namespace = namespace or f"svmsim-{uuid.uuid4().hex[:8]}"
        self.max_skew = max_skew
        self.batch_bytes = int(batch_bytes)
        self.flush_interval = float(flush_interval)
        self.poll_interval = float(poll_interval)
        self.call_timeout = float(call_timeout)
        self.drain_timeout = float(drain_timeout)
        self.started_ray = False
        self.groups: list[Group] = []
        self.hosts: dict[str, list[int]] = {}
        self._handles: list = []
        self._closed = False
        self._ran = False

    @classmethod
    def from_engine(cls, engine, **options) -> "RayGossipEngine":
        """A gossip engine with the settings of a (not yet deployed) `RayEngine` (what the runner builds)."""
        if isinstance(engine, RayGossipEngine):
            return engine
        kw = {"actors": getattr(engine, "actors", 2), "address": getattr(engine, "address", None),
              "init_options": getattr(engine, "init_options", None)}
        kw.update(options)
        return cls(**kw)

    # -- placement ----------------------------------------------------------------------------------------------
    def plan(self, roles: list[RoleSpec]) -> list[Group]:
        """Every role with several nodes split into `actors` contiguous groups ("peer-0..499", ...); a role of one
        node joins the first host of the largest role."""
        from .ray_engine import colocate_groups

        return colocate_groups(split_roles(roles, {s.role: self.actors for s in roles if len(s.node_ids) > 1}))

    def _ensure_ray(self) -> None:
        ray = _ray()
        if ray.is_initialized():
            return
        if self.address is None or self.address == "local":
            options = {"num_cpus": os.cpu_count() or 1, "include_dashboard": False,
                       "object_store_memory": _DEFAULT_OBJECT_STORE_BYTES, "log_to_driver": False}
        else:
            options = {"log_to_driver": False}
        options.update(self.init_options)
        ray.init(address=self.address, **options)
        self.started_ray = True

    def deploy(self, groups: list[Group], seed: int, topology: nx.Graph, *, clock: Clock | None = None,
               latency: LatencyModel | None = None, faults: FaultModel | None = None,
               round_time: float | None = None, compiled: bool | None = None,
               node_names: list[str] | None = None) -> None:
        """Start one host actor per distinct `Group.host` and initialise its groups and event loop."""
        from .ray_engine import placement

        if self._handles:
            raise RuntimeError("this RayGossipEngine is already deployed; build a new one")
        n = topology.number_of_nodes()
        check_connected(topology, "gossip topology")
        self.clock = clock or Clock()
        self.latency = latency or LatencyModel()
        self.round_time = float(round_time) if round_time is not None else 1.0 / self.clock.rate
        if not self.round_time > 0:
            raise ScenarioError(f"round_time = {round_time!r} is out of range; allowed: a number > 0")
        self.fault_model = faults if faults is not None else FaultModel()
        self.seed = int(seed)
        self.plan_ = self.fault_model.bind(n, self.seed)     # validates node ids; the driver's copy for the summary
        self.n_nodes = n
        owner = np.full(n, -1, dtype=np.int64)
        self.groups = sorted(groups, key=lambda g: g.gid)
        self.hosts = placement(self.groups)
        by_gid = {g.gid: g for g in self.groups}
        for j, gids in enumerate(self.hosts.values()):
            for gid in gids:
                g = by_gid[gid]
                if not isinstance(g.program, GossipProgram):
                    raise ScenarioError(f"role {g.role!r} runs {type(g.program).__name__}, which is not a gossip "
                                        "program; gossip on Ray needs GossipProgram peers")
                owner[np.asarray(g.node_ids, dtype=np.int64)] = j
        if (owner < 0).any():
            missing = np.flatnonzero(owner < 0)
            raise ScenarioError(f"{missing.size} node(s) of the topology run no program (e.g. node "
                                f"{int(missing[0])}); every node of a gossip topology must be a peer")
        self.owner = owner
        nbrs = neighbours(topology)
        adj_ptr = np.zeros(n + 1, dtype=np.int64)
        adj_ptr[1:] = np.cumsum([len(a) for a in nbrs])
        adj = np.concatenate(nbrs).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
        skew = None if self.max_skew is None else self.max_skew * self.round_time
        options = {"n_hosts": len(self.hosts), "max_skew": skew, "batch_bytes": self.batch_bytes,
                   "flush_interval": self.flush_interval}
        names = node_names or [str(i) for i in range(n)]
        self._ensure_ray()
        Host = GossipHost()
        try:
            for j, name in enumerate(self.hosts):
                self._handles.append(Host.options(name=name, namespace=self.namespace).remote(name, j))
            cloudpickle = _ray().cloudpickle
            self.host_info = self._get(
                [h.deploy.remote(cloudpickle.dumps([(gid, by_gid[gid].program, by_gid[gid].node_ids,
                                                     by_gid[gid].node_data) for gid in gids], protocol=_PICKLE),
                                 self.seed, n, owner, adj_ptr, adj, self.clock, self.latency,
                                 self.fault_model, self.round_time, compiled, names, options)
                 for h, gids in zip(self._handles, self.hosts.values())], timeout=5 * self.call_timeout)
            self._get([h.connect.remote(self._handles) for h in self._handles])
        except BaseException:
            self.close()
            raise
        self.compiled = all(info["compiled"] for info in self.host_info)

    # -- calls ----------------------------------------------------------------------------------------------------
    def _get(self, refs: list, timeout: float | None = None) -> list:
        """`ray.get` with a timeout; a host's exception is re-raised as itself, a dead or silent host as
        `SvmsimError`."""
        ray = _ray()
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        from .ray_engine import _raise_original

        try:
            return ray.get(refs, timeout=self.call_timeout if timeout is None else timeout)
        except RayTaskError as err:
            _raise_original(err)
        except RayActorError as err:
            raise SvmsimError(f"a Ray gossip host died ({', '.join(self.hosts)}): {err}") from err
        except GetTimeoutError as err:
            raise SvmsimError(f"a Ray gossip host did not answer within {timeout or self.call_timeout:g} s "
                              f"(hosts {', '.join(self.hosts)})") from err

    def _status(self) -> list[dict]:
        statuses = self._get([h.status.remote() for h in self._handles])
        for name, st in zip(self.hosts, statuses):
            if st.get("error") is not None:
                err = st["error"]
                if isinstance(err, Exception):
                    raise err                      # the program's own exception, with a note naming the host
                raise SvmsimError(f"Ray gossip host {name!r} failed:\n{st['error_text']}")
            if not st["alive"] and not st.get("finished"):
                raise SvmsimError(f"the event loop of Ray gossip host {name!r} stopped unexpectedly")
        return statuses

    @staticmethod
    def _shares(total: int | None, sizes: list[int]) -> list[int | None]:
        """`total` split over hosts in proportion to their nodes (the shares sum to `total`)."""
        if total is None:
            return [None] * len(sizes)
        n = sum(sizes)
        cum = np.concatenate([[0], np.cumsum(sizes)])
        cuts = [int(total) * int(c) // n for c in cum]
        return [max(1, b - a) for a, b in zip(cuts[:-1], cuts[1:])]

    # -- running ----------------------------------------------------------------------------------------------------
    def run(self, *, max_time: float | None = None, max_messages: int | None = None, max_scalars: int | None = None,
            max_seconds: float | None = None, eval_time: float | None = None,
            on_observe: Callable[[RayGossipProgress, dict], bool] | None = None) -> RayGossipResult:
        """Run until a budget is met, every program is done, the observer says stop, no host has events left, or
        the wall-clock budget; then drain, seal and collect (see the module docstring). One run per engine.

        on_observe(progress, {gid: observation}) is called for every evaluation point every host has reached (with
        eval_time) and returns True to stop.
        """
        if not self._handles:
            raise RuntimeError("deploy the engine before running it")
        if self._ran:
            raise RuntimeError("a RayGossipEngine runs once; build a new one")
        self._ran = True
        if eval_time is not None and not eval_time > 0:
            raise ScenarioError(f"eval_time = {eval_time!r} is out of range; allowed: a number > 0")
        sizes = [info["nodes"] for info in self.host_info]
        mm, ms = self._shares(max_messages, sizes), self._shares(max_scalars, sizes)
        started = time.perf_counter()
        self._get([h.start.remote(max_time, mm[j], ms[j], eval_time if on_observe else None)
                   for j, h in enumerate(self._handles)])
        pending: list[dict[int, dict]] = [{} for _ in self._handles]
        next_row = 0
        reason = None
        statuses = []
        activity, still_since = None, time.perf_counter()
        while reason is None:
            time.sleep(self.poll_interval)
            statuses = self._status()
            now_activity = tuple((st["events"], int(np.sum(st["x_received"]))) for st in statuses)
            if now_activity != activity or not all(st["idle"] for st in statuses):
                activity, still_since = now_activity, time.perf_counter()
            elif time.perf_counter() - still_since > self.call_timeout:
                raise SvmsimError("the Ray gossip hosts stalled: all idle and nothing handled for "
                                  f"{self.call_timeout:g} s (host clocks {[st['time'] for st in statuses]}, next "
                                  f"events {[st['heap_top'] for st in statuses]})")
            for j, st in enumerate(statuses):
                for snap in st["snapshots"]:
                    pending[j][snap["index"]] = snap
            while on_observe is not None and all(next_row in p for p in pending):
                snaps = [p.pop(next_row) for p in pending]
                next_row += 1
                if on_observe(*self._combine(snaps)):
                    reason = GossipStopReason.OBSERVER
                    break
            if reason is not None:
                break
            if all(st["done"] for st in statuses):
                reason = GossipStopReason.DONE
            elif all(st["ended"] and st["idle"] for st in statuses):
                capped = [st["capped"] for st in statuses if st["capped"]]
                if capped:
                    reason = GossipStopReason.MESSAGES if "messages" in capped else GossipStopReason.COMMUNICATION
                elif all(math.isinf(st["heap_top"]) for st in statuses):
                    reason = GossipStopReason.QUIESCENT
                else:
                    reason = GossipStopReason.TIME
            elif max_seconds is not None and time.perf_counter() - started >= max_seconds:
                reason = GossipStopReason.WALL
        run_wall = time.perf_counter() - started
        at_stop = self._totals(statuses) if statuses else {}
        drained = self._drain()
        results = self._finish()
        wall = time.perf_counter() - started
        return self._result(reason, results, run_wall, wall, drained, at_stop,
                            max_time if reason == GossipStopReason.TIME else None)

    def _combine(self, snaps: list[dict]) -> tuple[RayGossipProgress, dict]:
        t = snaps[0]["time"]
        tot = {k: sum(s[k] for s in snaps) for k in ("wakes", "events", "sent", "sent_scalars", "in_flight",
                                                     "messages", "scalars", "bytes")}
        progress = RayGossipProgress(time=t, round=int(t / self.round_time), wakes=tot["wakes"],
                                     events=tot["events"], sent=tot["sent"], sent_scalars=tot["sent_scalars"],
                                     in_flight=tot["in_flight"], messages=tot["messages"], scalars=tot["scalars"],
                                     bytes=tot["bytes"])
        obs = {}
        for s in snaps:
            obs.update(s["observations"])
        return progress, obs

    @staticmethod
    def _totals(statuses: list[dict]) -> dict:
        return {"sent": sum(s["sent"] for s in statuses), "wakes": sum(s["wakes"] for s in statuses),
                "times": [s["time"] for s in statuses]}

    def _drain(self) -> bool:
        """Stop the clocks and deliver what is in flight; True when everything was delivered in time."""
        self._get([h.stop_clocks.remote() for h in self._handles])
        deadline = time.perf_counter() + self.drain_timeout
        previous = None
        while time.perf_counter() < deadline:
            time.sleep(min(self.poll_interval, 0.02))
            sts = self._status()
            key = tuple((st["pending"], st["events"], tuple(st["x_sent"]), tuple(st["x_received"])) for st in sts)
            sent = sum(int(np.sum(st["x_sent"])) for st in sts)
            received = sum(int(np.sum(st["x_received"])) for st in sts)
            quiet = all(st["idle"] and st["pending"] == 0 for st in sts) and sent == received
            if quiet and key == previous:
                return True
            previous = key if quiet else None
        return False

    def _finish(self) -> list[dict]:
        """Seal the hosts, wait until each has received what the others sent it, and collect their results."""
        sealed = self._get([h.seal.remote() for h in self._handles])
        expected = np.array(sealed, dtype=np.int64)           # expected[a, b]: sent by host a to host b
        deadline = time.perf_counter() + self.call_timeout
        while True:
            sts = self._status()
            received = np.array([st["x_received"] for st in sts], dtype=np.int64)  # received[b, a]
            if np.array_equal(received.T, expected):
                break
            if time.perf_counter() > deadline:
                raise SvmsimError("messages sent between Ray gossip hosts did not arrive within "
                                  f"{self.call_timeout:g} s")
            time.sleep(0.01)
        return self._get([h.finish.remote() for h in self._handles])

    def _result(self, reason, results, run_wall, wall, drained, at_stop, clock_at_least=None) -> RayGossipResult:
        ledger = merge_ledgers([r["ledger"] for r in results])
        plan = self.plan_
        plan.tally = merge_tallies([r["tally"] for r in results])
        counters = [r["counters"] for r in results]
        down = np.concatenate([r["down"] for r in results]) if results else np.zeros(0, dtype=np.int64)
        faults = plan.summary(delayed=sum(c["delayed"] for c in counters), down_now=np.sort(down))
        obs = {}
        for r in results:
            obs.update(r["observations"])
        t = max(c["time"] for c in counters)
        if clock_at_least is not None:         # as in-process: a run stopped by the time budget ends at it
            t = max(t, float(clock_at_least))
        progress = RayGossipProgress(time=t, round=int(t / self.round_time), wakes=sum(c["wakes"] for c in counters),
                                     events=sum(c["events"] for c in counters), sent=sum(c["sent"] for c in counters),
                                     sent_scalars=sum(c["sent_scalars"] for c in counters), in_flight=0,
                                     messages=ledger.totals["messages"], scalars=ledger.totals["scalars"],
                                     bytes=ledger.totals["bytes"])
        cross = int(sum(int(np.sum(r["x_sent"])) for r in results))
        late = sum(c["late"] for c in counters)
        sent = progress.sent
        stats = {"hosts": list(self.hosts), "actors": len(self.hosts), "compiled_loop": self.compiled,
                 "max_skew_rounds": self.max_skew,
                 "wall_s": wall, "run_wall_s": run_wall, "drained": drained,
                 "sent_at_stop": at_stop.get("sent"), "host_times_at_stop": at_stop.get("times"),
                 "host_times_at_end": [c["time"] for c in counters],
                 "cross_host_messages": cross, "cross_host_fraction": cross / sent if sent else 0.0,
                 "cross_host_calls": int(sum(r["x_calls"] for r in results)),
                 "cross_host_bytes": int(sum(r["x_bytes"] for r in results)),
                 "late_deliveries": late, "late_fraction": late / cross if cross else 0.0,
                 "mean_lateness": (sum(c["lateness"] for c in counters) / late) if late else 0.0,
                 "sent_per_node": np.concatenate([r["sent_per_node"] for r in results]).tolist()
                 if self.n_nodes <= 100 else None}
        return RayGossipResult(reason=reason, ledger=ledger, faults=faults, observations=obs, progress=progress,
                               stats=stats)

    # -- lifetime -------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill the host actors, and stop Ray if this engine started it. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        handles, self._handles = self._handles, []
        try:
            from .ray_engine import release_actors
        except ImportError:  # pragma: no cover
            return
        release_actors(handles, self.started_ray)
        self.started_ray = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


# ----------------------------------------------------------------------------------------------------------------
# The runner's entry point
# ----------------------------------------------------------------------------------------------------------------

def run_scenario(scenario, deployment, engine, progress: bool, live=None):
    """`runner._run_gossip` on Ray: returns (model, rows, ledger, reason, extra) in the same shape. `live`: a
    `monitor.LiveMetrics` that gets the totals and metrics of every evaluation point."""
    from ..runner import _add_row, _by_role, _Progress

    stop, sched = scenario.stop, scenario.schedule
    gossip = RayGossipEngine.from_engine(engine)
    round_time = sched.effective_round_time
    budgets = [sched.max_time] + [r * round_time for r in (stop.max_rounds, stop.max_iterations) if r is not None]
    max_time = min((b for b in budgets if b is not None), default=None)
    unit = deployment.comm_unit[1] if deployment.comm_unit else 1.0
    rows: list[dict] = []
    bar = _Progress(progress, None if max_time is None else int(max_time / round_time), scenario.name)
    reason_box: list[str] = []
    started = time.perf_counter()

    def on_observe(p: RayGossipProgress, obs: dict) -> bool:
        m = deployment.evaluate(_by_role(obs, groups))
        m.update(iteration=p.round, round=p.round, virtual_time=p.time, wakes=p.wakes, sent_messages=p.sent,
                 in_flight=p.in_flight, messages=p.messages, scalars=p.scalars, bytes=p.bytes,
                 comm_units=p.scalars / unit, wall_time=time.perf_counter() - started)
        if live is not None:
            live.update_totals(p.messages, p.scalars, p.bytes, m)
        return _add_row(scenario, rows, bar, p.round, m, started, reason_box)

    eval_time = sched.eval_time if sched.eval_time is not None else round_time
    try:
        groups = gossip.plan(deployment.roles)
        groups = sorted(groups, key=lambda g: g.gid)
        gossip.deploy(groups, scenario.seed, deployment.topology,
                      clock=Clock(sched.clock, sched.rate, sched.jitter),
                      latency=LatencyModel(sched.latency_distribution(), sched.bandwidth, sched.edge_spread),
                      faults=scenario.faults.model(), round_time=round_time,
                      compiled=None if sched.compiled else False, node_names=deployment.node_names)
        result = gossip.run(max_time=max_time, max_messages=sched.max_messages, max_scalars=stop.max_scalars,
                            max_seconds=stop.max_seconds, eval_time=eval_time, on_observe=on_observe)
        on_observe(result.progress, result.observations)          # the final state, after the drain
        obs = _by_role(result.observations, groups)
        model = deployment.model(obs) if deployment.model else {}
        declared = deployment.declared_scalars(obs) if deployment.declared_scalars else None
    finally:
        bar.close()
        gossip.close()
    reason = result.reason
    if reason == GossipStopReason.OBSERVER and reason_box:
        reason = reason_box[0]
    p, fs, ledger = result.progress, result.faults, result.ledger
    matches = None
    if declared is not None:
        duplicated = sum(rec["scalars"] for rec in fs["duplicated"].values())
        matches = bool(declared + duplicated == ledger.totals["scalars"] + fs["dropped_total"]["scalars"])
    extra = {"rounds": p.round, "iterations": p.round, "virtual_time": p.time, "wakes": p.wakes, "events": p.events,
             "sent_messages": p.sent, "round_time": round_time, "compiled_loop": gossip.compiled,
             "declared_scalars": declared, "ledger_matches_declared": matches, "faults": fs,
             "ray_gossip": {k: v for k, v in result.stats.items() if k != "sent_per_node"}}
    return model, rows, ledger, reason, extra
