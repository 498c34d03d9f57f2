"""HOGWILD! (Recht, Re, Wright and Niu, NIPS 2011) for the C-SVM: lock-free SGD on a parameter held by a server.

Paper 000 compares Saddle-DSVC with HOGWILD! on test accuracy against communication (Appendix D, Figure 6;
C = 32, k = 20 clients). notes-000 section 4 records that the paper gives neither HOGWILD!'s communication
accounting nor its step sizes nor its loss scaling; the choices below are ours.

Objective. The C-SVM primal with a free (unregularised) bias, the problem of scikit-learn's ``SVC(kernel="linear")``:

    P(w, b) = 1/2 |w|^2 + C sum_i max(0, 1 - y_i (w.x_i + b)),      C = 32 by default (paper 000, Appendix D).

SGD runs on P/(nC) = lam/2 |w|^2 + 1/n sum_i hinge_i with lam = 1/(nC); one step on a sample (x_i, y_i) is

    w <- (1 - eta lam) w + eta y_i x_i [y_i (w.x_i + b) < 1],    b <- b + eta y_i [same test]

Recht et al.'s Algorithm 1 on a parameter server. Each processor loops: sample e, read x_e (the coordinates of the
parameter in e's support), compute the gradient from what it read, write x_v <- x_v - eta G_v for v in e, with
no lock; the updates that other processors write between a read and its write make the read stale (their
analysis bounds this lag by tau). Here the parameter (w, b) lives on the server (node 0) and the processors are
k clients (nodes 1..k), each sampling from its own shard; a client batches `steps_per_message` = m samples into
one read and one write, as m processors of one machine that read together and write together.

Asynchrony on synchronous rounds. The server takes the clients in turns, one turn per server round; a cycle gives
every client one turn, in an order drawn afresh each cycle from the run's seed (``turn_order = "shuffled"``) or
always 0..k-1 (``"fixed"``). At client c's turn the server

  1. applies c's writes that are due, in arrival order: a write computed from the read of cycle r is applied at
     c's turn in cycle r + 1 + delay (``delay`` = 0 by default);
  2. sends c the current values at the keys c pulled last ("read"; empty at c's first turn: only the turn).

In the next round c computes, from the values it read, the hinge sub-gradient of the batch it pulled for, sends it
("write"), samples its next batch and asks for that batch's keys ("pull"). So between a read and the write it
produced, the server applies the writes of the other clients' turns -- on average (delay + 1) k - 1 writes of m
steps each -- which is the staleness asynchrony gives; ``staleness_mean``/``staleness_max`` report it measured in
SGD steps. Everything random comes from the seed (clients' samples: (seed, node id); turn order: seed), so a run
is reproducible bit for bit, and a client's results do not depend on how an engine groups the clients.

Step sizes and scaling. The server applies a write of m samples with sum of sub-gradients g (hinge part only) as
m concurrent steps with one step size,

    w <- (1 - eta lam)^m w + eta g_w,    b <- b + eta g_b,    eta = eta_t = eta0 / (1 + t / T0),

t = SGD steps applied before it. eta0 = step_scale / R^2 with R^2 = max_i (|x_i|^2 + 1) (the bias feature is 1),
so one sample's step moves its margin by at most step_scale whatever the data's scale; the server learns R^2 and n
from one "stats" report per client. Bottou's SVM-SGD schedule eta0/(1 + lam eta0 t) has T0 = 1/(lam eta0) =
nC/eta0, hundreds of epochs for C = 32: the step would stay at eta0 for the whole run and the last iterate stays
noisy. Here T0 = t0_epochs * n is free. The defaults step_scale = 0.1 and t0_epochs = 1 come from a grid on
phishing and a9a with k = 20, m = 16: step_scale = 1 was unstable under the staleness of 20 clients, 0.03 slow.
The regulariser's shrink is applied lazily on the server (w = scale * v, O(1) per write), to the current w; only
the hinge part is stale. The clients only ever see values.

Messages and scalars (every int and float is one scalar; d is the data's dimension, the bias is key d):

    server -> client  "read"   [values at the keys pulled]               |K_prev|  (0 at the client's first turn)
    client -> server  "pull"   [keys: the sorted union of the supports   |K|
                                of the m sampled rows, and the bias key]
    client -> server  "write"  [indices, values] of the nonzero entries  2 nnz(g) (not sent when g = 0)
                                of g, the batch's summed sub-gradient
    client -> server  "stats"  [n_c, max_i |x_i|^2 (+1 for the bias)]    2, once, at the client's first turn

`hogwild_scalars` is that count for a turn or, from the counters the programs keep, for a run: the declared count
the tests hold the ledger equal to. An iteration is one cycle (k turns, k m samples). There is no paper bound and
no duality certificate: the evaluation reports the primal objective P(w, b) (the same function as
sklearn-linearsvc's), the accuracies, epochs, the step size, the measured staleness and the fraction of sampled
points that violated the margin at the values read.

Why turns: the reads and writes are sparse, so their lengths differ from client to client, and the messages of one
tag that reach one group of nodes in one round must have one width to be batched; one turn per round keeps every
message exact (no padding is counted) and makes the arrival order explicit.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp

from ...comm.message import MessageBatch, Outbox, constant_ids, frozen_ids
from ...program import NodeProgram, RoleSpec
from ..references.methods import csvm_primal
from .params import HogwildParams

__all__ = ["HogwildParams", "HogwildServer", "HogwildClient", "SampleStream", "hogwild_scalars"]

_RESCALE_BELOW = 1e-9   # fold the lazy shrink factor into v when it gets this small


def hogwild_scalars(keys_read: int, write_nonzeros: int, keys_pulled: int, stats_reports: int) -> int:
    """Scalars of a turn (or, with totals, of a run): the reads' values, the writes' (index, value) pairs, the
    pulls' keys and the 2-scalar stats reports (one per client, at its first turn)."""
    return keys_read + 2 * write_nonzeros + keys_pulled + 2 * stats_reports


class SampleStream:
    """The batches of client `node_id`: m row indices drawn uniformly with replacement from its n_rows rows, from
    the stream seeded by (seed, node id), so a client's samples do not depend on how an engine groups clients."""

    def __init__(self, seed: int, node_id: int, n_rows: int, m: int, block: int = 64):
        self.rng = np.random.default_rng([int(seed), int(node_id)])
        self.n_rows, self.m, self.block = n_rows, m, block
        self.buffer = np.empty(0, dtype=np.int64)
        self.next_at = 0

    def take(self) -> np.ndarray:
        if self.next_at == self.buffer.shape[0]:
            self.buffer = self.rng.integers(0, self.n_rows, size=self.m * self.block)
            self.next_at = 0
        rows = self.buffer[self.next_at:self.next_at + self.m]
        self.next_at += self.m
        return rows


# ---------------------------------------------------------------------------------------------------------------
# Client kernels: one pass over a batch's rows (CSR shard with the bias as column d)
# ---------------------------------------------------------------------------------------------------------------

@numba.njit(cache=True, nogil=True)
def _batch_keys(indptr, indices, rows, seen, scratch):
    """Sorted union of the supports of `rows`; `seen` is a zeroed bool array of the model's size, left zeroed."""
    count = 0
    for r in rows:
        for p in range(indptr[r], indptr[r + 1]):
            j = indices[p]
            if not seen[j]:
                seen[j] = True
                scratch[count] = j
                count += 1
    keys = np.sort(scratch[:count])
    for i in range(count):
        seen[keys[i]] = False
    return keys


@numba.njit(cache=True, nogil=True)
def _hinge_write(indptr, indices, data, y, rows, keys, values, w_read, grad):
    """From the values read at `keys`: the batch's summed hinge sub-gradient sum_{y_i <w, x_i> < 1} y_i x_i as
    (indices, values) of its nonzero entries, and the number of margin violators. `w_read` and `grad` are zeroed
    scratch arrays of the model's size, left zeroed."""
    for i in range(keys.shape[0]):
        w_read[keys[i]] = values[i]
    violators = 0
    for r in rows:
        z = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            z += data[p] * w_read[indices[p]]
        if y[r] * z < 1.0:
            violators += 1
            for p in range(indptr[r], indptr[r + 1]):
                grad[indices[p]] += y[r] * data[p]
    out = np.empty(2 * keys.shape[0])
    nnz = 0
    for i in range(keys.shape[0]):
        j = keys[i]
        if grad[j] != 0.0:
            out[nnz] = j
            out[keys.shape[0] + nnz] = grad[j]
            nnz += 1
        grad[j] = 0.0
        w_read[j] = 0.0
    payload = np.empty(2 * nnz)
    for q in range(nnz):                        # (element by element: a slice assignment compiles numba's
        payload[q] = out[q]                     # shape-mismatch message, seconds of a first run)
        payload[nnz + q] = out[keys.shape[0] + q]
    return payload, violators


def _with_bias_column(X, fit_intercept: bool) -> sp.csr_matrix:
    """X as CSR with sorted indices, and a column of ones appended (the bias feature, key d) when fitting b."""
    X = sp.csr_matrix(X, dtype=np.float64)
    if fit_intercept:
        X = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
    X.sort_indices()
    return sp.csr_matrix((X.data, X.indices.astype(np.int64), X.indptr.astype(np.int64)), shape=X.shape)


# ---------------------------------------------------------------------------------------------------------------
# The server: holds (w, b), takes the clients in turns, applies writes lock-free in arrival order
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class _ServerState:
    clients: np.ndarray
    position: dict                  # client node id -> its index 0..k-1
    to_client: list                 # per client: its id as a frozen array (cached routes)
    rng: np.random.Generator
    v: np.ndarray                   # w = scale * v
    b: float = 0.0
    scale: float = 1.0
    steps: int = 0                  # SGD steps applied (t)
    cycle: int = 0                  # completed cycles = iterations
    turn: int = 0                   # position in the current cycle
    order: np.ndarray | None = None
    keys: list = field(default_factory=list)          # per client: keys of its last pull (None before the first)
    serving: np.ndarray | None = None                 # per client: holds a batch we read for, write not yet in
    read_cycle: np.ndarray | None = None              # per client: cycle of that read
    read_steps: np.ndarray | None = None              # per client: steps applied at that read
    queue: list = field(default_factory=list)         # per client: deque of (read cycle, read steps, write row)
    n_seen: np.ndarray | None = None                  # per client: n_c from its stats (-1 before)
    radius2: float = 0.0                              # max |x|^2 (+1 with the bias) over the reports
    lam: float = math.nan           # 1/(nC), eta0 and T0, once every client has reported its stats
    eta0: float = math.nan
    t0: float = math.nan
    keys_read: int = 0
    writes_applied: int = 0
    staleness_sum: float = 0.0
    staleness_max: int = 0
    eta: float = math.nan


class HogwildServer(NodeProgram):
    """Node 0: the shared parameter (w, b). One client turn per step: apply its due writes, send its read."""

    role = "server"
    initiator = True   # round 0 starts the first turn

    def __init__(self, d: int, C: float, steps_per_message: int, delay: int, step_scale: float,
                 t0_epochs: float, turn_order: str, fit_intercept: bool):
        self.d = d
        self.C = C
        self.m = steps_per_message
        self.delay = delay
        self.step_scale = step_scale
        self.t0_epochs = t0_epochs
        self.turn_order = turn_order
        self.fit_intercept = fit_intercept

    def init(self, node_ids, node_data, seed):
        clients = np.asarray(node_data[0]["clients"], dtype=np.int64)
        k = clients.shape[0]
        st = _ServerState(frozen_ids(clients), {int(c): i for i, c in enumerate(clients)},
                          [frozen_ids([c]) for c in clients],
                          np.random.default_rng([int(seed), 0]), np.zeros(self.d))
        st.keys = [None] * k
        st.serving = np.zeros(k, dtype=bool)
        st.read_cycle = np.zeros(k, dtype=np.int64)
        st.read_steps = np.zeros(k, dtype=np.int64)
        st.queue = [deque() for _ in range(k)]
        st.n_seen = np.full(k, -1, dtype=np.int64)
        st.order = self._new_order(st, k)
        return st

    def _new_order(self, st: _ServerState, k: int) -> np.ndarray:
        return st.rng.permutation(k) if self.turn_order == "shuffled" else np.arange(k)

    # -- receiving ----------------------------------------------------------------------------------------
    def _receive(self, st: _ServerState, inbox) -> None:
        position = st.position
        if "stats" in inbox:
            b = inbox["stats"]
            for i in range(b.n_messages):
                row = b.row(i)
                st.n_seen[position[int(b.src[i])]] = int(row[0])
                st.radius2 = max(st.radius2, float(row[1]))
            if (st.n_seen >= 0).all() and math.isnan(st.lam):
                n = int(st.n_seen.sum())
                st.lam = 1.0 / (n * self.C)
                st.eta0 = self.step_scale / st.radius2
                st.t0 = self.t0_epochs * n
        writes = {}
        if "write" in inbox:
            b = inbox["write"]
            writes = {int(b.src[i]): b.row(i) for i in range(b.n_messages)}
        if "pull" in inbox:                       # every reply carries a pull; a write only when g != 0
            b = inbox["pull"]
            for i in range(b.n_messages):
                node = int(b.src[i])
                c = position[node]
                if st.serving[c]:
                    st.queue[c].append((st.read_cycle[c], st.read_steps[c], writes.get(node)))
                    st.serving[c] = False
                st.keys[c] = np.asarray(b.row(i), dtype=np.int64)

    # -- applying -------------------------------------------------------------------------------------------
    def _apply(self, st: _ServerState, read_steps: int, row) -> None:
        """m concurrent SGD steps: w <- (1 - eta lam)^m w + eta g_w, b <- b + eta g_b (row = [indices, values])."""
        eta = st.eta0 / (1.0 + st.steps / st.t0)
        st.eta = eta
        st.scale *= math.exp(self.m * math.log1p(-eta * st.lam))
        if st.scale < _RESCALE_BELOW:
            st.v *= st.scale
            st.scale = 1.0
        if row is not None and row.shape[0]:
            nnz = row.shape[0] // 2
            idx = row[:nnz].astype(np.int64)
            val = row[nnz:]
            if self.fit_intercept and idx[-1] == self.d:      # keys are sorted: the bias comes last
                st.b += eta * float(val[-1])
                idx, val = idx[:-1], val[:-1]
            st.v[idx] += (eta / st.scale) * val
        lag = st.steps - int(read_steps)
        st.staleness_sum += lag
        st.staleness_max = max(st.staleness_max, lag)
        st.writes_applied += 1
        st.steps += self.m

    def _values(self, st: _ServerState, keys: np.ndarray) -> np.ndarray:
        if self.fit_intercept and keys.shape[0] and keys[-1] == self.d:
            out = np.empty(keys.shape[0])
            out[:-1] = st.scale * st.v[keys[:-1]]
            out[-1] = st.b
            return out
        return st.scale * st.v[keys]

    def step(self, st: _ServerState, inbox, round_):
        self._receive(st, inbox)
        out = Outbox()
        k = st.clients.shape[0]
        c = int(st.order[st.turn])
        queue = st.queue[c]
        while queue and queue[0][0] + 1 + self.delay <= st.cycle:            # c's due writes, oldest first
            _, read_steps, row = queue.popleft()
            self._apply(st, read_steps, row)
        keys = st.keys[c]
        values = self._values(st, keys) if keys is not None else np.empty(0)
        out.send(MessageBatch("read", constant_ids(0, 1), st.to_client[c], values.reshape(1, -1)))
        if keys is not None:
            st.serving[c] = True
            st.read_cycle[c] = st.cycle
            st.read_steps[c] = st.steps
            st.keys_read += keys.shape[0]
        st.turn += 1
        if st.turn == k:
            st.turn = 0
            st.cycle += 1
            st.order = self._new_order(st, k)
            out.signals = {"iteration": st.cycle}
        return st, out

    def observe(self, st: _ServerState):
        w = st.scale * st.v
        return {"w": w, "b": st.b, "iteration": st.cycle, "steps": st.steps, "keys_read": st.keys_read,
                "writes_applied": st.writes_applied, "eta": st.eta, "staleness_max": st.staleness_max,
                "staleness_mean": st.staleness_sum / st.writes_applied if st.writes_applied else 0.0}


# ---------------------------------------------------------------------------------------------------------------
# The clients: sample from their shards, pull keys, compute the write from what they read
# ---------------------------------------------------------------------------------------------------------------

class _ClientState:
    """A group of clients: per client its shard (CSR, bias column appended), labels, sample stream and the batch
    it is waiting to read for; counters of what it sent."""

    def __init__(self, node_ids, shards, labels, streams, width):
        self.node_ids = frozen_ids(node_ids)
        self.position = {int(n): i for i, n in enumerate(self.node_ids)}
        self.from_client = [frozen_ids([n]) for n in self.node_ids]
        self.shards = shards
        self.labels = labels
        self.streams = streams
        g = len(shards)
        self.batch: list = [None] * g
        self.keys: list = [None] * g
        self.seen = np.zeros(width, np.bool_)
        self.scratch = np.empty(width, np.int64)
        self.w_read = np.zeros(width)
        self.grad = np.zeros(width)
        self.keys_pulled = np.zeros(g, dtype=np.int64)
        self.write_nonzeros = np.zeros(g, dtype=np.int64)
        self.stats_sent = np.zeros(g, dtype=np.int64)
        self.samples = np.zeros(g, dtype=np.int64)
        self.violators = np.zeros(g, dtype=np.int64)


class HogwildClient(NodeProgram):
    """Nodes 1..k: at each read, the batch's write from the values read, then the next batch's pull."""

    role = "client"

    def __init__(self, steps_per_message: int, fit_intercept: bool):
        self.m = steps_per_message
        self.fit_intercept = fit_intercept

    def init(self, node_ids, node_data, seed):
        shards, labels, streams = [], [], []
        for node, data in zip(node_ids, node_data):
            X = _with_bias_column(data["X"], self.fit_intercept)
            shards.append(X)
            labels.append(np.ascontiguousarray(data["y"], dtype=np.float64))
            streams.append(SampleStream(seed, int(node), X.shape[0], self.m))
        width = shards[0].shape[1] if shards else 0
        return _ClientState(node_ids, shards, labels, streams, width)

    def step(self, st: _ClientState, inbox, round_):
        out = Outbox()
        reads = inbox.get("read")
        if reads is None:
            return st, out
        to_server = constant_ids(0, 1)
        for i in range(reads.n_messages):
            c = st.position[int(reads.dst[i])]
            X, y, src = st.shards[c], st.labels[c], st.from_client[c]
            if st.batch[c] is None:                                    # first turn: report n_c and R^2
                sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
                out.send(MessageBatch("stats", src, to_server, np.array([[X.shape[0], sq.max()]])))
                st.stats_sent[c] += 1
            else:
                payload, violators = _hinge_write(X.indptr, X.indices, X.data, y, st.batch[c], st.keys[c],
                                                  np.ascontiguousarray(reads.row(i)), st.w_read, st.grad)
                st.violators[c] += violators
                st.samples[c] += st.batch[c].shape[0]
                if payload.shape[0]:
                    out.send(MessageBatch("write", src, to_server, payload.reshape(1, -1)))
                    st.write_nonzeros[c] += payload.shape[0] // 2
            rows = st.streams[c].take()
            keys = _batch_keys(X.indptr, X.indices, rows, st.seen, st.scratch)
            st.batch[c], st.keys[c] = rows, keys
            st.keys_pulled[c] += keys.shape[0]
            out.send(MessageBatch("pull", src, to_server, keys.reshape(1, -1)))
        return st, out

    def observe(self, st: _ClientState):
        return {"keys_pulled": int(st.keys_pulled.sum()), "write_nonzeros": int(st.write_nonzeros.sum()),
                "stats_sent": int(st.stats_sent.sum()), "samples": int(st.samples.sum()),
                "violators": int(st.violators.sum())}


# ---------------------------------------------------------------------------------------------------------------
# Scenario parameters and registration
# ---------------------------------------------------------------------------------------------------------------


def build_hogwild(params: HogwildParams, problem):
    from ...deployment import Deployment, server_client_layout
    from ...errors import InfeasibleParameterError

    ds = problem.dataset
    k, d, m = params.clients, ds.d, params.steps_per_message
    X = sp.csr_matrix(ds.X)
    radius2 = float(np.asarray(X.multiply(X).sum(axis=1)).max()) + (1.0 if params.fit_intercept else 0.0)
    if radius2 <= 0.0:
        raise InfeasibleParameterError("every training point is zero and there is no bias to fit: hogwild has "
                                       "nothing to learn; allowed: fit_intercept = true or non-zero data")
    if params.step_scale / (radius2 * ds.n * params.C) >= 1.0:
        raise InfeasibleParameterError(
            f"step_scale = {params.step_scale} makes the shrink factor 1 - eta0/(nC) <= 0 (n = {ds.n}, "
            f"C = {params.C}, max |x|^2 = {radius2:g}); allowed: step_scale < {radius2 * ds.n * params.C:g}")
    layout = server_client_layout(problem, k, "hogwild")
    server = HogwildServer(d, params.C, m, params.delay, params.step_scale, params.t0_epochs, params.turn_order,
                           params.fit_intercept)
    roles = [RoleSpec("server", server, np.array([0], dtype=np.int64), [{"clients": layout.clients}]),
             RoleSpec("client", HogwildClient(m, params.fit_intercept), layout.clients,
                      [{"X": ds.X[idx], "y": ds.y[idx]} for idx in layout.parts])]

    def predict_scores(X, srv):
        return np.asarray(X @ srv["w"]).ravel() + srv["b"]

    def evaluate(obs):
        srv = obs["server"][0]
        clients = obs["client"]
        samples = sum(o["samples"] for o in clients)
        out = {"iteration": srv["iteration"],
               "objective": csvm_primal(ds.X, ds.y, srv["w"], srv["b"], params.C),
               "train_accuracy": float(np.mean(np.where(predict_scores(ds.X, srv) >= 0, 1.0, -1.0) == ds.y)),
               "epochs": srv["steps"] / ds.n, "step_size": srv["eta"],
               "staleness_mean": srv["staleness_mean"], "staleness_max": srv["staleness_max"],
               "violator_fraction": sum(o["violators"] for o in clients) / samples if samples else math.nan}
        if ds.X_test is not None and ds.y_test is not None and len(ds.y_test):
            scores = predict_scores(ds.X_test, srv)
            out["test_accuracy"] = float(np.mean(np.where(scores >= 0, 1.0, -1.0) == ds.y_test))
        return out

    def declared(obs):
        clients = obs["client"]
        return hogwild_scalars(obs["server"][0]["keys_read"], sum(o["write_nonzeros"] for o in clients),
                               sum(o["keys_pulled"] for o in clients), sum(o["stats_sent"] for o in clients))

    def model(obs):
        srv = obs["server"][0]
        return {"coef": srv["w"].copy(), "intercept": float(srv["b"])}

    return Deployment(roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, bound=None, comm_unit=("kd", float(k * d)), model=model,
                      info={"k": k, "C": params.C, "steps_per_message": m, "delay": params.delay, "n": ds.n,
                            "d": d})
