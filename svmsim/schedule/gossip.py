"""Asynchronous gossip on a virtual clock.

Every node has its own clock: a Poisson clock with rate ``rate`` (exponential gaps) or a periodic clock with
period ``1/rate`` and jitter (gaps ``period * (1 ± jitter)``, first tick at a random phase). When a clock ticks the
scheduler calls the node's program (`GossipProgram.wake`); the program may send messages. A message takes a
latency drawn from a per-edge model (`LatencyModel`: constant, uniform, exponential or log-normal, times a fixed
factor per edge, plus size over bandwidth) and is then handed to the receiver (`GossipProgram.receive`), which may
answer. A fault model (`svmsim.faults`) may lose, duplicate or delay messages and crash, restart, slow down or
churn nodes.

Replays are exact. Events sit in one heap keyed by ``(time, priority, sequence)``: the priority orders the kinds
of event that fall on the same instant (crash, leave, recover, join, delivery, clock tick) and the sequence
number is the order of insertion. All randomness is *counter based*: the n-th draw of a stream is a hash of
(seed, stream, node, n) (SplitMix64), so a node's k-th clock gap or its c-th message's latency does not depend
on how other events were interleaved or batched, and the same scenario and seed give the same run, bit for bit.

Metering. Every message crosses the meter exactly once, when its fate is known: lost in the network (at the send
time), dropped at a receiver that is down (at the arrival time), or delivered. Either way it is recorded in the
meter's *round* of its **send** time, ``round = floor(send_time / round_time)`` (``round_time`` defaults to one
mean clock period, ``1/rate``: one round is the time in which every node wakes once on average, Kempe et al.'s
gossip round). Lost and dead-receiver messages go to `Meter.record_dropped`. A duplicated message is two
messages on the wire, each metered. Messages still in flight when the run is finished (`finish`) are metered as
delivered traffic (they were sent) and listed as ``in_flight_at_end`` in the fault summary. Records are buffered
and handed to the meter in batches of one tag and one round.

Two engines drive the same model:

* the **Python path** calls the programs' ``wake``/``receive`` methods, one event per call (a program must give
  the same result when several consecutive events of one kind are passed in one call: another engine may batch);
* the **compiled path** runs the whole event loop in numba when the program provides a `GossipKernel`
  (numba functions over its state arrays; Push-Sum does). It is about two orders of magnitude faster, and gives
  the same run as the Python path, bit for bit (tests hold them equal).

Observation. `run` calls ``on_observe(progress)`` at virtual times ``eval_time, 2*eval_time, ...`` (state as of
that instant: every event before it has been applied) and/or every ``eval_messages`` messages sent. The runner's
metrics rows use ``iteration = round = floor(time / round_time)``, the number of whole rounds of virtual time.
"""
from __future__ import annotations

import heapq
import math
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable

import networkx as nx
import numba
import numpy as np

from ..comm.message import MessageBatch, Outbox, frozen_ids
from ..comm.meter import Meter
from ..errors import ProtocolError, ScenarioError
from ..program import Group, NodeProgram
from ..topology import check_connected, neighbours

__all__ = [
    "GossipProgram",
    "GossipKernel",
    "GossipScheduler",
    "GossipProgress",
    "GossipStopReason",
    "Clock",
    "LatencyModel",
    "Distribution",
    "DISTRIBUTIONS",
    "CLOCKS",
    "counter_uniform",
    "stream_keys",
]

# ----------------------------------------------------------------------------------------------------------------
# Counter-based random numbers
# ----------------------------------------------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S12, _S27, _S30, _S31 = np.uint64(12), np.uint64(27), np.uint64(30), np.uint64(31)
_TWO_TO_MINUS_52 = 2.0 ** -52

#: stream ids of `stream_keys` (one key per node and stream)
STREAM_CLOCK, STREAM_LATENCY, STREAM_EDGE, STREAM_FAULT, STREAM_CHURN, STREAM_PROGRAM = 1, 2, 3, 4, 5, 6


@numba.njit(cache=True)
def mix64(z):
    """SplitMix64's finaliser: a bijective hash of a uint64."""
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@numba.njit(cache=True)
def counter_uniform(key, counter):
    """The `counter`-th uniform number of the stream `key`, in the open interval (0, 1) (52 random bits)."""
    z = mix64(np.uint64(key) + np.uint64(counter) * _GOLDEN)
    return (np.float64(z >> _S12) + 0.5) * _TWO_TO_MINUS_52


@numba.njit(cache=True)
def stream_keys(seed, stream, n):
    """One uint64 key per node for random stream `stream` of run seed `seed` (keys of different seeds, streams
    and nodes are unrelated)."""
    base = mix64(mix64(np.uint64(seed) + _GOLDEN) ^ (np.uint64(stream) * _MIX2))
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = mix64(base + np.uint64(i + 1) * _GOLDEN)
    return out


@numba.njit(cache=True)
def _standard_normal(u1, u2):
    """Box-Muller: a standard normal number from two uniforms in (0, 1)."""
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


# ----------------------------------------------------------------------------------------------------------------
# Distributions (latencies, extra delays)
# ----------------------------------------------------------------------------------------------------------------

#: distribution kinds and their parameters
DISTRIBUTIONS = {"constant": ("value",), "uniform": ("low", "high"), "exponential": ("mean",),
                 "lognormal": ("median", "sigma")}
_DIST_CODE = {"constant": 0, "uniform": 1, "exponential": 2, "lognormal": 3}
_DIST_ALLOWED = {"value": "a number >= 0", "low": "a number >= 0", "high": "a number >= low",
                 "mean": "a number > 0", "median": "a number > 0", "sigma": "a number >= 0"}


@numba.njit(cache=True)
def _sample(code, a, b, u1, u2):
    """A draw of distribution `code` with parameters (a, b) from two uniforms (see `Distribution`)."""
    if code == 0:
        return a
    if code == 1:
        return a + (b - a) * u1
    if code == 2:
        return -a * math.log(u1)
    return a * math.exp(b * _standard_normal(u1, u2))


def _article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class Distribution:
    """A non-negative random duration: ``constant(value)``, ``uniform(low, high)``, ``exponential(mean)`` or
    ``lognormal(median, sigma)`` (``median * exp(sigma * Z)``). In a scenario it is a number (a constant) or an
    inline table such as ``{kind = "lognormal", median = 0.01, sigma = 0.5}``."""

    kind: str = "constant"
    params: tuple = (0.0,)

    def __post_init__(self):
        if self.kind not in DISTRIBUTIONS:
            raise ScenarioError(f"distribution kind {self.kind!r} is unknown; allowed: {', '.join(DISTRIBUTIONS)}")
        names = DISTRIBUTIONS[self.kind]
        if len(self.params) != len(names):
            raise ScenarioError(f"{_article(self.kind)} distribution takes {', '.join(names)}")
        for name, v in zip(names, self.params):
            bad = not _is_number(v) or not math.isfinite(float(v)) or (
                float(v) <= 0 if name in ("mean", "median") else float(v) < 0)
            if name == "high" and not bad:
                bad = float(v) < float(self.params[0])
            if bad:
                raise ScenarioError(f"{name} = {v!r} is out of range for {_article(self.kind)} distribution; allowed: "
                                    f"{_DIST_ALLOWED[name]}")
        object.__setattr__(self, "params", tuple(float(v) for v in self.params))

    # -- constructors ---------------------------------------------------------------------------------------------
    @classmethod
    def constant(cls, value: float) -> "Distribution":
        return cls("constant", (value,))

    @classmethod
    def uniform(cls, low: float, high: float) -> "Distribution":
        return cls("uniform", (low, high))

    @classmethod
    def exponential(cls, mean: float) -> "Distribution":
        return cls("exponential", (mean,))

    @classmethod
    def lognormal(cls, median: float, sigma: float) -> "Distribution":
        return cls("lognormal", (median, sigma))

    @classmethod
    def from_config(cls, value: Any, name: str = "distribution") -> "Distribution":
        """A number (constant) or a table ``{kind = ..., <params>}``; errors name ``name.key``, value and range."""
        if isinstance(value, Distribution):
            return value
        if _is_number(value):
            if not math.isfinite(float(value)) or float(value) < 0:
                raise ScenarioError(f"{name} = {value!r} is out of range; allowed: a number >= 0 (a constant), or "
                                    f"a table {{kind = ..., ...}} with kind one of {', '.join(DISTRIBUTIONS)}")
            return cls.constant(float(value))
        if not isinstance(value, dict):
            raise ScenarioError(f"{name} = {value!r} has the wrong type: expected a number or a table "
                                f"{{kind = ..., ...}} with kind one of {', '.join(DISTRIBUTIONS)}")
        kind = value.get("kind")
        if kind not in DISTRIBUTIONS:
            raise ScenarioError(f"{name}.kind = {kind!r} is not a distribution; allowed: {', '.join(DISTRIBUTIONS)}")
        names = DISTRIBUTIONS[kind]
        for key in value:
            if key != "kind" and key not in names:
                raise ScenarioError(f"unknown key '{name}.{key}' for {_article(kind)} distribution; allowed keys: kind, "
                                    f"{', '.join(names)}")
        params = []
        for key in names:
            if key not in value:
                raise ScenarioError(f"{name}.{key} is missing; {_article(kind)} distribution needs {', '.join(names)} "
                                    f"({', '.join(f'{k}: {_DIST_ALLOWED[k]}' for k in names)})")
            v = value[key]
            if not _is_number(v):
                raise ScenarioError(f"{name}.{key} = {v!r} has the wrong type: expected a number")
            params.append(float(v))
        try:
            return cls(kind, tuple(params))
        except ScenarioError as exc:
            raise ScenarioError(f"{name}.{exc}") from None

    def to_config(self) -> dict:
        return {"kind": self.kind, **dict(zip(DISTRIBUTIONS[self.kind], self.params))}

    # -- use --------------------------------------------------------------------------------------------------------
    @property
    def code(self) -> int:
        return _DIST_CODE[self.kind]

    @property
    def a(self) -> float:
        return self.params[0]

    @property
    def b(self) -> float:
        return self.params[1] if len(self.params) > 1 else 0.0

    @property
    def mean(self) -> float:
        if self.kind == "constant":
            return self.a
        if self.kind == "uniform":
            return 0.5 * (self.a + self.b)
        if self.kind == "exponential":
            return self.a
        return self.a * math.exp(0.5 * self.b ** 2)

    def sample(self, u1: float, u2: float = 0.5) -> float:
        """The draw of this distribution for uniforms (u1, u2) in (0, 1)."""
        return float(_sample(self.code, self.a, self.b, u1, u2))


# ----------------------------------------------------------------------------------------------------------------
# Clocks and latency
# ----------------------------------------------------------------------------------------------------------------

CLOCKS = ("poisson", "periodic")


@numba.njit(cache=True)
def _tick_gap(periodic, rate, jitter, u, first):
    """Time from one tick of a node's clock to its next (from time 0 to the first tick when `first`)."""
    if periodic == 0:
        return -math.log(u) / rate
    period = 1.0 / rate
    if first:
        return period * u
    return period * (1.0 + jitter * (2.0 * u - 1.0))


@dataclass(frozen=True)
class Clock:
    """Each node's clock: ``poisson`` (exponential gaps of mean 1/rate) or ``periodic`` (gaps of 1/rate times a
    uniform factor in [1 - jitter, 1 + jitter], first tick at a uniform phase). Stragglers run at rate/factor."""

    kind: str = "poisson"
    rate: float = 1.0
    jitter: float = 0.0

    def __post_init__(self):
        if self.kind not in CLOCKS:
            raise ScenarioError(f"clock = {self.kind!r} is not a clock; allowed: {', '.join(CLOCKS)}")
        if not _is_number(self.rate) or not (0 < float(self.rate) < math.inf):
            raise ScenarioError(f"rate = {self.rate!r} is out of range; allowed: a number > 0")
        if not _is_number(self.jitter) or not 0 <= float(self.jitter) < 1:
            raise ScenarioError(f"jitter = {self.jitter!r} is out of range; allowed: a number in [0, 1)")
        if self.kind == "poisson" and self.jitter:
            raise ScenarioError(f"jitter = {self.jitter!r} applies to the periodic clock only; allowed: "
                                "clock = \"periodic\", or jitter = 0")


@dataclass(frozen=True)
class LatencyModel:
    """How long a message takes: ``distribution`` (per message) times a fixed factor per edge, plus
    ``bytes / bandwidth``.

    edge_spread: sigma of the per-edge factor ``exp(edge_spread * Z_edge)`` (one standard normal Z per undirected
        edge, drawn from the seed): heterogeneous links whose median latency differs; 0 makes all links alike.
    bandwidth: bytes per unit of virtual time; ``None`` for no size-dependent term.
    """

    distribution: Distribution = field(default_factory=lambda: Distribution.constant(0.01))
    bandwidth: float | None = None
    edge_spread: float = 0.0

    def __post_init__(self):
        if not isinstance(self.distribution, Distribution):
            object.__setattr__(self, "distribution", Distribution.from_config(self.distribution, "latency"))
        if self.bandwidth is not None and (not _is_number(self.bandwidth) or not float(self.bandwidth) > 0):
            raise ScenarioError(f"bandwidth = {self.bandwidth!r} is out of range; allowed: a number > 0 (bytes per "
                                "unit of virtual time)")
        if not _is_number(self.edge_spread) or not 0 <= float(self.edge_spread) < math.inf:
            raise ScenarioError(f"edge_spread = {self.edge_spread!r} is out of range; allowed: a number >= 0")


# ----------------------------------------------------------------------------------------------------------------
# Node programs
# ----------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _kernel_no_crash(arrays, node):
    return


@numba.njit(cache=True)
def _kernel_no_recover(arrays, node, keep_state):
    return


@dataclass
class GossipKernel:
    """A program's compiled form, for the compiled event loop. All functions are numba-jitted and act in place on
    ``arrays`` (a tuple of arrays that the program's state shares, so `observe` sees the result):

    ``wake(arrays, node, t, out_dst, out_tag, out_payload) -> (n_out, done)``
    ``receive(arrays, dst, src, tag, payload, t, out_dst, out_tag, out_payload) -> (n_out, done)``
    ``crash(arrays, node)``, ``recover(arrays, node, keep_state)``

    A call writes its messages to rows ``0..n_out-1`` of the out arrays (sender: the event's node; payload row k
    holds ``widths[out_tag[k]]`` float64 scalars) and returns whether every node of the program has finished.
    The results must equal the program's Python methods exactly (the easy way: the methods call these functions).
    """

    arrays: tuple
    wake: Callable
    receive: Callable
    tags: tuple
    widths: np.ndarray
    max_out: int = 1
    crash: Callable = _kernel_no_crash
    recover: Callable = _kernel_no_recover


class GossipProgram(NodeProgram):
    """A peer program for the gossip scheduler; acts on a group of nodes (struct of arrays over the group).

    ``init(node_ids, node_data, seed) -> state``
    ``wake(state, nodes, times) -> (state, Outbox)``: the clocks of `nodes` ticked at `times` (event order); each
        may do local work and send messages (`MessageBatch` rows src -> dst; src must be the waking node).
    ``receive(state, batch, times) -> (state, Outbox)``: deliver the rows of `batch` (event order) that arrived at
        `times`; the result must equal processing the rows one at a time in that order. Replies are sent from the
        receiving node.
    ``observe(state)``: a snapshot for the evaluator (never metered).
    ``crash(state, nodes)`` / ``recover(state, nodes, keep_state)``: fault hooks (default: nothing happens; a
        recovered node without its state should restart from its initial state). Return the state.
    ``kernel(state) -> GossipKernel | None``: the compiled form, if the program has one.

    Randomness comes from per-node seeded streams in the state. ``Outbox.signals = {"done": True}`` says every
    node of this group has finished; the scheduler stops when all groups say so.
    """

    role = "peer"

    def wake(self, state: Any, nodes: np.ndarray, times: np.ndarray) -> tuple[Any, Outbox]:  # pragma: no cover
        raise NotImplementedError

    def receive(self, state: Any, batch: MessageBatch, times: np.ndarray) -> tuple[Any, Outbox]:  # pragma: no cover
        raise NotImplementedError

    def crash(self, state: Any, nodes: np.ndarray) -> Any:
        return state

    def recover(self, state: Any, nodes: np.ndarray, keep_state: bool) -> Any:
        return state

    def kernel(self, state: Any) -> GossipKernel | None:
        return None

    def step(self, state, inbox, round_):
        raise ProtocolError(f"{type(self).__name__} is a gossip program: it runs under the gossip scheduler "
                            "([schedule] kind = \"gossip\"), not in synchronous rounds")


# ----------------------------------------------------------------------------------------------------------------
# Event loop constants (shared by the Python and the compiled loop)
# ----------------------------------------------------------------------------------------------------------------

# event priorities at equal times
P_CRASH, P_LEAVE, P_RECOVER, P_JOIN, P_DELIVER, P_WAKE = 0, 1, 2, 3, 4, 5
# causes in records: record code = kind * 16 + duplicate * 8 + cause
CAUSE_DELIVERED, CAUSE_LOST, CAUSE_DEAD_RECEIVER, CAUSE_IN_FLIGHT, CAUSE_DEAD_SENDER = 0, 1, 2, 3, 4
CAUSE_NAMES = {CAUSE_DELIVERED: "delivered", CAUSE_LOST: "lost", CAUSE_DEAD_RECEIVER: "dead_receiver",
               CAUSE_IN_FLIGHT: "in_flight_at_end", CAUSE_DEAD_SENDER: "dead_sender"}
DROPPED_CAUSES = (CAUSE_LOST, CAUSE_DEAD_RECEIVER, CAUSE_DEAD_SENDER)
# node events in the fault log
NODE_CRASH, NODE_RECOVER, NODE_LEAVE, NODE_JOIN = 0, 1, 2, 3
NODE_EVENT_NAMES = ("crash", "recover", "leave", "join")
# per-node integer state columns
I_EPOCH, I_TICKS, I_SENT, I_DOWN, I_DEAD, I_CHURN = range(6)
# key columns
K_CLOCK, K_LATENCY, K_FAULT, K_CHURN = range(4)
# float parameters
(E_JITTER, E_DROP, E_DUP, E_DELAY, E_LAT_A, E_LAT_B, E_DELAY_A, E_DELAY_B, E_BANDWIDTH, E_SPREAD,
 E_ROUND_TIME, E_CHURN_RATE, E_CHURN_DOWN) = range(13)
# integer parameters
C_PERIODIC, C_LAT, C_DELAY, C_N, C_CHURN_KEEP = range(5)
# loop counters
(N_HEAP, N_SEQ, N_FREE, N_REC, N_LOG, N_WAKES, N_SENT, N_SENT_SCALARS, N_EVENTS, N_DONE, N_DELAYED, N_BAD_SRC,
 N_BAD_DST) = range(13)
F_NOW, F_NEXT_EVAL, F_MAX_TIME = range(3)
L_MAX_MESSAGES, L_MAX_SCALARS, L_NEXT_EVAL_MSG, L_YIELD = range(4)
# loop status
(ST_QUIESCENT, ST_TIME, ST_DONE, ST_MESSAGES, ST_SCALARS, ST_EVAL_TIME, ST_EVAL_MSG, ST_YIELD, ST_FLUSH, ST_GROW,
 ST_BAD_EDGE) = range(11)
_NO_LIMIT = np.iinfo(np.int64).max


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


@numba.njit(cache=True)
def _churn_duration(env, key, counter):
    """Churn: even counters draw up-times (mean 1/churn_rate), odd counters down-times (mean churn_downtime)."""
    mean = env[E_CHURN_DOWN] if counter % 2 == 1 else 1.0 / env[E_CHURN_RATE]
    return -mean * math.log(counter_uniform(key, counter))


@numba.njit(cache=True)
def _next_tick(cfg, env, keys, rates, node, k):
    """Gap before tick `k` of `node`'s clock (tick 0 is the first one after time 0)."""
    return _tick_gap(cfg[C_PERIODIC], rates[node], env[E_JITTER], counter_uniform(keys[node, K_CLOCK], k), k == 0)


@numba.njit(cache=True)
def _copy_latency(env, cfg, keys, src, c, copy, factor, nbytes):
    """Latency of one copy (0 or 1) of message c of `src`, and whether it was delayed by a fault."""
    lkey = keys[src, K_LATENCY]
    base = c * 4 + 2 * copy
    lat = _sample(cfg[C_LAT], env[E_LAT_A], env[E_LAT_B], counter_uniform(lkey, base),
                  counter_uniform(lkey, base + 1)) * factor + nbytes / env[E_BANDWIDTH]
    delayed = 0
    if env[E_DELAY] > 0.0:
        fkey = keys[src, K_FAULT]
        fbase = c * 8 + 2 + 3 * copy
        if counter_uniform(fkey, fbase) < env[E_DELAY]:
            lat += _sample(cfg[C_DELAY], env[E_DELAY_A], env[E_DELAY_B], counter_uniform(fkey, fbase + 1),
                           counter_uniform(fkey, fbase + 2))
            delayed = 1
    return lat, delayed


@numba.njit(cache=True)
def _send_fate(env, cfg, keys, edge_key, src, dst, c, nbytes):
    """Fate of message c of `src`: (copies, delayed copies, latency 1, latency 2); copies is 0 (lost), 1 or 2
    (duplicated)."""
    fkey = keys[src, K_FAULT]
    if env[E_DROP] > 0.0 and counter_uniform(fkey, c * 8) < env[E_DROP]:
        return 0, 0, 0.0, 0.0
    factor = 1.0
    if env[E_SPREAD] > 0.0:
        lo = min(src, dst)
        e = lo * cfg[C_N] + (src + dst - lo)
        factor = math.exp(env[E_SPREAD] * _standard_normal(counter_uniform(edge_key, 2 * e),
                                                           counter_uniform(edge_key, 2 * e + 1)))
    lat1, d1 = _copy_latency(env, cfg, keys, src, c, 0, factor, nbytes)
    if env[E_DUP] > 0.0 and counter_uniform(fkey, c * 8 + 1) < env[E_DUP]:
        lat2, d2 = _copy_latency(env, cfg, keys, src, c, 1, factor, nbytes)
        return 2, d1 + d2, lat1, lat2
    return 1, d1, lat1, 0.0


# ----------------------------------------------------------------------------------------------------------------
# The compiled event loop
# ----------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _heap_push(ht, hk, ctr, t, prio, a, b):
    """Push event (t, prio, next sequence number; a, b) on the array heap (ht: times, hk: prio, seq, a, b)."""
    i = ctr[N_HEAP]
    ctr[N_HEAP] = i + 1
    seq = ctr[N_SEQ]
    ctr[N_SEQ] = seq + 1
    while i > 0:
        p = (i - 1) >> 1
        tp = ht[p]
        if tp < t or (tp == t and (hk[p, 0] < prio or (hk[p, 0] == prio and hk[p, 1] < seq))):
            break
        ht[i] = tp
        hk[i, 0] = hk[p, 0]
        hk[i, 1] = hk[p, 1]
        hk[i, 2] = hk[p, 2]
        hk[i, 3] = hk[p, 3]
        i = p
    ht[i] = t
    hk[i, 0] = prio
    hk[i, 1] = seq
    hk[i, 2] = a
    hk[i, 3] = b


@numba.njit(cache=True)
def _heap_pop(ht, hk, ctr):
    """Pop the smallest (time, prio, seq) event; returns (t, prio, a, b)."""
    t = ht[0]
    prio = hk[0, 0]
    a = hk[0, 2]
    b = hk[0, 3]
    n = ctr[N_HEAP] - 1
    ctr[N_HEAP] = n
    if n > 0:
        lt = ht[n]
        lp = hk[n, 0]
        ls = hk[n, 1]
        la = hk[n, 2]
        lb = hk[n, 3]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            r = c + 1
            if r < n and (ht[r] < ht[c] or (ht[r] == ht[c] and (hk[r, 0] < hk[c, 0] or (
                    hk[r, 0] == hk[c, 0] and hk[r, 1] < hk[c, 1])))):
                c = r
            tc = ht[c]
            if tc < lt or (tc == lt and (hk[c, 0] < lp or (hk[c, 0] == lp and hk[c, 1] < ls))):
                ht[i] = tc
                hk[i, 0] = hk[c, 0]
                hk[i, 1] = hk[c, 1]
                hk[i, 2] = hk[c, 2]
                hk[i, 3] = hk[c, 3]
                i = c
            else:
                break
        ht[i] = lt
        hk[i, 0] = lp
        hk[i, 1] = ls
        hk[i, 2] = la
        hk[i, 3] = lb
    return t, prio, a, b


@numba.njit(cache=True)
def sorted_position(ptr, values, u, v):
    """Position of v in row u of a CSR-style sorted adjacency (values[ptr[u]:ptr[u+1]]), by binary search; the
    insertion point when v is not there."""
    lo = ptr[u]
    hi = ptr[u + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _is_edge(adj_ptr, adj, u, v):
    lo = sorted_position(adj_ptr, adj, u, v)
    return lo < adj_ptr[u + 1] and adj[lo] == v


# The event handling below is shared by `_kernel_loop` and the Ray host's loop (`engine.ray_gossip`). These
# helpers and the loops are compiled without reference counting (``_nrt=False``: they allocate nothing), as
# the counting of the many array arguments at every call cost about half the loop's throughput.

@numba.njit(cache=True, _nrt=False)
def _log_node_event(log_t, log_i, ctr, t, node, event):
    g = ctr[N_LOG]
    ctr[N_LOG] = g + 1
    log_t[g] = t
    log_i[g, 0] = node
    log_i[g, 1] = event


@numba.njit(_nrt=False)
def _node_event(crash_fn, recover_fn, prog, ht, hk, ni, rates, keys, env, cfg, log_t, log_i, ctr, t, prio, node, b):
    """A crash, leave, recover or join of `node` at time t (b: the event's flag: crash for good, recover with state).
    Counts the node down or up (a node is down while any of its crashes or leaves lasts), draws churn's next
    event, stops or restarts its clock (the epoch), calls the program's crash or recover hook and logs the change."""
    if prio == P_CRASH or prio == P_LEAVE:
        if prio == P_CRASH:
            if b == 1:
                ni[node, I_DEAD] = 1
            event = NODE_CRASH
        else:
            if ni[node, I_DEAD] == 1:
                return                                     # a dead node's churn ends
            c = ni[node, I_CHURN]
            _heap_push(ht, hk, ctr, t + _churn_duration(env, keys[node, K_CHURN], 2 * c + 1), P_JOIN, node, 0)
            event = NODE_LEAVE
        ni[node, I_DOWN] += 1
        if ni[node, I_DOWN] == 1:
            ni[node, I_EPOCH] += 1
            crash_fn(prog, node)
            _log_node_event(log_t, log_i, ctr, t, node, event)
    else:
        if prio == P_RECOVER:
            keep = b == 1
            event = NODE_RECOVER
        else:
            c = ni[node, I_CHURN]
            ni[node, I_CHURN] = c + 1
            _heap_push(ht, hk, ctr, t + _churn_duration(env, keys[node, K_CHURN], 2 * c + 2), P_LEAVE, node, 0)
            keep = cfg[C_CHURN_KEEP] == 1
            event = NODE_JOIN
        if ni[node, I_DOWN] > 0:
            ni[node, I_DOWN] -= 1
            if ni[node, I_DOWN] == 0 and ni[node, I_DEAD] == 0:
                ni[node, I_EPOCH] += 1
                k = ni[node, I_TICKS]
                ni[node, I_TICKS] = k + 1
                _heap_push(ht, hk, ctr, t + _next_tick(cfg, env, keys, rates, node, k), P_WAKE, node,
                           ni[node, I_EPOCH])
                recover_fn(prog, node, keep)
                _log_node_event(log_t, log_i, ctr, t, node, event)


@numba.njit(_nrt=False)
def _handle_event(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk, mi, mp, free, ni, rates, keys,
                  env, cfg, rec, log_t, log_i, ctr, fc, out_dst, out_tag, out_pay, t, prio, a, b):
    """Handle the event (t, prio, a, b) just popped off the heap, in the compiled loops (`_kernel_loop` and the
    Ray host's loop). Returns (ran, n_out, done, sender): whether a program's wake or receive ran (then its
    n_out messages in the out arrays are to be sent from `sender`, and `done` is its signal), or not (a stale
    tick, a delivery to a node that is down, a node event)."""
    if prio == P_WAKE:
        if b != ni[a, I_EPOCH]:
            return False, 0, False, a                      # a tick of a clock stopped by a crash
        fc[F_NOW] = t
        ctr[N_EVENTS] += 1
        k = ni[a, I_TICKS]
        ni[a, I_TICKS] = k + 1
        _heap_push(ht, hk, ctr, t + _next_tick(cfg, env, keys, rates, a, k), P_WAKE, a, b)
        ctr[N_WAKES] += 1
        n_out, done = wake_fn(prog, a, t, out_dst, out_tag, out_pay)
        return True, n_out, done, a
    fc[F_NOW] = t
    ctr[N_EVENTS] += 1
    if prio != P_DELIVER:
        _node_event(crash_fn, recover_fn, prog, ht, hk, ni, rates, keys, env, cfg, log_t, log_i, ctr, t, prio, a, b)
        return False, 0, False, a
    src = mi[a, 0]
    dst = mi[a, 1]
    tag = mi[a, 2]
    r = ctr[N_REC]
    ctr[N_REC] = r + 1
    rec[r, 0] = mi[a, 3]
    rec[r, 1] = src
    rec[r, 2] = dst
    if ni[dst, I_DOWN] > 0:
        rec[r, 3] = tag * 16 + mi[a, 4] * 8 + CAUSE_DEAD_RECEIVER
        free[ctr[N_FREE]] = a
        ctr[N_FREE] += 1
        return False, 0, False, dst
    rec[r, 3] = tag * 16 + mi[a, 4] * 8 + CAUSE_DELIVERED
    n_out, done = receive_fn(prog, dst, src, tag, mp[a, :widths[tag]], t, out_dst, out_tag, out_pay)
    free[ctr[N_FREE]] = a
    ctr[N_FREE] += 1
    return True, n_out, done, dst


@numba.njit(cache=True, _nrt=False)
def _send(env, cfg, keys, edge_key, adj_ptr, adj, widths, ni, rec, ctr, round_time, t, sender, d, tag):
    """Send a message of kind `tag` from `sender` to `d` at time t, in the compiled loops: check the edge, count
    it, draw its fate (`_send_fate`) and record it if it is lost. Returns (copies, latency 1, latency 2, round
    bin): copies is -1 if (sender, d) is not an edge (the pair is left in ctr[N_BAD_SRC], ctr[N_BAD_DST]),
    0 if the message is lost, else 1 or 2 copies to deliver after latency 1 and 2."""
    if not _is_edge(adj_ptr, adj, sender, d):
        ctr[N_BAD_SRC] = sender
        ctr[N_BAD_DST] = d
        return -1, 0.0, 0.0, np.int64(0)
    c = ni[sender, I_SENT]
    ni[sender, I_SENT] = c + 1
    w = widths[tag]
    ctr[N_SENT] += 1
    ctr[N_SENT_SCALARS] += w
    bin_ = np.int64(t / round_time)
    copies, delayed, lat1, lat2 = _send_fate(env, cfg, keys, edge_key, sender, d, c, w * 8)
    if copies == 0:
        r = ctr[N_REC]
        ctr[N_REC] = r + 1
        rec[r, 0] = bin_
        rec[r, 1] = sender
        rec[r, 2] = d
        rec[r, 3] = tag * 16 + CAUSE_LOST
        return 0, lat1, lat2, bin_
    ctr[N_DELAYED] += delayed
    return copies, lat1, lat2, bin_


@numba.njit(cache=True, _nrt=False)
def _enqueue(ht, hk, ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, w, arrive):
    """Put copy `copy` of a message (payload: the first w scalars of `pay`) in a pool slot and on the heap, to
    be delivered at `arrive`."""
    ctr[N_FREE] -= 1
    slot = free[ctr[N_FREE]]
    mi[slot, 0] = sender
    mi[slot, 1] = d
    mi[slot, 2] = tag
    mi[slot, 3] = bin_
    mi[slot, 4] = copy
    for q in range(w):
        mp[slot, q] = out_pay[k, q]
    _heap_push(ht, hk, ctr, arrive, P_DELIVER, slot, 0)


@numba.njit(cache=True, _nrt=False)
def _no_room(ctr, ht, rec, log_t, max_out):
    """ST_GROW if the pool or the heap may not hold the next event's messages, ST_FLUSH if the records or the
    log may not; -1 if there is room."""
    if ctr[N_FREE] < 2 * max_out or ctr[N_HEAP] + 2 * max_out + 2 > ht.shape[0]:
        return ST_GROW
    if ctr[N_REC] + 2 * max_out + 1 > rec.shape[0] or ctr[N_LOG] + 1 > log_t.shape[0]:
        return ST_FLUSH
    return -1


@numba.njit(_nrt=False)
def _kernel_loop(wake_fn, receive_fn, crash_fn, recover_fn, prog, widths, ht, hk, mi, mp, free, ni, rates, keys,
                 edge_key, env, cfg, adj_ptr, adj, rec, log_t, log_i, ctr, fc, lim, out_dst, out_tag, out_pay):
    """The event loop of `GossipScheduler._run_python`, compiled. Returns a status (ST_*) when it must hand back
    to Python: a budget, an evaluation point, a full buffer, or every `lim[L_YIELD]` events (wall-clock check).
    Statement for statement the same as the Python loop, so both give the same run."""
    max_out = out_dst.shape[0]
    round_time = env[E_ROUND_TIME]
    since_yield = 0
    while True:
        if ctr[N_HEAP] == 0:
            return ST_QUIESCENT
        t = ht[0]
        if fc[F_NEXT_EVAL] <= t and fc[F_NEXT_EVAL] <= fc[F_MAX_TIME]:
            return ST_EVAL_TIME
        if t > fc[F_MAX_TIME]:
            return ST_TIME
        status = _no_room(ctr, ht, rec, log_t, max_out)
        if status >= 0:
            return status
        if since_yield >= lim[L_YIELD]:
            return ST_YIELD
        since_yield += 1
        t, prio, a, b = _heap_pop(ht, hk, ctr)
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
            for copy in range(copies):
                _enqueue(ht, hk, ctr, mi, mp, free, sender, d, tag, bin_, copy, out_pay, k, widths[tag],
                         t + (lat1 if copy == 0 else lat2))
        ctr[N_DONE] = 1 if done else 0
        if ctr[N_DONE] == 1:
            return ST_DONE
        if ctr[N_SENT] >= lim[L_MAX_MESSAGES]:
            return ST_MESSAGES
        if ctr[N_SENT_SCALARS] >= lim[L_MAX_SCALARS]:
            return ST_SCALARS
        if ctr[N_SENT] >= lim[L_NEXT_EVAL_MSG]:
            return ST_EVAL_MSG


_LOOPS: dict[tuple, Callable] = {}


def _loop_for(kernel: GossipKernel) -> Callable:
    """`_kernel_loop` with the kernel's functions bound as compile-time constants (direct calls that numba can
    inline). Compiled once per process and set of functions (about a second; numba cannot cache a loop that
    receives functions, whether as arguments or bound like this)."""
    key = (kernel.wake, kernel.receive, kernel.crash, kernel.recover)
    loop = _LOOPS.get(key)
    if loop is None:
        wake, receive, crash, recover = key

        @numba.njit
        def loop(prog, widths, ht, hk, mi, mp, free, ni, rates, keys, edge_key, env, cfg, adj_ptr, adj, rec, log_t,
                 log_i, ctr, fc, lim, out_dst, out_tag, out_pay):
            return _kernel_loop(wake, receive, crash, recover, prog, widths, ht, hk, mi, mp, free, ni, rates, keys,
                                edge_key, env, cfg, adj_ptr, adj, rec, log_t, log_i, ctr, fc, lim, out_dst, out_tag,
                                out_pay)

        loop = _LOOPS[key] = loop
    return loop


@numba.njit(cache=True)
def _push_events(ht, hk, ctr, times, events):
    for i in range(times.shape[0]):
        _heap_push(ht, hk, ctr, times[i], events[i, 0], events[i, 1], events[i, 2])


# ----------------------------------------------------------------------------------------------------------------
# The scheduler
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class GossipProgress:
    """Where a gossip run stands (passed to observers).

    time: virtual time; round: ``floor(time / round_time)``; wakes: clock ticks handled; events: events handled
    (ticks, deliveries, fault transitions); sent / sent_scalars: messages (scalars) the programs sent;
    in_flight: messages in the network now.
    """

    time: float
    round: int
    wakes: int
    events: int
    sent: int
    sent_scalars: int
    in_flight: int


@dataclass
class EventLoopArrays:
    """The arrays a compiled event loop works in (in-process and on each Ray actor): the event heap (times,
    keys), the message pool (ints, payloads, free list), per-node state, ledger records, the evaluation log,
    counters, float and int settings, and a step's out buffers. `allocate` pushes the initial events."""

    ht: np.ndarray
    hk: np.ndarray
    mi: np.ndarray
    mp: np.ndarray
    free: np.ndarray
    ni: np.ndarray
    rec: np.ndarray
    log_t: np.ndarray
    log_i: np.ndarray
    ctr: np.ndarray
    fc: np.ndarray
    lim: np.ndarray
    out_dst: np.ndarray
    out_tag: np.ndarray
    out_pay: np.ndarray

    @classmethod
    def allocate(cls, n_nodes: int, pool: int, events: list, max_out: int, width: int, n_counters: int,
                 n_settings: int) -> "EventLoopArrays":
        cap = len(events) + pool + 2 * max_out + 16
        ctr = np.zeros(n_counters, dtype=np.int64)
        ctr[N_FREE] = pool
        ni = np.zeros((n_nodes, 6), dtype=np.int64)
        ni[:, I_TICKS] = 1
        arrays = cls(ht=np.empty(cap), hk=np.empty((cap, 4), dtype=np.int64), mi=np.empty((pool, 5), dtype=np.int64),
                     mp=np.empty((pool, width)), free=np.arange(pool, dtype=np.int64)[::-1].copy(), ni=ni,
                     rec=np.empty((65536, 4), dtype=np.int64), log_t=np.empty(4096),
                     log_i=np.empty((4096, 2), dtype=np.int64), ctr=ctr, fc=np.zeros(n_settings),
                     lim=np.zeros(n_settings, dtype=np.int64), out_dst=np.zeros(max_out, dtype=np.int64),
                     out_tag=np.zeros(max_out, dtype=np.int64), out_pay=np.zeros((max_out, width)))
        if events:
            times = np.array([e[0] for e in events], dtype=np.float64)
            keys = np.array([e[1:] for e in events], dtype=np.int64)
            _push_events(arrays.ht, arrays.hk, arrays.ctr, times, keys)
        return arrays


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
    new_free = np.empty(2 * pool, dtype=np.int64)
    nf = int(ctr[N_FREE])
    new_free[:nf] = free[:nf]
    new_free[nf:nf + pool] = np.arange(2 * pool - 1, pool - 1, -1)
    ctr[N_FREE] = nf + pool
    cap = ht.shape[0]
    new_ht = np.empty(cap + 2 * pool)
    new_hk = np.empty((cap + 2 * pool, 4), dtype=np.int64)
    new_ht[:cap] = ht
    new_hk[:cap] = hk
    return new_mi, new_mp, new_free, new_ht, new_hk


def program_sends(out, sender: int, kind_id):
    """Every message of a Python gossip program's outbox as (kind, scalars, bytes, src, dst, payload row), in
    order; `kind_id(tag, scalars, dtype)` numbers the message kinds. A message must come from `sender`, the node
    whose event is being handled (ProtocolError otherwise)."""
    for batch in out.batches:
        src_ids = batch.src.tolist()
        dst_ids = batch.dst.tolist()
        payload = batch.payload
        if payload.ndim != 2:
            payload = payload.reshape(len(src_ids) if payload.shape[0] == len(src_ids) else 1, -1)
        spm = payload.shape[1]
        nbytes = spm * payload.dtype.itemsize
        kind = kind_id(batch.tag, spm, payload.dtype)
        shared_row = payload.shape[0] == 1
        for i in range(len(src_ids)):
            s = src_ids[i]
            if s != sender:
                raise ProtocolError(f"message with tag {batch.tag!r} claims to come from node {s}, but the event "
                                    f"being handled is node {sender}'s; a gossip program sends only from the node "
                                    "that woke or received")
            yield kind, spm, nbytes, s, dst_ids[i], (payload[0:1] if shared_row else payload[i:i + 1])


def python_node_event(heap: list, seq: int, t: float, prio: int, node: int, b: int, nstate, gid: int,
                      programs: list, states: list, one_ids, env, keys, cfg, rates, log: list) -> int:
    """The Python loops' handling of a crash / leave / recover / join event of `node` (the same semantics as
    `_node_event` of the compiled loops): counts the node down or up, schedules its churn and clock, calls the
    program's crash / recover hook and logs the change. Returns the next heap sequence number."""
    if prio == P_CRASH or prio == P_LEAVE:
        if prio == P_CRASH:
            if b == 1:
                nstate[I_DEAD] = 1
            event = NODE_CRASH
        else:
            if nstate[I_DEAD] == 1:
                return seq                                     # a dead node's churn ends
            c = nstate[I_CHURN]
            heapq.heappush(heap, (t + _churn_duration(env, keys[node, K_CHURN], 2 * c + 1), P_JOIN, seq, node, 0))
            seq += 1
            event = NODE_LEAVE
        nstate[I_DOWN] += 1
        if nstate[I_DOWN] == 1:
            nstate[I_EPOCH] += 1
            res = programs[gid].crash(states[gid], one_ids[node])
            if res is not None:
                states[gid] = res
            log.append((t, node, event))
        return seq
    if prio == P_RECOVER:
        keep = b == 1
        event = NODE_RECOVER
    else:
        c = nstate[I_CHURN]
        nstate[I_CHURN] = c + 1
        heapq.heappush(heap, (t + _churn_duration(env, keys[node, K_CHURN], 2 * c + 2), P_LEAVE, seq, node, 0))
        seq += 1
        keep = cfg[C_CHURN_KEEP] == 1
        event = NODE_JOIN
    if nstate[I_DOWN] > 0:
        nstate[I_DOWN] -= 1
        if nstate[I_DOWN] == 0 and nstate[I_DEAD] == 0:
            nstate[I_EPOCH] += 1
            k = nstate[I_TICKS]
            nstate[I_TICKS] = k + 1
            heapq.heappush(heap, (t + _next_tick(cfg, env, keys, rates, node, k), P_WAKE, seq, node, nstate[I_EPOCH]))
            seq += 1
            res = programs[gid].recover(states[gid], one_ids[node], bool(keep))
            if res is not None:
                states[gid] = res
            log.append((t, node, event))
    return seq


class GossipScheduler:
    """Drives asynchronous gossip over an in-process engine's groups, meters every message, applies faults.

    Parameters
    ----------
    engine: a deployed in-process engine (its ``groups`` and ``states``); groups: its groups (every node of the
        topology must belong to one, and every group's program must be a `GossipProgram`).
    meter: the meter every message crosses. topology: the graph messages travel on (checked connected).
    clock, latency: the virtual-time model (defaults: Poisson clocks of rate 1, constant latency 0.01).
    faults: a `svmsim.faults.FaultModel` (bound here with `seed`), or a `FaultPlan` bound for this run (its
        tally collects this run's losses), or None.
    seed: seeds clocks, latencies and per-edge factors (faults use the fault model's seed, by default this one).
    round_time: virtual time per meter round (default ``1/clock.rate``).
    compiled: True to require the compiled loop, False for the Python loop, None to use the compiled loop when
        there is one group whose program has a `GossipKernel`.
    """

    def __init__(self, engine, groups: list[Group], meter: Meter, topology: nx.Graph, *, clock: Clock | None = None,
                 latency: LatencyModel | None = None, faults=None, seed: int = 0, round_time: float | None = None,
                 compiled: bool | None = None):
        from ..faults import FaultModel, FaultPlan

        self.engine = engine
        self.groups = groups
        self.meter = meter
        self.clock = clock or Clock()
        self.latency = latency or LatencyModel()
        n = topology.number_of_nodes()
        self.n_nodes = n
        check_connected(topology, "gossip topology")
        if meter.n_nodes != n:
            raise ScenarioError(f"the meter counts {meter.n_nodes} nodes but the topology has {n}")
        if not hasattr(engine, "states"):
            raise ScenarioError(f"the gossip scheduler runs on the in-process engine; engine {engine.name!r} is not "
                                "supported yet (allowed: engine.name = \"inproc\")")
        if [g.gid for g in groups] != list(range(len(groups))):
            raise ScenarioError("the groups' ids must be 0..k-1 in order (as engines plan them); got "
                                f"{[g.gid for g in groups]}")
        node_group = np.full(n, -1, dtype=np.int64)
        for g in groups:
            if not isinstance(g.program, GossipProgram):
                raise ScenarioError(f"role {g.role!r} runs {type(g.program).__name__}, which is not a gossip program; "
                                    "the gossip scheduler needs GossipProgram peers (use [schedule] kind = \"sync\" "
                                    "for server-client algorithms)")
            node_group[np.asarray(g.node_ids, dtype=np.int64)] = g.gid
        if (node_group < 0).any():
            missing = np.flatnonzero(node_group < 0)
            raise ScenarioError(f"{missing.size} node(s) of the topology run no program (e.g. node {int(missing[0])});"
                                " every node of a gossip topology must be a peer")
        self._node_group = node_group
        self.round_time = float(round_time) if round_time is not None else 1.0 / self.clock.rate
        if not self.round_time > 0:
            raise ScenarioError(f"round_time = {round_time!r} is out of range; allowed: a number > 0")
        self.seed = int(seed)
        if faults is None:
            faults = FaultModel()
        self.faults = faults if isinstance(faults, FaultPlan) else faults.bind(n, self.seed)
        if self.faults.n_nodes != n:
            raise ScenarioError(f"the fault plan was bound for {self.faults.n_nodes} nodes but the topology has {n}")
        # neighbour lists (CSR) for validating sends
        nbrs = neighbours(topology)
        self._adj_ptr = np.zeros(n + 1, dtype=np.int64)
        self._adj_ptr[1:] = np.cumsum([len(a) for a in nbrs])
        self._adj = np.concatenate(nbrs).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
        self._adj_sets = [set(a.tolist()) for a in nbrs]
        self._build_environment()
        # program kernel
        self._kernel = None
        if compiled is not False and len(groups) == 1:
            self._kernel = groups[0].program.kernel(engine.states[groups[0].gid])
        if compiled and self._kernel is None:
            raise ScenarioError("compiled = true needs a single group whose program provides a GossipKernel; "
                                f"{type(groups[0].program).__name__} does not (allowed: compiled = false)")
        self.compiled = self._kernel is not None
        # message kinds (tag, scalars per message, dtype) -> id, for the records
        self._kinds: list[tuple[str, int, np.dtype]] = []
        self._kind_ids: dict[tuple, int] = {}
        self._stub_payloads: dict[int, np.ndarray] = {}
        self._finished = False
        self._next_eval = math.inf                 # the next point of the observation grid of step _eval_time
        self._eval_time = math.inf
        if self.compiled:
            self._init_compiled()
        else:
            self._init_python()

    # -- set-up -------------------------------------------------------------------------------------------------
    def _build_environment(self) -> None:
        n = self.n_nodes
        plan = self.faults
        lat = self.latency.distribution
        delay = plan.delay_distribution
        env = np.zeros(16)
        env[E_JITTER] = self.clock.jitter
        env[E_DROP] = plan.drop
        env[E_DUP] = plan.duplicate
        env[E_DELAY] = plan.delay
        env[E_LAT_A], env[E_LAT_B] = lat.a, lat.b
        env[E_DELAY_A], env[E_DELAY_B] = (delay.a, delay.b) if delay is not None else (0.0, 0.0)
        env[E_BANDWIDTH] = self.latency.bandwidth if self.latency.bandwidth is not None else math.inf
        env[E_SPREAD] = self.latency.edge_spread
        env[E_ROUND_TIME] = self.round_time
        env[E_CHURN_RATE] = plan.churn_rate
        env[E_CHURN_DOWN] = plan.churn_downtime
        cfg = np.zeros(8, dtype=np.int64)
        cfg[C_PERIODIC] = 1 if self.clock.kind == "periodic" else 0
        cfg[C_LAT] = lat.code
        cfg[C_DELAY] = delay.code if delay is not None else 0
        cfg[C_N] = n
        cfg[C_CHURN_KEEP] = 1 if plan.churn_state else 0
        keys = np.empty((n, 4), dtype=np.uint64)
        keys[:, K_CLOCK] = stream_keys(self.seed, STREAM_CLOCK, n)
        keys[:, K_LATENCY] = stream_keys(self.seed, STREAM_LATENCY, n)
        keys[:, K_FAULT] = plan.fault_keys
        keys[:, K_CHURN] = plan.churn_keys
        self._env, self._cfg, self._keys = env, cfg, keys
        self._edge_key = stream_keys(self.seed, STREAM_EDGE, 1)[0]
        self._rates = (self.clock.rate / plan.straggler_factors).astype(np.float64)

    def _initial_events(self) -> list[tuple[float, int, int, int]]:
        """Events pushed before the run, in push order: explicit crashes, their recoveries, the first churn
        departures, the first clock ticks."""
        plan = self.faults
        events = []
        for node, start, end, keep in plan.outages:
            events.append((start, P_CRASH, node, 1 if math.isinf(end) else 0))
        for node, start, end, keep in plan.outages:
            if not math.isinf(end):
                events.append((end, P_RECOVER, node, 1 if keep else 0))
        if plan.churn_rate > 0:
            for node in range(self.n_nodes):
                events.append((float(_churn_duration(self._env, self._keys[node, K_CHURN], 0)), P_LEAVE, node, 0))
        for node in range(self.n_nodes):
            events.append((float(_next_tick(self._cfg, self._env, self._keys, self._rates, node, 0)), P_WAKE, node, 0))
        return events

    def _init_python(self) -> None:
        n = self.n_nodes
        self._heap: list[tuple] = []
        self._seq = 0
        self._ni = [[0] * 6 for _ in range(n)]        # per node: epoch, ticks, sent, down, dead, churn counter
        for t, prio, a, b in self._initial_events():
            heapq.heappush(self._heap, (t, prio, self._seq, a, b))
            self._seq += 1
        for node in range(n):
            self._ni[node][I_TICKS] = 1
        self._rec = array("q")
        self._log: list[tuple[float, int, int]] = []
        self._counts = {"wakes": 0, "sent": 0, "sent_scalars": 0, "events": 0, "delayed": 0}
        self._now = 0.0
        self._group_done = [False] * len(self.groups)
        self._one_ids = [frozen_ids([i]) for i in range(n)]
        self._py_rates = self._rates.tolist()

    def _init_compiled(self) -> None:
        n = self.n_nodes
        k = self._kernel
        self._loop = _loop_for(k)
        self._widths = np.asarray(k.widths, dtype=np.int64)
        for tag, w in zip(k.tags, self._widths):
            self._kind_id(tag, int(w), np.dtype(np.float64))
        a = EventLoopArrays.allocate(n, 4 * n + 64, self._initial_events(), k.max_out, int(self._widths.max()),
                                     n_counters=16, n_settings=4)
        (self._ht, self._hk, self._mi, self._mp, self._free, self._ni_arr, self._rec_arr, self._log_t, self._log_i,
         self._ctr, self._fc, self._lim, self._out_dst, self._out_tag, self._out_pay) = (
            a.ht, a.hk, a.mi, a.mp, a.free, a.ni, a.rec, a.log_t, a.log_i, a.ctr, a.fc, a.lim, a.out_dst, a.out_tag,
            a.out_pay)

    def _kind_id(self, tag: str, spm: int, dtype: np.dtype) -> int:
        return register_kind(self._kinds, self._kind_ids, tag, spm, dtype)

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current virtual time."""
        return float(self._fc[F_NOW]) if self.compiled else self._now

    def progress(self, at: float | None = None) -> GossipProgress:
        t = self.now if at is None else at
        if self.compiled:
            c = self._ctr
            counts = (int(c[N_WAKES]), int(c[N_EVENTS]), int(c[N_SENT]), int(c[N_SENT_SCALARS]))
        else:
            c = self._counts
            counts = (c["wakes"], c["events"], c["sent"], c["sent_scalars"])
        return GossipProgress(time=t, round=int(t / self.round_time), wakes=counts[0], events=counts[1],
                              sent=counts[2], sent_scalars=counts[3], in_flight=self.n_in_flight)

    @property
    def n_in_flight(self) -> int:
        if self.compiled:
            nh = int(self._ctr[N_HEAP])
            return int(np.count_nonzero(self._hk[:nh, 0] == P_DELIVER))
        return sum(1 for e in self._heap if e[1] == P_DELIVER)

    def in_flight(self) -> list[tuple[int, int, str, np.ndarray]]:
        """The messages in the network now, as (src, dst, tag, payload row), in no particular order."""
        out = []
        if self.compiled:
            nh = int(self._ctr[N_HEAP])
            for slot in self._hk[:nh][self._hk[:nh, 0] == P_DELIVER, 2]:
                src, dst, tag = (int(v) for v in self._mi[slot, :3])
                out.append((src, dst, self._kernel.tags[tag], self._mp[slot, :self._widths[tag]].copy()))
        else:
            for e in self._heap:
                if e[1] == P_DELIVER:
                    src, dst, kind, _, _, payload = e[3]
                    out.append((src, dst, self._kinds[kind][0], payload[0].copy()))
        return out

    def node_counters(self) -> dict[str, np.ndarray]:
        """Per node: clock ticks drawn (those handled plus the pending one), messages sent, whether it is down now,
        whether it crashed for good."""
        ni = self._ni_arr if self.compiled else np.array(self._ni, dtype=np.int64).reshape(-1, 6)
        return {"ticks": ni[:, I_TICKS].copy(), "sent": ni[:, I_SENT].copy(), "down": ni[:, I_DOWN] > 0,
                "dead": ni[:, I_DEAD] > 0}

    # -- running --------------------------------------------------------------------------------------------------
    def run(self, *, max_time: float | None = None, max_messages: int | None = None, max_scalars: int | None = None,
            max_seconds: float | None = None, eval_time: float | None = None, eval_messages: int | None = None,
            on_observe: Callable[[GossipProgress], bool] | None = None) -> str:
        """Run until a budget is met, every program is done, the observer says stop, or no event is left.

        max_time: virtual-time budget (the clock is left at max_time); max_messages / max_scalars: budgets on what
        the programs sent (checked after each event); max_seconds: wall-clock budget of this call.
        on_observe(progress) is called at virtual times eval_time, 2*eval_time, ... and every eval_messages sent
        messages (in this call; a later call with the same eval_time continues the same time grid); it returns
        True to stop. Returns the reason the run stopped; a later call resumes.
        """
        if self._finished:
            raise ScenarioError("this gossip run has been finished; create a new scheduler to run again")
        started = time.perf_counter()
        limits = {"max_time": math.inf if max_time is None else float(max_time),
                  "max_messages": _NO_LIMIT if max_messages is None else int(max_messages),
                  "max_scalars": _NO_LIMIT if max_scalars is None else int(max_scalars),
                  "next_eval": math.inf, "next_eval_msg": _NO_LIMIT}
        if on_observe is not None and eval_time is not None:
            if not eval_time > 0:
                raise ScenarioError(f"eval_time = {eval_time!r} is out of range; allowed: a number > 0")
            if eval_time != self._eval_time:
                self._eval_time = float(eval_time)
                self._next_eval = (math.floor(self.now / eval_time) + 1) * eval_time
            limits["next_eval"] = self._next_eval
        if on_observe is not None and eval_messages is not None:
            if not eval_messages >= 1:
                raise ScenarioError(f"eval_messages = {eval_messages!r} is out of range; allowed: an integer >= 1")
            limits["next_eval_msg"] = (self.progress().sent // eval_messages + 1) * eval_messages
        while True:
            status = self._advance(limits)
            if status == ST_EVAL_TIME:
                at = self._next_eval
                self._next_eval = limits["next_eval"] = at + self._eval_time
                self._flush()
                if on_observe(self.progress(at)):
                    return GossipStopReason.OBSERVER
            elif status == ST_EVAL_MSG:
                limits["next_eval_msg"] += eval_messages
                self._flush()
                if on_observe(self.progress()):
                    return GossipStopReason.OBSERVER
            elif status == ST_YIELD or status == ST_FLUSH or status == ST_GROW:
                if status == ST_GROW:
                    self._grow()
                else:
                    self._flush()
                if max_seconds is not None and time.perf_counter() - started >= max_seconds:
                    self._flush()
                    return GossipStopReason.WALL
            elif status == ST_BAD_EDGE:
                self._raise_bad_edge(int(self._ctr[N_BAD_SRC]), int(self._ctr[N_BAD_DST]))
            else:
                if status == ST_TIME:
                    self._set_now(limits["max_time"])
                self._flush()
                return _STATUS_REASON[status]

    def finish(self) -> dict:
        """End the run: meter the messages still in flight (as delivered traffic, listed as in flight at the end in
        the fault summary) and return the fault summary. The scheduler cannot run after this."""
        if not self._finished:
            if self.compiled:
                nh = int(self._ctr[N_HEAP])
                slots = self._hk[:nh][self._hk[:nh, 0] == P_DELIVER, 2]
                mi = self._mi[slots]
                rec = np.column_stack([mi[:, 3], mi[:, 0], mi[:, 1], mi[:, 2] * 16 + mi[:, 4] * 8 + CAUSE_IN_FLIGHT])
                self._flush(extra=rec)
            else:
                for e in self._heap:
                    if e[1] == P_DELIVER:
                        src, dst, kind, bin_, dup, _ = e[3]
                        self._rec.extend((bin_, src, dst, kind * 16 + dup * 8 + CAUSE_IN_FLIGHT))
                self._flush()
            self._finished = True
        return self.fault_summary()

    def fault_summary(self) -> dict:
        """What the faults did: dropped messages by cause and tag, duplicates, delays, node events, nodes down."""
        counters = self.node_counters()
        delayed = int(self._ctr[N_DELAYED]) if self.compiled else self._counts["delayed"]
        return self.faults.summary(delayed=delayed, down_now=np.flatnonzero(counters["down"]))

    def _set_now(self, t: float) -> None:
        if self.compiled:
            self._fc[F_NOW] = max(self._fc[F_NOW], t)
        else:
            self._now = max(self._now, t)

    def _advance(self, limits: dict) -> int:
        if self.compiled:
            fc, lim = self._fc, self._lim
            fc[F_NEXT_EVAL] = limits["next_eval"]
            fc[F_MAX_TIME] = limits["max_time"]
            lim[L_MAX_MESSAGES] = limits["max_messages"]
            lim[L_MAX_SCALARS] = limits["max_scalars"]
            lim[L_NEXT_EVAL_MSG] = limits["next_eval_msg"]
            lim[L_YIELD] = 1 << 17
            return self._loop(self._kernel.arrays, self._widths, self._ht, self._hk, self._mi, self._mp, self._free,
                              self._ni_arr, self._rates, self._keys, self._edge_key, self._env, self._cfg,
                              self._adj_ptr, self._adj, self._rec_arr, self._log_t, self._log_i, self._ctr, fc, lim,
                              self._out_dst, self._out_tag, self._out_pay)
        return self._run_python(limits)

    def _grow(self) -> None:
        """Double the message pool and the heap of the compiled loop."""
        self._mi, self._mp, self._free, self._ht, self._hk = grow_pool(self._mi, self._mp, self._free, self._ctr,
                                                                       self._ht, self._hk)

    # -- the Python loop ------------------------------------------------------------------------------------------
    def _run_python(self, limits: dict) -> int:
        """One event at a time through the programs' Python methods (see `_kernel_loop`, its compiled twin)."""
        heap = self._heap
        heappush, heappop = heapq.heappush, heapq.heappop
        ni = self._ni
        rec = self._rec
        kinds = self._kinds
        programs = [g.program for g in self.groups]
        states = self.engine.states
        node_group = self._node_group.tolist()
        group_done = self._group_done
        one_ids = self._one_ids
        adj_sets = self._adj_sets
        env, cfg, keys, rates, edge_key = self._env, self._cfg, self._keys, self._rates, self._edge_key
        round_time = self.round_time
        counts = self._counts
        seq = self._seq
        wakes, sent, sent_scalars, events, delayed = (counts["wakes"], counts["sent"], counts["sent_scalars"],
                                                      counts["events"], counts["delayed"])
        now = self._now
        max_time, max_messages, max_scalars = limits["max_time"], limits["max_messages"], limits["max_scalars"]
        next_eval, next_eval_msg = limits["next_eval"], limits["next_eval_msg"]
        since_yield = 0
        status = ST_QUIESCENT
        while True:
            if not heap:
                status = ST_QUIESCENT
                break
            t = heap[0][0]
            if next_eval <= t and next_eval <= max_time:
                status = ST_EVAL_TIME
                break
            if t > max_time:
                status = ST_TIME
                break
            if since_yield >= 4096:
                status = ST_YIELD
                break
            since_yield += 1
            t, prio, _, a, b = heappop(heap)
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
                rec.extend((bin_, src, dst, kind * 16 + dup * 8 + CAUSE_DELIVERED))
                gid = node_group[dst]
                batch = MessageBatch(kinds[kind][0], one_ids[src], one_ids[dst], payload)
                states[gid], out = programs[gid].receive(states[gid], batch, np.array((t,)))
                sender = dst
            else:
                now = t
                events += 1
                seq = python_node_event(heap, seq, t, prio, a, b, ni[a], node_group[a], programs, states, one_ids,
                                        env, keys, cfg, rates, self._log)
                continue
            bin_ = int(t / round_time)
            for kind, spm, nbytes, s, d, row in program_sends(out, sender, self._kind_id):
                if d not in adj_sets[s]:
                    self._raise_bad_edge(s, d)
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
                heappush(heap, (t + lat1, P_DELIVER, seq, (s, d, kind, bin_, 0, row), 0))
                seq += 1
                if copies == 2:
                    heappush(heap, (t + lat2, P_DELIVER, seq, (s, d, kind, bin_, 1, row), 0))
                    seq += 1
            sig = out.signals
            if sig and "done" in sig:
                group_done[node_group[sender]] = bool(sig["done"])
            if all(group_done):
                status = ST_DONE
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
        self._seq = seq
        counts.update(wakes=wakes, sent=sent, sent_scalars=sent_scalars, events=events, delayed=delayed)
        self._now = now
        return status

    # -- metering ---------------------------------------------------------------------------------------------------
    def _flush(self, extra: np.ndarray | None = None) -> None:
        """Hand the buffered records to the meter (one batch per kind, fate and round) and the fault tally."""
        if self.compiled:
            nr = int(self._ctr[N_REC])
            recs = self._rec_arr[:nr]
            if extra is not None and extra.shape[0]:
                recs = np.concatenate([recs, extra.astype(np.int64)])
            self._ctr[N_REC] = 0
            ng = int(self._ctr[N_LOG])
            log = [(float(self._log_t[i]), int(self._log_i[i, 0]), int(self._log_i[i, 1])) for i in range(ng)]
            self._ctr[N_LOG] = 0
        else:
            recs = np.frombuffer(self._rec, dtype=np.int64).reshape(-1, 4) if len(self._rec) else \
                np.zeros((0, 4), dtype=np.int64)
            self._rec = array("q")
            log, self._log = self._log, []
        for t, node, event in log:
            self.faults.tally.node_event(t, node, NODE_EVENT_NAMES[event])
        if recs.shape[0]:
            self._meter_records(recs)

    def _meter_records(self, recs: np.ndarray) -> None:
        code = recs[:, 3]
        cause = code & 7
        dropped = np.isin(cause, DROPPED_CAUSES)
        group = (code >> 4) * 2 + dropped
        order = np.lexsort((recs[:, 0], group))
        group = group[order]
        bins = recs[order, 0]
        src = recs[order, 1]
        dst = recs[order, 2]
        cut = np.flatnonzero((np.diff(group) != 0) | (np.diff(bins) != 0)) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [group.shape[0]]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            g = int(group[s])
            tag, spm, dtype = self._kinds[g >> 1]
            stub = self._stub_payloads.get(g >> 1)
            if stub is None:
                stub = self._stub_payloads[g >> 1] = np.zeros((1, spm), dtype=dtype)
            batch = MessageBatch(tag, src[s:e], dst[s:e], stub)
            if g & 1:
                self.meter.record_dropped(int(bins[s]), batch)
            else:
                self.meter.record(int(bins[s]), batch)
        codes, counts = np.unique(code, return_counts=True)
        for c, m in zip(codes.tolist(), counts.tolist()):
            tag, spm, _ = self._kinds[c >> 4]
            self.faults.tally.messages(tag, CAUSE_NAMES[c & 7], bool((c >> 3) & 1), m, m * spm)

    def _raise_bad_edge(self, s: int, d: int) -> None:
        names = self.meter.node_names
        if not (0 <= d < self.n_nodes):
            raise ProtocolError(f"node {s} sent a message to node {d}, but node ids must lie in 0..{self.n_nodes - 1}")
        raise ProtocolError(f"node {s} ({names[s]}) sent a message to node {d} ({names[d]}), which are not "
                            "neighbours in the topology; gossip programs may only send along edges")
