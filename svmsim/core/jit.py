"""`inner`: numba's `njit` for functions that compiled code calls, compiled without what only a Python caller needs.

numba gives every compiled function two wrappers, one for calls from Python (it unboxes every argument) and one for
first-class function pointers. For a function whose argument is a program's compiled state (a named tuple of a
hundred arrays, `comm.collectives.state_with_collective`) the two cost ten times the function itself: a small step
helper compiles in about 0.2 s without them and 2.3 s with them. `inner` leaves both out, and types a literal
integer argument (a tag, a flag written in the caller) as a plain integer, so that one compilation serves every
constant a caller passes instead of one per constant.

A call from Python still works (tests, a notebook): it goes to a twin compiled with the Python wrapper, in memory only,
so it does not reach the disk cache that the compiled callers load. svmsim's own modules never call an `inner`
function from Python (`InnerCalledFromPython` says where one does; the test suite turns it into an error).

`REPRODUCIBLE_FASTMATH` is the most of numba's fastmath that svmsim's kernels take. A compiled function is compiled
once on its own and again, as a linked copy, inside every compiled caller, and which of the two runs depends on
what numba's disk cache held when the process started. With ``reassoc`` and ``nsz`` together LLVM's reassociation
pass rewrites floating-point expressions, and it rewrites an already optimised copy differently, so the last bits of
a result depended on the cache (Saddle-DSVC on iris: 1.0882761299998103 compiled, ...098 loaded). Without ``nsz``
that pass leaves floating point alone, while ``reassoc`` alone still lets reductions vectorise."""
from __future__ import annotations

import sys
import warnings

import numba
from numba.core import types
from numba.core.registry import CPUDispatcher

__all__ = ["InnerCalledFromPython", "REPRODUCIBLE_FASTMATH", "inner"]

#: fastmath flags that give the same bits compiled or loaded from the cache (see the module's docstring): reductions
#: vectorise (reassoc), multiply-adds fuse (contract), divisions by a loop constant become multiplications (arcp)
REPRODUCIBLE_FASTMATH = frozenset({"reassoc", "contract", "arcp"})

_OPTIONS = dict(nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


class InnerCalledFromPython(RuntimeWarning):
    """svmsim called a function made for compiled callers from Python (it runs, compiled afresh and uncached)."""


class InnerDispatcher(CPUDispatcher):
    """A numba dispatcher without the Python and function-pointer wrappers (see the module's docstring)."""

    _python_twin = None

    def get_call_template(self, args, kws):
        # a constant in the caller (types.Literal) is typed as its plain type: one compilation for every constant
        return super().get_call_template(tuple(types.unliteral(a) for a in args),
                                         {k: types.unliteral(v) for k, v in kws.items()})

    def __call__(self, *args, **kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller == "svmsim" or caller.startswith("svmsim."):
            warnings.warn(f"{caller} calls {self.py_func.__module__}.{self.py_func.__qualname__} from Python; "
                          f"it is compiled for compiled callers (svmsim.core.jit.inner): call it from a numba "
                          f"function or make it a plain numba.njit", InnerCalledFromPython, stacklevel=2)
        if self._python_twin is None:
            own = {k: v for k, v in self.targetoptions.items() if k not in _OPTIONS}
            self._python_twin = numba.njit(nogil=True, **own)(self.py_func)
        return self._python_twin(*args, **kwargs)


def inner(func=None, **options):
    """``@inner`` or ``@inner(fastmath=..., ...)``: `numba.njit(cache=True, nogil=True, **options)` without the
    Python and function-pointer wrappers and without literal specialisations; for functions called from numba
    code only (a Python call works, slower: see the module's docstring)."""
    if func is None:
        return lambda f: inner(f, **options)
    targetoptions = dict(_OPTIONS, **options)
    disp = InnerDispatcher(py_func=func, locals={}, targetoptions=targetoptions)
    disp.enable_caching()
    return disp
