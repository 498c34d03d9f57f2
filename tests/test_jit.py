"""`svmsim.core.jit.inner`: helpers for compiled callers compile once for every constant, without numba's Python
wrapper, and still answer a call from Python."""
from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba.core import types

from svmsim.core.jit import InnerCalledFromPython, inner


@inner
def _scaled_add(out, values, factor):
    for i in range(values.shape[0]):
        out[i] += factor * values[i]


@numba.njit                               # not cached: its compilation types the calls below in this process
def _caller(out, values):
    _scaled_add(out, values, 2)           # two constants: one compilation for int64
    _scaled_add(out, values, 3)


def test_one_compilation_serves_every_constant_a_caller_passes():
    out, values = np.zeros(3), np.arange(3.0)
    _caller(out, values)
    assert np.array_equal(out, 5.0 * values)
    signatures = _scaled_add.signatures
    assert len(signatures) == 1
    assert signatures[0][2] == types.int64 and not any(isinstance(t, types.Literal) for t in signatures[0])


def test_a_call_from_python_runs_on_a_twin_with_the_same_result():
    out_python, out_compiled, values = np.zeros(3), np.zeros(3), np.linspace(0.1, 0.7, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")    # a call from a test (not from svmsim) is allowed silently
        _scaled_add(out_python, values, 2)
        _scaled_add(out_python, values, 3)
    _caller(out_compiled, values)
    assert np.array_equal(out_python, out_compiled)


def test_a_call_from_svmsims_own_python_is_reported():
    namespace = {"__name__": "svmsim.some_module", "f": _scaled_add, "np": np}
    exec("def call():\n    f(np.zeros(2), np.ones(2), 1.0)\n", namespace)
    with pytest.warns(InnerCalledFromPython, match=r"svmsim.some_module calls .*_scaled_add from Python"):
        namespace["call"]()


def _svmsim_dispatchers():
    """Every numba function defined in svmsim's modules (modules of optional extras that are not installed are
    left out)."""
    import importlib
    import pkgutil

    import svmsim
    from numba.core.registry import CPUDispatcher

    found = []
    for info in pkgutil.walk_packages(svmsim.__path__, "svmsim."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        found += [(info.name, name, obj) for name, obj in vars(module).items()
                  if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == info.name]
    return found


def test_every_kernel_keeps_to_the_fastmath_flags_that_give_the_same_bits_compiled_or_cached():
    """A fastmath set beyond `REPRODUCIBLE_FASTMATH` (``nsz`` with ``reassoc``, or ``fastmath=True``) lets LLVM
    rewrite a kernel's linked copies differently from the kernel itself, so results would depend on numba's cache."""
    from svmsim.core.jit import REPRODUCIBLE_FASTMATH

    found = _svmsim_dispatchers()
    assert len(found) > 100
    offending, with_fastmath = [], 0
    for module, name, disp in found:
        flags = disp.targetoptions.get("fastmath", False)
        if flags is False or flags is None:
            continue
        with_fastmath += 1
        if flags is True or not set(flags) <= REPRODUCIBLE_FASTMATH:
            offending.append(f"{module}.{name}: {flags}")
    assert with_fastmath >= 10 and not offending
