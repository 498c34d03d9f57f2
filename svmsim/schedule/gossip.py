"""Asynchronous gossip on a virtual clock, in this process.

Every node has its own clock (`core.timing.Clock`: Poisson, or periodic with jitter). When a clock ticks the node's
program is woken (`GossipProgram.wake`) and may send messages; a message takes a latency drawn from the alpha-beta
model (`core.timing.LatencyModel`: a per-message draw times a fixed factor per edge, plus size over bandwidth)
and is then handed to the receiver (`GossipProgram.receive`), which may answer. A fault model (`svmsim.faults`)
may lose, duplicate or delay messages and crash, restart, slow down or churn nodes.

Replays are exact: one heap keyed by ``(time, priority, sequence)`` orders every event and all randomness is
counter based (`core.streams`), so the same scenario and seed give the same run, bit for bit. The event loop is
`schedule.event_host.EventHost` (compiled when the program offers a `GossipKernel`, else its Python twin, which
gives the same run); this scheduler runs one host that owns every node and adds the observation grid, the budgets
and the end of the run. The Ray engine runs the same host in every actor (`engine.ray_gossip`).

Metering: every message crosses the meter exactly once, in the round of its send time, ``round = floor(send_time /
round_time)`` (``round_time`` defaults to one mean clock period, ``1/rate``: the time in which every node wakes
once on average, Kempe et al.'s gossip round), when its fate is known: lost, dropped at a receiver that is down, or
delivered. A duplicated message is two messages on the wire. Messages still in flight when the run is finished
(`finish`) are metered as delivered traffic and listed as ``in_flight_at_end`` in the fault summary.

Observation: `run` calls ``on_observe(progress, observations)`` at virtual times ``eval_time, 2*eval_time, ...``
(state as of that instant) and/or every ``eval_messages`` messages sent.
"""
from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

import networkx as nx
import numpy as np

from ..comm.meter import Ledger, Meter
from ..core.timing import Clock, LatencyModel
from ..errors import ScenarioError
from ..program import GossipProgram, Group
from ..topology import check_connected, neighbour_csr
from .event_host import EventHost, GossipSetting
from .event_kernels import (NO_LIMIT, ST_BAD_EDGE, ST_DONE, ST_EVAL_MSG,
                            ST_EVAL_TIME, ST_FLUSH, ST_GROW, ST_MESSAGES, ST_QUIESCENT, ST_SCALARS, ST_TIME, ST_YIELD)

__all__ = ["GossipRun", "GossipScheduler", "GossipProgress", "GossipStopReason", "GossipOutcome",
           "GossipTiming", "check_gossip_groups"]


class GossipStopReason:
    TIME = "virtual time budget"
    MESSAGES = "message budget"
    COMMUNICATION = "communication budget"
    WALL = "time budget"
    OBSERVER = "stopping rule"
    DONE = "algorithm finished"
    QUIESCENT = "no events left (every clock stopped and nothing in flight)"


_STATUS_REASON = {ST_QUIESCENT: GossipStopReason.QUIESCENT, ST_TIME: GossipStopReason.TIME,
                  ST_DONE: GossipStopReason.DONE, ST_MESSAGES: GossipStopReason.MESSAGES,
                  ST_SCALARS: GossipStopReason.COMMUNICATION}


@dataclass
class GossipProgress:
    """Where a gossip run stands (passed to observers).

    time: virtual time; round: ``floor(time / round_time)``; wakes: clock ticks handled; events: events handled
    (ticks, deliveries, fault transitions); sent / sent_scalars: messages (scalars) the programs sent;
    in_flight: messages in the network now; messages / scalars / bytes: what the meter has settled so far.
    """

    time: float
    round: int
    wakes: int
    events: int
    sent: int
    sent_scalars: int
    in_flight: int
    messages: int = 0
    scalars: int = 0
    bytes: int = 0


@dataclass
class GossipOutcome:
    """What a finished gossip run produced (the same on every engine): why it stopped, the final progress and
    observations (after the drain on Ray; before the messages in flight are metered in-process), the ledger, the
    fault summary, whether the event loop was compiled, and engine statistics. `codec_counts`: what the encoders of
    hosts other than the caller's counted (`Compressor.counts`, one per host; empty when the caller's encoder did
    the encoding itself, in-process, or nothing was compressed). `python_reason`: why a loop that could have been
    compiled ran in Python (a codec without a compiled form), or None."""

    reason: str
    progress: GossipProgress
    observations: dict
    ledger: Ledger
    faults: dict
    compiled: bool
    stats: dict
    codec_counts: list = field(default_factory=list)
    python_reason: str | None = None


NO_GROUP = -1    # the group of a node that runs no program


@dataclass(frozen=True)
class GossipTiming:
    """A gossip run's virtual-time model, checked and with its defaults: the topology's node count (the topology
    checked connected), the nodes' clocks (default: Poisson of rate 1), the latency model (default: constant
    0.01) and the meter's round of virtual time (default: one mean clock period, ``1/clock.rate``)."""

    n_nodes: int
    clock: Clock
    latency: LatencyModel
    round_time: float

    @classmethod
    def of(cls, topology: nx.Graph, clock: Clock | None = None, latency: LatencyModel | None = None,
           round_time: float | None = None) -> "GossipTiming":
        check_connected(topology, "gossip topology")
        clock = clock or Clock()
        rt = float(round_time) if round_time is not None else 1.0 / clock.rate
        if not rt > 0:
            raise ScenarioError(f"round_time = {round_time!r} is out of range; allowed: a number > 0")
        return cls(topology.number_of_nodes(), clock, latency or LatencyModel(), rt)


class GossipRun(ABC):
    """A gossip run as an engine hosts it (`Engine.gossip` returns one), driven alike on every engine by the runner
    and the conformance checks: `GossipScheduler` (one event loop in this process) and `engine.ray_gossip.RayGossipRun`
    (one per Ray actor) are the two. The same scenario and seed give the same draws on both; the deterministic
    Ray mode gives the same run, bit for bit.

    `groups`: the groups hosting the roles (by gid); `round_time`: virtual time per meter round. `run` runs until a
    budget is met, every program is done, the observer says stop, or no event is left, and returns a
    `GossipStopReason`; `outcome` says what the run produced (`GossipOutcome`); `close` releases what the run holds.
    """

    groups: list[Group]
    round_time: float

    @abstractmethod
    def run(self, *, max_time: float | None = None, max_messages: int | None = None,
            max_scalars: int | None = None, max_seconds: float | None = None, eval_time: float | None = None,
            eval_messages: int | None = None, on_observe: Callable[..., bool] | None = None,
            with_observations: bool = False, peek: bool = False) -> str:
        """Run. max_time: virtual-time budget; max_messages / max_scalars: budgets on what the programs sent;
        max_seconds: wall-clock budget. ``on_observe(progress)`` (``on_observe(progress, {gid: observation})`` with
        `with_observations`) is called at virtual times eval_time, 2*eval_time, ... (and every eval_messages sent
        messages where the engine supports it) and returns True to stop. With `peek` the observations may share the
        states' memory: read them at once."""

    @abstractmethod
    def outcome(self, peek: bool = False, hand_over: bool = False) -> GossipOutcome:
        """What the run produced; with `hand_over` the observations may be the states' own arrays (the run is
        over)."""

    def close(self) -> None:
        """Release what the run holds (default: nothing)."""

    @staticmethod
    def check_eval_time(eval_time: float | None) -> None:
        """An evaluation step must be a positive virtual time."""
        if eval_time is not None and not eval_time > 0:
            raise ScenarioError(f"eval_time = {eval_time!r} is out of range; allowed: a number > 0")


def check_gossip_groups(groups: list[Group], n: int, where: str = "the gossip scheduler") -> np.ndarray:
    """Every group runs a `GossipProgram` and every node of the topology belongs to one; returns each node's gid."""
    node_group = np.full(n, NO_GROUP, dtype=np.int64)  # pragma: no mutate (equivalent: the host keeps int64)
    for g in groups:
        if not isinstance(g.program, GossipProgram):
            raise ScenarioError(f"role {g.role!r} runs {type(g.program).__name__}, which is not a gossip program; "
                                f"{where} needs GossipProgram peers (use [schedule] kind = \"sync\" for "
                                "server-client algorithms)")
        node_group[np.asarray(g.node_ids, dtype=np.int64)] = g.gid  # pragma: no mutate (equivalent: ids are ints)
    if (node_group < 0).any():
        missing = np.flatnonzero(node_group < 0)
        raise ScenarioError(f"{missing.size} node(s) of the topology run no program (e.g. node {int(missing[0])});"
                            " every node of a gossip topology must be a peer")
    return node_group


class GossipScheduler(GossipRun):
    """Drives asynchronous gossip over an in-process engine's groups, meters every message, applies faults.

    Parameters
    ----------
    engine: a deployed in-process engine (its ``states`` are stepped in place); groups: its groups (every node of
        the topology must belong to one, and every group's program must be a `GossipProgram`).
    meter: the meter every message crosses. topology: the graph messages travel on (checked connected).
    clock, latency: the virtual-time model (defaults: Poisson clocks of rate 1, constant latency 0.01).
    faults: a `svmsim.faults.FaultModel` (bound here with `seed`), or a `FaultPlan` bound for this run (its
        tally collects this run's losses), or None.
    seed: seeds clocks, latencies and per-edge factors (faults use the fault model's seed, by default this one).
    round_time: virtual time per meter round (default ``1/clock.rate``).
    compiled: True to require the compiled loop, False for the Python loop, None to use the compiled loop when
        there is one group whose program has a `GossipKernel`.
    compression: a `comm.compression.Compressor` that encodes every message sent (the Python loop), or None.
    """

    def __init__(self, engine, groups: list[Group], meter: Meter, topology: nx.Graph, *, clock: Clock | None = None,
                 latency: LatencyModel | None = None, faults=None, seed: int = 0, round_time: float | None = None,
                 compiled: bool | None = None, compression=None):
        from ..fault_plan import FaultPlan
        from ..faults import FaultModel

        self.engine = engine
        self.groups = groups
        self.meter = meter
        timing = GossipTiming.of(topology, clock, latency, round_time)
        self.clock, self.latency, self.round_time = timing.clock, timing.latency, timing.round_time
        n = self.n_nodes = timing.n_nodes
        if meter.n_nodes != n:
            raise ScenarioError(f"the meter counts {meter.n_nodes} nodes but the topology has {n}")
        if not hasattr(engine, "states"):
            raise ScenarioError(f"the gossip scheduler steps the states of an in-process engine; engine "
                                f"{engine.name!r} hosts its own (its `gossip` method runs gossip)")
        if [g.gid for g in groups] != list(range(len(groups))):
            raise ScenarioError("the groups' ids must be 0..k-1 in order (as engines plan them); got "
                                f"{[g.gid for g in groups]}")
        node_group = check_gossip_groups(groups, n)
        self.seed = int(seed)
        if faults is None:
            faults = FaultModel()
        self.faults = faults if isinstance(faults, FaultPlan) else faults.bind(n, self.seed)
        if self.faults.n_nodes != n:
            raise ScenarioError(f"the fault plan was bound for {self.faults.n_nodes} nodes but the topology has {n}")
        adj_ptr, adj = neighbour_csr(topology)
        setting = GossipSetting(n, self.clock, self.latency, self.faults, self.seed, self.round_time)
        programs = {g.gid: g.program for g in groups}
        if compiled and len(groups) != 1:
            raise ScenarioError("compiled = true needs a single group whose program provides a GossipKernel; "
                                f"there are {len(groups)} groups (allowed: compiled = false)")
        owner = np.zeros(n, dtype=np.int64)  # pragma: no mutate (equivalent: the host keeps int64)
        self.host = EventHost(programs, engine.states, node_group, owner, 0, setting, adj_ptr, adj, meter,
                              compiled=compiled, compression=compression)
        self.compiled = self.host.compiled
        self._finished = False  # pragma: no mutate (equivalent: None is as false)
        self._reason = ""
        # pragma: no mutate start (equivalent: both are set before they are read, and None differs from any step)
        self._next_eval = math.inf                 # the next point of the observation grid of step _eval_time
        self._eval_time = math.inf
        # pragma: no mutate end

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current virtual time."""
        return self.host.now

    def progress(self, at: float | None = None) -> GossipProgress:
        t = self.now if at is None else at
        c = self.host.counters()
        m = self.meter
        return GossipProgress(time=t, round=int(t / self.round_time), wakes=c["wakes"], events=c["events"],
                              sent=c["sent"], sent_scalars=c["sent_scalars"], in_flight=self.n_in_flight,
                              messages=m.messages, scalars=m.scalars, bytes=m.bytes)

    @property
    def n_in_flight(self) -> int:
        return self.host.pending()

    def in_flight(self) -> list[tuple[int, int, str, np.ndarray]]:
        """The messages in the network now, as (src, dst, tag, payload row), in no particular order."""
        return self.host.in_flight_rows()

    def node_counters(self) -> dict[str, np.ndarray]:
        """Per node: clock ticks drawn (those handled plus the pending one), messages sent, whether it is down now,
        whether it crashed for good."""
        ni = self.host.node_state()
        return {"ticks": ni["ticks"].copy(), "sent": ni["sent"].copy(), "down": ni["down"] > 0,
                "dead": ni["dead"] > 0}

    def observe(self) -> dict:
        """Every group's observation now (gid -> `program.observe(state)`)."""
        return self.engine.observe()

    def peek(self) -> dict:
        """`observe` through the programs' `peek` (gid -> `program.peek(state)`): no copies, valid until the states
        next change."""
        return self.engine.peek()

    # -- running --------------------------------------------------------------------------------------------------
    def run(self, *, max_time: float | None = None, max_messages: int | None = None, max_scalars: int | None = None,
            max_seconds: float | None = None, eval_time: float | None = None, eval_messages: int | None = None,
            on_observe: Callable[..., bool] | None = None, with_observations: bool = False, peek: bool = False) -> str:
        """Run until a budget is met, every program is done, the observer says stop, or no event is left.

        max_time: virtual-time budget (the clock is left at max_time); max_messages / max_scalars: budgets on what
        the programs sent (checked after each event); max_seconds: wall-clock budget of this call.
        on_observe(progress) (or on_observe(progress, observations) with `with_observations`) is called at virtual
        times eval_time, 2*eval_time, ... and every eval_messages sent messages (in this call; a later call with the
        same eval_time continues the same time grid); it returns True to stop. Returns the reason the run stopped;
        a later call resumes. With `peek` the observations are the programs' `peek`s (no copies of the nodes'
        state): they hold during the call only.
        """
        self._reason = self._run(max_time, max_messages, max_scalars, max_seconds, eval_time, eval_messages,
                                 on_observe, with_observations, peek)
        return self._reason

    def _run(self, max_time, max_messages, max_scalars, max_seconds, eval_time, eval_messages, on_observe,
             with_observations, peek) -> str:
        if self._finished:
            raise ScenarioError("this gossip run has been finished; create a new scheduler to run again")
        deadline = math.inf if max_seconds is None else time.perf_counter() + max_seconds
        host = self.host
        limit = math.inf if max_time is None else float(max_time)
        host.max_messages = NO_LIMIT if max_messages is None else int(max_messages)
        host.max_scalars = NO_LIMIT if max_scalars is None else int(max_scalars)
        host.next_eval, host.next_eval_msg = math.inf, NO_LIMIT

        def observe(at=None) -> bool:
            p = self.progress(at)
            if not with_observations:
                return on_observe(p)
            return on_observe(p, self.peek() if peek else self.observe())

        if on_observe is not None and eval_time is not None:
            self.check_eval_time(eval_time)
            if eval_time != self._eval_time:
                self._eval_time = float(eval_time)
                self._next_eval = (math.floor(self.now / eval_time) + 1) * eval_time
            host.next_eval = self._next_eval
        if on_observe is not None and eval_messages is not None:
            if not eval_messages >= 1:
                raise ScenarioError(f"eval_messages = {eval_messages!r} is out of range; allowed: an integer >= 1")
            host.next_eval_msg = (self.progress().sent // eval_messages + 1) * eval_messages
        while True:
            status = host.advance(limit)
            if status == ST_EVAL_TIME:
                at = self._next_eval
                self._next_eval = host.next_eval = at + self._eval_time
                host.flush()
                if observe(at):
                    return GossipStopReason.OBSERVER
            elif status == ST_EVAL_MSG:
                host.next_eval_msg += eval_messages
                host.flush()
                if observe():
                    return GossipStopReason.OBSERVER
            elif status == ST_YIELD or status == ST_FLUSH or status == ST_GROW:
                if status == ST_GROW:
                    host.grow()
                else:
                    host.flush()
                if time.perf_counter() >= deadline:  # pragma: no mutate (equivalent for >: a continuous clock)
                    host.flush()
                    return GossipStopReason.WALL
            elif status == ST_BAD_EDGE:
                host.raise_bad_edge()
            else:
                if status == ST_TIME:
                    host.set_now(limit)
                host.flush()
                return _STATUS_REASON[status]

    def finish(self) -> dict:
        """End the run: meter the messages still in flight (as delivered traffic, listed as in flight at the end in
        the fault summary; none is left in flight after) and return the fault summary. The scheduler cannot run
        after this, and lets go of its event queue."""
        if not self._finished:
            self.host.meter_in_flight()
            self.host.end()
            self._finished = True
        return self.fault_summary()

    def outcome(self, peek: bool = False, hand_over: bool = False) -> GossipOutcome:
        """Finish the run (`finish`) and say what it produced; the final progress and observations are those
        before the messages in flight were metered (with `peek`, the programs' `peek`s: the states no longer change
        once the run is finished, unless the engine is deployed again; with `hand_over`, the programs'
        `hand_over`s: the caller may reuse the states' arrays, for the run is over)."""
        progress = self.progress()
        observations = self.engine.hand_over() if hand_over else (self.peek() if peek else self.observe())
        faults = self.finish()
        return GossipOutcome(reason=self._reason, progress=progress, observations=observations,
                             ledger=self.meter.ledger(), faults=faults, compiled=self.compiled, stats={},
                             python_reason=self.host.python_reason)

    def close(self) -> None:
        """Nothing to release in-process (the engine owns the states)."""

    def fault_summary(self) -> dict:
        """What the faults did: dropped messages by cause and tag, duplicates, delays, node events, nodes down."""
        counters = self.node_counters()
        return self.faults.summary(delayed=self.host.counters()["delayed"], down_now=np.flatnonzero(counters["down"]))
