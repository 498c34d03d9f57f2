"""The actor side of gossip on Ray (`engine.ray_gossip`, whose docstring describes the design): `HostState`, what
one host actor does, an `EventHost` for its nodes run in slices by a thread of its own, exchanging messages with the
other hosts directly; and `GossipHost`, the Ray actor class that wraps it. The driver, `RayGossipRun`, lives in
`engine.ray_gossip`; the deterministic mode's windows, checkpoints and recovery in `engine.ray_windows`.
"""
from __future__ import annotations

import collections
import math
import pickle
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..comm.meter import Meter
from ..core.timing import Clock, LatencyModel
from ..errors import ScenarioError
from ..faults import FaultModel
from ..program import GossipProgram
from ..schedule.event_host import EventHost, GossipSetting
from ..schedule.event_kernels import (NO_LIMIT, ST_BAD_EDGE, ST_EVAL_TIME, ST_FLUSH, ST_GROW,
                                      ST_MESSAGES, ST_QUIESCENT, ST_SCALARS, ST_TIME, ST_XFLUSH, ST_YIELD)
from ..schedule.windows import WindowHost
from .ray_actors import this_node

__all__ = ["HostState", "GossipHost"]

_PICKLE = pickle.HIGHEST_PROTOCOL


class HostState:
    """What a gossip host actor does (the Ray actor `GossipHost` wraps it; tests may drive it directly): an
    `EventHost` for its nodes, a thread that runs it in slices, and the messages it exchanges with the other hosts.

    The actor's methods (called by the driver and by the other hosts) run on the actor's own thread and share the
    state with the loop thread under a lock.
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
        self._sealed = False
        self._capped = ""
        self._finished = False
        self._idle = False
        self._snapshots: list[dict] = []

    # -- set-up -------------------------------------------------------------------------------------------------
    def deploy(self, groups: list[tuple] | bytes, seed: int, n_nodes: int, owner: np.ndarray, adj_ptr: np.ndarray,
               adj: np.ndarray, clock: Clock, latency: LatencyModel, faults: FaultModel, round_time: float,
               compiled: bool | None, node_names: Sequence[str] | None, options: dict) -> dict:
        """Initialise this host's groups ``(gid, program, node_ids, node_data)`` and its event loop.

        The driver sends the groups pickled in one bytes object: unpickled here, the programs' and data's arrays
        are writable copies, as in-process (Ray hands numpy arguments over as read-only views).
        """
        self._deploy_args = (groups, seed, n_nodes, owner, adj_ptr, adj, clock, latency, faults, round_time,
                             compiled, node_names, options)
        if isinstance(groups, (bytes, bytearray)):
            groups = _ray().cloudpickle.loads(groups)
        n = int(n_nodes)
        self.n_hosts = int(options["n_hosts"])
        self.meter = Meter(n, None, node_names)
        self.plan = faults.bind(n, seed)
        self.max_skew = options.get("max_skew")
        self.flush_interval = float(options.get("flush_interval", 0.005))
        programs: dict[int, GossipProgram] = {}
        states: dict[int, Any] = {}
        node_group = np.full(n, -1, dtype=np.int64)
        for gid, program, node_ids, node_data in sorted(groups, key=lambda t: t[0]):
            if not isinstance(program, GossipProgram):
                raise ScenarioError(f"role runs {type(program).__name__}, which is not a gossip program")
            programs[gid] = program
            try:
                states[gid] = program.init(node_ids, node_data, seed)
            except Exception as err:
                _note(err, self.name)
                raise
            node_group[np.asarray(node_ids, dtype=np.int64)] = gid
        setting = GossipSetting(n, clock, latency, self.plan, seed, round_time)
        encoder = None
        if options.get("compression") is not None:      # this host encodes its own senders' messages
            from ..comm.compression import Compressor

            encoder = Compressor(options["compression"], n, seed)
        self.host = EventHost(programs, states, node_group, owner, self.index, setting, adj_ptr, adj, self.meter,
                              compiled=compiled, xbatch_bytes=int(options.get("batch_bytes", 90_000)),
                              compression=encoder)
        self.host.warm_up()
        self.round_time = float(round_time)
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
        self._eval_index = 0
        self._last_send = time.perf_counter()
        return {"name": self.name, "nodes": int(self.host.local.size), "compiled": self.host.compiled,
                "python_reason": self.host.python_reason, "ray_node": this_node()}

    def connect(self, peers: list) -> bool:
        """Handles of every host, this one included (by index)."""
        self.peers = list(peers)
        return True

    # -- running ------------------------------------------------------------------------------------------------
    def start(self, max_time: float | None, max_messages: int | None, max_scalars: int | None,
              eval_time: float | None) -> bool:
        """Start the event loop thread (budgets are this host's share)."""
        with self._lock:
            host = self.host
            self._max_time = math.inf if max_time is None else float(max_time)
            if eval_time is not None:
                self._eval_time = float(eval_time)
                host.next_eval = self._eval_time
            host.max_messages = NO_LIMIT if max_messages is None else int(max_messages)
            host.max_scalars = NO_LIMIT if max_scalars is None else int(max_scalars)
        self._thread = threading.Thread(target=self._run_thread, name=f"svmsim-gossip-{self.name}", daemon=True)
        self._thread.start()
        return True

    # -- deterministic mode: the driver cuts time windows (`schedule.windows`) ---------------------------------------
    def window_begin(self) -> bool:
        self._windows = WindowHost(self.host, self._observe)
        return True

    def window(self, incoming: list, limit: float, snapshot: bool) -> dict:
        try:
            out = self._windows.step(incoming, limit, snapshot)
        except Exception as err:
            _note(err, self.name)
            raise
        for dest, parts in out["out"].items():
            self.x_sent[dest] += sum(p[3].shape[0] for p in parts)
        return out

    def checkpoint(self) -> bytes:
        """This host's state between two windows: its event loop's heap, buffers and counters, its programs'
        states, its meter and its fault tally (the programs and their data are the deployed ones, not copied)."""
        saved = {k: v for k, v in self.host.__dict__.items() if k not in _NOT_CHECKPOINTED}
        return pickle.dumps({"host": saved, "x_sent": self.x_sent}, protocol=_PICKLE)

    def restore(self, blob: bytes) -> bool:
        """Take up a checkpoint of this host (taken by an actor deployed with the same arguments)."""
        saved = pickle.loads(blob)
        host = self.host
        host.__dict__.update(saved["host"])
        if host.compiled:                      # the kernel works on the restored states' arrays
            gid = next(iter(host.programs))
            host.kernel = host.programs[gid].kernel(host.states[gid])
        self.meter, self.plan = host.meter, host.plan
        self.x_sent = saved["x_sent"]
        return self.window_begin()

    def window_reset(self) -> bool:
        """Back to the state before the run (deployed afresh from the same programs, data and seed)."""
        self.deploy(*self._deploy_args)
        return self.window_begin()

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
        host = self.host
        took = self._take_incoming()
        status = host.advance(self._limit())
        if status == ST_EVAL_TIME:
            self._snapshot()
        elif status == ST_FLUSH or (status == ST_YIELD and not host.compiled):
            host.flush()
        elif status == ST_GROW:
            host.grow()
        elif status == ST_XFLUSH:
            self._send_out()
        elif status == ST_BAD_EDGE:
            host.raise_bad_edge()
        elif status in (ST_MESSAGES, ST_SCALARS):
            self._cap("messages" if status == ST_MESSAGES else "scalars")
        idle = status in (ST_TIME, ST_QUIESCENT) and not self._incoming
        if idle or time.perf_counter() - self._last_send >= self.flush_interval:
            self._send_out()
        if idle:
            host.flush()
            self._send_times()
        self._idle = idle and not took
        return not self._idle

    def _cap(self, what: str) -> None:
        """This host's share of the message or scalar budget is spent: its clocks stop at the current time."""
        self._capped = what
        self._max_time = self.host.now
        self.host.max_messages = self.host.max_scalars = NO_LIMIT

    def _published(self) -> float:
        """The time of this host's next event: what the others may run ahead of (inf when it has none it will
        handle by itself: no events, or none before its time budget or the time its share of a budget ran out)."""
        top = self.host.heap_top()
        return top if top <= self._max_time else math.inf

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
            self.host.put_incoming(pickle.loads(self._incoming.popleft()))
            took = True
        return took

    def _send_out(self) -> None:
        """Send the outgoing buffer: one fire-and-forget call per destination host (metered in flight once sealed)."""
        self._last_send = time.perf_counter()
        out = self.host.take_outgoing()
        for dest, parts in out.items():
            count = sum(p[3].shape[0] for p in parts)
            if self._sealed:
                self.host.meter_parts_in_flight(parts)
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

    # -- observation -----------------------------------------------------------------------------------------------
    def _counters(self) -> dict:
        out = self.host.counters()
        m = self.meter
        out.update(time=self.host.now, messages=m.messages, scalars=m.scalars, bytes=m.bytes)
        return out

    def _snapshot(self) -> None:
        """The state at evaluation point `next_eval` of this host's clock."""
        host = self.host
        host.flush()
        at = host.next_eval
        snap = self._counters()
        snap.update(index=self._eval_index, time=at, in_flight=self._pending(), observations=self._observe())
        self._snapshots.append(snap)
        self._eval_index += 1
        host.next_eval = at + self._eval_time

    def _pending(self) -> int:
        return self.host.pending() + len(self._incoming)

    def _observe(self) -> dict:
        out = {}
        for gid in sorted(self.host.programs):
            try:
                out[gid] = self.host.programs[gid].observe(self.host.states[gid])
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
            heap_top = self.host.heap_top()
            draining = self.host.draining
            out = self._counters()
            out.update(error=None, pending=self._pending(), idle=self._idle, draining=draining,
                       capped=self._capped, heap_top=heap_top,
                       ended=(not draining and not self._incoming
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
        with self._lock:
            self.host.draining = True
        self._wakeup.set()
        return True

    def seal(self) -> np.ndarray:
        """Stop sending to other hosts (from now on such messages are metered in flight at the end); returns how
        many messages this host sent to each host."""
        with self._lock:
            self._send_out()
            self._sealed = True
            return self.x_sent.copy()

    def finish(self, incoming: list = ()) -> dict:
        """Stop the loop, meter what is still held (and `incoming`: parts lists of messages from other hosts still
        on their way, in deterministic mode) as in flight at the end, and return this host's results."""
        self._stop = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout=60.0)
        if self._error is not None:
            raise self._error
        with self._lock:
            host = self.host
            self._sealed = True
            self._take_incoming()
            for parts in incoming:
                host.put_incoming(parts)
            host.flush()
            at_stop = self._counters()            # before what is held is metered (as in-process)
            at_stop["in_flight"] = self._pending()
            self._send_out()                      # sealed: metered as in flight
            if not self._finished:
                host.meter_in_flight()
            self._finished = True
            ni = host.node_state()
            tally = self.plan.tally
            local = host.local
            return {"ledger": self.meter.ledger(), "counters": self._counters(), "at_stop": at_stop,
                    "observations": self._observe(),
                    "tally": {"by_fate": dict(tally.by_fate), "node_event_counts": dict(tally.node_event_counts),
                              "node_events": list(tally.node_events)},
                    "down": local[ni["down"][local] > 0], "sent_per_node": ni["sent"][local],
                    "x_sent": self.x_sent.copy(), "x_received": self.x_received.copy(), "x_calls": self.x_calls,
                    "x_bytes": self.x_bytes, "time": host.now,
                    "codec_counts": None if host.compression is None else host.compression.counts()}

    def ping(self) -> bool:
        return True


#: what a checkpoint leaves out: the compiled loop and the kernel (bound to functions of this process), the programs
#: and the topology (as deployed)
_NOT_CHECKPOINTED = frozenset({"_loop", "kernel", "programs", "adj_ptr", "adj", "owner", "node_group"})


_NOTE = "(raised on Ray gossip host "


def _note(err: BaseException, host: str) -> None:
    """Add a note naming the host to `err`, once (the first host that notes it)."""
    notes = getattr(err, "__notes__", None) or ()
    if hasattr(err, "add_note") and not any(isinstance(n, str) and n.startswith(_NOTE) for n in notes):
        err.add_note(f"{_NOTE}{host!r})")


def _ray():
    import ray

    return ray


_GOSSIP_HOST = None


def GossipHost():  # noqa: N802 - a class factory: Ray is imported only when a Ray run is made
    """The Ray actor class of a gossip host (`HostState` as a plain, ordered actor that needs no CPU)."""
    global _GOSSIP_HOST
    if _GOSSIP_HOST is None:
        _GOSSIP_HOST = _ray().remote(num_cpus=0)(HostState)
    return _GOSSIP_HOST
