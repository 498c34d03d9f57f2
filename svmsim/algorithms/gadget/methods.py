"""GADGET SVM (paper 002, Algorithm 2): every node runs Pegasos on its own data and gossips its model.

Read beside notes-002.md sections 2-3 and 7. Node i holds the shard M_i and a model w_i (0 at the start). Each time
its clock ticks, a node that has not finished does, with its own step counter t = 1, 2, ...

    (a) pick one instance (x, y) uniformly from M_i
    (b) it is a margin violator when y <w_i, x> < 1                  (M_i^+, tested on the sampled point only)
    (c) L = y x for a violator, else 0
    (d) alpha = 1/(lam t)
    (e) w_i <- (1 - lam alpha) w_i + alpha L = (1 - 1/t) w_i + y x/(lam t) [violator]
    (f) [optional] w_i <- min(1, (1/sqrt(lam))/|w_i|) w_i
    (g) gossip w_i with one neighbour j drawn from row i of B
    (h) [optional] project the node's model after the gossip, as in (f)

and Eq. 1's f(w) = lam/2 |w|^2 + mean hinge is the objective every node approximates. Gossip (g) has two forms:

* ``push-sum`` (Algorithm 1, Kempe et al.): node i keeps a Push-Sum weight omega_i next to its model, which plays
  the ratio s_i/omega_i. It keeps half of (s_i, omega_i) and sends the other half (omega_i/2 w_i, omega_i/2), d+1
  scalars, to j; the receiver adds it: w_j <- (omega_j w_j + s)/(omega_j + omega), omega_j += omega. The local step
  acts on the ratio, i.e. s <- omega step(s/omega) (notes-002 section 7, item 3). The weights start at 1, or at
  n_i/mean(n) with ``size_weighted`` so that the consensus is the n_i-weighted average of the analysis.
* ``pairwise`` (the authors' code): i sends w_i (d scalars) to j; j sets w_j <- (w_i + w_j)/2 and answers with
  minus its change (d scalars), which i adds: both end at (w_i + w_j)/2, and the sum of the models is conserved
  even when exchanges overlap (a local step i took meanwhile is kept).

``rounds`` = R gossip ticks per local step ("Push-Sum to termination" approximated by R rounds): a node gossips at
every tick of its clock and takes a local step at every R-th one. The peer j is drawn from row i of B
(``mixing``, the names of `svmsim.algorithms.pushsum`): ``neighbour`` b_ij = 1/deg i (the random walk the paper
suggests and the authors' code uses), ``metropolis`` b_ij = 1/(1 + max(deg i, deg j)) or ``uniform``
b_ij = 1/(deg i + 1); the remainder b_ii is a tick without an exchange.

Stopping (notes-002 section 3, the authors' rule): after each local step F = 1[y <w, x> < 1] + lam/2 |w_i|^2 on the
step's sample; a node whose counter of consecutive |F - F_prev| <= eps (0.001) reaches ``patience`` (10), or that
has taken ``iterations`` (T) steps, is finished: it stops local steps and stops initiating gossip, but still answers
and absorbs messages as a peer. The run is done when every node has finished or is down: under faults
(`svmsim.faults`) a crashed node cannot finish, so it does not hold the run up (a node that would have come back
later misses the end; the fault summary lists it in ``down_at_end``).

A node's output model is its last iterate (the paper's experiments) or, with ``average`` and T steps, the average of
its iterates over its last T/2 steps (Theorem 5 averages the iterates; the suffix form drops the early ones).

The node programs run on svmsim's asynchronous gossip scheduler (`svmsim.schedule.gossip`). A clock tick is `_tick`
and a delivery `_deliver`, numba functions on the group's preallocated arrays that both the Python methods
(`wake`, `receive`) and the scheduler's compiled event loop (`GadgetPeer.kernel`) call, so both give the same run.
Per-node random streams keep the results independent of how nodes are grouped. Evaluation (never metered): every
node's Eq. 1 objective and train/test accuracy as mean and std over nodes, the average model's, and the consensus
error mean_i |w_i - w_bar| (and its max) of the gossiped models. Nodes that are down at an evaluation point are left
out of these means (their models cannot be reached); ``nodes_up`` and ``test_accuracy_all_nodes`` (every node's
model, down ones included) are then reported too. The deployment's ``info`` carries the topology's spectral facts
(`svmsim.algorithms.pushsum.gossip_topology_info`: spectral gap of the gossip chain, 1/gap, mixing time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import scipy.sparse as sp

from ...comm.message import MessageBatch, Outbox, frozen_ids
from ...core.jit import inner
from ...core.names import NodeNames
from ...numerics.prefetch import prefetch, prefetch_row
from ...numerics.vectors import segment_cumsum
from ...program import GossipKernel, GossipProgram, NodeRows, Ragged, RoleSpec, frozen_view
from ..pegasos.methods import (PAPER_EPS, PAPER_PATIENCE, as_rows, eq1_optimum, next_index, next_uniform,
                               optimum_info, rel_primal, row_axpy, row_dot, seed_streams, stopping_update)
from .params import EVAL_NODES, GadgetParams

__all__ = ["GadgetPeer", "GadgetParams", "gadget_scalars_per_message", "GOSSIP_MODES", "MIXINGS", "build_gadget"]

GOSSIP_MODES = ("push-sum", "pairwise")
MIXINGS = ("neighbour", "metropolis", "uniform")             # `topology.MIXING_RULES`, without importing it

#: message tags
PUSH, AVERAGE, AVERAGE_REPLY = "push", "average", "average_reply"

#: per hosted node: local steps taken, clock ticks, consecutive small |dF|, finished (0/1), messages sent of each
#: kind, steps summed into the averaged iterate, down (0/1)
NODE_COUNTERS = np.dtype([("steps", np.int64), ("ticks", np.int64), ("hits", np.int64), ("done", np.int64),
                          ("sent_push", np.int64), ("sent_average", np.int64), ("sent_reply", np.int64),
                          ("averaged", np.int64), ("down", np.int64)], align=True)
#: per hosted node: its Push-Sum weight omega, the previous step's F and the last |dF|
NODE_FLOATS = np.dtype([("omega", np.float64), ("f_prev", np.float64), ("last_df", np.float64)], align=True)
#: the group's progress: nodes finished, nodes, nodes down that have not finished
PROGRESS = np.dtype([("finished", np.int64), ("nodes", np.int64), ("down", np.int64)], align=True)
#: the program's constants
CONFIG = np.dtype([("lam", np.float64), ("radius", np.float64), ("eps", np.float64), ("patience", np.int64),
                   ("max_steps", np.int64), ("ticks_per_step", np.int64), ("project_local", np.bool_),
                   ("project_gossip", np.bool_), ("push_sum", np.bool_), ("average", np.bool_)], align=True)
#: a Push-Sum weight below this is not split any further (it would underflow after ~1000 unanswered pushes)
_TINY_OMEGA = 1e-250


def gadget_scalars_per_message(d: int, gossip: str) -> int:
    """Scalars in one GADGET message: d + 1 for a Push-Sum share (s, omega), d for a pairwise-averaging model."""
    return d + 1 if gossip == "push-sum" else d


# ---------------------------------------------------------------------------------------------------------------
# Kernels: one node's clock tick and one message's delivery, shared by the Python methods and the compiled loop
# ---------------------------------------------------------------------------------------------------------------

class GadgetArrays(NamedTuple):
    """What the kernels act on for a group of hosted nodes (row j: the group's j-th node; see `GadgetState`)."""

    local_of: np.ndarray
    X: object                   # array or CSR triple
    y: np.ndarray
    row_start: np.ndarray
    W: np.ndarray
    W_sum: np.ndarray
    counters: np.ndarray        # one `NODE_COUNTERS` record per row
    node_floats: np.ndarray     # one `NODE_FLOATS` record per row
    rng: np.ndarray
    nbr_ptr: np.ndarray
    nbr_ids: np.ndarray
    nbr_cum: np.ndarray
    progress: np.ndarray        # one `PROGRESS` record
    config: np.ndarray          # one `CONFIG` record
    points: np.ndarray


# message kinds inside the kernels (index into the program's tags): Push-Sum uses 0; pairwise 0 = request, 1 = reply
_REQUEST, _REPLY = 0, 1


def _kernel_ready(X) -> bool:
    """Whether the kernels read X as it is (`as_rows` makes no copy of it and changes nothing in it): CSR float64
    with sorted indices, or a C-contiguous float64 array."""
    if sp.issparse(X):
        return X.format == "csr" and X.dtype == np.float64 and bool(X.has_sorted_indices)
    return isinstance(X, np.ndarray) and X.dtype == np.float64 and X.ndim == 2 and X.flags.c_contiguous


@numba.njit(inline="always", cache=True)
def _project_row(W, j, radius):
    """(f)/(h): scale row j of W onto the ball of radius 1/sqrt(lam); returns |w_j|^2 afterwards."""
    d = W.shape[1]
    nrm2 = 0.0
    for c in range(d):
        nrm2 += W[j, c] * W[j, c]
    if nrm2 > radius * radius:
        f = radius / math.sqrt(nrm2)
        for c in range(d):
            W[j, c] *= f
        return radius * radius
    return nrm2


@inner
def _tick(node, arrays, message):
    """One tick of `node`'s clock: a local step (a)-(f) at every R-th tick, then the gossip send (g) written to
    `message`. Returns the destination, or -1 when nothing is sent."""
    X, y, row_start, W, W_sum, rng, points = arrays.X, arrays.y, arrays.row_start, arrays.W, arrays.W_sum, arrays.rng, \
        arrays.points
    config = arrays.config[0]
    lam, radius, eps = config.lam, config.radius, config.eps
    patience, max_steps, ticks_per_step = config.patience, config.max_steps, config.ticks_per_step
    d = W.shape[1]
    j = arrays.local_of[node]
    counters = arrays.counters[j]
    floats = arrays.node_floats[j]
    if counters.done:
        return -1
    counters.ticks += 1
    if (counters.ticks - 1) % ticks_per_step == 0:
        t = counters.steps + 1
        counters.steps = t
        if config.average and 2 * t > max_steps:                             # sum of w_j^(t), t in (T/2, T]
            for c in range(d):
                W_sum[j, c] += W[j, c]
            counters.averaged += 1
        lo = row_start[j]
        i = lo + next_index(rng, j, row_start[j + 1] - lo)                   # (a)
        if points.shape[0]:                                                  # the point's row of the shared set
            i = points[i]
        wj = W[j]
        violated = y[i] * row_dot(X, i, wj) < 1.0                            # (b), (c)
        shrink = 1.0 - 1.0 / t                                                # (d), (e): 1 - lam alpha = 1 - 1/t
        for c in range(d):
            wj[c] *= shrink
        if violated:
            row_axpy(X, i, y[i] / (lam * t), wj)
        if config.project_local:                                              # (f)
            nrm2 = _project_row(W, j, radius)
        else:
            nrm2 = 0.0
            for c in range(d):
                nrm2 += wj[c] * wj[c]
        F = (1.0 if violated else 0.0) + 0.5 * lam * nrm2                     # the authors' single-sample F
        floats.last_df = abs(F - floats.f_prev)
        counters.hits = stopping_update(F, floats.f_prev, counters.hits, eps) if eps > 0.0 else 0
        floats.f_prev = F
    # (g) one neighbour drawn from row j of B (past the last cumulative share: no exchange this tick)
    dst = -1
    u = next_uniform(rng, j)
    nbr_cum = arrays.nbr_cum
    k, hi = arrays.nbr_ptr[j], arrays.nbr_ptr[j + 1]
    while k < hi and nbr_cum[k] <= u:
        k += 1
    if config.push_sum:
        if k < hi and floats.omega >= 2.0 * _TINY_OMEGA:
            half = 0.5 * floats.omega                                          # keep half of (s, omega), send half
            floats.omega = half
            for c in range(d):
                message[c] = half * W[j, c]
            message[d] = half
            counters.sent_push += 1
            dst = arrays.nbr_ids[k]
    elif k < hi:
        for c in range(d):
            message[c] = W[j, c]
        counters.sent_average += 1
        dst = arrays.nbr_ids[k]
    # finished: the stopping rule or T steps, once the last step's R gossip ticks are over
    if counters.ticks % ticks_per_step == 0 and (
            (eps > 0.0 and counters.hits >= patience) or (max_steps > 0 and counters.steps >= max_steps)):
        counters.done = 1
        arrays.progress[0].finished += 1
    return dst


@inner
def _deliver(node, kind, message, arrays, reply):
    """A message reaches `node`: Push-Sum adds the share (s, omega) to the node's pair (its model is the ratio);
    pairwise averaging moves the peer to the mean of the two and answers with minus its change (written to
    `reply`, returns True), which the initiator adds. Then (h)."""
    W = arrays.W
    config = arrays.config[0]
    d = W.shape[1]
    j = arrays.local_of[node]
    answered = False
    if config.push_sum:
        floats = arrays.node_floats[j]
        total = floats.omega + message[d]
        keep = floats.omega / total
        for c in range(d):
            W[j, c] = keep * W[j, c] + message[c] / total
        floats.omega = total
    elif kind == _REQUEST:                                    # w_j <- (w_i + w_j)/2; answer minus the change
        answered = True
        for c in range(d):
            change = 0.5 * (message[c] - W[j, c])
            W[j, c] += change
            reply[c] = -change
        arrays.counters[j].sent_reply += 1
    else:                                                     # the initiator adds the answer
        for c in range(d):
            W[j, c] += message[c]
    if config.project_gossip:
        _project_row(W, j, config.radius)
    return answered


@numba.njit(cache=True)
def _wake_nodes(nodes, arrays, routes, payload):
    """`_tick` for each of `nodes` in order; messages go to rows 0.. of routes (sources, destinations) and payload.
    Returns how many."""
    n_out = 0
    for q in range(nodes.shape[0]):
        dst = _tick(nodes[q], arrays, payload[n_out])
        if dst >= 0:
            routes[0, n_out] = nodes[q]
            routes[1, n_out] = dst
            n_out += 1
    return n_out


@numba.njit(cache=True)
def _deliver_rows(dst, kind, payload, arrays, replies):
    """`_deliver` for each row in order (replies to requests in the rows of `replies`)."""
    for r in range(dst.shape[0]):
        _deliver(dst[r], kind, payload[r], arrays, replies[r] if replies.shape[0] else payload[r])


@numba.njit(cache=True)
def _kernel_wake(arrays, node, t, out_dst, out_tag, out_payload):
    dst = _tick(node, arrays, out_payload[0])
    if dst < 0:
        return 0, _all_done(arrays.progress[0])
    out_dst[0] = dst
    out_tag[0] = _REQUEST
    return 1, _all_done(arrays.progress[0])


@numba.njit(cache=True)
def _kernel_prefetch(arrays, node):
    """Prefetch what `node`'s next tick or delivery reads first (`GossipKernel.prefetch`): its model row and sum,
    its counters, its random stream and its neighbour row (its data rows are read only at a local step)."""
    j = arrays.local_of[node]
    prefetch_row(arrays.W, j)
    prefetch(arrays.counters, j)
    prefetch(arrays.node_floats, j)
    prefetch(arrays.rng, j)
    prefetch(arrays.nbr_ptr, j)


@numba.njit(cache=True)
def _kernel_receive(arrays, dst, src, tag, payload, t, out_dst, out_tag, out_payload):
    if _deliver(dst, tag, payload, arrays, out_payload[0]):
        out_dst[0] = src
        out_tag[0] = _REPLY
        return 1, _all_done(arrays.progress[0])
    return 0, _all_done(arrays.progress[0])


@numba.njit(inline="always", cache=True)
def _all_done(progress):
    """Whether every node of the group has finished or is down (`progress`: a `PROGRESS` record)."""
    return progress.finished + progress.down >= progress.nodes


# ---------------------------------------------------------------------------------------------------------------
# The peer program
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class GadgetState:
    """The nodes of one group (struct of arrays, row j = the j-th node of the group)."""

    node_ids: np.ndarray        # global ids (read-only)
    local_of: np.ndarray        # global id -> row (-1 for nodes of other groups)
    rows: object                # the shards stacked, or the data set they read (points): array or CSR triple
    y: np.ndarray
    row_start: np.ndarray       # node j's points are rows row_start[j]:row_start[j+1] (of X and y, or of points)
    W: np.ndarray               # models w_j (Push-Sum: the ratio s_j/omega_j)
    W_sum: np.ndarray           # with `average`: sum of w_j^(t) over the last half of node j's steps
    counters: np.ndarray        # per node: a `NODE_COUNTERS` record (steps, ticks, hits, done, messages sent, ...)
    node_floats: np.ndarray     # per node: a `NODE_FLOATS` record (omega, F_prev, last |dF|)
    rng: np.ndarray             # one splitmix64 stream per node
    nbr_ptr: np.ndarray         # neighbours of node j: nbr_ids[nbr_ptr[j]:nbr_ptr[j+1]], cumulative B row nbr_cum
    nbr_ids: np.ndarray
    nbr_cum: np.ndarray
    progress: np.ndarray        # one `PROGRESS` record: finished nodes, nodes, nodes down that have not finished
    shard_sizes: np.ndarray
    config: np.ndarray          # one `CONFIG` record: the program's constants
    points: np.ndarray          # shard position -> row of X and y, where they are a shared data set (else empty)

    def __post_init__(self):
        # what the kernels take (in this order)
        self.arrays = GadgetArrays(self.local_of, self.rows, self.y, self.row_start, self.W, self.W_sum,
                                   self.counters, self.node_floats, self.rng, self.nbr_ptr, self.nbr_ids, self.nbr_cum,
                                   self.progress, self.config, self.points)

    @property
    def all_done(self) -> bool:
        p = self.progress[0]
        return bool(p["finished"] + p["down"] >= p["nodes"])


class GadgetPeer(GossipProgram):
    """A GADGET node (every node is a peer). Per-node data: {"X", "y", "neighbours", "probs", "omega"}."""

    role = "peer"

    def __init__(self, d: int, lam: float, gossip: str = "push-sum", rounds: int = 1, project_local: bool = True,
                 project_gossip: bool = True, eps: float = PAPER_EPS, patience: int = PAPER_PATIENCE,
                 iterations: int | None = None, average: bool = False):
        if gossip not in GOSSIP_MODES:
            raise ValueError(f"gossip = {gossip!r}; allowed: {', '.join(GOSSIP_MODES)}")
        if average and not iterations:
            raise ValueError("average = True averages the last half of T steps: it needs iterations = T")
        self.d = int(d)
        self.lam = float(lam)
        self.radius = 1.0 / math.sqrt(lam)
        self.gossip = gossip
        self.push_sum = gossip == "push-sum"
        self.rounds = int(rounds)
        self.project_local = bool(project_local)
        self.project_gossip = bool(project_gossip)
        self.eps = float(eps)
        self.patience = int(patience)
        self.iterations = int(iterations or 0)
        self.average = bool(average)
        self.width = gadget_scalars_per_message(self.d, gossip)
        self.tags = (PUSH,) if self.push_sum else (AVERAGE, AVERAGE_REPLY)
        self._no_replies = np.empty((0, self.d))

    def _config(self) -> np.ndarray:
        config = np.zeros(1, CONFIG)
        config[0] = (self.lam, self.radius, self.eps, self.patience, self.iterations, self.rounds, self.project_local,
                     self.project_gossip, self.push_sum, self.average)
        return config

    # -- interface ----------------------------------------------------------------------------------------------
    def init(self, node_ids, node_data, seed):
        node_ids = frozen_ids(node_ids)
        if isinstance(node_data, NodeRows):                  # the shards as whole arrays (build_gadget's)
            return self._init_from_rows(node_ids, node_data, seed)
        Xs = [nd["X"] for nd in node_data]
        X = sp.vstack(Xs, format="csr") if any(sp.issparse(x) for x in Xs) else np.vstack(Xs)
        sizes = np.array([x.shape[0] for x in Xs], dtype=np.int64)
        nbrs = [np.asarray(nd["neighbours"], dtype=np.int64) for nd in node_data]
        nbr_ptr = np.concatenate([[0], np.cumsum([nb.size for nb in nbrs])]).astype(np.int64)
        probs = np.concatenate([np.asarray(nd["probs"], dtype=np.float64) for nd in node_data])
        return self._state(node_ids, X, np.concatenate([np.asarray(nd["y"], dtype=np.float64) for nd in node_data]),
                           sizes, nbr_ptr, np.concatenate(nbrs).astype(np.int64), probs,
                           [float(nd.get("omega", 1.0)) for nd in node_data], seed)

    def _init_from_rows(self, node_ids, rows: NodeRows, seed):
        cols = rows.columns
        X, y = cols["X"], cols["y"]
        sizes = np.diff(X.ptr)
        shared = (X.items is not None and y.items is not None and np.array_equal(X.items, y.items)
                  and np.array_equal(X.ptr, y.ptr) and _kernel_ready(X.values))
        points = X.items if shared else None
        if not shared:                                       # the shards gathered in node order
            X, y = (c if c.items is None else c.take(np.arange(len(c))) for c in (X, y))
        return self._state(node_ids, X.values, np.asarray(y.values, dtype=np.float64), sizes,
                           cols["neighbours"].ptr, np.asarray(cols["neighbours"].values, dtype=np.int64),
                           np.asarray(cols["probs"].values, dtype=np.float64), cols["omega"], seed, points)

    def _state(self, node_ids, X, y, sizes, nbr_ptr, nbr_ids, probs, omega, seed,
               points: np.ndarray | None = None) -> "GadgetState":
        """The hosted nodes' state from their shards (rows of X in node order, `sizes` each, or with `points` the
        rows of a shared X and y that the shards' positions pick) and mixing rows."""
        m = node_ids.shape[0]
        if (sizes == 0).any():
            from ...errors import DataError

            empty = node_ids[np.flatnonzero(sizes == 0)]
            raise DataError(f"node {int(empty[0])} has no data points ({empty.size} such node(s)); every GADGET node "
                            "takes Pegasos steps on its own shard, so each needs at least one (use fewer nodes or a "
                            "partition that gives every node points)")
        top = int(max(node_ids.max(), nbr_ids.max() if nbr_ids.size else 0))
        local_of = np.full(top + 1, -1, dtype=np.int64)
        local_of[node_ids] = np.arange(m)
        node_floats = np.zeros(m, NODE_FLOATS)
        node_floats["omega"] = omega
        node_floats["f_prev"] = np.nan
        progress = np.zeros(1, PROGRESS)
        progress[0] = (0, m, 0)
        return GadgetState(
            node_ids=node_ids, local_of=local_of, rows=as_rows(X), y=y,
            row_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), W=np.zeros((m, self.d)),
            W_sum=np.zeros((m, self.d) if self.average else (0, self.d)), counters=np.zeros(m, NODE_COUNTERS),
            node_floats=node_floats, rng=seed_streams(seed, node_ids), nbr_ptr=np.asarray(nbr_ptr, dtype=np.int64),
            nbr_ids=nbr_ids, nbr_cum=segment_cumsum(np.asarray(nbr_ptr, dtype=np.int64), probs),
            progress=progress, shard_sizes=np.asarray(sizes, dtype=np.int64),
            config=self._config(), points=np.zeros(0, dtype=np.int64) if points is None else points)

    def wake(self, st: GadgetState, nodes, times):
        k = nodes.shape[0]
        routes, payload = np.empty((2, k), dtype=np.int64), np.empty((k, self.width))
        n_out = _wake_nodes(nodes, st.arrays, routes, payload)
        out = Outbox()
        if n_out == k:
            out.batches.append(MessageBatch(self.tags[0], routes[0], routes[1], payload))
        elif n_out:
            out.batches.append(MessageBatch(self.tags[0], routes[0, :n_out], routes[1, :n_out], payload[:n_out]))
        if st.all_done:
            out.signals = {"done": True}
        return st, out

    def receive(self, st: GadgetState, batch: MessageBatch, times):
        out = Outbox()
        kind = self.tags.index(batch.tag)
        payload = batch.rows()
        if kind == _REQUEST and not self.push_sum:
            replies = np.empty((batch.n_messages, self.d))
            _deliver_rows(batch.dst, kind, payload, st.arrays, replies)
            out.batches.append(MessageBatch(AVERAGE_REPLY, batch.dst, batch.src, replies))
        else:
            _deliver_rows(batch.dst, kind, payload, st.arrays, self._no_replies)
        if st.all_done:
            out.signals = {"done": True}
        return st, out

    def kernel(self, st: GadgetState) -> GossipKernel:
        """The compiled form for the gossip scheduler's compiled loop (the same `_tick` and `_deliver`)."""
        widths = np.array([self.width] * len(self.tags), dtype=np.int64)
        return GossipKernel(arrays=st.arrays, wake=_kernel_wake, receive=_kernel_receive, tags=self.tags,
                            widths=widths, max_out=1, crash=_kernel_crash, recover=_kernel_recover,
                            prefetch=_kernel_prefetch)

    def observe(self, st: GadgetState):
        return self._observation(st, np.copy)

    def peek(self, st: GadgetState):
        """`observe` with read-only views of the models (no copy of every node's w: 1 KB a node at d = 123), valid
        until the state next changes; w_out is a copy where averaged iterates are kept."""
        return self._observation(st, frozen_view)

    def hand_over(self, st: GadgetState):
        """The last observation, when the run is over: the state's own models, without a copy."""
        return self._observation(st, lambda W: W)

    def _observation(self, st: GadgetState, models) -> dict:
        """The observation, with `models(W)` as w (and as w_out without averaged iterates)."""
        counters = st.counters
        if self.average:                            # the averaged iterate where a node has one
            w_out = st.W.copy()
            counts = counters["averaged"]
            has = counts > 0
            w_out[has] = st.W_sum[has] / counts[has, None]
        else:
            w_out = models(st.W)
        return {"nodes": st.node_ids, "w": models(st.W), "w_out": w_out, "steps": counters["steps"].copy(),
                "done": counters["done"].astype(bool), "sent_push": counters["sent_push"].copy(),
                "sent_average": counters["sent_average"].copy(), "sent_reply": counters["sent_reply"].copy(),
                "last_dF": st.node_floats["last_df"].copy(), "omega": st.node_floats["omega"].copy(),
                "shard_sizes": st.shard_sizes, "down": counters["down"].astype(bool)}

    def crash(self, st: GadgetState, nodes):
        """A crashed node keeps its state; the scheduler neither wakes it nor delivers to it. It is marked down:
        while it is, the run does not wait for it to finish (see `_kernel_crash`)."""
        for node in np.asarray(nodes, dtype=np.int64).tolist():
            _kernel_crash(st.arrays, node)
        return st

    def recover(self, st: GadgetState, nodes, keep_state: bool):
        """A node that comes back without its state restarts from w = 0, t = 0 (its Push-Sum weight is kept, so
        the network's total weight is unchanged)."""
        for node in np.asarray(nodes, dtype=np.int64).tolist():
            _kernel_recover(st.arrays, node, keep_state)
        return st


@numba.njit(cache=True)
def _kernel_crash(arrays, node):
    """`node` went down (a crash, or it left by churn): mark it. A node that is down cannot finish, so the program
    is done when every node has finished or is down (finished + down == nodes): a permanent crash does not hold the
    run up until its budget. A node that would come back later misses the end of the run; it is listed in the fault
    summary's ``down_at_end``."""
    counters = arrays.counters[arrays.local_of[node]]
    if counters.down == 0:
        counters.down = 1
        if counters.done == 0:
            arrays.progress[0].down += 1


@numba.njit(cache=True)
def _kernel_recover(arrays, node, keep_state):
    j = arrays.local_of[node]
    counters = arrays.counters[j]
    progress = arrays.progress[0]
    if counters.down == 1:
        counters.down = 0
        if counters.done == 0:
            progress.down -= 1
    if keep_state:
        return
    progress.finished -= counters.done
    arrays.W[j, :] = 0.0
    if arrays.W_sum.shape[0]:
        arrays.W_sum[j, :] = 0.0
    counters.steps = 0
    counters.ticks = 0
    counters.hits = 0
    counters.done = 0
    counters.averaged = 0
    arrays.node_floats[j].f_prev = np.nan


# ---------------------------------------------------------------------------------------------------------------
# Evaluation: every node's model against Eq. 1 and the test set, and the nodes' consensus
# ---------------------------------------------------------------------------------------------------------------

def gather_nodes(observations: list[dict]) -> dict:
    """The groups' observations as arrays ordered by global node id (one group's own arrays where it holds every
    node in order: no copy)."""
    if len(observations) == 1 and (observations[0]["nodes"] == np.arange(observations[0]["nodes"].shape[0])).all():
        return dict(observations[0])
    nodes = np.concatenate([o["nodes"] for o in observations])
    order = np.argsort(nodes, kind="stable")
    out = {"nodes": nodes[order]}
    for key in ("w", "w_out", "steps", "done", "sent_push", "sent_average", "sent_reply", "last_dF", "omega",
                "shard_sizes", "down"):
        out[key] = np.concatenate([o[key] for o in observations])[order]
    return out


@numba.njit(cache=True)
def _score_columns(S, y, owner):
    """Per column i of the scores S (points x models): the summed hinge loss, the correct predictions (a score of
    0 counts as +1), and the correct predictions and count over the rows whose owner is i (owner -1: none)."""
    n, m = S.shape
    hinge, correct = np.zeros(m), np.zeros(m)
    own_correct, own_count = np.zeros(m), np.zeros(m)
    for r in range(n):
        yr = y[r]
        for i in range(m):
            margin = yr * S[r, i]
            if margin < 1.0:
                hinge[i] += 1.0 - margin
            if (S[r, i] >= 0.0) == (yr > 0.0):
                correct[i] += 1.0
        o = owner[r]
        if o >= 0:
            own_count[o] += 1.0
            if (S[r, o] >= 0.0) == (yr > 0.0):
                own_correct[o] += 1.0
    return hinge, correct, own_correct, own_count


#: the evaluation scores the models in column blocks of about this many values (64 MB): memory O(points + nodes),
#: not points x nodes (30 000 nodes on a9a were 11.8 GB)
SCORE_BLOCK_VALUES = 2 ** 23


def _scores(X, y, models, owner):
    """`_score_columns` of the scores X @ models.T, computed block of models by block (every score is the same sum
    in the same order as in one product, so the same bits)."""
    m = models.shape[0]
    step = max(1, SCORE_BLOCK_VALUES // max(1, X.shape[0]))
    outs = [np.zeros(m) for _ in range(4)]
    for a in range(0, m, step):
        b = min(m, a + step)
        local = np.where((owner >= a) & (owner < b), owner - a, -1)
        parts = _score_columns(np.ascontiguousarray(X @ models[a:b].T), y, local)
        for out, part in zip(outs, parts):
            out[a:b] = part
    return outs


#: rows per block of the evaluation's whole-array steps (no temporary of every node's model)
_ROWS = 8192


def _average_rows(A: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """np.average(A, axis=0, weights=weights) with its bits, without its temporary of every row times its weight:
    the products a block of rows at a time, their sum carried on (NumPy sums the rows of a C-ordered array in
    order, so carrying the sum gives the same bits)."""
    if weights is None or A.shape[0] <= _ROWS:
        return np.average(A, axis=0, weights=weights)
    wgt = np.broadcast_to(weights, (1,) + weights.shape).swapaxes(-1, 0)      # (n, 1), as np.average makes it
    scale = wgt.sum(axis=0, dtype=np.result_type(A.dtype, wgt.dtype))
    if np.any(scale == 0.0):
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    total = np.multiply(A[:_ROWS], wgt[:_ROWS]).sum(axis=0)
    for i in range(_ROWS, A.shape[0], _ROWS):
        total = np.vstack([total, np.multiply(A[i:i + _ROWS], wgt[i:i + _ROWS])]).sum(axis=0)
    return total / scale


def _row_distances(A: np.ndarray, center: np.ndarray) -> np.ndarray:
    """np.linalg.norm(A - center, axis=1), row by row the same bits, a block of rows at a time."""
    return np.concatenate([np.linalg.norm(A[i:i + _ROWS] - center, axis=1) for i in range(0, A.shape[0], _ROWS)])


class ConsensusEvaluator:
    """Metrics of the node models W (m x d): per-node Eq. 1 objective and accuracies (mean and std over nodes),
    the average model, and the disagreement |w_i - w_bar| of the gossiped models (W unless given). Test accuracy
    is on the whole test set; the paper's protocol (each node on its own test shard) is `test_accuracy_shard`.

    Scoring a model is a pass over the data, so scoring every node's costs nodes x points: quadratic when the data
    grow with the nodes. With `sample` (sorted node ids) only those nodes' models are scored for the per-node means,
    stds and extremes (an estimate, reported as ``nodes_scored``); the average model, its objective and accuracy,
    and the consensus still use every node."""

    def __init__(self, X, y, lam: float, X_test=None, y_test=None, test_shards: list[np.ndarray] | None = None,
                 sample: np.ndarray | None = None):
        self.X, self.y, self.lam = X, np.asarray(y, dtype=np.float64), float(lam)
        self.X_test = X_test
        self.y_test = None if y_test is None else np.asarray(y_test, dtype=np.float64)
        self.no_owner = np.full(self.y.shape[0], -1, dtype=np.int64)
        self.test_owner = None
        if self.y_test is not None:
            self.test_owner = np.full(self.y_test.shape[0], -1, dtype=np.int64)
            for i, idx in enumerate(test_shards or []):
                self.test_owner[idx] = i
        self.n_shards = len(test_shards or [])
        self.sample = None if sample is None else np.asarray(sample, dtype=np.int64)
        if self.sample is not None and self.test_owner is not None:     # owners as rows of the sampled models
            row_of = np.full(max(self.n_shards, int(self.sample.max()) + 1), -1, dtype=np.int64)
            row_of[self.sample] = np.arange(self.sample.size)
            self.test_owner = np.where(self.test_owner >= 0, row_of[np.maximum(self.test_owner, 0)], -1)

    def __call__(self, W: np.ndarray, weights: np.ndarray | None = None, gossiped: np.ndarray | None = None,
                 up: np.ndarray | None = None) -> dict:
        """Metrics of the node models; with `up` (a mask) the means, stds and the consensus are over the nodes that
        are up, and ``nodes_up``, ``test_accuracy_all_nodes`` (every node, down ones included) are added."""
        m = W.shape[0]
        live = np.arange(m) if up is None else np.flatnonzero(up)
        if live.size == 0:                                    # every node is down: report them all
            live = np.arange(m)
        everyone = live.size == m                             # then the rows themselves, not a copy of them

        def rows(A):
            return A if everyone else A[live]

        lw = None if weights is None else np.asarray(weights)[live]
        w_bar = _average_rows(rows(W), lw)
        # the scored models' rows (every node's, or the sample's) and, among them, those of nodes that are up
        scored, nodes = (np.arange(m), live) if self.sample is None else (self.sample, np.flatnonzero(
            up[self.sample] if up is not None else np.ones(self.sample.size, dtype=bool)))
        if nodes.size == 0:
            nodes = np.arange(scored.size)
        k = scored.size
        models = np.vstack([W[scored], w_bar])               # the scored nodes' models, then their average
        hinge, correct, _, _ = _scores(self.X, self.y, models, self.no_owner)
        objective = 0.5 * self.lam * np.einsum("ij,ij->i", models, models) + hinge / self.y.shape[0]
        train_acc = correct / self.y.shape[0]
        G = rows(W if gossiped is None else gossiped)
        dist = _row_distances(G, _average_rows(G, lw))
        out = {"objective": float(objective[nodes].mean()), "objective_std": float(objective[nodes].std()),
               "objective_min": float(objective[nodes].min()), "objective_max": float(objective[nodes].max()),
               "train_accuracy": float(train_acc[nodes].mean()), "train_accuracy_std": float(train_acc[nodes].std()),
               "model_disagreement": float(dist.mean()), "model_disagreement_max": float(dist.max()),
               "model_norm": float(_row_distances(W[scored[nodes]], 0.0).mean()), "nodes": m,
               "average_model_objective": float(objective[k])}
        if self.sample is not None:
            out["nodes_scored"] = int(nodes.size)
        if up is not None:
            out["nodes_up"] = int(np.count_nonzero(up))
        if self.X_test is not None and self.y_test is not None and self.y_test.size:
            _, correct, own_correct, own_count = _scores(self.X_test, self.y_test, models, self.test_owner)
            test_acc = correct / self.y_test.shape[0]
            out["test_accuracy"] = float(test_acc[nodes].mean())
            out["test_accuracy_std"] = float(test_acc[nodes].std())
            out["average_model_test_accuracy"] = float(test_acc[k])
            if up is not None:
                out["test_accuracy_all_nodes"] = float(test_acc[:k].mean())
            if self.n_shards == m:
                shard_acc = own_correct[:k] / np.maximum(own_count[:k], 1.0)
                out["test_accuracy_shard"] = float(shard_acc[nodes].mean())
                out["test_accuracy_shard_std"] = float(shard_acc[nodes].std())
        return out


# ---------------------------------------------------------------------------------------------------------------
# Scenario parameters, deployment and registration
# ---------------------------------------------------------------------------------------------------------------


def build_gadget(params: GadgetParams, problem):
    from ...data import partition
    from ...deployment import Deployment
    from ...errors import InfeasibleParameterError
    from ...topology import build_topology, ensure_usable, mixing_rows
    from ..pushsum.methods import gossip_topology_info

    ds = problem.dataset
    m, d = params.nodes, ds.d
    if m > ds.n:
        raise InfeasibleParameterError(f"nodes = {m} exceeds the number of training points ({ds.n}); "
                                       f"allowed: 2 <= nodes <= {ds.n}")
    if problem.topology is not None:
        G = problem.topology
    else:
        G = build_topology(problem.topology_kind, m, seed=problem.seed, **problem.topology_params)
    ensure_usable(G, "gadget topology")
    if G.number_of_nodes() != m:
        raise InfeasibleParameterError(f"the topology has {G.number_of_nodes()} nodes but nodes = {m}; "
                                       f"allowed: a graph on exactly {m} nodes")
    parts = partition(ds.y, m, problem.partition_scheme, seed=problem.seed, **problem.partition_params)
    ptr, nbr, prob = mixing_rows(G, params.mixing)      # row i of B over node i's neighbours; b_ii: no exchange
    sizes = np.array([p.size for p in parts], dtype=np.float64)
    omega = sizes / sizes.mean() if (params.size_weighted and params.gossip == "push-sum") else np.ones(m)
    # every node's shard, neighbours and their probabilities as whole arrays (not a slice of the data per node);
    # entry i is {"X": its points, "y", "neighbours", "probs", "omega"}
    shard_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(sizes.astype(np.int64), out=shard_ptr[1:])
    points = np.concatenate(parts).astype(np.int64) if m else np.zeros(0, dtype=np.int64)
    # the shards pick rows of the data set, which the nodes share in process (a copy of the data set is 12 bytes a
    # stored value); split over hosts, each gets its nodes' rows gathered (`Ragged.take`)
    X_all, y_all = ds.X, np.asarray(ds.y, dtype=np.float64)
    node_data = (NodeRows(X=Ragged(shard_ptr, X_all, points), y=Ragged(shard_ptr, y_all, points),
                          neighbours=Ragged(ptr, nbr), probs=Ragged(ptr, prob), omega=omega) if _kernel_ready(X_all)
                 else NodeRows(X=Ragged(shard_ptr, X_all[points]), y=Ragged(shard_ptr, y_all[points]),
                               neighbours=Ragged(ptr, nbr), probs=Ragged(ptr, prob), omega=omega))
    program = GadgetPeer(d, params.lam, gossip=params.gossip, rounds=params.rounds,
                         project_local=params.project_local, project_gossip=params.project_gossip, eps=params.eps,
                         patience=params.patience, iterations=params.iterations, average=params.average)
    roles = [RoleSpec("peer", program, np.arange(m, dtype=np.int64), node_data)]
    test_shards = None
    if ds.y_test is not None and len(ds.y_test) >= m:
        test_shards = partition(len(ds.y_test), m, "iid", seed=problem.seed + 1)
    # the nodes whose models are scored for the means over nodes: all, or a fixed seeded sample above eval_nodes
    sample = (np.sort(np.random.default_rng([problem.seed, 0xE7A1]).choice(m, params.eval_nodes, replace=False))
              if 0 < params.eval_nodes < m else None)
    evaluator = ConsensusEvaluator(ds.X, ds.y, params.lam, ds.X_test, ds.y_test, test_shards, sample)
    best = eq1_optimum(ds, params.lam, params.reference)         # J* of Eq. 1, for rel_primal
    per_message = gadget_scalars_per_message(d, params.gossip)
    consensus_weights = sizes if params.gossip == "push-sum" and params.size_weighted else None

    def evaluate(obs):
        g = gather_nodes(obs["peer"])
        # a node that is down (crashed, or away by churn) is left out of the means and the consensus; the metrics
        # then also give nodes_up and test_accuracy_all_nodes
        out = evaluator(g["w_out"], consensus_weights, g["w"], up=~g["down"] if g["down"].any() else None)
        steps = g["steps"]
        out.update(steps_mean=float(steps.mean()), local_steps=int(steps.sum()), steps_min=int(steps.min()),
                   steps_max=int(steps.max()), finished_nodes=int(g["done"].sum()),
                   last_dF=float(np.nanmean(g["last_dF"])) if np.isfinite(g["last_dF"]).any() else math.nan,
                   gossip_messages=int(g["sent_push"].sum() + g["sent_average"].sum() + g["sent_reply"].sum()))
        if best is not None:
            out["rel_primal"] = rel_primal(out["objective"], best)
        return out

    def declared(obs):
        g = gather_nodes(obs["peer"])
        return int(g["sent_push"].sum() + g["sent_average"].sum() + g["sent_reply"].sum()) * per_message

    def model(obs):
        g = gather_nodes(obs["peer"])
        live = np.flatnonzero(~g["down"]) if not g["down"].all() else np.arange(m)
        weights = None if consensus_weights is None else consensus_weights[live]
        models = g["w_out"] if live.size == m else g["w_out"][live]
        return {"coef": _average_rows(models, weights), "intercept": 0.0,
                "node_coef": g["w_out"], "node_down": g["down"]}

    return Deployment(roles=roles, topology=G, node_names=NodeNames("peer-", m), evaluate=evaluate,
                      declared_scalars=declared, comm_unit=("d", float(d)), model=model,
                      info={"nodes": m, "d": d, "gossip": params.gossip, "rounds": params.rounds,
                            "mixing": params.mixing, "scheduler": "gossip",
                            "scalars_per_message": {tag: per_message for tag in program.tags},
                            "shard_sizes": sizes.astype(int).tolist(), **optimum_info(best),
                            **gossip_topology_info(G, params.mixing, 0.5)})


#: GADGET's memory model (bytes): the interpreter with numba and the libraries, and per node (the loop's, the
#: meter's and the program's arrays beside the model; per edge it is Push-Sum's EDGE_BYTES)
GADGET_BASE_BYTES, GADGET_NODE_BYTES = 268 * 2 ** 20, 378


def gadget_memory(params: GadgetParams, problem) -> tuple[int, str, str]:
    """The peak memory of a GADGET run, before it is built (`AlgorithmInfo.memory`): GADGET_BASE_BYTES, per node
    GADGET_NODE_BYTES and its model of d scalars (8 bytes each; with averaged iterates their sums and the averaged
    copy at the end, 16 more), the data set the nodes' shards read (CSR: 12 bytes a stored value; hosts that hold
    part of the nodes gather their rows), the edges and the evaluation's block of scores. Fitted to peaks measured
    for 10 rounds on a random 2-out overlay (a9a with 10^3 and 3·10^4 nodes; synthetic a9a-shaped sets of two
    points per node with 10^5, 3·10^5 and 10^6 nodes: 0.36 to 2.5 GB, every one within 2 %)."""
    from ..pushsum.methods import EDGE_BYTES, topology_size

    n, edges = topology_size(problem, params.nodes)
    ds = problem.dataset
    stored = int(ds.X.nnz) if hasattr(ds.X, "nnz") else int(np.prod(ds.X.shape))
    model_bytes = (24 if params.average else 8) * ds.d
    need = (GADGET_BASE_BYTES + 12 * stored + n * (GADGET_NODE_BYTES + model_bytes) + edges * EDGE_BYTES
            + 8 * SCORE_BLOCK_VALUES)
    return need, f"{n:,} nodes with a model of {ds.d} scalars and their share of {stored:,} stored data values, " \
        f"{edges:,} edges of the {problem.topology_kind} topology", "fewer nodes or a sparser topology"
