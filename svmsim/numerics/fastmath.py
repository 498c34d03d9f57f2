"""A vectorisable exp for numba loops.

numba calls libm's scalar `exp` (about 5 ns per element here) because llvmlite is built without Intel SVML, and
a scalar call blocks SIMD vectorisation of the whole loop. `vexp` is written from operations LLVM vectorises:
range reduction x = k*ln2 + r with |r| <= ln2/2, a degree-12 Taylor polynomial for exp(r) (relative error
below 2e-16 on that interval), and 2^k built directly in the exponent bits. Inputs below -708 return 0
(exp underflows there anyway); inputs above 709 return +inf.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["vexp"]


@intrinsic
def _int64_bits_as_float64(typingctx, x):
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 0.693147180369123816490
_LN2_LO = 1.90821492927058770002e-10


@numba.njit(inline="always", cache=True)
def vexp(x):
    if x < -708.0:
        return 0.0
    if x > 709.0:
        return math.inf
    k = math.floor(x * _LOG2E + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    two_k = _int64_bits_as_float64((np.int64(k) + 1023) << 52)
    return p * two_k
