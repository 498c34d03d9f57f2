"""Seconds spent in numba's compiler, measured as they happen, so that measured wall time can leave them out
(design principle 12: measured wall time excludes compilation).

numba announces its work through `numba.core.event`:

* ``"numba:compiler_lock"`` spans every stretch a thread waits for or holds numba's compiler lock: a dispatcher
  looking up a cached function on disk and loading it, compiling one afresh, writing it to the cache;
* ``"numba:compile"`` spans a fresh compilation (a cache miss), inside the lock.

`install` registers one listener for both kinds, once per process (numba is imported then, not before); from then
on `seconds` is the compiler's total in this process: ``"compile"`` under the lock (loads from the disk cache
included) and ``"new"`` its part spent compiling afresh. Nested spans (a function compiled while its caller
compiles, the lock taken again by the thread that holds it) count once, by their outermost span, per thread.

`Stopwatch` reads wall-clock seconds since it was made with and without the compilation since then: the runner's
``wall_time`` (without), ``wall_time_total`` (with) and ``compile_time`` (the difference) of every metrics row.

What it cannot see: compilation in other processes (Ray host actors, sweep workers measure their own), and
compilation of functions that do not go through numba's dispatchers.

Foundations: imports nothing of svmsim.
"""
from __future__ import annotations

import threading
import time

__all__ = ["install", "installed", "seconds", "Stopwatch"]

_KINDS = {"numba:compiler_lock": "compile", "numba:compile": "new"}
_totals = {"compile": 0.0, "new": 0.0}
_add = threading.Lock()
_local = threading.local()
_listener = None
_install = threading.Lock()


def _spans() -> dict:
    """This thread's open spans: kind -> [depth, start]."""
    spans = getattr(_local, "spans", None)
    if spans is None:
        spans = _local.spans = {kind: [0, 0.0] for kind in _totals}
    return spans


def _start(kind: str) -> None:
    span = _spans()[kind]
    if span[0] == 0:
        span[1] = time.perf_counter()
    span[0] += 1


def _end(kind: str) -> None:
    span = _spans()[kind]
    if span[0] == 0:                # an end whose start came before the listener was installed
        return
    span[0] -= 1
    if span[0] == 0:
        elapsed = time.perf_counter() - span[1]
        with _add:
            _totals[kind] += elapsed


def install() -> bool:
    """Register the listener on numba's compiler events (once per process; later calls do nothing). False where
    numba or its event API is not available (then `seconds` stays 0)."""
    global _listener
    if _listener is not None:
        return True
    with _install:
        if _listener is not None:
            return True
        try:
            from numba.core import event
        except ImportError:         # pragma: no cover - numba is a dependency; an API that moved
            return False

        class _CompileListener(event.Listener):
            def on_start(self, ev):
                _start(_KINDS[ev.kind])

            def on_end(self, ev):
                _end(_KINDS[ev.kind])

        listener = _CompileListener()
        for kind in _KINDS:
            event.register(kind, listener)
        _listener = listener
    return True


def installed() -> bool:
    return _listener is not None


def seconds(kind: str = "compile") -> float:
    """Seconds this process has spent in numba's compiler since `install`, by the threads' outermost spans:
    ``"compile"`` (under the compiler lock: fresh compilation, cache loads and writes) or ``"new"`` (the part spent
    compiling afresh)."""
    with _add:
        return _totals[kind]


class Stopwatch:
    """Wall-clock seconds since it was made, and the part of them numba spent compiling (`install` is called)."""

    def __init__(self):
        install()
        self.started = time.perf_counter()
        self.compiled_before = seconds()
        self.new_before = seconds("new")

    def read(self) -> tuple[float, float]:
        """(wall-clock seconds so far, compilation seconds so far), read together."""
        total = time.perf_counter() - self.started
        return total, min(total, max(0.0, seconds() - self.compiled_before))

    def wall(self) -> float:
        """Wall-clock seconds so far less the compilation in them."""
        total, compiling = self.read()
        return total - compiling

    def times(self) -> dict[str, float]:
        """``wall_time`` (compilation left out), ``wall_time_total`` and ``compile_time``: a metrics row's."""
        total, compiling = self.read()
        return {"wall_time": total - compiling, "wall_time_total": total, "compile_time": compiling}

    def compile_split(self) -> dict[str, float]:
        """Compilation since the stopwatch started: ``compile_seconds`` in all, of which ``compile_new_seconds``
        compiling afresh (the rest: loading from numba's disk cache, writing to it)."""
        return {"compile_seconds": max(0.0, seconds() - self.compiled_before),
                "compile_new_seconds": max(0.0, seconds("new") - self.new_before)}
