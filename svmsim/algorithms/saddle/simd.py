"""Intrinsics and compile options shared by the Saddle-SVC / Saddle-DSVC kernels (paper 000).

All reductions run with fastmath reassociation (`core.jit.REPRODUCIBLE_FASTMATH`) so that numba vectorises them; `vexp` is a vectorisable exp
(`exp_le709` the same without its overflow branch, where the shift bounds the argument). Rules that keep the
loops SIMD: loop over a *slice* (`range(lo, hi)` indexing makes numba emit negative-index wraparound, which
blocks vectorisation); never reduce floats with max (numba's max reduction stays scalar; counts above a
threshold, or an integer max over the IEEE bits of non-negative doubles, `float_bits`, are used instead); bind
a select to a name before accumulating it (`acc += a if c else b` inline turns into branches that block SIMD).
`wide_simd()` lets a function use 512-bit vectors (LLVM stops at 256 bits by default). Check with
`inspect_asm()` of a fresh (uncached) compile: the hot loops should use zmm (or ymm) registers
(`benchmarks/bench_saddle_kernel.py` counts them).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ...core.jit import REPRODUCIBLE_FASTMATH
from ...numerics.fastmath import emit_exp

JIT_OPTS = dict(cache=True, nogil=True, fastmath=set(REPRODUCIBLE_FASTMATH), error_model="numpy", boundscheck=False)

#: exp(Lt - shift) stays finite while Lt - shift <= 700
EXP_HEADROOM = 700.0


@intrinsic
def wide_simd(typingctx):
    """Mark the calling function for 512-bit auto-vectorisation (zmm registers on AVX-512 CPUs).

    LLVM's x86 cost model stops at 256-bit vectors by default even where AVX-512 exists ("prefer-vector-width");
    the hot loops here are bound by arithmetic throughput, which the wider registers raise. The two standard
    LLVM function attributes below lift the limit for the marked function only; on CPUs without AVX-512 they
    change nothing.
    """
    def codegen(context, builder, signature, args):
        attrs = builder.function.attributes
        for attr in ('"prefer-vector-width"="512"', '"min-legal-vector-width"="512"'):
            set.add(attrs, attr)        # llvmlite's AttributeSet.add only admits keyword attributes
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def exp_le709(typingctx, x):
    """`vexp` without its overflow branch, for arguments known to be <= 709 (the shift guarantees <= 700)."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        return emit_exp(builder, args[0], overflow_check=False)

    return types.float64(types.float64), codegen


@intrinsic
def prefetch_l2(typingctx, arr, idx):
    """Hint the CPU to bring arr[idx]'s cache line into L2 (llvm.prefetch, read, moderate locality)."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = builder.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 2), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, types.intp), codegen
