"""Saddle-DSVC round steps (paper 000, Algorithm 4): the compiled form of `SaddleServer.step` /
`SaddleClient.step` after set-up (a `SyncKernel`; the Python steps call these too, so both paths are one code).
Tags index DSVC_TAGS; DSVC_WIDTHS gives each tag's scalars per message.
"""
from __future__ import annotations

import math

import numba
import numpy as np

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

# server ints: iteration, cap reports, Rule 3 passes this iteration, phase, coordinate position, own id,
# nu mode, max passes, projection (0: Rule 3, 1: warm-started Newton)
S_ITER, S_REPORTS, S_PASSES, S_PHASE, S_POS, S_ID, S_NU, S_MAXPASS, S_NEWTON = range(9)

# server floats: Z per class and the Newton multiplier c per class (Newton projection), the weight cap, the
# trends of the threshold guess (per class: mean of the next row and of the current row over the uncapped),
# then room for a round's sums
SF_Z, SF_C, SF_CAP, SF_TREND, SF_SUMS = 0, 2, 4, 5, 9
SF_SIZE = SF_SUMS + 10   # the sums of a round's reports (scratch, no allocation per round)
PHASE_SETUP, PHASE_DELTA, PHASE_NEXT = 0, 1, 2
CAP_TOLERANCE = 1e-13   # Rule 3 "until the excess is zero", with floating-point slack (notes section 7.10)


@numba.njit(cache=True, nogil=True)
def _sum_rows(in_tag, in_payload, n_in, tag, width, out):
    for c in range(width):
        out[c] = 0.0
    for r in range(n_in):
        if in_tag[r] == tag:
            for c in range(width):
                out[c] += in_payload[r, c]


@numba.njit(cache=True, nogil=True)
def _broadcast(tag, src, dsts, values, width, out_tag, out_src, out_dst, out_payload, n_out):
    for j in range(dsts.shape[0]):
        out_tag[n_out] = tag
        out_src[n_out] = src
        out_dst[n_out] = dsts[j]
        for c in range(width):
            out_payload[n_out, c] = values[c]
        n_out += 1
    return n_out


@numba.njit(cache=True, nogil=True)
def dsvc_server_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                     out_payload):
    """Algorithm 4, server side: lines 10 (delta sums), 19 (Z sums), 31-36 (Rule 3 sums) and line 3 (i*)."""
    clients, coords, ints, sfl = arrays
    me = ints[S_ID]
    sums = sfl[SF_SUMS:SF_SUMS + 10]
    n_out = 0
    completed = -1
    flags = 0
    first = in_tag[0] if n_in > 0 else -1
    if first == T_DELTA:                                            # line 10
        _sum_rows(in_tag, in_payload, n_in, T_DELTA, 2, sums)
        n_out = _broadcast(T_DELTA_SUM, me, clients, sums, 2, out_tag, out_src, out_dst, out_payload, n_out)
    elif first == T_Z:                                              # line 19
        _sum_rows(in_tag, in_payload, n_in, T_Z, 2, sums)
        n_out = _broadcast(T_Z_SUM, me, clients, sums, 2, out_tag, out_src, out_dst, out_payload, n_out)
        ints[S_PASSES] = 0
        sfl[SF_Z] = sums[0]
        sfl[SF_Z + 1] = sums[1]
        if ints[S_NU] == 0:
            ints[S_ITER] += 1
            ints[S_PHASE] = PHASE_NEXT
            completed = ints[S_ITER]
            flags |= _WAKE
    elif first == T_CAP:                                            # lines 31-36
        _sum_rows(in_tag, in_payload, n_in, T_CAP, 4, sums)
        ints[S_REPORTS] += 1
        ints[S_PASSES] += 1
        if (sums[0] <= CAP_TOLERANCE and sums[1] <= CAP_TOLERANCE) or ints[S_PASSES] >= ints[S_MAXPASS]:
            ints[S_ITER] += 1
            ints[S_PHASE] = PHASE_NEXT
            completed = ints[S_ITER]
            flags |= _WAKE
        else:
            n_out = _broadcast(T_CAP_SUM, me, clients, sums, 4, out_tag, out_src, out_dst, out_payload, n_out)
    elif first == T_Z_GUESS:                                        # Newton: Z and the step at the guess
        _sum_rows(in_tag, in_payload, n_in, T_Z_GUESS, 8, sums)
        ints[S_PASSES] = 0
        for c in range(2):
            z, n_big, below = sums[c], sums[2 + c], sums[4 + c]
            sfl[SF_TREND + 2 * c + 1] = sums[6 + c] / below if below > 0.0 else 0.0   # mean of row i*(t)
            c0 = z * (1.0 - sfl[SF_CAP] * n_big) / below if (n_big > 0.0 and below > 0.0) else 1.0
            sfl[SF_Z + c] = z
            sfl[SF_C + c] = max(c0, 1.0)          # a tangent root: at or left of the answer (concavity)
        sums[2] = sfl[SF_C]
        sums[3] = sfl[SF_C + 1]
        n_out = _broadcast(T_Z_SCALE, me, clients, sums, 4, out_tag, out_src, out_dst, out_payload, n_out)
    elif first == T_MASS:                                           # warm-started Newton projection
        _sum_rows(in_tag, in_payload, n_in, T_MASS, 10, sums)
        ints[S_REPORTS] += 1
        ints[S_PASSES] += 1
        final = True
        for c in range(2):
            under = 0.0                                             # the raw weights around the threshold,
            over = np.inf                                           # over all clients
            for r in range(n_in):
                if in_tag[r] == T_MASS:
                    under = max(under, in_payload[r, 4 + c])
                    over = min(over, in_payload[r, 6 + c])
            z, cur, n_big, below = sfl[SF_Z + c], sfl[SF_C + c], sums[c], sums[2 + c]
            if n_big == 0.0:
                c_new = 1.0
            elif below > 0.0:
                c_new = max(z * (1.0 - sfl[SF_CAP] * n_big) / below, cur)
            else:                                                   # everything capped: only at the answer
                c_new = cur
            # exact when no raw weight lies between the old and the new threshold (the capped set stays)
            th_new = sfl[SF_CAP] * z / c_new
            if not (below <= 0.0 or (under < th_new if c_new >= cur else over >= th_new)):
                final = False
            sfl[SF_C + c] = c_new
            sfl[SF_TREND + 2 * c] = sums[8 + c] / below if below > 0.0 else 0.0     # mean of row i*(t+1)
        if ints[S_PASSES] >= ints[S_MAXPASS]:
            final = True
        sums[0] = sfl[SF_C]
        sums[1] = sfl[SF_C + 1]
        sums[2] = 1.0 if final else 0.0
        for j in range(4):                  # the trends of the next threshold guess (row i*(t+1), row i*(t))
            sums[3 + j] = sfl[SF_TREND + j]
        n_out = _broadcast(T_SCALE, me, clients, sums, 7, out_tag, out_src, out_dst, out_payload, n_out)
        if final:
            ints[S_ITER] += 1
            ints[S_PHASE] = PHASE_NEXT
            completed = ints[S_ITER]
            flags |= _WAKE
    elif n_in == 0 and ints[S_PHASE] == PHASE_NEXT:                 # woken: line 3, the next i*
        pos = ints[S_POS]
        sums[0] = coords[pos]
        ints[S_POS] = pos + 1
        n_out = _broadcast(T_COORD, me, clients, sums, 1, out_tag, out_src, out_dst, out_payload, n_out)
        ints[S_PHASE] = PHASE_DELTA
        if coords.shape[0] - ints[S_POS] < COORD_LOW_WATER:
            flags |= _PAUSE
    return n_out, completed, flags

# client ints: coordinate position, i*, i*(t+1), first iteration flag, server id, expected and received i* of a
# protocol error, whether the hard margin's acc_after holds a previous pass's sums, projection (1: Newton)
C_POS, C_ISTAR, C_NEXT, C_FIRST, C_SERVER, C_ERR_EXPECTED, C_ERR_GOT, C_PRIMED, C_NEWTON = range(9)

# client floats: sigma, kappa, gamma, theta, cap, log cap, Z per class, Newton multiplier c per class, log of
# the last normaliser per class, the server's trends (4) and the last w step (the Newton guess)
F_SIGMA, F_KAPPA, F_GAMMA, F_THETA, F_CAP, F_LOGCAP = range(6)
F_Z, F_C, F_LOGNORM, F_TREND, F_DW = 6, 8, 10, 12, 16


@numba.njit(cache=True, nogil=True)
def _first_row(in_tag, n_in, tag):
    for r in range(n_in):
        if in_tag[r] == tag:
            return r
    return -1


@numba.njit(cache=True, nogil=True)
def _gather(tag, srcs, dst, rows, out_tag, out_src, out_dst, out_payload, n_out):
    for j in range(srcs.shape[0]):
        out_tag[n_out] = tag
        out_src[n_out] = srcs[j]
        out_dst[n_out] = dst
        for c in range(rows.shape[1]):
            out_payload[n_out, c] = rows[j, c]
        n_out += 1
    return n_out


@numba.njit(cache=True, nogil=True)
def dsvc_client_step(arrays, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst,
                     out_payload):
    """Algorithm 4, client side, for a group of clients: lines 5-6 (delta), 12-15 (w step and the mirror pass),
    20-21 (normalise) and 27-34 (Rule 3 reports)."""
    (S, seg_lo, seg_hi, seg_class, ids, w, wnorm2, u, Lr, pr, p_prev, mult, mult_capped, off, shift, acc_new,
     acc_old, acc_after, rows2, rows4, rows6, coords, ints, fl) = arrays
    server = ints[C_SERVER]
    cap = fl[F_CAP]
    n_out = 0
    flags = 0
    r = _first_row(in_tag, n_in, T_Z_SUM)
    if r >= 0:                                                      # lines 20-21, then the first Rule 3 report
        client_normalise(in_payload[r], mult, mult_capped, off, shift, acc_new, acc_after, seg_class,
                         not (cap < np.inf))
        if cap < np.inf:
            client_cap_round(S[ints[C_NEXT]], pr, seg_lo, seg_hi, seg_class, in_payload[r], False, mult,
                             mult_capped, off, cap, rows4, acc_new)
            n_out = _gather(T_CAP, ids, server, rows4, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_CAP_SUM)
    if r >= 0:                                                      # lines 27-34
        client_cap_round(S[ints[C_NEXT]], pr, seg_lo, seg_hi, seg_class, in_payload[r], True, mult, mult_capped,
                         off, cap, rows4, acc_new)
        n_out = _gather(T_CAP, ids, server, rows4, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_Z_SCALE)
    if r >= 0:                                                      # Newton: normalise, a pass at c0
        client_normalise(in_payload[r], mult, mult_capped, off, shift, acc_new, acc_after, seg_class, False)
        for k in range(2):
            fl[F_Z + k] = in_payload[r, k]
            fl[F_C + k] = in_payload[r, 2 + k]
            fl[F_LOGNORM + k] = shift[k]
        clients_threshold_report(S[ints[C_NEXT]], pr, seg_lo, seg_hi, seg_class, fl[F_Z:F_Z + 2],
                                 fl[F_C:F_C + 2], cap, rows6, acc_new, acc_after)
        n_out = _gather(T_MASS, ids, server, rows6, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_SCALE)
    if r >= 0:                                                      # the server's Newton step
        fl[F_C] = in_payload[r, 0]
        fl[F_C + 1] = in_payload[r, 1]
        if in_payload[r, 2] != 0.0:                                 # final: p = min(cap, c*pr/Z)
            for j in range(4):
                fl[F_TREND + j] = in_payload[r, 3 + j]
            for k in range(2):
                mult[k] = fl[F_C + k] / fl[F_Z + k]
                off[k] = shift[k] - math.log(fl[F_C + k])
            for s in range(seg_lo.shape[0]):
                k = seg_class[s]
                acc_new[s] = cap * acc_new[s] + mult[k] * acc_after[s]
        else:
            clients_threshold_report(S[ints[C_NEXT]], pr, seg_lo, seg_hi, seg_class, fl[F_Z:F_Z + 2],
                                     fl[F_C:F_C + 2], cap, rows6, acc_new, acc_after)
            n_out = _gather(T_MASS, ids, server, rows6, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_COORD)
    if r >= 0:                                                      # lines 5-6
        i = np.int64(in_payload[r, 0])
        pos = ints[C_POS]
        if i != coords[pos]:
            ints[C_ERR_EXPECTED] = coords[pos]
            ints[C_ERR_GOT] = i
            return 0, -1, _ERROR
        ints[C_ISTAR] = i
        ints[C_NEXT] = coords[pos + 1]
        ints[C_POS] = pos + 1
        if coords.shape[0] - ints[C_POS] < COORD_LOW_WATER:
            flags |= _PAUSE
        theta = fl[F_THETA]
        if ints[C_FIRST] == 1:                                      # iteration 0: eta[-1] = eta[0], no momentum
            seg = np.empty(seg_lo.shape[0])
            clients_delta(S[i], pr, p_prev, seg_lo, seg_hi, seg_class, mult, cap, theta, seg)
            ints[C_FIRST] = 0
            for c in range(rows2.shape[0]):
                rows2[c, 0] = seg[2 * c]
                rows2[c, 1] = -seg[2 * c + 1]                       # delta- = <X-_i*, xi_bar> = -(signed sum)
        else:
            client_delta_rows(acc_new, acc_old, theta, rows2)
        n_out = _gather(T_DELTA, ids, server, rows2, out_tag, out_src, out_dst, out_payload, n_out)
    r = _first_row(in_tag, n_in, T_DELTA_SUM)
    if r >= 0 and ints[C_NEWTON] == 1 and cap < np.inf:             # lines 12-15, Newton form
        client_mirror_round_newton(S, ints[C_ISTAR], ints[C_NEXT], coords[ints[C_POS] + 1], w, wnorm2, u, Lr, pr,
                                   seg_lo, seg_hi, seg_class, fl[F_SIGMA], fl[F_KAPPA], fl[F_GAMMA], off,
                                   fl[F_LOGCAP], mult, cap, shift,
                                   fl[F_LOGNORM:F_LOGNORM + 2], fl[F_C:F_C + 2], fl[F_TREND:F_TREND + 4],
                                   fl[F_DW:F_DW + 1], in_payload[r, 0], in_payload[r, 1], rows6, acc_old)
        n_out = _gather(T_Z_GUESS, ids, server, rows6[:, :8], out_tag, out_src, out_dst, out_payload, n_out)
    elif r >= 0:                                                    # lines 12-15
        client_mirror_round(S, ints[C_ISTAR], ints[C_NEXT], coords[ints[C_POS] + 1], w, wnorm2, u, Lr, pr, seg_lo,
                            seg_hi, seg_class, fl[F_SIGMA], fl[F_KAPPA], fl[F_GAMMA], off, fl[F_LOGCAP], mult, cap,
                            shift, in_payload[r, 0], in_payload[r, 1], rows2, acc_new, acc_old, acc_after,
                            ints[C_PRIMED:C_PRIMED + 1])
        n_out = _gather(T_Z, ids, server, rows2, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out, -1, flags
