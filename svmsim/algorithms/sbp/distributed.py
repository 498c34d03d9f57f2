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
    pick    server -> owner     [r]     sent with each trial: the r-th covered point in shard order, r = floor(u K)
            with the stream's u and K the count at the last level, which is right exactly when the trial confirms
            the covered set (the count does not change); otherwise its answer is discarded
    row     owner -> server     [y_i, c_i, K_ii, ||x_i||^2, nnz, idx.., val..]         the picked point
    (on a settled level the server updates ||w||^2 and the projection's shrink factor and broadcasts the update)

So an iteration costs 2 (update, stats) + 2 R (Newton trials, with their picks and rows) rounds: at least two
sequential round trips, latency-bound unless n/k kernel evaluations outlast a round trip (notes-003 section 6.4);
the speculative pick trades R - 1 discarded rows per iteration for two rounds fewer. Run on the
points in shard order, the iterates are those of single-machine SBP (`methods.sbp_iterations`) up to the rounding
of the reduced sums. Without a bias only; nu > 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from ...comm.message import MessageBatch, Outbox, frozen_ids
from ...core.streams import STREAM_PROGRAM, counter_uniform, stream_keys
from ...errors import InfeasibleParameterError, ProtocolError
from ...numerics.csr import CSR_INDEX
from ...numerics.kernels import KernelData, kernel_data
from ...program import NodeProgram, RoleSpec
from .build import model_metrics, resolve_nu, settle_rule, settled_row
from .kernel_problem import KernelProblem
from .methods import nth_below
from .params import DSBPParams
from .responses import Responses, apply_row, coef_now, coef_total, responses
from .water import NEWTON_MAX_PASSES, water_level_sorted

__all__ = ["DSBPParams", "SBPClient", "SBPServer", "build_dsbp"]

_HEADER = 5             # scalars before a sparse row's indices and values in `update` and `row`


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
        return KernelData(np.array([0, nnz], np.int64), body[:nnz].astype(CSR_INDEX), body[nnz:2 * nnz].copy(),
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
    passes: int = 0              # this iteration's Newton passes
    trials: int = 0              # trial broadcasts, in all
    picks: int = 0               # pick messages, in all (one with every trial sent from a count)
    row_scalars: int = 0         # scalars of the sampled rows (update and row messages), in all


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
            self._trial(st, out, 0.0, None)
            return st, out
        counts, sums, totals = inbox["stats"].rows().T.tolist()   # one row per client, in client order
        if "row" in inbox:                                # the speculative pick's answer (kept or discarded)
            st.row_scalars += inbox["row"].scalars_per_message
        k = int(sum(counts))
        s = sum(sums)                                     # summed in client order, whatever the grouping
        st.passes += 1
        if st.count < 0 and k == 0:                       # below every response: from (V + sum c) / n
            self._trial(st, out, (self.volume + sum(totals)) / st.n_total, None)
            st.passes += 1
        elif st.count >= 0 and k == st.count:             # the covered set stopped changing: the level, and the
            st.level = st.tau                             # pick sent with this trial was the right one
            self._update(st, out, inbox["row"].row(0))
        else:
            if st.passes >= NEWTON_MAX_PASSES:
                raise ProtocolError(f"distributed SBP: the water level did not settle in {NEWTON_MAX_PASSES} "
                                    "Newton passes (rounding); single-machine SBP falls back to selection here")
            st.count = k
            self._trial(st, out, (self.volume + s) / k, counts)
        return st, out

    def _trial(self, st: _Server, out: Outbox, tau: float, counts) -> None:
        """Broadcast the trial level; with the counts at the last level, also the pick that is right if the trial
        confirms the covered set (same count), so that a settled level needs no extra round trip."""
        st.tau = tau
        st.trials += 1
        out.send(MessageBatch.broadcast("trial", 0, st.clients, np.array([tau])))
        if counts is None:
            return
        k = int(sum(counts))
        u = counter_uniform(st.key, st.t + 1)
        local = min(int(u * k), k - 1)                    # the global rank, then the rank within its owner
        m = 0
        while local >= counts[m]:
            local -= int(counts[m])
            m += 1
        st.picks += 1
        out.send(MessageBatch.single("pick", 0, int(st.clients[m]), np.array([float(local)])))

    def _update(self, st: _Server, out: Outbox, p: np.ndarray) -> None:
        y_i, c_i, k_ii = float(p[0]), float(p[1]), float(p[2])
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

    def observe(self, st: _Server):
        return {"t": st.t, "r2": st.r2, "level": st.level, "trials": st.trials, "picks": st.picks,
                "row_scalars": st.row_scalars,
                "clients": int(st.clients.shape[0])}


@dataclass
class _Clients:
    node_ids: np.ndarray
    R: Responses                 # the group's clients' points, concatenated (averaged, with their test shares)
    lo: np.ndarray               # member m holds points lo[m]..lo[m + 1] of R (and tests tlo[m]..tlo[m + 1])
    tlo: np.ndarray
    metered: np.ndarray          # member m's kernel evaluations handed to the meter so far (R.evaluations[m] counts)
    pending: int = -1            # the index (in R) a member was asked to sample, until the update arrives
    last_tau: float = 0.0        # the level the last stats were taken at (the covered set is c < last_tau)


class SBPClient(NodeProgram):
    """The clients of a group, stepped together: one `Responses` over their points, each member a range of it, so
    a step is one compiled call over the group (the per-point arithmetic is a member's own; any grouping gives the
    same per-node results)."""

    role = "client"

    def __init__(self, params):
        self.params = params

    def init(self, node_ids, node_data, seed):
        stack = sp.vstack if sp.issparse(node_data[0]["X"]) else np.vstack
        X = stack([d["X"] for d in node_data])
        sizes = [d["y"].shape[0] for d in node_data]
        test = None
        tsizes = [0] * len(node_data)
        if node_data[0]["X_test"] is not None:
            test = kernel_data(stack([d["X_test"] for d in node_data]))
            tsizes = [d["X_test"].shape[0] for d in node_data]
        lo = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        R = responses(kernel_data(X), self.params, np.concatenate([d["y"] for d in node_data]), test, averaged=True,
                      members=lo)
        return _Clients(frozen_ids(node_ids), R, lo, np.concatenate([[0], np.cumsum(tsizes)]).astype(np.int64),
                        np.zeros(len(node_data), np.int64))

    def step(self, st: _Clients, inbox, round_):
        out = Outbox()
        tau = None
        R = st.R
        if "update" in inbox:
            p = inbox["update"].row(0)
            q = _decode_row(p, 4, R.data)
            eta, y_i, shrink, tau = float(p[0]), float(p[1]), float(p[2]), float(p[3])
            apply_row(R, q, 0, y_i, st.pending, eta, shrink)           # n/k kernel evaluations per client
            st.pending = -1
        if np.any(R.evaluations != st.metered):          # each member's own counter (`numerics.kernels`)
            out.signals = {"counts": {"kernel_evaluations": R.evaluations - st.metered}}
            st.metered = R.evaluations.copy()
        if "trial" in inbox:
            tau = float(inbox["trial"].row(0)[0])
            st.pending = -1                               # a pick rides with every trial: only the last one counts
        if tau is not None:
            rows = np.empty((st.lo.shape[0] - 1, 3))
            _stats_members(R.c, st.lo, tau, rows)
            out.send(MessageBatch.gather("stats", st.node_ids, 0, rows))
            st.last_tau = tau
        if "pick" in inbox:
            b = inbox["pick"]
            m = int(np.flatnonzero(st.node_ids == b.dst[0])[0])
            lo, hi = int(st.lo[m]), int(st.lo[m + 1])
            # a pick rides with each trial, computed from the last level's counts; when the trial moves the
            # covered set it is discarded by the server, and may point past this set: any row answers it then
            i = lo + max(nth_below(R.c[lo:hi], st.last_tau, int(b.row(0)[0])), 0)
            st.pending = i
            head = (R.y[i], R.c[i], R.kdiag[i])
            out.send(MessageBatch.single("row", int(b.dst[0]), 0, _encode_row(R.data, i, head)))
        return st, out

    def observe(self, st: _Clients):
        R = st.R
        coef, total = coef_now(R), coef_total(R)
        tests = np.diff(st.tlo)
        out = []
        for m in range(st.lo.shape[0] - 1):
            lo, hi, tlo, thi = st.lo[m], st.lo[m + 1], st.tlo[m], st.tlo[m + 1]
            share = tests[m] / max(int(tests.sum()), 1)
            out.append({"coef": coef[lo:hi], "coef_total": total[lo:hi], "c": R.c[lo:hi].copy(),
                        "c_sum": R.c_sum[lo:hi].copy(), "test_sum": R.test_sum[tlo:thi].copy(),
                        "test_evaluations": round(share * int(R.test_evaluations[0]))})
        return out


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _stats_members(c, lo, tau, rows):
    """Each member's stats at the trial level tau over its range of c: #{c < tau}, sum{c < tau}, sum c (one
    branch-free pass; sums vectorised as in `water.count_below`)."""
    for m in range(lo.shape[0] - 1):
        part = c[lo[m]:lo[m + 1]]                 # a slice, so that the loop vectorises
        k = 0
        below = 0.0
        total = 0.0
        for j in range(part.shape[0]):
            x = part[j]
            b = x < tau
            k += b
            below += x if b else 0.0
            total += x
        rows[m, 0] = k
        rows[m, 1] = below
        rows[m, 2] = total


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
        test = kp.test_matrix()[test_parts[m]] if test_parts is not None else None
        node_data.append({"X": ds.X[part], "y": kp.y[part], "X_test": test})
    eta0 = 1.0 / math.sqrt(float(_diagonal_max(kp.data, kp)))
    budget = kp.iterations
    roles = [RoleSpec("server", SBPServer(kp.n * nu, eta0, kp.n, budget), np.array([0], np.int64),
                      [{"clients": layout.clients}]),
             RoleSpec("client", SBPClient(kp.kernel), layout.clients, node_data)]
    ev = _Evaluation(kp, order, np.concatenate(test_parts) if test_parts is not None else None)
    settle = settle_rule(params)

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
        return settled_row(settle, {
            "iteration": server["t"], "epochs": server["t"] / kp.n, "level": float(level),
            "newton_trials": server["trials"], "evaluator_kernel_evaluations": sum(s["test_evaluations"] for s in shards),
            **model_metrics(ev, coef, c, test, 0.0, divide, ref)})

    def declared(obs):
        server, _ = assemble(obs)
        t, trials = server["t"], server["trials"]
        return k * trials + 3 * k * (trials + t) + server["picks"] + server["row_scalars"]

    def model(obs):
        server, shards = assemble(obs)
        T = max(server["t"], 1)
        coef = np.zeros(kp.n)
        coef[order] = np.concatenate([s["coef_total"] for s in shards]) / T
        c = np.concatenate([s["c_sum"] for s in shards]) / T
        level, _ = water_level_sorted(c, kp.n * nu)
        return {"dual_coef": coef / (level if level > 0 else 1.0), "intercept": 0.0, "level": float(level)}

    info = {**kp.info(), "clients": k, "nu": nu, "volume": kp.n * nu,
            "rounds_per_iteration": "2 + 2 R (R: Newton trials of the water level)",
            "scalars_per_iteration": "k (1 + 3) R + 3 k + R (1 + 5 + 2 nnz) + k (5 + 2 nnz(x_i)) (sparse; dense: "
                                     "d values)"}
    return Deployment(roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, model=model, info=info)


def _diagonal_max(data: KernelData, kp: KernelProblem) -> float:
    from ...numerics.kernels import kernel_diagonal

    return float(kernel_diagonal(data, kp.kernel, np.zeros(1, np.int64)).max()) if data.sqnorm.shape[0] else 0.0
