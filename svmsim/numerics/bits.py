"""A float64's IEEE bits and back, in numba, without a conversion: a value's exponent read from its bits, a power of
two built in them, integer max/min reductions over non-negative floats (whose bit order is their value order)."""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["float_bits", "bits_float"]


@intrinsic
def float_bits(typingctx, x):
    """The IEEE bits of a float64 as int64: for x >= 0 their order is the order of the values, and integer
    max/min reductions vectorise (float ones do not without no-NaN flags)."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def bits_float(typingctx, b):
    """Inverse of `float_bits`."""
    if not isinstance(b, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen
