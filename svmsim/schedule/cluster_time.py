"""Modelled cluster time for synchronous rounds: "how long would this take on my cluster".

The model (a dataflow critical path under the alpha-beta cost of each link):

* a node's step starts when the node is ready: when its previous step has finished and every message of its inbox
  has arrived; it computes for ``work / compute_rate`` seconds (the work its program declares for that step, in
  operations: `SyncKernel.work`; ``compute = "measured"``: the wall time of the node's own step in this process,
  the simulator's per-step cost included), then hands its messages to its network port in the order it sent them;
* each node has one send port and one receive port (full duplex, one message at a time in each direction): a
  message of b bytes on link (s, d) occupies s's send port for b / beta_sd, arrives alpha_sd later, and occupies
  d's receive port for b / beta_sd (messages queue at a busy receive port in order of arrival);
* there is no global barrier: a node that has its inputs goes on (as an MPI all-reduce returns on each rank).

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

import numpy as np

from ..errors import ScenarioError

__all__ = ["NetworkModel", "ClusterClock", "COMPUTE_MODES"]

#: how a step's compute time is modelled: from the work the program declares, or measured in this process
COMPUTE_MODES = ("count", "measured")


@dataclass(frozen=True)
class NetworkModel:
    """alpha (latency, seconds per message) and beta (bandwidth, bytes per second) of every link, with per-link
    overrides ``{(a, b): (latency, bandwidth)}`` (both directions of the link a-b), and the nodes' compute rate
    (operations per second)."""

    latency: float = 50e-6
    bandwidth: float = 1.25e9
    compute_rate: float = 1e9
    links: dict = field(default_factory=dict)
    compute: str = "count"      # "count": declared work / compute_rate; "measured": the step's own wall time

    def __post_init__(self):
        if self.compute not in COMPUTE_MODES:
            raise ScenarioError(f"[network] compute = {self.compute!r} is unknown; allowed: "
                                f"{', '.join(COMPUTE_MODES)}")
        for name, v, low in (("latency", self.latency, 0.0), ("bandwidth", self.bandwidth, None),
                             ("compute_rate", self.compute_rate, None)):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (
                v >= low if low is not None else v > 0)
            if not ok:
                raise ScenarioError(f"[network] {name} = {v!r} is out of range; allowed: a finite number "
                                    f"{'>= 0' if low is not None else '> 0'}")

    def link_arrays(self, ptr: np.ndarray, nbr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, seconds per byte) per directed edge id of the CSR adjacency (ptr, nbr)."""
        alpha = np.full(nbr.shape[0], float(self.latency))
        per_byte = np.full(nbr.shape[0], 1.0 / float(self.bandwidth))
        for (s, d), (lat, bw) in self.links.items():
            for a, b in ((s, d), (d, s)):
                row = nbr[ptr[a]:ptr[a + 1]]
                pos = np.searchsorted(row, b)
                if pos >= row.shape[0] or row[pos] != b:
                    raise ScenarioError(f"[network] link {s}-{d} is not an edge of the topology; allowed: links "
                                        "between neighbours")
                alpha[ptr[a] + pos] = float(lat)
                per_byte[ptr[a] + pos] = 1.0 / float(bw)
        return alpha, per_byte


class ClusterClock:
    """Per-node ready times under a `NetworkModel`, advanced one round at a time by the synchronous scheduler."""

    def __init__(self, model: NetworkModel, n_nodes: int, ptr: np.ndarray, nbr: np.ndarray):
        self.model = model
        self.ptr, self.nbr = ptr, nbr
        self.alpha, self.per_byte = model.link_arrays(ptr, nbr)
        self.ready = np.zeros(n_nodes)
        self.compute = np.zeros(n_nodes)          # total modelled compute seconds per node
        self.network = 0.0                        # total seconds messages spent on links (sum over messages)

    @property
    def now(self) -> float:
        """The modelled time: the latest ready time over all nodes."""
        return float(self.ready.max()) if self.ready.size else 0.0

    def advance(self, stepped: np.ndarray, seconds: np.ndarray, src: np.ndarray, dst: np.ndarray,
                nbytes: np.ndarray) -> None:
        """One round: nodes `stepped` computed for `seconds` each, then sent messages (src, dst, bytes) in the
        order given."""
        finish = self.ready.copy()
        if stepped.size:
            seconds = np.asarray(seconds, np.float64)
            finish[stepped] = self.ready[stepped] + seconds
            self.compute[stepped] += seconds
        if src.size:
            edge = self.ptr[src] + np.array([np.searchsorted(self.nbr[self.ptr[s]:self.ptr[s + 1]], d)
                                             for s, d in zip(src.tolist(), dst.tolist())], np.int64)
            occupy = nbytes * self.per_byte[edge]
            # send ports: each sender's messages one after another, from the end of its compute
            order = np.lexsort((np.arange(src.size), src))
            sent = np.empty(src.size)
            port = {}
            for i in order.tolist():
                s = int(src[i])
                t = max(port.get(s, finish[s]), finish[s]) + occupy[i]
                port[s] = sent[i] = t
            earliest = sent + self.alpha[edge]
            # receive ports: messages in order of earliest arrival (then send order)
            rx = {}
            arrive = np.empty(src.size)
            for i in np.lexsort((np.arange(src.size), earliest)).tolist():
                d = int(dst[i])
                arrive[i] = t = max(earliest[i], rx.get(d, -math.inf) + occupy[i])
                rx[d] = t
            self.network += float((arrive - (sent - occupy)).sum())
            np.maximum.at(finish, dst, arrive)
        np.maximum(self.ready, finish, out=self.ready)
