"""Saddle-DSVC (paper 000, Algorithms 3-4): one server and k clients as node programs.

Messages (every scalar counted; a broadcast counts once per recipient; the index i* is one scalar):
  setup   (Algorithm 3, once)  client -> server "stats" [n1_c, n2_c, max|x|_c, max|HDx|_c]   4k
                               server -> client "setup" [n1, n2, s, q]                         4k
  round 1 server -> client "coord" [i*]                 k     client -> server "delta" [d+_c, d-_c]   2k
  round 2 server -> client "delta_sum" [S.d+, S.d-]    2k     client -> server "z" [Z+_c, Z-_c]       2k
  round 3 server -> client "z_sum" [S.Z+, S.Z-]        2k
  round 4 (nu only, repeated P times): client -> server "cap" [s+_c, s-_c, O+_c, O-_c]   4k each time;
          server -> client "cap_sum" [S.s+, S.s-, S.O+, S.O-] 4k, except after the last report (sums zero)
  with projection = "newton" instead, round 2's "z" is "z_guess" [Z, capped count, mass below and row i* times
          the mass below a predicted threshold, per class] 8k, round 3's "z_sum" is "z_scale" [S.Z+, S.Z-, c0+,
          c0-] 4k, then P ~ 1 times: client -> server "mass" [capped count, mass below, largest weight below and
          smallest at or above the threshold, row i*(t+1) times the mass below, per class] 10k; server -> client
          "scale" [c+, c-, final, the four trends of the next guess] 7k

After set-up every round is a compiled step of `protocol` (the same code from Python and in the compiled loop).
"""
from __future__ import annotations

import math

import numpy as np

from ...comm.message import Inbox, MessageBatch, Outbox, frozen_ids
from ...numerics.hadamard import next_power_of_two
from ...program import NodeProgram, SyncKernel, kernel_step
from . import protocol as K
from .preprocess import (CoordinateStream, Rotation, SaddleConstants, _q_value, _row_norms,
                         saddle_constants)

CAP_TOLERANCE = K.CAP_TOLERANCE
MAX_CAP_PASSES = 10_000


def dsvc_scalars_per_iteration(k: int, nu_mode: bool, cap_reports: int = 1) -> int:
    """Scalars one Saddle-DSVC iteration sends: 9k (hard margin), plus 4k(2P - 1) with P Rule 3 reports."""
    return 9 * k + (4 * k * (2 * cap_reports - 1) if nu_mode else 0)


def dsvc_scalars(k: int, iterations: int, reports: int, nu_mode: bool, projection: str = "rule3") -> int:
    """Scalars of `iterations` Saddle-DSVC iterations with `reports` projection reports in all (after set-up):
    9k each, plus for the nu-SVM per report 4k ("cap") and 4k more ("cap_sum") except the last of an iteration
    (Rule 3), or with Newton 6k more on "z_guess" than on "z" and 2k more on "z_scale" than on "z_sum", and
    10k ("mass") and 7k ("scale") per report."""
    total = 9 * k * iterations
    if nu_mode:
        total += 4 * k * (2 * reports - iterations) if projection == "rule3" else 8 * k * iterations + 17 * k * reports
    return total


def dsvc_setup_scalars(k: int) -> int:
    return 8 * k


def dsvc_bound(k: int, d: int, eps: float) -> dict:
    """Theorem 8 upper bound k(d + sqrt(d/eps)) and the Omega(k min(d, 1/eps)) lower bound (Theorem 9), in
    scalars without their constants and logarithms."""
    return {"upper": k * (d + math.sqrt(d / eps)), "lower": k * min(d, 1.0 / eps)}


class _CoordinateWindow:
    """The shared coordinate stream as the compiled steps read it: a buffer and a position (`pos[0]`), refilled
    from the stream in Python whenever a step reports it running low (a pause)."""

    def __init__(self, d_pad: int, seed: int):
        self.stream = CoordinateStream(d_pad, seed)
        self.pos = np.zeros(1, dtype=np.int64)
        self.buf = np.zeros(0, dtype=np.int64)

    def refill(self) -> np.ndarray:
        p = int(self.pos[0])
        if self.buf.shape[0] - p < 4 * K.COORD_LOW_WATER:
            self.buf = np.concatenate([self.buf[p:], self.stream.take(CoordinateStream.BLOCK)])
            self.pos[0] = 0
        return self.buf


class _ServerState:
    """The server's state; `arrays()` names it for the compiled step (`protocol.ServerArrays`)."""

    def __init__(self, clients: np.ndarray, d_pad: int, seed: int, me: int, cap: float):
        self.clients = clients
        self.me = me
        self.cap = float(cap)
        self.iteration = np.zeros(1, dtype=np.int64)
        self.reports = np.zeros(1, dtype=np.int64)
        self.passes = np.zeros(1, dtype=np.int64)
        self.phase = np.full(1, K.PHASE_SETUP, dtype=np.int64)
        self.z = np.zeros(2)
        self.c = np.ones(2)
        self.trend = np.zeros(4)
        self.sums = np.zeros(K.SUMS_WIDTH)
        self.coords = _CoordinateWindow(d_pad, seed)

    def arrays(self) -> K.ServerArrays:
        return K.ServerArrays(
            clients=self.clients, coords=self.coords.refill(), me=self.me, nu=self.cap < math.inf,
            max_passes=MAX_CAP_PASSES, cap=self.cap, iteration=self.iteration, reports=self.reports,
            passes=self.passes, phase=self.phase, pos=self.coords.pos, z=self.z, c=self.c, trend=self.trend,
            sums=self.sums)


class SaddleServer(NodeProgram):
    """The server of Algorithm 4: draws i*, sums the clients' scalars and broadcasts the sums.

    After set-up (Algorithm 3, here in Python) every round is `protocol.dsvc_server_step`, run from
    Python by `kernel_step` or by the compiled loop."""

    role = "server"

    def __init__(self, d: int, n: int, eps: float, beta: float, q, cap: float, projection: str = "rule3"):
        self.d_pad = next_power_of_two(d)
        self.n = n
        self.eps = eps
        self.beta = beta
        self.q = q
        self.cap = cap
        self.newton = projection == "newton"

    def init(self, node_ids, node_data, seed):
        clients = frozen_ids(node_data[0]["clients"])
        return _ServerState(clients, self.d_pad, seed, int(node_ids[0]), self.cap)

    def kernel(self, st: _ServerState) -> SyncKernel | None:
        if st.phase[0] == K.PHASE_SETUP:
            return None
        return SyncKernel(st.arrays(), K.dsvc_server_step, K.DSVC_TAGS, K.DSVC_WIDTHS, max_out=st.clients.shape[0])

    def step(self, st: _ServerState, inbox, round_):
        if "stats" not in inbox:
            return st, kernel_step(self.kernel(st), inbox, round_)
        out = Outbox()                                        # Algorithm 3: global n1, n2, scale and q
        rows = np.asarray(inbox["stats"].payload)
        n1, n2 = rows[:, 0].sum(), rows[:, 1].sum()
        scale = rows[:, 2].max()
        q = _q_value(self.q, self.d_pad, int(n1 + n2), rows[:, 3].max() / scale)
        out.send(MessageBatch.broadcast("setup", 0, st.clients, np.array([n1, n2, scale, q])))
        buf = st.coords.refill()
        i = buf[st.coords.pos[0]]
        st.coords.pos[0] += 1
        out.send(MessageBatch.broadcast("coord", 0, st.clients, np.array([float(i)])))
        st.phase[0] = K.PHASE_DELTA
        return st, out

    def observe(self, st):
        return {"iteration": int(st.iteration[0]), "cap_reports": int(st.reports[0])}


class _ClientState:
    """Struct of arrays for a group of clients: their points in segments [c0 +1, c0 -1, c1 +1, ...]."""

    def __init__(self, node_ids, S, seg_lo, seg_hi, seg_class, index, stats, server: int, seed: int, newton: bool):
        self.node_ids = frozen_ids(node_ids)
        self.S = S
        self.seg_lo, self.seg_hi, self.seg_class = seg_lo, seg_hi, seg_class
        self.index = index
        self.stats = stats
        self.const: SaddleConstants | None = None
        self.cap = math.inf
        m = S.shape[1]
        self.w = np.zeros(S.shape[0])
        self.wnorm2 = np.zeros(1)
        self.u = np.zeros(m)
        self.Lr = np.zeros(m)
        self.pr = np.zeros(m)
        self.p_prev = np.zeros(m)
        self.mult = np.ones(2)
        self.mult_capped = np.zeros(2)   # multiplier at the last Rule 3 capping (0: nothing capped yet)
        self.off = np.zeros(2)
        self.shift = np.zeros(2)
        self.started = False
        self.acc_new = np.zeros(seg_lo.shape[0])     # per segment: <S_i*(t+1), p[t+1]>, prepared in rounds 2-4
        self.acc_old = np.zeros(seg_lo.shape[0])     # per segment: <S_i*(t+1), p[t]>
        self.acc_after = np.zeros(seg_lo.shape[0])   # hard margin, per segment: <S_i*(t+2), p[t+1]>
        k = seg_lo.shape[0] // 2
        self.rows2 = np.zeros((k, 2))                   # reply buffers
        self.rows4 = np.zeros((k, 4))
        self.rows6 = np.zeros((k, 10))
        self.server = server
        self.newton = newton
        self.istar = np.full(1, -1, dtype=np.int64)
        self.i_next = np.zeros(1, dtype=np.int64)
        self.first = np.ones(1, dtype=np.int64)
        self.primed = np.zeros(1, dtype=np.int64)
        self.err = np.zeros(2, dtype=np.int64)
        self.z = np.zeros(2)
        self.c = np.ones(2)
        self.lognorm = np.zeros(2)
        self.trend = np.zeros(4)
        self.dw_prev = np.zeros(1)
        # the shared coordinate stream (Algorithm 3's shared seed): the clients know i*(t+1) in advance
        self.coords = _CoordinateWindow(S.shape[0], seed)

    def arrays(self) -> K.ClientArrays:
        """The state named for the compiled step (after set-up: the constants are known)."""
        c = self.const
        return K.ClientArrays(
            S=self.S, seg_lo=self.seg_lo, seg_hi=self.seg_hi, seg_class=self.seg_class, ids=self.node_ids,
            coords=self.coords.refill(), server=self.server, newton=self.newton, sigma=c.sigma, kappa=c.kappa,
            gamma=c.gamma, theta=c.theta, cap=self.cap, logcap=math.log(self.cap) if self.cap < math.inf else math.inf,
            w=self.w, wnorm2=self.wnorm2, u=self.u, Lr=self.Lr, pr=self.pr, p_prev=self.p_prev, mult=self.mult,
            mult_capped=self.mult_capped, off=self.off, shift=self.shift, acc_new=self.acc_new, acc_old=self.acc_old,
            acc_after=self.acc_after, rows2=self.rows2, rows4=self.rows4, rows6=self.rows6, pos=self.coords.pos,
            istar=self.istar, i_next=self.i_next, first=self.first, primed=self.primed, err=self.err, z=self.z,
            c=self.c, lognorm=self.lognorm, trend=self.trend, dw_prev=self.dw_prev)


class SaddleClient(NodeProgram):
    """A client of Algorithm 4 (and its preprocessing, Algorithm 3), run over a group of clients at once.

    The clients share the server's seed (Algorithm 3 shares W and D that way), so they know the coordinate
    stream: round 2's pass over the shard also accumulates the sums that round 1 of the next iteration needs,
    and when i* arrives the reply is ready. The messages are exactly Algorithm 4's; a coordinate that differs
    from the shared stream is a protocol error. After set-up every round is `protocol.dsvc_client_step`.
    """

    role = "client"
    initiator = True   # sends its statistics in round 0 (Algorithm 3)

    def __init__(self, d: int, eps: float, beta: float, cap: float, server: int = 0, projection: str = "rule3"):
        self.d = d
        self.eps = eps
        self.beta = beta
        self.cap = cap
        self.server = server
        self.newton = projection == "newton"

    def init(self, node_ids, node_data, seed):
        rot = Rotation.from_seed(self.d, seed)                 # shared seed: every client has the same H D
        blocks, lo, hi, cls, index, stats = [], [], [], [], [], []
        start = 0
        for data in node_data:
            X, y, idx = data["X"], np.asarray(data["y"]), np.asarray(data["index"])
            pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y < 0)
            order = np.concatenate([pos, neg])
            Y = rot.rotate_rows(X, order) if order.size else np.zeros((0, rot.d_pad))
            norms = _row_norms(X) if order.size else np.zeros(1)
            stats.append([pos.size, neg.size, float(norms.max()) if norms.size else 0.0,
                          float(np.abs(Y).max()) if Y.size else 0.0])
            Y *= y[order, None]
            blocks.append(Y)
            index.append(idx[order])
            for c, count in ((0, pos.size), (1, neg.size)):
                lo.append(start)
                hi.append(start + count)
                cls.append(c)
                start += count
        S = np.ascontiguousarray(np.vstack(blocks).T) if blocks else np.zeros((rot.d_pad, 0))
        return _ClientState(node_ids, S, np.array(lo, np.int64), np.array(hi, np.int64), np.array(cls, np.int64),
                            np.concatenate(index) if index else np.zeros(0, np.int64), np.array(stats, float),
                            self.server, seed, self.newton)

    def _setup(self, st: _ClientState, row: np.ndarray) -> None:
        n1, n2, scale, q = float(row[0]), float(row[1]), float(row[2]), float(row[3])
        st.S /= scale
        n = int(n1 + n2)
        st.const = c = saddle_constants(st.S.shape[0], n, self.eps, self.beta, q)
        st.cap = self.cap
        counts = np.array([n1, n2])
        for s in range(st.seg_lo.shape[0]):                   # eta = 1/n1, xi = 1/n2 (global counts)
            sl = slice(st.seg_lo[s], st.seg_hi[s])
            st.Lr[sl] = -math.log(counts[st.seg_class[s]])
        st.pr[:] = np.exp(st.Lr)
        st.p_prev[:] = st.pr
        st.shift[:] = c.kappa * (-np.log(counts)) / (c.gamma + c.kappa) + np.log(counts)
        st.lognorm[:] = st.shift

    def kernel(self, st: _ClientState) -> SyncKernel | None:
        if st.const is None:
            return None
        return SyncKernel(st.arrays(), K.dsvc_client_step, K.DSVC_TAGS, K.DSVC_WIDTHS, max_out=st.node_ids.shape[0],
                          error=lambda: self._coordinate_error(st))

    @staticmethod
    def _coordinate_error(st: _ClientState) -> str:
        return (f"the server sent coordinate {st.err[1]} where the shared coordinate stream has {st.err[0]}")

    def step(self, st: _ClientState, inbox, round_):
        if not st.started:
            st.started = True
            out = Outbox()
            out.send(MessageBatch.gather("stats", st.node_ids, self.server, st.stats))
            return st, out
        if "setup" in inbox:
            self._setup(st, inbox["setup"].row(0))
            inbox = Inbox({t: b for t, b in inbox.items() if t != "setup"})
        return st, kernel_step(self.kernel(st), inbox, round_)

    def observe(self, st: _ClientState):
        p = np.empty(st.pr.shape[0])
        hard = st.cap == math.inf and st.primed[0]     # the hard margin keeps log-weights only
        for s in range(st.seg_lo.shape[0]):
            sl = slice(st.seg_lo[s], st.seg_hi[s])
            c = st.seg_class[s]
            p[sl] = np.exp(st.Lr[sl] - st.off[c]) if hard else np.minimum(st.cap, st.mult[c] * st.pr[sl])
        return {"w": st.w.copy(), "index": st.index, "p": p}
