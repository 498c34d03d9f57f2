"""A vectorisable exp for numba loops.

numba calls libm's scalar `exp` (about 5 ns per element here) because llvmlite is built without Intel SVML, and
a scalar call blocks SIMD vectorisation of the whole loop. `vexp` is emitted as straight-line LLVM IR that LLVM
vectorises: range reduction x = k*ln2 + r with |r| <= ln2/2, a degree-10 polynomial for exp(r) (near-minimax on
that interval, approximation error below 3.2e-16 relative; about 5e-16 with rounding), and 2^k built directly in
the exponent bits. Inputs below -708 return 0 (exp underflows there anyway); inputs above 709 return +inf.

Two details keep it short and exact under the callers' fastmath flags:

* k = round(x/ln2) comes from one fused multiply-add with the magic constant 1.5*2^52 + 1023: the sum's low
  mantissa bits are then k + 1023, which shifted left by 52 are the bits of 2^k (no float<->int conversions);
* its instructions carry only the `contract` flag (FMA fusion), so a caller's reassociation cannot fold
  (t + C) - C or merge the two parts of ln2 in the range reduction.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["vexp", "emit_exp"]

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693147180369123816490     # ln 2 to 32 bits: k*_LN2_HI is exact for |k| < 2^21
_LN2_LO = 1.90821492927058770002e-10  # ln 2 - _LN2_HI
#: 1.5*2^52 + 1023: adding it rounds to an integer and leaves k + 1023 in the low mantissa bits
_MAGIC = 6755399441056767.0
#: exp(r) ~ sum_i _POLY[i] r^i on |r| <= ln2/2 (Chebyshev-node least squares, degree 10)
_POLY = (1.0, 1.0000000000000067, 0.5000000000000006, 0.16666666666554406, 0.04166666666657314,
         0.008333333385667782, 0.0013888888932488599, 0.00019841170270440067, 2.4801504346997686e-05,
         2.764018079620985e-06, 2.7626357241447223e-07)
_LOW, _HIGH = -708.0, 709.0


def emit_exp(builder, x, overflow_check=True):
    """Emit the IR of `vexp` for the double `x` (for intrinsics); without `overflow_check` the caller
    guarantees x <= 709."""
    dbl = ir.DoubleType()
    i64 = ir.IntType(64)
    exact = ("contract",)           # a non-empty flag set: numba's fastmath rewrite leaves these instructions alone

    def const(v):
        return ir.Constant(dbl, v)

    def fma(a, b, c):               # contract lets the backend fuse a*b + c into one FMA
        return builder.fadd(builder.fmul(a, b, flags=exact), c, flags=exact)

    t = fma(x, const(_LOG2E), const(_MAGIC))
    k = builder.fsub(t, const(_MAGIC), flags=exact)              # round(x*log2(e)) as a double, exactly
    r = fma(k, const(-_LN2_HI), x)                                # exact: k*_LN2_HI has trailing zero bits
    r = fma(k, const(-_LN2_LO), r)
    p = const(_POLY[-1])
    for c in _POLY[-2::-1]:
        p = fma(p, r, const(c))
    two_k = builder.bitcast(builder.shl(builder.bitcast(t, i64), ir.Constant(i64, 52)), dbl)
    y = builder.fmul(p, two_k, flags=exact)
    y = builder.select(builder.fcmp_ordered("<", x, const(_LOW)), const(0.0), y)
    if overflow_check:
        y = builder.select(builder.fcmp_ordered(">", x, const(_HIGH)), const(float("inf")), y)
    return y


@intrinsic
def _exp_ir(typingctx, x):
    if not isinstance(x, types.Float):
        return None
    sig = types.float64(types.float64)

    def codegen(context, builder, signature, args):
        return emit_exp(builder, args[0])

    return sig, codegen


@numba.njit(inline="always", cache=True)
def vexp(x):
    return _exp_ir(float(x))
