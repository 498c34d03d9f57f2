"""The built-in codecs' arithmetic in numba, one row at a time: the one implementation that the codecs' NumPy
interface (`comm.codecs`, a batch of rows from Python) and the compiled gossip loop (`schedule.event_kernels`, one
message at a time, with error feedback) both run, so a run encodes the same bits in either loop.

A row is encoded by `encode_row` from its codec's `CODEC_PLAN` record: the codec's code (`KERNEL_CODES`) and its
parameters as numbers. Sums run left to right (no fastmath), so the NumPy interface and a compiled caller add in the
same order. Nothing here allocates (scratch arrays come from the caller): the compiled loops run without reference
counting. `comm.codecs` imports this module only when it encodes, so validating a scenario imports no compiler.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from ..core.jit import inner
from ..core.streams import counter_uniform, mix64
from ..numerics.bits import bits_float, float_bits

__all__ = ["KERNEL_CODES", "CODEC_PLAN", "EF_CODES", "encode_row", "encode_rows", "channel_encode", "half_round",
           "bf16_round"]

#: the built-in codecs with a kernel, by name
KERNEL_CODES = {"none": 0, "fp16": 1, "bf16": 2, "qsgd": 3, "topk": 4, "randk": 5, "sign": 6}
C_NONE, C_FP16, C_BF16, C_QSGD, C_TOPK, C_RANDK, C_SIGN = range(7)
#: error feedback, by name (`comm.codecs.EF_MODES`)
EF_CODES = {"none": 0, "ef": 1, "ef21": 2}
EF_NONE, EF_EF, EF_EF21 = range(3)

#: one message kind's encoding in the compiled loops: the codec (`KERNEL_CODES`; -1: the kind travels raw) and its
#: parameters (QSGD's bits; a sparsifier's kept entries, value width and scaling), the error feedback (`EF_CODES`),
#: the encoded width (the row's scalars before its exact tail), whether the codec draws uniforms and is lossy, the
#: row of the kind's error-feedback state (-1: none), the bytes of one encoded message, and the kind's stream salt
CODEC_PLAN = np.dtype([("code", np.int64), ("bits", np.int64), ("keep", np.int64), ("value_bits", np.int64),
                       ("unbiased", np.int64), ("ef", np.int64), ("width", np.int64), ("stochastic", np.int64),
                       ("lossy", np.int64), ("state", np.int64), ("nbytes", np.int64), ("salt", np.uint64)],
                      align=True)

_HALF_MIN_NORMAL = 2.0 ** -14
_HALF_OVERFLOW = 65520.0                  # the midpoint between half's largest value (65504) and 2^16: rounds to inf
_F32_MIN_NORMAL = 2.0 ** -126
_TWO_128 = 2.0 ** 128


@inner
def _rounded_at(a, spacing_exponent):
    """a >= 0 rounded to a multiple of 2^spacing_exponent, halves to even: adding C = 2^(spacing_exponent + 52),
    whose spacing is that, makes the addition round there (round to nearest even), and subtracting C is exact."""
    c = bits_float(np.int64(spacing_exponent + 52 + 1023) << np.int64(52))
    return (a + c) - c


@inner
def _exponent(a):
    """e with a in [2^(e-1), 2^e), for a normal double a > 0 (frexp's exponent)."""
    return ((float_bits(a) >> np.int64(52)) & np.int64(0x7FF)) - 1022


@inner
def half_round(x):
    """x as IEEE half precision reads it (round to nearest even from the double, as NumPy converts), as a double."""
    if x != x or math.isinf(x):
        return x
    a = abs(x)
    if a >= _HALF_OVERFLOW:
        return math.copysign(math.inf, x)
    if a < _HALF_MIN_NORMAL:
        return math.copysign(_rounded_at(a, -24), x)     # half's subnormal spacing
    return math.copysign(_rounded_at(a, _exponent(a) - 11), x)     # 11 significant bits


@inner
def bf16_round(x):
    """x as bfloat16 reads it: rounded to float32, then to 8 significant bits, nearest even (as a double)."""
    f = np.float64(np.float32(x))
    if f != f or math.isinf(f):
        return f
    a = abs(f)
    if a < _F32_MIN_NORMAL:
        r = _rounded_at(a, -133)                          # float32's subnormal spacing at bfloat16's 7 bits
    else:
        r = _rounded_at(a, _exponent(a) - 8)
    if r >= _TWO_128:
        r = math.inf
    return math.copysign(r, f)


@inner
def _at_width(v, value_bits):
    if value_bits == 16:
        return half_round(v)
    if value_bits == 32:
        return np.float64(np.float32(v))
    return v


@inner
def _ranks_before(code, x, u, i, j):
    """Whether entry i is kept before entry j: topk by magnitude (NaN last), randk by uniform; ties: lower index."""
    if code == C_TOPK:
        a, b = abs(x[i]), abs(x[j])
        if a != a:
            return b != b and i < j
        if b != b:
            return True
        if a != b:
            return a > b
        return i < j
    if u[i] != u[j]:
        return u[i] < u[j]
    return i < j


@inner
def _sift_down(code, x, u, heap, k, pos):
    """Restore the heap of the k kept entries from `pos` down (its top: the entry ranked last)."""
    while True:
        c = 2 * pos + 1
        if c >= k:
            return
        if c + 1 < k and _ranks_before(code, x, u, heap[c], heap[c + 1]):
            c += 1
        if _ranks_before(code, x, u, heap[pos], heap[c]):
            tmp = heap[pos]
            heap[pos] = heap[c]
            heap[c] = tmp
            pos = c
        else:
            return


@inner
def _select(code, x, u, w, k, heap):
    """The k entries of x[:w] ranked first (`_ranks_before`) into heap[:k], in heap order."""
    for i in range(k):
        heap[i] = i
    for pos in range(k // 2 - 1, -1, -1):
        _sift_down(code, x, u, heap, k, pos)
    for i in range(k, w):
        if _ranks_before(code, x, u, i, heap[0]):
            heap[0] = i
            _sift_down(code, x, u, heap, k, 0)


@inner
def encode_row(plan, x, u, out, scratch):
    """What the receiver reads of row x[:plan.width] under `plan`'s codec (`comm.codecs`' formulas), into out[:width].
    u: the row's uniforms (read by the stochastic codecs); scratch: int64, at least the width (sparsifiers)."""
    w = plan.width
    code = plan.code
    if code == C_FP16:
        for j in range(w):
            out[j] = half_round(x[j])
    elif code == C_BF16:
        for j in range(w):
            out[j] = bf16_round(x[j])
    elif code == C_QSGD:
        s = np.float64((1 << plan.bits) - 1)
        ss = 0.0
        for j in range(w):
            ss += x[j] * x[j]
        norm = math.sqrt(ss)
        safe = norm if norm > 0 else 1.0
        step = np.float64(np.float32(norm)) / s           # the norm travels as a float32
        for j in range(w):
            scaled = abs(x[j]) / safe * s                 # in [0, s]
            level = np.floor(scaled)
            if u[j] < scaled - level:                     # up with probability scaled - level: unbiased
                level += 1.0
            if level > s:                                 # (rounding can put |v_j| s / |v| a hair above s)
                level = s
            out[j] = (-level if x[j] < 0 else level) * step
            if norm == 0:
                out[j] = 0.0
    elif code == C_TOPK or code == C_RANDK:
        k = plan.keep
        _select(code, x, u, w, k, scratch)
        for j in range(w):
            out[j] = 0.0
        scale = np.float64(w) / np.float64(k)
        for i in range(k):
            j = scratch[i]
            v = x[j] * scale if (code == C_RANDK and plan.unbiased != 0) else x[j]
            out[j] = _at_width(v, plan.value_bits)
    elif code == C_SIGN:
        total = 0.0
        for j in range(w):
            total += abs(x[j])
        scale = np.float64(np.float32(total / w))          # the scale travels as a float32
        for j in range(w):
            out[j] = -scale if x[j] < 0 else scale
    else:
        for j in range(w):
            out[j] = x[j]


@numba.njit(cache=True)
def encode_rows(plan, rows, uniforms):
    """`encode_row` for every row of `rows` (the codecs' NumPy interface: `plan` a one-record `CODEC_PLAN` array)."""
    m, w = rows.shape
    out = np.empty((m, w))
    scratch = np.empty(max(w, 1), dtype=np.int64)
    p = plan[0]
    for i in range(m):
        encode_row(p, rows[i], uniforms[i], out[i], scratch)
    return out


@inner
def channel_encode(plan, state_row, keys, drawn, kind, sender, row, buf, scratch):
    """Encode message `row` of kind `kind` from `sender` in place (its first plan.width scalars; an exact tail stays),
    with the error feedback of its channel's state (`state_row`: e for ef, g for ef21) and, for a stochastic codec,
    the sender's next uniforms of the kind (keys[sender] mixed with the kind's salt; drawn[kind, sender] counts
    them). buf: float64 (3, width) scratch; scratch: int64 (width). `comm.compression.Compressor` for one message."""
    w = plan.width
    x = buf[0]
    u = buf[1]
    c = buf[2]
    if plan.stochastic != 0:
        key = mix64(keys[sender] ^ plan.salt)
        start = drawn[kind, sender]
        for j in range(w):
            u[j] = counter_uniform(key, start + j)
        drawn[kind, sender] = start + w
    if plan.ef == EF_EF:
        for j in range(w):
            x[j] = row[j] + state_row[j]
    elif plan.ef == EF_EF21:
        for j in range(w):
            x[j] = row[j] - state_row[j]
    else:
        for j in range(w):
            x[j] = row[j]
    encode_row(plan, x, u, c, scratch)
    if plan.ef == EF_EF:
        for j in range(w):
            state_row[j] = x[j] - c[j]
            row[j] = c[j]
    elif plan.ef == EF_EF21:
        for j in range(w):
            state_row[j] = state_row[j] + c[j]
            row[j] = state_row[j]
    else:
        for j in range(w):
            row[j] = c[j]
