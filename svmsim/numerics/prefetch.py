"""Software prefetches for numba code: ask the memory system for a node's rows before they are needed.

The gossip event loop visits nodes in random order; at 10^5 nodes their rows no longer fit the caches, and each
array touched for a node is a miss. Prefetching the next event's rows while the current event runs overlaps
those misses (`event_kernels._event_loop`; a kernel's own rows through `GossipKernel.prefetch`). A prefetch
changes no result."""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch", "prefetch_row"]

#: bytes per cache line
LINE = 64


@intrinsic
def prefetch(typingctx, arr, index):
    """Prefetch row `index` of `arr` (its first element's cache line) for reading; no effect on results."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [idx] + [zero] * (aryty.ndim - 1),
                                       wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # read, high temporal locality, data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, index), codegen


@numba.njit(cache=True, inline="always")
def prefetch_row(arr, index):
    """Prefetch every cache line of row `index` of the 2-D C-contiguous `arr`."""
    row = arr[index]
    step = max(1, LINE // row.itemsize)
    for q in range(0, row.shape[0], step):
        prefetch(row, q)
