"""Distributed SBP (notes-003 section 6; **an extrapolation, not in the paper**): a server and k clients that hold
shards of the training points and their responses.

The server holds t, ||w||^2, the last level and the sampling stream; no per-example state. Client m holds its
points, their coefficients and responses (and the running sums of the averaged iterate), and a share of the test
set's responses for the evaluator. One iteration, in rounds (tags and scalars per message):

    update  server -> clients   [eta, y_i, shrink, tau, ||x_i||^2, nnz, idx.., val..]  the step of t - 1 and the
            next trial level tau (the last level); every client applies it (its n/k kernel evaluations) and replies
    stats   clients -> server   [#{c_j < tau}, sum{c_j < tau}, sum c_j]               3
    trial   server -> clients   [tau]   Newton's step tau <- (V + sum S) / sum k (`water.water_level_newton`), until
            the count stops changing: the level is exact; each trial is answered by stats
    pick    server -> owner     [r]     the r-th covered point in shard order, r = floor(u K) with the stream's u
    row     owner -> server     [y_i, c_i, K_ii, ||x_i||^2, nnz, idx.., val..]         the sampled point
    (the server updates ||w||^2 and the projection's shrink factor, then broadcasts the next update)

So an iteration costs 2 (update, stats) + 2 R (Newton trials) + 2 (pick, row) rounds: at least two sequential
round trips, latency-bound unless n/k kernel evaluations outlast a round trip (notes-003 section 6.4). Run on the
points in shard order, the iterates are those of single-machine SBP (`methods.sbp_iterations`) up to the rounding
of the reduced sums. Without a bias only; nu > 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numba
import numpy as np
from pydantic import Field

from ...comm.message import MessageBatch, Outbox, frozen_ids
from ...core.streams import STREAM_PROGRAM, counter_uniform, stream_keys
from ...errors import InfeasibleParameterError, ProtocolError
from ...numerics.kernels import KernelData, kernel_data
from ...program import NodeProgram, RoleSpec
from .build import SBPParams, model_metrics, resolve_nu
from .kernel_problem import KernelProblem
from .responses import apply_row, coef_now, coef_total, responses
from .water import NEWTON_MAX_PASSES, count_below, water_level_sorted

__all__ = ["DSBPParams", "SBPClient", "SBPServer", "build_dsbp"]

_HEADER = 5             # scalars before a sparse row's indices and values in `update` and `row`


class DSBPParams(SBPParams):
    """``[algorithm]`` keys of dsbp."""

    clients: int = Field(4, ge=1, description="clients k holding shards of the training points")


def _encode_row(data: KernelData, i: int, head: tuple) -> np.ndarray:
    """head + (||x_i||^2, nnz, indices, values) of row i; dense rows send their d values (no indices)."""
    if data.sparse:
        lo, hi = data.indptr[i], data.indptr[i + 1]
        idx, val = data.indices[lo:hi].astype(np.float64), data.values[lo:hi]
    else:
        idx, val = np.zeros(0), data.dense[i]
    return np.concatenate([np.asarray(head, np.float64), [data.sqnorm[i], float(val.shape[0])], idx, val])


def _decode_row(payload: np.ndarray, head: int, like: KernelData) -> KernelData:
    """The row sent by `_encode_row` as a one-row `KernelData` of the same storage as `like`."""
    sq, nnz = payload[head], int(payload[head + 1])
    body = payload[head + 2:]
    if like.sparse:
        return KernelData(np.array([0, nnz], np.int64), body[:nnz].astype(np.int64), body[nnz:2 * nnz].copy(),
                          like.dense[:0], np.array([sq]), True, like.d)
    return KernelData(like.indptr, like.indices, like.values, body[:nnz].reshape(1, -1).copy(), np.array([sq]), False,
                      like.d)


@dataclass
class _Server:
    clients: np.ndarray
    volume: float
    eta0: float
    key: np.uint64
    n_total: int
    budget: int                  # iterations to run
    t: int = 0                   # iterations done
    r2: float = 0.0
    level: float = 0.0
    tau: float = 0.0             # the trial level the last stats answer
    count: int = -1              # Newton: the count at tau (-1: none yet)
    total: float = 0.0           # the sum at tau
    passes: int = 0              # this iteration's Newton passes
    trials: int = 0              # trial broadcasts, in all
    row_scalars: int = 0         # scalars of the sampled rows (update and row messages), in all
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class SBPServer(NodeProgram):
    role = "server"
    initiator = True

    def __init__(self, volume: float, eta0: float, n_total: int, budget: int):
        self.volume, self.eta0, self.n_total, self.budget = float(volume), float(eta0), int(n_total), int(budget)

    def init(self, node_ids, node_data, seed):
        return _Server(frozen_ids(node_data[0]["clients"]), self.volume, self.eta0,
                       stream_keys(seed, STREAM_PROGRAM, 1)[0], self.n_total, self.budget)

    def step(self, st: _Server, inbox, round_):
        out = Outbox()
        if round_ == 0:                                   # iteration 1 starts from the level 0
            self._trial(st, out, 0.0)
        elif "stats" in inbox:
            rows = inbox["stats"].rows()                  # one row per client, in client order
            k = int(rows[:, 0].sum())
            s = float(rows[:, 1].sum())
            st.passes += 1
            if st.count < 0 and k == 0:                   # below every response: from (V + sum c) / n
                st.count = -1
                self._trial(st, out, (self.volume + float(rows[:, 2].sum())) / st.n_total)
                st.passes += 1
            elif st.count >= 0 and k == st.count:         # the covered set stopped changing: the level
                st.level = st.tau
                st.counts = rows[:, 0].astype(np.int64)
                u = counter_uniform(st.key, st.t + 1)
                r = min(int(u * k), k - 1)
                cum = np.cumsum(st.counts)
                m = int(np.searchsorted(cum, r, side="right"))
                local = r - (int(cum[m - 1]) if m else 0)
                out.send(MessageBatch.single("pick", 0, int(st.clients[m]), np.array([float(local)])))
            else:
                if st.passes >= NEWTON_MAX_PASSES:
                    raise ProtocolError(f"distributed SBP: the water level did not settle in {NEWTON_MAX_PASSES} "
                                        "Newton passes (rounding); single-machine SBP falls back to selection here")
                st.count, st.total = k, s
                self._trial(st, out, (self.volume + s) / k)
        elif "row" in inbox:
            p = inbox["row"].row(0)
            y_i, c_i, k_ii = float(p[0]), float(p[1]), float(p[2])
            st.row_scalars += p.shape[0]
            t = st.t + 1
            eta = self.eta0 / math.sqrt(t)
            r2 = st.r2 + 2.0 * eta * c_i + eta * eta * k_ii
            shrink = 1.0 / math.sqrt(r2) if r2 > 1.0 else 1.0
            st.r2 = r2 * shrink * shrink
            st.t = t
            update = np.concatenate([[eta, y_i, shrink, st.level], p[3:]])
            st.row_scalars += update.shape[0] * st.clients.shape[0]
            out.send(MessageBatch.broadcast("update", 0, st.clients, update))
            st.tau, st.count, st.passes = st.level, -1, 0
            out.signals = {"iteration": t, **({"done": True} if t >= st.budget else {})}
        return st, out

    def _trial(self, st: _Server, out: Outbox, tau: float) -> None:
        st.tau = tau
        st.trials += 1
        out.send(MessageBatch.broadcast("trial", 0, st.clients, np.array([tau])))

    def observe(self, st: _Server):
        return {"t": st.t, "r2": st.r2, "level": st.level, "trials": st.trials, "row_scalars": st.row_scalars,
                "clients": int(st.clients.shape[0])}


@dataclass
class _Clients:
    node_ids: np.ndarray
    shards: tuple                # per client: Responses over its points (averaged, with its test share)
    evaluations: np.ndarray      # per client: evaluations counted so far (reported to the meter step by step)
    pending: dict = field(default_factory=dict)   # client position -> the index it was asked to sample
    last_tau: float = 0.0        # the level the last stats were taken at (the covered set is c < last_tau)


class SBPClient(NodeProgram):
    role = "client"

    def __init__(self, params):
        self.params = params

    def init(self, node_ids, node_data, seed):
        shards = tuple(responses(d["data"], self.params, d["y"], d["test"], averaged=True) for d in node_data)
        return _Clients(frozen_ids(node_ids), shards, np.array([int(R.evaluations[0]) for R in shards]))

    def step(self, st: _Clients, inbox, round_):
        out = Outbox()
        tau = None
        if "update" in inbox:
            p = inbox["update"].row(0)
            q = _decode_row(p, 4, st.shards[0].data)
            eta, y_i, shrink, tau = float(p[0]), float(p[1]), float(p[2]), float(p[3])
            owners = np.full(len(st.shards), -1, np.int64)
            for m, i in st.pending.items():
                owners[m] = i
            done = np.zeros(len(st.shards), np.int64)
            _apply_all(st.shards, q, y_i, owners, eta, shrink, done)      # n/k kernel evaluations per client
            st.pending = {}
            out.signals = {"counts": {"kernel_evaluations": done}}
        if "trial" in inbox:
            tau = float(inbox["trial"].row(0)[0])
        if tau is not None:
            rows = np.empty((len(st.shards), 3))
            _stats_all(st.shards, tau, rows)
            out.send(MessageBatch.gather("stats", st.node_ids, 0, rows))
            st.last_tau = tau
        if "pick" in inbox:
            b = inbox["pick"]
            m = int(np.flatnonzero(st.node_ids == b.dst[0])[0])
            R = st.shards[m]
            r = int(b.row(0)[0])
            covered = np.flatnonzero(R.c < st.last_tau)
            i = int(covered[r])
            st.pending = {m: i}
            head = (R.y[i], R.c[i], R.kdiag[i])
            out.send(MessageBatch.single("row", int(b.dst[0]), 0, _encode_row(R.data, i, head)))
        return st, out

    def observe(self, st: _Clients):
        return [{"coef": coef_now(R), "coef_total": coef_total(R), "c": R.c.copy(), "c_sum": R.c_sum.copy(),
                 "test_sum": R.test_sum.copy(), "test_evaluations": int(R.test_evaluations[0])}
                for R in st.shards]


@numba.njit(cache=True, nogil=True)
def _apply_all(shards, q, y_i, owners, eta, shrink, done):
    """Every client of the group applies the step (`responses.apply_row`); done[m]: its kernel evaluations."""
    for m in range(len(shards)):
        R = shards[m]
        before = R.evaluations[0]
        apply_row(R, q, 0, y_i, owners[m], eta, shrink)
        done[m] = R.evaluations[0] - before


@numba.njit(cache=True, nogil=True)
def _stats_all(shards, tau, rows):
    """Each client's stats at the trial level tau: #{c < tau}, sum{c < tau}, sum c."""
    for m in range(len(shards)):
        c = shards[m].c
        k, below = count_below(c, tau)
        rows[m, 0] = k
        rows[m, 1] = below
        rows[m, 2] = c.sum()


class _Evaluation:
    """What `model_metrics` reads, with the points in shard order (y, y_test, lam)."""

    def __init__(self, kp: KernelProblem, order: np.ndarray, test_order: np.ndarray | None):
        self.lam = kp.lam
        self.y = kp.y[order]
        self.y_test = kp.y_test[test_order] if (kp.y_test is not None and test_order is not None) else None
        self.accuracy = kp.accuracy


def build_dsbp(params: DSBPParams, problem):
    from ...deployment import Deployment, server_client_layout

    if params.bias:
        raise InfeasibleParameterError("dsbp runs SBP without a bias (the level with a bias needs per-class "
                                       "exchanges, notes-003 6.6); allowed: bias = false, or sbp on one machine")
    kp = KernelProblem(params, problem.dataset)
    nu, ref = resolve_nu(params.nu, kp, problem.seed)
    if not nu > 0:
        raise InfeasibleParameterError(f"dsbp needs nu > 0 (its water level is found by Newton rounds); got nu = "
                                       f"{nu}; allowed: nu > 0, or sbp on one machine for nu = 0")
    k = params.clients
    layout = server_client_layout(problem, k, "dsbp")
    ds = problem.dataset
    order = np.concatenate(layout.parts)
    test_parts = (np.array_split(np.arange(kp.y_test.shape[0]), k) if kp.y_test is not None else None)
    node_data = []
    for m, part in enumerate(layout.parts):
        test = kernel_data(_rows(kp.test_matrix(), test_parts[m])) if test_parts is not None else None
        node_data.append({"data": kernel_data(_rows(ds.X, part)), "y": kp.y[part], "test": test})
    eta0 = 1.0 / math.sqrt(float(max(_diagonal_max(d["data"], kp) for d in node_data)))
    budget = kp.iterations
    roles = [RoleSpec("server", SBPServer(kp.n * nu, eta0, kp.n, budget), np.array([0], np.int64),
                      [{"clients": layout.clients}]),
             RoleSpec("client", SBPClient(kp.kernel), layout.clients, node_data)]
    ev = _Evaluation(kp, order, np.concatenate(test_parts) if test_parts is not None else None)

    def assemble(obs):
        server = obs["server"][0]
        shards = [s for group in obs["client"] for s in group]
        return server, shards

    def evaluate(obs):
        server, shards = assemble(obs)
        T = max(server["t"], 1)
        coef = np.concatenate([s["coef_total"] for s in shards]) / T
        c = np.concatenate([s["c_sum"] for s in shards]) / T
        level, _ = water_level_sorted(c, kp.n * nu)
        divide = level if level > 0 else 1.0
        test = np.concatenate([s["test_sum"] for s in shards]) / T if test_parts is not None else None
        return {"iteration": server["t"], "epochs": server["t"] / kp.n, "level": float(level),
                "newton_trials": server["trials"],
                "evaluator_kernel_evaluations": sum(s["test_evaluations"] for s in shards),
                **model_metrics(ev, coef, c, test, 0.0, divide, ref)}

    def declared(obs):
        server, _ = assemble(obs)
        t, trials = server["t"], server["trials"]
        return k * trials + 3 * k * (trials + t) + t + server["row_scalars"]

    def model(obs):
        server, shards = assemble(obs)
        T = max(server["t"], 1)
        coef = np.zeros(kp.n)
        coef[order] = np.concatenate([s["coef_total"] for s in shards]) / T
        c = np.concatenate([s["c_sum"] for s in shards]) / T
        level, _ = water_level_sorted(c, kp.n * nu)
        return {"dual_coef": coef / (level if level > 0 else 1.0), "intercept": 0.0, "level": float(level)}

    info = {**kp.info(), "clients": k, "nu": nu, "volume": kp.n * nu,
            "rounds_per_iteration": "4 + 2 R (R: Newton trials of the water level)",
            "scalars_per_iteration": "k (1 + 3) R + 3 k + 1 + (k + 1) (5 + 2 nnz(x_i)) (sparse; dense: d values)"}
    return Deployment(roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, model=model, info=info)


def _rows(X, idx):
    return X[idx]


def _diagonal_max(data: KernelData, kp: KernelProblem) -> float:
    from ...numerics.kernels import kernel_diagonal

    return float(kernel_diagonal(data, kp.kernel, np.zeros(1, np.int64)).max()) if data.sqnorm.shape[0] else 0.0
