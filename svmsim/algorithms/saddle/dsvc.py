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
  check   (beta = "auto", after every check_every iterations; `hull_check`) server -> client "check" [tau+, tau-,
          re-read u] 3k; client -> server "hull" [per class: count, min u, max u and a probe report at tau; |w| in
          the data's coordinates; S_c p_c] k(d + 17); then per probe: server -> client "probe" [tau+, tau-] 2k,
          client -> server "probe_stats" [a probe report per class] 10k; last: server -> client "resume" [beta,
          restarted] 2k with the next "coord"

After set-up every round is a compiled step of `protocol` (the same code from Python and in the compiled loop);
the rounds of a check run in Python (`SaddleServer._check`, `SaddleClient._report`).
"""
from __future__ import annotations

import math

import numpy as np

from ...core.metrics import relative_gap
from ...comm.message import Inbox, MessageBatch, Outbox, frozen_ids
from ...numerics.hadamard import next_power_of_two
from ...program import NodeProgram, SyncKernel, kernel_step
from . import protocol as K
from .hull_check import FIRST_WIDTH, PROBE_WIDTH, CappedMinSearch, combine_probes, first_report, probe_report
from .preprocess import (U_REFRESH_EVERY, CoordinateStream, Rotation, SaddleConstants, q_value, row_norms,
                         saddle_constants)
from .restarts import StallWatch, lower_beta

CAP_TOLERANCE = K.CAP_TOLERANCE
MAX_CAP_PASSES = 10_000
#: beta = "auto": the relative gap a restart aims below (SaddleSVC's default tol, so both restart alike)
AIMED_GAP = 1e-3


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


def dsvc_check_scalars(k: int, d_pad: int, checks: int, probes: int) -> int:
    """Scalars of `checks` certificate checks (beta = "auto") with `probes` probes in all: per check 3k ("check"),
    k(d + 2 FIRST_WIDTH + 1) ("hull") and 2k ("resume"); per probe 2k ("probe") and 2 PROBE_WIDTH k ("probe_stats")."""
    return checks * k * (d_pad + 2 * FIRST_WIDTH + 6) + probes * k * (2 + 2 * PROBE_WIDTH)


def default_check_every(d_pad: int, n: int, eps: float, q: float) -> int:
    """SaddleSVC's default check interval: the paper's T at beta = 1, between 250 and 5000 iterations."""
    return max(250, min(saddle_constants(d_pad, n, eps, 1.0, q).iterations_estimate(), 5000))


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
        # beta = "auto" (set at set-up): the check interval, the run's beta and its constants' inputs, the check
        self.check_every = 0
        self.beta = math.nan
        self.n = self.q = self.scale = math.nan
        self.watch = StallWatch()
        self.restarts = self.checks = self.probes = 0
        self.checked = 0                       # the iteration of the last check
        self.since_refresh = 0                 # iterations since the clients last re-read u (U_REFRESH_EVERY)
        self.tau = np.zeros(2)                 # the thresholds probed, per class (the last answers between checks)
        self.searches: list[CappedMinSearch] = []
        self.upper = self.w_norm = math.nan

    def check_due(self) -> bool:
        it = int(self.iteration[0])
        return (self.check_every > 0 and self.phase[0] == K.PHASE_NEXT and it > 0 and it % self.check_every == 0
                and self.checked != it)

    def arrays(self) -> K.ServerArrays:
        return K.ServerArrays(
            clients=self.clients, coords=self.coords.refill(), me=self.me, nu=self.cap < math.inf,
            max_passes=MAX_CAP_PASSES, check_every=self.check_every, cap=self.cap, iteration=self.iteration,
            reports=self.reports, passes=self.passes, phase=self.phase, pos=self.coords.pos, z=self.z, c=self.c,
            trend=self.trend, sums=self.sums)

    def next_coordinate(self) -> float:
        """Line 3 from Python: the next i* of the shared stream."""
        buf = self.coords.refill()
        i = buf[self.coords.pos[0]]
        self.coords.pos[0] += 1
        return float(i)


class SaddleServer(NodeProgram):
    """The server of Algorithm 4: draws i*, sums the clients' scalars and broadcasts the sums.

    After set-up (Algorithm 3, here in Python) every round is `protocol.dsvc_server_step`, run from
    Python by `kernel_step` or by the compiled loop, except the rounds of a certificate check (beta = "auto"),
    which run in Python: the server certifies the iterate as the single machine does (`hull_check`), feeds the
    gap to the same `restarts.StallWatch` and restarts with `restarts.lower_beta`'s beta when it stalls."""

    role = "server"

    def __init__(self, d: int, n: int, eps: float, beta, q, cap: float, projection: str = "rule3",
                 check_every: int | None = None):
        self.d_pad = next_power_of_two(d)
        self.n = n
        self.eps = eps
        self.beta = beta
        self.q = q
        self.cap = cap
        self.newton = projection == "newton"
        self.auto = beta == "auto"
        self.check_every = check_every

    def init(self, node_ids, node_data, seed):
        clients = frozen_ids(node_data[0]["clients"])
        return _ServerState(clients, self.d_pad, seed, int(node_ids[0]), self.cap)

    def kernel(self, st: _ServerState) -> SyncKernel | None:
        if st.phase[0] in (K.PHASE_SETUP, K.PHASE_CHECK) or st.check_due():
            return None
        return SyncKernel(st.arrays(), K.dsvc_server_step, K.DSVC_TAGS, K.DSVC_WIDTHS, max_out=st.clients.shape[0])

    def step(self, st: _ServerState, inbox, round_):
        if "stats" in inbox:
            return st, self._setup(st, inbox["stats"])
        if "hull" in inbox or "probe_stats" in inbox or st.check_due():
            return st, self._check(st, inbox)
        return st, kernel_step(self.kernel(st), inbox, round_)

    def _setup(self, st: _ServerState, stats: MessageBatch) -> Outbox:
        out = Outbox()                                        # Algorithm 3: global n1, n2, scale and q
        rows = np.asarray(stats.payload)
        n1, n2 = rows[:, 0].sum(), rows[:, 1].sum()
        scale = rows[:, 2].max()
        q = q_value(self.q, self.d_pad, int(n1 + n2), rows[:, 3].max() / scale)
        out.send(MessageBatch.broadcast("setup", 0, st.clients, np.array([n1, n2, scale, q])))
        out.send(MessageBatch.broadcast("coord", 0, st.clients, np.array([st.next_coordinate()])))
        st.phase[0] = K.PHASE_DELTA
        st.n, st.q, st.scale = int(n1 + n2), q, scale
        st.beta = 1.0 if self.auto else float(self.beta)   # "auto" starts at the paper's scale, as SaddleSVC
        if self.auto:
            st.check_every = int(self.check_every or default_check_every(self.d_pad, st.n, self.eps, q))
        return out

    # -- beta = "auto": the certificate check (hull_check) and the restart (restarts) -------------------------
    def _check(self, st: _ServerState, inbox) -> Outbox:
        out = Outbox()
        if "hull" in inbox:                                   # the first reports: U, |w| and a probe per class
            rows = np.asarray(inbox["hull"].payload)
            first = 2 * FIRST_WIDTH
            st.upper = st.scale * float(np.linalg.norm(rows[:, first + 1:].sum(axis=0)))
            st.w_norm = float(rows[0, first])
            st.searches = []
            for c in range(2):
                cols = rows[:, c * FIRST_WIDTH:(c + 1) * FIRST_WIDTH]
                search = CappedMinSearch(self.cap, int(cols[:, 0].sum()), float(cols[:, 1].min()),
                                         float(cols[:, 2].max()))
                search.update(st.tau[c], combine_probes(cols[:, 3:]))
                st.searches.append(search)
        elif "probe_stats" in inbox:
            rows = np.asarray(inbox["probe_stats"].payload)
            st.probes += 1
            for c, search in enumerate(st.searches):
                search.update(st.tau[c], combine_probes(rows[:, c * PROBE_WIDTH:(c + 1) * PROBE_WIDTH]))
        else:                                                 # an iteration that ends with a check: ask
            st.phase[0] = K.PHASE_CHECK
            st.since_refresh += int(st.iteration[0]) - st.checked
            st.checked = int(st.iteration[0])
            refresh = st.since_refresh >= U_REFRESH_EVERY         # as SaddleSVC, before its certificate
            if refresh:
                st.since_refresh = 0
            out.send(MessageBatch.broadcast("check", st.me, st.clients, np.array([*st.tau, float(refresh)])))
            return out
        if not all(search.done for search in st.searches):
            st.tau[:] = [search.tau for search in st.searches]
            out.send(MessageBatch.broadcast("probe", st.me, st.clients, st.tau.copy()))
            return out
        restarted = self._decide(st)
        out.send(MessageBatch.broadcast("resume", st.me, st.clients, np.array([st.beta, float(restarted)])))
        out.send(MessageBatch.broadcast("coord", st.me, st.clients, np.array([st.next_coordinate()])))
        st.phase[0] = K.PHASE_DELTA
        return out

    def _decide(self, st: _ServerState) -> bool:
        """The certificate as SaddleSVC's (`estimator.SaddleSVC._certificate`) and beta = "auto"'s restart."""
        lo_p, lo_q = (search.value for search in st.searches)
        gap_u = lo_p + lo_q
        lower = st.scale * max(gap_u, 0.0) / st.w_norm if st.w_norm > 0 else 0.0
        upper = st.upper
        info = {"hull_distance": upper, "hull_lower": lower,
                "rel_gap": relative_gap(upper, lower)}
        st.checks += 1
        st.watch.add(st.checked, info["rel_gap"])
        patience = 2 * saddle_constants(self.d_pad, st.n, self.eps, st.beta, st.q).iterations_estimate()
        new_beta = lower_beta(st.beta, info, st.scale, self.eps, AIMED_GAP) if st.watch.stalled(patience) else None
        st.tau[:] = [search.tau for search in st.searches]    # the next check's first probe
        if new_beta is None:
            return False
        st.beta = float(new_beta)
        st.watch.restart(st.checked)
        st.restarts += 1
        return True

    def observe(self, st):
        return {"iteration": int(st.iteration[0]), "cap_reports": int(st.reports[0]), "beta": st.beta,
                "restarts": st.restarts, "checks": st.checks, "probes": st.probes}


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
        self.momentum = np.ones(1, dtype=np.int64)
        self.rotation: Rotation | None = None
        self.n = 0
        self.q = math.nan
        self.in_check = False            # between a "check" and its "resume" every round runs in Python
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
            c=self.c, lognorm=self.lognorm, trend=self.trend, dw_prev=self.dw_prev, momentum=self.momentum)

    def weights(self) -> np.ndarray:
        """The weights p (eta, xi) of every point, in segment order."""
        p = np.empty(self.pr.shape[0])
        hard = self.cap == math.inf and self.primed[0]     # the hard margin keeps log-weights only
        for s in range(self.seg_lo.shape[0]):
            sl = slice(self.seg_lo[s], self.seg_hi[s])
            c = self.seg_class[s]
            p[sl] = np.exp(self.Lr[sl] - self.off[c]) if hard else np.minimum(self.cap, self.mult[c] * self.pr[sl])
        return p


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
            norms = row_norms(X) if order.size else np.zeros(1)
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
        st = _ClientState(node_ids, S, np.array(lo, np.int64), np.array(hi, np.int64), np.array(cls, np.int64),
                          np.concatenate(index) if index else np.zeros(0, np.int64), np.array(stats, float),
                          self.server, seed, self.newton)
        st.rotation = rot
        return st

    def _setup(self, st: _ClientState, row: np.ndarray) -> None:
        n1, n2, scale, q = float(row[0]), float(row[1]), float(row[2]), float(row[3])
        st.S /= scale
        n = int(n1 + n2)
        st.n, st.q = n, q
        beta = 1.0 if self.beta == "auto" else float(self.beta)    # "auto" starts at 1, as the server
        st.const = c = saddle_constants(st.S.shape[0], n, self.eps, beta, q)
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
        if st.const is None or st.in_check:
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
        if "check" in inbox or "probe" in inbox:
            return st, self._report(st, inbox)
        if "resume" in inbox:
            self._resume(st, inbox["resume"].row(0))
            inbox = Inbox({t: b for t, b in inbox.items() if t != "resume"})
        return st, kernel_step(self.kernel(st), inbox, round_)

    # -- beta = "auto": a certificate check (`hull_check`) ---------------------------------------------------
    def _report(self, st: _ClientState, inbox) -> Outbox:
        """The clients' reports of a check: the first ("hull": per class count, extremes and a probe; |w| in the
        data's coordinates; S_c p_c; after re-reading u when the server says so) or a probe's ("probe_stats"), one
        row per client."""
        first = "check" in inbox
        tau = inbox["check" if first else "probe"].row(0)
        if first and tau[2] != 0.0:
            st.u[:] = st.w @ st.S                             # re-read u = S^T w (U_REFRESH_EVERY), as SaddleSVC
        k = st.node_ids.shape[0]
        width = FIRST_WIDTH if first else PROBE_WIDTH
        rows = np.zeros((k, 2 * width + (1 + st.S.shape[0] if first else 0)))
        report = first_report if first else probe_report
        for s in range(st.seg_lo.shape[0]):                  # per client and class: the values u_j = <w, S_j>
            c = st.seg_class[s]
            report(st.u[st.seg_lo[s]:st.seg_hi[s]], float(tau[c]), rows[s // 2, c * width:(c + 1) * width])
        out = Outbox()
        if not first:
            out.send(MessageBatch.gather("probe_stats", st.node_ids, self.server, rows))
            return out
        st.in_check = True
        rows[:, 2 * width] = np.linalg.norm(st.rotation.to_original(st.w))
        p = st.weights()
        for j in range(k):                                    # S_c p_c over the client's two segments
            lo, hi = st.seg_lo[2 * j], st.seg_hi[2 * j + 1]
            rows[j, 2 * width + 1:] = st.S[:, lo:hi] @ p[lo:hi]
        out.send(MessageBatch.gather("hull", st.node_ids, self.server, rows))
        return out

    def _resume(self, st: _ClientState, row: np.ndarray) -> None:
        """The check's end: with a restart, the new beta's constants and one delta without extrapolation."""
        st.in_check = False
        if row[1] != 0.0:
            st.const = saddle_constants(st.S.shape[0], st.n, self.eps, float(row[0]), st.q)
            st.momentum[0] = 0

    def observe(self, st: _ClientState):
        return {"w": st.w.copy(), "index": st.index, "p": st.weights()}
