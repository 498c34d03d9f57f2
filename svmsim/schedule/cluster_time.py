"""Modelled cluster time for synchronous rounds: "how long would this take on my cluster".

The model (a dataflow critical path under the alpha-beta cost of each link):

* a node's step starts when the node is ready: when its previous step has finished and every message of its inbox
  has arrived; it computes for ``step_overhead + work / compute_rate`` seconds (the work its program declares for
  that step, in operations: `SyncKernel.work`; ``step_overhead``: the fixed cost of a step in the node's runtime;
  ``compute = "measured"``: the wall time of the node's own step in this process, the simulator's per-step cost
  included), then hands its messages to its network port in the order it sent them;
* each node has one send port and one receive port (full duplex, one message at a time in each direction): a
  message of b bytes on link (s, d) occupies s's send port for b / beta_sd, arrives alpha_sd later, and occupies
  d's receive port for b / beta_sd (messages queue at a busy receive port in order of arrival);
* there is no global barrier: a node that has its inputs goes on (as an MPI all-reduce returns on each rank).

Nodes and links need not be alike: each node has its own compute rate and each link its own alpha and beta, drawn
from a log-normal spread around the table's values (``compute_spread``, ``link_spread``: a node's rate is
``compute_rate * exp(s z)``, a link's alpha ``latency * exp(s z)`` and beta ``bandwidth / exp(s z)``, z standard
normal from the run's seed), read from a trace file (`read_trace`) or given one by one; a named profile
(`PROFILES`) sets the table's defaults.

The modelled time at a point of the run is the latest ready time over all nodes. The model ignores contention
inside the network (switch fabric, shared links between different pairs), the simulator's own costs, and
stragglers unless a fault model adds them. With it, a star all-reduce of d doubles over K nodes takes
2 alpha + 2 (K - 1) 8d / beta (the hub's ports serialise), a ring 2 (K - 1) (alpha + 8 (d/K) / beta), a binary tree
of height h about 2 h (alpha + 2 * 8d / beta), a binomial tree over K = 2^m nodes 2 m (alpha + 8d / beta): the trees
win for small d, the ring for large d.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numba
import numpy as np

from ..core.streams import STREAM_CLUSTER, counter_uniform, standard_normal, stream_keys
from ..errors import ScenarioError
from .cluster_profiles import PROFILES, ClusterTrace, read_trace

__all__ = [
    "COMPUTE_MODES",
    "PROFILES",
    "ClockState",
    "ClusterClock",
    "ClusterTrace",
    "NetworkModel",
    "read_trace",
    "clock_compute",
    "clock_message",
    "clock_round",
    "clock_work",
    "idle_clock_state",
]

#: how a step's compute time is modelled: from the work the program declares, or measured in this process
COMPUTE_MODES = ("count", "measured")

@numba.njit(cache=True, nogil=True)
def _spread_factors(keys, lo, hi, spread):
    """exp(spread * z) for each pair (lo[i], hi[i]) of node ids (hi = -1: the node lo[i] itself), z standard normal
    from node lo[i]'s key of the cluster stream and counters 2 (hi + 1), 2 (hi + 1) + 1."""
    out = np.empty(lo.shape[0])
    for i in range(lo.shape[0]):
        c = 2 * (hi[i] + 1)
        out[i] = math.exp(spread * standard_normal(counter_uniform(keys[lo[i]], c), counter_uniform(keys[lo[i]], c + 1)))
    return out


@dataclass(frozen=True)
class NetworkModel:
    """alpha (latency, seconds per message) and beta (bandwidth, bytes per second) of every link, with per-link
    overrides ``{(a, b): (latency, bandwidth)}`` (both directions of the link a-b), and the nodes' compute rate
    (operations per second) with per-node overrides ``node_rates``. ``compute_spread`` and ``link_spread``: the
    sigma of a log-normal factor on each node's rate and each link's speed (drawn from `seed`; overrides are exact)."""

    latency: float = 50e-6
    bandwidth: float = 1.25e9
    compute_rate: float = 1e9
    links: dict = field(default_factory=dict)
    compute: str = "count"      # "count": declared work / compute_rate; "measured": the step's own wall time
    node_rates: dict = field(default_factory=dict)
    compute_spread: float = 0.0
    link_spread: float = 0.0
    seed: int = 0
    trace: ClusterTrace | None = None   # where node_rates and links came from, when a trace file gave them
    step_overhead: float = 0.0  # seconds each step of a node costs beyond its declared work (count mode)

    def __post_init__(self):
        if self.compute not in COMPUTE_MODES:
            raise ScenarioError(f"[network] compute = {self.compute!r} is unknown; allowed: "
                                f"{', '.join(COMPUTE_MODES)}")
        for name, v, low in (("latency", self.latency, 0.0), ("bandwidth", self.bandwidth, None),
                             ("compute_rate", self.compute_rate, None), ("compute_spread", self.compute_spread, 0.0),
                             ("link_spread", self.link_spread, 0.0), ("step_overhead", self.step_overhead, 0.0)):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (
                v >= low if low is not None else v > 0)
            if not ok:
                raise ScenarioError(f"[network] {name} = {v!r} is out of range; allowed: a finite number "
                                    f"{'>= 0' if low is not None else '> 0'}")

    def node_rate_array(self, n_nodes: int) -> np.ndarray:
        """Each node's compute rate (operations per second)."""
        rates = np.full(n_nodes, float(self.compute_rate))
        if self.compute_spread > 0:
            keys = stream_keys(self.seed, STREAM_CLUSTER, n_nodes)
            nodes = np.arange(n_nodes, dtype=np.int64)
            rates *= _spread_factors(keys, nodes, np.full(n_nodes, -1, np.int64), float(self.compute_spread))
        if self.trace is not None and self.trace.node_rates:
            missing = [i for i in range(n_nodes) if i not in self.trace.node_rates]
            if missing:
                raise ScenarioError(f"[network] node {missing[0]} is missing from trace {self.trace.path!r} "
                                    f"({len(missing)} of {n_nodes} nodes are); allowed: a trace with node rows gives "
                                    f"one for every node 0..{n_nodes - 1}")
        for node, rate in self.node_rates.items():
            if not 0 <= node < n_nodes:
                raise ScenarioError(f"[network] node {node} has a compute rate, but the cluster's nodes are "
                                    f"0..{n_nodes - 1}; allowed: node ids of the topology")
            rates[node] = float(rate)
        return rates

    def link_arrays(self, ptr: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, seconds per byte) per directed edge id of the CSR adjacency (ptr, nbr)."""
        alpha = np.full(nbr.shape[0], float(self.latency))
        per_byte = np.full(nbr.shape[0], 1.0 / float(self.bandwidth))
        if self.link_spread > 0:           # one factor per link, for both directions: keyed by its lower end
            n = ptr.shape[0] - 1
            src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
            dst = np.asarray(nbr, np.int64)
            factor = _spread_factors(stream_keys(self.seed, STREAM_CLUSTER, n), np.minimum(src, dst),
                                     np.maximum(src, dst), float(self.link_spread))
            alpha *= factor
            per_byte *= factor
        for (s, d), (lat, bw) in self.links.items():
            for a, b in ((s, d), (d, s)):
                row = nbr[ptr[a]:ptr[a + 1]]
                pos = np.searchsorted(row, b)
                if pos >= row.shape[0] or row[pos] != b:
                    raise ScenarioError(f"[network] link {s}-{d} is not an edge of the topology; allowed: links "
                                        "between neighbours")
                if lat is not None:
                    alpha[ptr[a] + pos] = float(lat)
                if bw is not None:
                    per_byte[ptr[a] + pos] = 1.0 / float(bw)
        return alpha, per_byte


class ClockState(NamedTuple):
    """The clock's arrays, as the numba round functions read them (the compiled loop and `ClusterClock.advance`
    run the same functions on it). Message buffers hold one round's messages in send order."""

    on: np.ndarray          # [1] bool: the compiled loop keeps the time (False: a placeholder state)
    ready: np.ndarray       # (n_nodes,) when each node is ready for its next step
    compute: np.ndarray     # (n_nodes,) total modelled compute seconds per node
    network: np.ndarray     # [1] total seconds messages spent on links (sum over messages)
    rate: np.ndarray        # (n_nodes,) each node's operations per second (count mode)
    overhead: np.ndarray    # [1] seconds each step costs beyond its work (count mode)
    alpha: np.ndarray       # (directed edges,) latency per CSR edge id
    per_byte: np.ndarray    # (directed edges,) seconds per byte
    port: np.ndarray        # (n_nodes,) a sender's port is busy until then (valid where port_at == stamp)
    port_at: np.ndarray
    rx: np.ndarray          # (n_nodes,) a receiver's port is busy until then (valid where rx_at == stamp)
    rx_at: np.ndarray
    stamp: np.ndarray       # [1] the round being timed
    n_msg: np.ndarray       # [1] messages of this round so far
    m_src: np.ndarray       # (capacity,) this round's messages
    m_dst: np.ndarray
    m_edge: np.ndarray
    m_bytes: np.ndarray
    m_sent: np.ndarray


@numba.njit(cache=True, nogil=True, inline="always")
def _computed(clock, node, seconds):
    clock.ready[node] = clock.ready[node] + seconds
    clock.compute[node] += seconds


@numba.njit(cache=True, nogil=True)
def clock_compute(clock, nodes, seconds):
    """Nodes `nodes` computed for `seconds` each this round (before they send)."""
    for j in range(nodes.shape[0]):
        _computed(clock, nodes[j], seconds[j])


@numba.njit(cache=True, nogil=True)
def clock_work(clock, nodes, work):
    """Nodes `nodes` stepped this round, doing `work` operations each (count mode: the step overhead plus work / the
    node's rate seconds; `work` empty: the program declares none)."""
    overhead = clock.overhead[0]
    for j in range(nodes.shape[0]):
        seconds = work[j] / clock.rate[nodes[j]] if work.shape[0] > 0 else 0.0
        _computed(clock, nodes[j], seconds + overhead)


@numba.njit(cache=True, nogil=True, inline="always")
def clock_message(clock, src, dst, edge, nbytes):
    """One message of this round, in send order."""
    k = clock.n_msg[0]
    clock.m_src[k] = src
    clock.m_dst[k] = dst
    clock.m_edge[k] = edge
    clock.m_bytes[k] = nbytes
    clock.n_msg[0] = k + 1


@numba.njit(cache=True, nogil=True)
def clock_round(clock):
    """The round's messages on the links: each sender's port serialises its messages from the end of its compute
    (in send order); messages reach the receive ports by earliest arrival (then send order), which serialise
    them; a receiver is ready once its last message has arrived. Clears the round's messages."""
    n = clock.n_msg[0]
    stamp = clock.stamp[0] + 1
    clock.stamp[0] = stamp
    if n == 0:
        return
    ready, port, port_at, rx, rx_at = clock.ready, clock.port, clock.port_at, clock.rx, clock.rx_at
    earliest = np.empty(n)
    for i in range(n):                                  # send ports, in send order per sender
        s = clock.m_src[i]
        e = clock.m_edge[i]
        start = ready[s]
        if port_at[s] == stamp and port[s] > start:
            start = port[s]
        t = start + clock.m_bytes[i] * clock.per_byte[e]
        port[s] = t
        port_at[s] = stamp
        clock.m_sent[i] = t
        earliest[i] = t + clock.alpha[e]
    arrive = np.empty(n)
    for i in np.argsort(earliest, kind="mergesort"):     # receive ports, by earliest arrival then send order
        d = clock.m_dst[i]
        t = earliest[i]
        if rx_at[d] == stamp:
            t = max(t, rx[d] + clock.m_bytes[i] * clock.per_byte[clock.m_edge[i]])
        rx[d] = t
        rx_at[d] = stamp
        arrive[i] = t
    total = clock.network[0]
    for i in range(n):
        occupy = clock.m_bytes[i] * clock.per_byte[clock.m_edge[i]]
        total += arrive[i] - (clock.m_sent[i] - occupy)
        d = clock.m_dst[i]
        ready[d] = max(ready[d], arrive[i])
    clock.network[0] = total
    clock.n_msg[0] = 0


def idle_clock_state() -> ClockState:
    """A state the compiled loop takes when no clock runs (`on` is False; nothing is read)."""
    f, i = np.zeros(1), np.zeros(1, np.int64)
    return ClockState(np.zeros(1, np.bool_), f, f, f, np.ones(1), f, f, f, f, i, f, i, i, i, i, i, i, f, f)


class ClusterClock:
    """Per-node ready times under a `NetworkModel`, advanced one round at a time by the synchronous scheduler
    (through `advance` on the Python rounds, through `state` inside the compiled rounds: the same functions)."""

    def __init__(self, model: NetworkModel, n_nodes: int, ptr: np.ndarray, nbr: np.ndarray):
        self.model = model
        self.ptr, self.nbr = ptr, nbr
        alpha, per_byte = model.link_arrays(ptr, nbr)
        self._state = ClockState(
            on=np.ones(1, np.bool_), ready=np.zeros(n_nodes), compute=np.zeros(n_nodes), network=np.zeros(1),
            rate=model.node_rate_array(n_nodes), overhead=np.array([float(model.step_overhead)]), alpha=alpha,
            per_byte=per_byte,
            port=np.zeros(n_nodes), port_at=np.full(n_nodes, -1, np.int64), rx=np.zeros(n_nodes),
            rx_at=np.full(n_nodes, -1, np.int64), stamp=np.zeros(1, np.int64), n_msg=np.zeros(1, np.int64),
            m_src=np.zeros(0, np.int64), m_dst=np.zeros(0, np.int64), m_edge=np.zeros(0, np.int64),
            m_bytes=np.zeros(0), m_sent=np.zeros(0))

    @property
    def ready(self) -> np.ndarray:
        return self._state.ready

    @property
    def rates(self) -> np.ndarray:
        """Each node's compute rate (operations per second)."""
        return self._state.rate

    @property
    def compute(self) -> np.ndarray:
        """Total modelled compute seconds per node."""
        return self._state.compute

    @property
    def network(self) -> float:
        """Total seconds messages spent on links (a sum over messages)."""
        return float(self._state.network[0])

    @property
    def now(self) -> float:
        """The modelled time: the latest ready time over all nodes."""
        return float(self.ready.max()) if self.ready.size else 0.0

    def state(self, capacity: int) -> ClockState:
        """The arrays for a loop that sends up to `capacity` messages a round."""
        st = self._state
        if st.m_src.shape[0] < capacity:
            st = self._state = st._replace(m_src=np.zeros(capacity, np.int64), m_dst=np.zeros(capacity, np.int64),
                                           m_edge=np.zeros(capacity, np.int64), m_bytes=np.zeros(capacity),
                                           m_sent=np.zeros(capacity))
        return st

    def advance(self, stepped: np.ndarray, seconds: np.ndarray, src: np.ndarray, dst: np.ndarray,
                nbytes: np.ndarray) -> None:
        """One round: nodes `stepped` computed for `seconds` each, then sent messages (src, dst, bytes) in the
        order given."""
        st = self.state(src.size)
        if stepped.size:
            clock_compute(st, np.asarray(stepped, np.int64), np.asarray(seconds, np.float64))
        if src.size:
            edge = self.ptr[src] + np.array([np.searchsorted(self.nbr[self.ptr[s]:self.ptr[s + 1]], d)
                                             for s, d in zip(src.tolist(), dst.tolist())], np.int64)
            n = src.size
            st.m_src[:n], st.m_dst[:n], st.m_edge[:n], st.m_bytes[:n] = src, dst, edge, nbytes
            st.n_msg[0] = n
        clock_round(st)
