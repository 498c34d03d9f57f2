"""Asynchronous gossip on Ray: the gossip node programs run in Ray actors that send to each other directly.

The peers are split over `actors` host actors ("peer-0..499", "peer-500..999", named after their nodes). Each runs
the in-process scheduler's `schedule.event_host.EventHost` for its nodes (the same counter-based streams for their
clocks, latencies and faults), through the programs' compiled `GossipKernel` (Push-Sum, GADGET; with the GIL
released) or their Python ``wake``/``receive`` methods (``compiled = False``). This module is the driver,
`RayGossipRun`; the host actor is `engine.ray_gossip_host`.

Two modes. **Free-running** (the default, described below): every host runs on its own clock, kept within
``max_skew`` of the others; fast, but which messages arrive late depends on Ray's timing, so runs differ.
**Deterministic** (``deterministic=True``, ``[engine] gossip = "deterministic"``): the driver cuts conservative time
windows no longer than the smallest latency and routes the messages between hosts at each window's end
(`schedule.windows`): the in-process run bit for bit on any number of actors, at one call per host per window.

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
Measured (``benchmarks/bench_ray_gossip.py``, 1000 Push-Sum nodes, 2 hosts): 0.5 rounds 1.0e5-1.4e5 messages/s,
85% of the cross-host messages late by 0.23 rounds on average; 0.1 rounds about 6e4/s; no bound 1.1e5-1.8e5/s,
but the hosts' clocks drift hundreds of rounds apart.

Metering and the merged ledger
------------------------------
Every host keeps its own `Meter` and `FaultTally`, with the in-process scheduler's convention: a message is
metered exactly once, when its fate is known, in the round of its **send** time: lost in the network (by the
sender, at the send time), dropped at a receiver that is down, or delivered (by the receiver). The driver merges
the hosts' ledgers exactly (`Ledger.merge`: totals, tags and dropped tags summed; edges summed by (src, dst);
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
``address`` is given) and stopped by `close` only if this engine started it. The runner reaches it through the
engine interface (`RayEngine.gossip`), as it reaches the in-process scheduler through `InProcessEngine.gossip`;
``ray-cgraph`` is refused for gossip.
"""
from __future__ import annotations

import math
import pickle
import time
import uuid
from collections.abc import Sequence
from typing import Callable

import networkx as nx
import numpy as np

from ..comm.meter import Ledger
from ..core.streams import STREAM_EDGE, stream_keys
from ..core.timing import Clock, LatencyModel
from ..errors import ScenarioError, SvmsimError
from ..fault_plan import FaultTally
from ..faults import FaultModel
from ..program import Group, RoleSpec
from ..schedule.gossip import (GossipOutcome, GossipProgress, GossipRun, GossipStopReason, GossipTiming,
                               check_gossip_groups)
from ..schedule.windows import smallest_latency
from ..topology import neighbour_csr
from .base import split_roles
from .ray_actors import (colocate_groups, ensure_ray, host_options, lost_hosts, placement, raise_original,
                         release_actors)
from .ray_gossip_host import GossipHost

__all__ = ["RayGossipRun", "GossipHost", "merge_tallies"]

_PICKLE = pickle.HIGHEST_PROTOCOL


def _ray():
    import ray

    return ray


# ----------------------------------------------------------------------------------------------------------------
# Merging the hosts' ledgers and tallies
# ----------------------------------------------------------------------------------------------------------------

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


class RayGossipRun(GossipRun):
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
    deterministic: run in conservative time windows (`schedule.windows`): the in-process run bit for bit, on any
        number of actors; needs a smallest latency > 0 (max_skew, batch_bytes and flush_interval do not apply).
    checkpoint_every: deterministic mode: a checkpoint of every host every this many windows, or later (`HostJournal`;
        None: none, a lost host then replays from the start). recover: deterministic mode: replace a host actor that
        dies and bring it back to where it was (`engine.ray_windows`); False: a lost host ends the run.
    """

    name = "ray"

    def __init__(self, actors: int = 2, address: str | None = None, init_options: dict | None = None,
                 namespace: str | None = None, max_skew: float | None = 0.5, batch_bytes: int = 90_000,
                 flush_interval: float = 0.005, poll_interval: float = 0.05, call_timeout: float = 60.0,
                 drain_timeout: float = 30.0, deterministic: bool = False, checkpoint_every: int | None = 100,
                 recover: bool = True):
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
        self.deterministic = bool(deterministic)
        self.checkpoint_every, self.recover = checkpoint_every, bool(recover)
        self.window = math.nan              # deterministic mode: the time window (the smallest latency)
        self.started_ray = False
        self.groups: list[Group] = []
        self.hosts: dict[str, list[int]] = {}
        self._handles: list = []
        self.host_nodes: dict[str, str] = {}   # host actor name -> the id of the Ray node Ray placed it on
        self._closed = False
        self._ran = False
        self._outcome: GossipOutcome | None = None

    # -- placement ----------------------------------------------------------------------------------------------
    def plan(self, roles: list[RoleSpec]) -> list[Group]:
        """Every role with several nodes split into `actors` contiguous groups ("peer-0..499", ...); a role of one
        node joins the first host of the largest role."""
        return colocate_groups(split_roles(roles, {s.role: self.actors for s in roles if len(s.node_ids) > 1}))

    def _ensure_ray(self) -> None:
        self.started_ray = ensure_ray(self.address, self.init_options) or self.started_ray

    def deploy(self, groups: list[Group], seed: int, topology: nx.Graph, *, clock: Clock | None = None,
               latency: LatencyModel | None = None, faults: FaultModel | None = None,
               round_time: float | None = None, compiled: bool | None = None,
               node_names: Sequence[str] | None = None, compression=None) -> None:
        """Start one host actor per distinct `Group.host` and initialise its groups and event loop (`compression`:
        the run's `Compressor`, whose spec and seed every host encodes its own senders' messages with)."""
        if self._handles:
            raise RuntimeError("this RayGossipRun is already deployed; build a new one")
        timing = GossipTiming.of(topology, clock, latency, round_time)
        n = timing.n_nodes
        self.clock, self.latency, self.round_time = timing.clock, timing.latency, timing.round_time
        self.fault_model = faults if faults is not None else FaultModel()
        self.seed = int(seed)
        self.plan_ = self.fault_model.bind(n, self.seed)     # validates node ids; the driver's copy for the summary
        self.n_nodes = n
        self.groups = sorted(groups, key=lambda g: g.gid)
        check_gossip_groups(self.groups, n, "gossip on Ray")
        self.hosts = placement(self.groups)
        by_gid = {g.gid: g for g in self.groups}
        owner = np.full(n, -1, dtype=np.int64)
        for j, gids in enumerate(self.hosts.values()):
            for gid in gids:
                owner[np.asarray(by_gid[gid].node_ids, dtype=np.int64)] = j
        self.owner = owner
        adj_ptr, adj = neighbour_csr(topology)
        if self.deterministic:
            self.window = smallest_latency(self.latency, adj_ptr, adj, stream_keys(self.seed, STREAM_EDGE, 1)[0])
        skew = None if self.max_skew is None else self.max_skew * self.round_time
        options = {"n_hosts": len(self.hosts), "max_skew": skew, "batch_bytes": self.batch_bytes,
                   "flush_interval": self.flush_interval,
                   "compression": None if compression is None else compression.spec}
        self._ensure_ray()
        try:
            for j in range(len(self.hosts)):
                self._handles.append(self._start_host(j))
            cloudpickle = _ray().cloudpickle
            self.host_args = [(cloudpickle.dumps([(gid, by_gid[gid].program, by_gid[gid].node_ids,
                                                   by_gid[gid].node_data) for gid in gids], protocol=_PICKLE),
                               self.seed, n, owner, adj_ptr, adj, self.clock, self.latency, self.fault_model,
                               self.round_time, compiled, node_names, options) for gids in self.hosts.values()]
            self.host_info = self.gather([h.deploy.remote(*args) for h, args in zip(self._handles, self.host_args)],
                                       timeout=5 * self.call_timeout)
            self.gather([h.connect.remote(self._handles) for h in self._handles])
        except BaseException:
            self.close()
            raise
        self.compiled = all(info["compiled"] for info in self.host_info)
        self.host_nodes = {info["name"]: info["ray_node"] for info in self.host_info}

    def _start_host(self, j: int, suffix: str = ""):
        """A new (not yet deployed) actor for host `j` (its actor named after the host, plus `suffix`), placed as
        `ray_actors.host_scheduling` says."""
        name = list(self.hosts)[j]
        return GossipHost().options(name=name + suffix, namespace=self.namespace,
                                    **host_options(len(self.hosts))[j]).remote(name, j)

    # -- the host actors, for the deterministic mode's windows (`engine.ray_windows`) --------------------------------
    @property
    def handles(self) -> tuple:
        """The Ray actor handles of the hosts, in the order of `hosts` (a copy: `replace_host` changes one)."""
        return tuple(self._handles)

    def replace_host(self, j: int, suffix: str = ""):
        """Start a new actor for host `j` in place of the old one (named after the host, plus `suffix`; placed as
        the first was) and return its handle. The new actor is not deployed yet: the caller deploys it with
        ``host_args[j]`` and brings it to where the old one was."""
        self._handles[j] = self._start_host(j, suffix)
        return self._handles[j]

    # -- calls ----------------------------------------------------------------------------------------------------
    def gather(self, refs: list, timeout: float | None = None) -> list:
        """The results of calls made to the hosts (`ray.get`), waiting at most `timeout` seconds (default
        `call_timeout`); a host's exception is re-raised as itself, a dead host as `EngineFailure` naming the
        hosts and logical nodes lost, a silent one as `SvmsimError`."""
        ray = _ray()
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(refs, timeout=self.call_timeout if timeout is None else timeout)
        except RayTaskError as err:
            raise_original(err)
        except RayActorError as err:
            raise lost_hosts(self.hosts, self._handles, self.groups, err) from None
        except GetTimeoutError as err:
            raise SvmsimError(f"a Ray gossip host did not answer within {timeout or self.call_timeout:g} s "
                              f"(hosts {', '.join(self.hosts)})") from err

    def _status(self) -> list[dict]:
        statuses = self.gather([h.status.remote() for h in self._handles])
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
            eval_messages: int | None = None, on_observe: Callable[[GossipProgress, dict], bool] | None = None,
            with_observations: bool = True, peek: bool = False) -> str:
        """Run until a budget is met, every program is done, the observer says stop, no host has events left, or
        the wall-clock budget; then drain, seal and collect (see the module docstring). One run per engine.

        on_observe(progress, {gid: observation}) is called for every evaluation point every host has reached (with
        eval_time) and returns True to stop. Returns the reason the run stopped; `outcome` says what it produced.
        `peek` (here and in `outcome`) changes nothing: the hosts' snapshots reach the driver as copies.
        """
        if not with_observations:
            raise ScenarioError("gossip on Ray hands observers the hosts' snapshots: on_observe(progress, "
                                "observations); allowed: with_observations = true")
        if eval_messages is not None:
            raise ScenarioError("eval_messages applies to the in-process engine: Ray hosts evaluate on their own "
                                "clocks; allowed on Ray: [schedule] eval_time")
        if not self._handles:
            raise RuntimeError("deploy the engine before running it")
        if self._ran:
            raise RuntimeError("a RayGossipRun runs once; build a new one")
        self._ran = True
        self.check_eval_time(eval_time)
        if self.deterministic:
            return self._run_windows(max_time, max_messages, max_scalars, max_seconds, eval_time, on_observe)
        sizes = [info["nodes"] for info in self.host_info]
        mm, ms = self._shares(max_messages, sizes), self._shares(max_scalars, sizes)
        started = time.perf_counter()
        self.gather([h.start.remote(max_time, mm[j], ms[j], eval_time if on_observe else None)
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
                if on_observe(*self.combine_snapshots(snaps)):
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
        self._outcome = self._result(reason, results, run_wall, wall, drained, at_stop,
                                     max_time if reason == GossipStopReason.TIME else None)
        return reason

    def _run_windows(self, max_time, max_messages, max_scalars, max_seconds, eval_time, on_observe) -> str:
        """Deterministic mode (`engine.ray_windows`): time windows, checkpoints, lost hosts replaced."""
        from .ray_windows import run_deterministic

        started = time.perf_counter()
        reason, results, stats = run_deterministic(self, max_time, max_messages, max_scalars, max_seconds, eval_time,
                                                   on_observe, checkpoint_every=self.checkpoint_every,
                                                   recover=self.recover)
        wall = time.perf_counter() - started
        self._outcome = self._result(reason, results, wall, wall, None, {},
                                     max_time if reason == GossipStopReason.TIME else None)
        self._outcome.stats.update(stats, max_skew_rounds=None)
        return reason

    def outcome(self, peek: bool = False, hand_over: bool = False) -> GossipOutcome:
        """What the run produced (after the drain): progress, observations (copies), merged ledger, faults, stats."""
        if self._outcome is None:
            raise RuntimeError("run the engine before asking for its outcome")
        return self._outcome

    def combine_snapshots(self, snaps: list[dict]) -> tuple[GossipProgress, dict]:
        """One evaluation point from every host's snapshot of it (taken at the same virtual time): the summed
        progress counters and all the hosts' observations, as the observer ``on_observe(progress, observations)``
        takes them."""
        t = snaps[0]["time"]
        tot = {k: sum(s[k] for s in snaps) for k in ("wakes", "events", "sent", "sent_scalars", "in_flight",
                                                     "messages", "scalars", "bytes")}
        progress = GossipProgress(time=t, round=int(t / self.round_time), wakes=tot["wakes"],
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
        self.gather([h.stop_clocks.remote() for h in self._handles])
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
        sealed = self.gather([h.seal.remote() for h in self._handles])
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
        return self.gather([h.finish.remote() for h in self._handles])

    def _result(self, reason, results, run_wall, wall, drained, at_stop, clock_at_least=None) -> GossipOutcome:
        ledger = Ledger.merge([r["ledger"] for r in results])
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
        # deterministic mode ends as in-process: what is in flight is metered after the final state is taken
        held = [r["at_stop"] for r in results] if self.deterministic else None
        totals = {k: sum(c[k] for c in held) for k in ("in_flight", "messages", "scalars", "bytes")} if held else \
            dict(ledger.totals, in_flight=0)
        progress = GossipProgress(time=t, round=int(t / self.round_time), wakes=sum(c["wakes"] for c in counters),
                                  events=sum(c["events"] for c in counters), sent=sum(c["sent"] for c in counters),
                                  sent_scalars=sum(c["sent_scalars"] for c in counters), in_flight=totals["in_flight"],
                                  messages=totals["messages"], scalars=totals["scalars"], bytes=totals["bytes"])
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
        return GossipOutcome(reason=reason, progress=progress, observations=obs, ledger=ledger, faults=faults,
                             compiled=self.compiled, stats=stats,
                             codec_counts=[r["codec_counts"] for r in results if r.get("codec_counts") is not None],
                             python_reason=next((i["python_reason"] for i in self.host_info
                                                 if i.get("python_reason")), None))

    # -- lifetime -------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill the host actors, and stop Ray if this engine started it. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        handles, self._handles = self._handles, []
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
