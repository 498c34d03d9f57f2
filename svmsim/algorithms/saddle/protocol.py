"""Saddle-DSVC round steps (paper 000, Algorithm 4): the compiled form of `SaddleServer.step` /
`SaddleClient.step` after set-up (a `SyncKernel`; the Python steps call these too, so both paths are one code).
Tags index DSVC_TAGS; DSVC_WIDTHS gives each tag's scalars per message.

A step reads its state by name: `ServerArrays` / `ClientArrays` are named tuples (numba passes them like plain
tuples) of the arrays that the Python state shares, so `observe` sees what a step wrote. A scalar that a step
changes is a one-element array (`st.iteration[0]`); one fixed at set-up is a plain field (`st.theta`).

Every sum the server broadcasts is a star reduce of `comm.collectives`: the clients' rows go up (`gather_to`),
the server adds them by sender from zero (`star_reduce`) and sends the sums down (`broadcast_from`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from ...comm.collectives import broadcast_from, gather_to, star_reduce
from ...core.jit import inner
from .mirror import clients_delta
from .rounds import (client_cap_round, client_delta_rows, client_mirror_round, client_mirror_round_newton,
                     client_normalise, clients_threshold_report)

DSVC_TAGS = ("stats", "setup", "coord", "delta", "delta_sum", "z", "z_sum", "cap", "cap_sum", "mass", "scale",
             "z_guess", "z_scale")
DSVC_WIDTHS = np.array([4, 4, 1, 2, 2, 2, 2, 4, 4, 10, 7, 8, 4], dtype=np.int64)
T_COORD, T_DELTA, T_DELTA_SUM, T_Z, T_Z_SUM, T_CAP, T_CAP_SUM, T_MASS, T_SCALE, T_Z_GUESS, T_Z_SCALE = range(2, 13)
_WAKE, _PAUSE, _ERROR = 1, 4, 8     # program.KERNEL_* flags

#: a coordinate buffer with fewer than this many entries left asks for a refill (pause)
COORD_LOW_WATER = 8
PHASE_SETUP, PHASE_DELTA, PHASE_NEXT, PHASE_CHECK = 0, 1, 2, 3
CAP_TOLERANCE = 1e-13   # Rule 3 "until the excess is zero", with floating-point slack (notes section 7.10)
#: the largest sums a round's reports carry (the "mass" rows)
SUMS_WIDTH = 10


class ServerArrays(NamedTuple):
    """The server's state as its compiled step reads it."""

    clients: np.ndarray      # the clients' node ids
    coords: np.ndarray       # the shared coordinate stream's buffer (read at `pos`)
    me: int                  # the server's node id
    nu: bool                 # nu-SVM (a projection follows the normalisation) or hard margin
    max_passes: int          # projection passes per iteration at most
    check_every: int         # beta = "auto": a certificate check after every check_every iterations (0: none)
    cap: float               # the weight cap nu
    iteration: np.ndarray    # [1] iterations completed
    reports: np.ndarray      # [1] projection reports received, in all
    passes: np.ndarray       # [1] projection passes in this iteration
    phase: np.ndarray        # [1] PHASE_*
    pos: np.ndarray          # [1] position in `coords`
    z: np.ndarray            # [2] Z per class (Newton projection)
    c: np.ndarray            # [2] the Newton multiplier c per class
    trend: np.ndarray        # [4] per class: means of row i*(t+1) and of row i*(t) over the uncapped weights
    sums: np.ndarray         # [SUMS_WIDTH] the sums of a round's reports (scratch, no allocation per round)


class ClientArrays(NamedTuple):
    """The state of a group of clients as their compiled step reads it; per segment s (pairs per client: +1
    points, -1 points) and per class k."""

    S: np.ndarray            # (d, m) signed rotated points, one column per point
    seg_lo: np.ndarray       # segment s is points [seg_lo[s], seg_hi[s])
    seg_hi: np.ndarray
    seg_class: np.ndarray    # the class k of segment s
    ids: np.ndarray          # the clients' node ids
    coords: np.ndarray       # the shared coordinate stream's buffer (read at `pos`)
    server: int              # the server's node id
    newton: bool             # projection by Newton steps (else Rule 3)
    sigma: float             # the constants of Algorithm 1 line 4
    kappa: float
    gamma: float
    theta: float
    cap: float               # the weight cap nu (inf: hard margin)
    logcap: float
    w: np.ndarray            # (d,) the iterate w (every client keeps the same copy)
    wnorm2: np.ndarray       # [1] |w|^2
    u: np.ndarray            # (m,) u_j = <w, S_j>
    Lr: np.ndarray           # (m,) raw log-weights
    pr: np.ndarray           # (m,) raw weights: p_j = min(cap, mult[k]*pr_j)
    p_prev: np.ndarray       # (m,) the weights of the first iteration's delta
    mult: np.ndarray         # [2] per class
    mult_capped: np.ndarray  # [2] multiplier at the last Rule 3 capping (0: nothing capped yet)
    off: np.ndarray          # [2] per class: log p_j = min(logcap, Lr_j - off[k])
    shift: np.ndarray        # [2] per class: the exp shift
    acc_new: np.ndarray      # per segment: <S_i*(t+1), p[t+1]>, prepared in rounds 2-4
    acc_old: np.ndarray      # per segment: <S_i*(t+1), p[t]>
    acc_after: np.ndarray    # hard margin, per segment: <S_i*(t+2), p[t+1]>
    rows2: np.ndarray        # reply buffers, one row per client
    rows4: np.ndarray
    rows6: np.ndarray
    pos: np.ndarray          # [1] position in `coords`
    istar: np.ndarray        # [1] i* of this iteration
    i_next: np.ndarray       # [1] i*(t+1)
    first: np.ndarray        # [1] 1 until the first delta is sent
    primed: np.ndarray       # [1] the hard margin's acc_after holds a previous pass's sums
    err: np.ndarray          # [2] the expected and the received i* of a protocol error
    z: np.ndarray            # [2] Z per class (Newton projection)
    c: np.ndarray            # [2] the Newton multiplier c per class
    lognorm: np.ndarray      # [2] log of the last normaliser per class
    trend: np.ndarray        # [4] the server's trends of the threshold guess
    dw_prev: np.ndarray      # [1] the last w step (the Newton guess)
    momentum: np.ndarray     # [1] 0: the next delta goes without extrapolation (a restart of beta = "auto")


@inner
def _check_due(st, completed):
    """_PAUSE after an iteration that ends with a certificate check (beta = "auto"; the check runs in Python)."""
    return _PAUSE if st.check_every > 0 and completed % st.check_every == 0 else 0


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def dsvc_server_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                     out_payload):
    """Algorithm 4, server side: lines 10 (delta sums), 19 (Z sums), 31-36 (Rule 3 sums) and line 3 (i*)."""
    me = st.me
    sums = st.sums
    n_out = 0
    completed = -1
    flags = 0
    first = in_tag[0] if n_in > 0 else -1
    if first == T_DELTA:                                            # line 10
        star_reduce(T_DELTA, me, in_tag, in_dst, in_payload, n_in, 2, sums)
        n_out = broadcast_from(T_DELTA_SUM, me, st.clients, sums, 2, out_tag, out_src, out_dst, out_payload, n_out)
    elif first == T_Z:                                              # line 19
        star_reduce(T_Z, me, in_tag, in_dst, in_payload, n_in, 2, sums)
        n_out = broadcast_from(T_Z_SUM, me, st.clients, sums, 2, out_tag, out_src, out_dst, out_payload, n_out)
        st.passes[0] = 0
        st.z[0] = sums[0]
        st.z[1] = sums[1]
        if not st.nu:
            st.iteration[0] += 1
            st.phase[0] = PHASE_NEXT
            completed = st.iteration[0]
            flags |= _WAKE | _check_due(st, completed)
    elif first == T_CAP:                                            # lines 31-36
        star_reduce(T_CAP, me, in_tag, in_dst, in_payload, n_in, 4, sums)
        st.reports[0] += 1
        st.passes[0] += 1
        if (sums[0] <= CAP_TOLERANCE and sums[1] <= CAP_TOLERANCE) or st.passes[0] >= st.max_passes:
            st.iteration[0] += 1
            st.phase[0] = PHASE_NEXT
            completed = st.iteration[0]
            flags |= _WAKE | _check_due(st, completed)
        else:
            n_out = broadcast_from(T_CAP_SUM, me, st.clients, sums, 4, out_tag, out_src, out_dst, out_payload, n_out)
    elif first == T_Z_GUESS:                                        # Newton: Z and the step at the guess
        star_reduce(T_Z_GUESS, me, in_tag, in_dst, in_payload, n_in, 8, sums)
        st.passes[0] = 0
        for c in range(2):
            z, n_big, below = sums[c], sums[2 + c], sums[4 + c]
            st.trend[2 * c + 1] = sums[6 + c] / below if below > 0.0 else 0.0   # mean of row i*(t)
            c0 = z * (1.0 - st.cap * n_big) / below if (n_big > 0.0 and below > 0.0) else 1.0
            st.z[c] = z
            st.c[c] = max(c0, 1.0)          # a tangent root: at or left of the answer (concavity)
        sums[2] = st.c[0]
        sums[3] = st.c[1]
        n_out = broadcast_from(T_Z_SCALE, me, st.clients, sums, 4, out_tag, out_src, out_dst, out_payload, n_out)
    elif first == T_MASS:                                           # warm-started Newton projection
        star_reduce(T_MASS, me, in_tag, in_dst, in_payload, n_in, 10, sums)
        st.reports[0] += 1
        st.passes[0] += 1
        final = True
        for c in range(2):
            under = 0.0                                             # the raw weights around the threshold,
            over = np.inf                                           # over all clients
            for r in range(n_in):
                if in_tag[r] == T_MASS:
                    under = max(under, in_payload[r, 4 + c])
                    over = min(over, in_payload[r, 6 + c])
            z, cur, n_big, below = st.z[c], st.c[c], sums[c], sums[2 + c]
            if n_big == 0.0:
                c_new = 1.0
            elif below > 0.0:
                c_new = max(z * (1.0 - st.cap * n_big) / below, cur)
            else:                                                   # everything capped: only at the answer
                c_new = cur
            # exact when no raw weight lies between the old and the new threshold (the capped set stays)
            th_new = st.cap * z / c_new
            if not (below <= 0.0 or (under < th_new if c_new >= cur else over >= th_new)):
                final = False
            st.c[c] = c_new
            st.trend[2 * c] = sums[8 + c] / below if below > 0.0 else 0.0     # mean of row i*(t+1)
        if st.passes[0] >= st.max_passes:
            final = True
        sums[0] = st.c[0]
        sums[1] = st.c[1]
        sums[2] = 1.0 if final else 0.0
        for j in range(4):                  # the trends of the next threshold guess (row i*(t+1), row i*(t))
            sums[3 + j] = st.trend[j]
        n_out = broadcast_from(T_SCALE, me, st.clients, sums, 7, out_tag, out_src, out_dst, out_payload, n_out)
        if final:
            st.iteration[0] += 1
            st.phase[0] = PHASE_NEXT
            completed = st.iteration[0]
            flags |= _WAKE | _check_due(st, completed)
    elif n_in == 0 and st.phase[0] == PHASE_NEXT:                 # woken: line 3, the next i*
        pos = st.pos[0]
        sums[0] = st.coords[pos]
        st.pos[0] = pos + 1
        n_out = broadcast_from(T_COORD, me, st.clients, sums, 1, out_tag, out_src, out_dst, out_payload, n_out)
        st.phase[0] = PHASE_DELTA
        if st.coords.shape[0] - st.pos[0] < COORD_LOW_WATER:
            flags |= _PAUSE
    return n_out, completed, flags


@inner
def _first_row(in_tag, n_in, tag):
    for r in range(n_in):
        if in_tag[r] == tag:
            return r
    return -1


@numba.njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def dsvc_client_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    """Algorithm 4, client side, for a group of clients: lines 5-6 (delta), 12-15 (w step and the mirror pass),
    20-21 (normalise) and 27-34 (Rule 3 reports)."""
    cap = st.cap
    n_out = 0
    flags = 0
    r = _first_row(in_tag, n_in, T_Z_SUM)
    if r >= 0:                                                      # lines 20-21, then the first Rule 3 report
        client_normalise(in_payload[r], st.mult, st.mult_capped, st.off, st.shift, st.acc_new, st.acc_after,
                         st.seg_class, not (cap < np.inf))
        if cap < np.inf:
            client_cap_round(st.S[st.i_next[0]], st.pr, st.seg_lo, st.seg_hi, st.seg_class, in_payload[r], False,
                             st.mult, st.mult_capped, st.off, cap, st.rows4, st.acc_new)
            n_out = gather_to(T_CAP, st.ids, st.server, st.rows4, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_CAP_SUM)
    if r >= 0:                                                      # lines 27-34
        client_cap_round(st.S[st.i_next[0]], st.pr, st.seg_lo, st.seg_hi, st.seg_class, in_payload[r], True,
                         st.mult, st.mult_capped, st.off, cap, st.rows4, st.acc_new)
        n_out = gather_to(T_CAP, st.ids, st.server, st.rows4, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_Z_SCALE)
    if r >= 0:                                                      # Newton: normalise, a pass at c0
        client_normalise(in_payload[r], st.mult, st.mult_capped, st.off, st.shift, st.acc_new, st.acc_after,
                         st.seg_class, False)
        for k in range(2):
            st.z[k] = in_payload[r, k]
            st.c[k] = in_payload[r, 2 + k]
            st.lognorm[k] = st.shift[k]
        clients_threshold_report(st.S[st.i_next[0]], st.pr, st.seg_lo, st.seg_hi, st.seg_class, st.z, st.c, cap,
                                 st.rows6, st.acc_new, st.acc_after)
        n_out = gather_to(T_MASS, st.ids, st.server, st.rows6, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_SCALE)
    if r >= 0:                                                      # the server's Newton step
        st.c[0] = in_payload[r, 0]
        st.c[1] = in_payload[r, 1]
        if in_payload[r, 2] != 0.0:                                 # final: p = min(cap, c*pr/Z)
            for j in range(4):
                st.trend[j] = in_payload[r, 3 + j]
            for k in range(2):
                st.mult[k] = st.c[k] / st.z[k]
                st.off[k] = st.shift[k] - math.log(st.c[k])
            for s in range(st.seg_lo.shape[0]):
                k = st.seg_class[s]
                st.acc_new[s] = cap * st.acc_new[s] + st.mult[k] * st.acc_after[s]
        else:
            clients_threshold_report(st.S[st.i_next[0]], st.pr, st.seg_lo, st.seg_hi, st.seg_class, st.z, st.c,
                                     cap, st.rows6, st.acc_new, st.acc_after)
            n_out = gather_to(T_MASS, st.ids, st.server, st.rows6, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_COORD)
    if r >= 0:                                                      # lines 5-6
        i = np.int64(in_payload[r, 0])
        pos = st.pos[0]
        if i != st.coords[pos]:
            st.err[0] = st.coords[pos]
            st.err[1] = i
            return 0, -1, _ERROR
        st.istar[0] = i
        st.i_next[0] = st.coords[pos + 1]
        st.pos[0] = pos + 1
        if st.coords.shape[0] - st.pos[0] < COORD_LOW_WATER:
            flags |= _PAUSE
        theta = st.theta if st.momentum[0] == 1 else 0.0         # a restart: delta = <S_i*, p[t+1]>
        st.momentum[0] = 1
        if st.first[0] == 1:                                        # iteration 0: eta[-1] = eta[0], no momentum
            seg = np.empty(st.seg_lo.shape[0])
            clients_delta(st.S[i], st.pr, st.p_prev, st.seg_lo, st.seg_hi, st.seg_class, st.mult, cap, theta, seg)
            st.first[0] = 0
            for c in range(st.rows2.shape[0]):
                st.rows2[c, 0] = seg[2 * c]
                st.rows2[c, 1] = -seg[2 * c + 1]                    # delta- = <X-_i*, xi_bar> = -(signed sum)
        else:
            client_delta_rows(st.acc_new, st.acc_old, theta, st.rows2)
        n_out = gather_to(T_DELTA, st.ids, st.server, st.rows2, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_DELTA_SUM)
    if r >= 0 and st.newton and cap < np.inf:                       # lines 12-15, Newton form
        client_mirror_round_newton(st.S, st.istar[0], st.i_next[0], st.coords[st.pos[0] + 1], st.w, st.wnorm2,
                                   st.u, st.Lr, st.pr, st.seg_lo, st.seg_hi, st.seg_class, st.sigma, st.kappa,
                                   st.gamma, st.off, st.logcap, st.mult, cap, st.shift, st.lognorm, st.c, st.trend,
                                   st.dw_prev, in_payload[r, 0], in_payload[r, 1], st.rows6, st.acc_old)
        n_out = gather_to(T_Z_GUESS, st.ids, st.server, st.rows6[:, :8], out_tag, out_src, out_dst, out_payload, n_out)
    elif r >= 0:                                                    # lines 12-15
        client_mirror_round(st.S, st.istar[0], st.i_next[0], st.coords[st.pos[0] + 1], st.w, st.wnorm2, st.u,
                            st.Lr, st.pr, st.seg_lo, st.seg_hi, st.seg_class, st.sigma, st.kappa, st.gamma, st.off,
                            st.logcap, st.mult, cap, st.shift, in_payload[r, 0], in_payload[r, 1], st.rows2,
                            st.acc_new, st.acc_old, st.acc_after, st.primed)
        n_out = gather_to(T_Z, st.ids, st.server, st.rows2, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out, -1, flags
