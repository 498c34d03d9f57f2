"""The compiled gossip event loop, kept on disk between processes.

`event_kernels.loop_for` binds a program's compiled functions into the event loop as compile-time constants, so
that numba inlines them. Numba cannot cache a function that closes over other functions or receives them as
values, so each process used to compile the loop afresh: about 9 s for Push-Sum, as much as the rest of the
set-up of a 10^5-node run. Here the loop's three functions that take the program's functions as parameters
(`REWRITTEN`) are written out as a module of their own, their text unchanged but for those parameters, which
become the module's globals (imported by name), as does `remote`; numba caches that (`cache=True`), and the next
process loads the machine code in a fraction of a second.

The module's name carries a hash of every source file the loop is compiled from (the event loop's, the program's,
and those of the compiled functions they call, followed through their modules' globals) and of the Python and
numba versions, so an edit to any of them gives a new module and never a stale loop. The modules live in
``$SVMSIM_CACHE_DIR`` (default: ``$XDG_CACHE_HOME/svmsim/loops``, i.e. ``~/.cache/svmsim/loops``). Where none of
this works (functions that are not importable by name, a directory that cannot be written, numba's JIT switched
off) `cached_loop` returns None and the caller compiles the loop in memory as before.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Callable

import numba
from numba.core.registry import CPUDispatcher

__all__ = ["cached_loop", "loop_cache_dir"]

#: the functions of `event_kernels` that take the program's functions as parameters: rewritten with them (and
#: `remote`) as the generated module's globals
REWRITTEN = ("_node_event", "_handle_event", "_prefetch_node", "_event_loop")
_FUNCTION_PARAMS = ("wake_fn, receive_fn, crash_fn, recover_fn, prefetch_fn, ", "wake_fn, receive_fn, crash_fn, "
                    "recover_fn, ", "crash_fn, recover_fn, ", "prefetch_fn, ")
ROLES = ("wake", "receive", "crash", "recover", "prefetch")

_PRELUDE = '''"""The svmsim gossip event loop with {names} bound (see svmsim.schedule.loop_cache)."""
import math

import numba
import numpy as np

import {kernels} as _kernels

globals().update({{k: v for k, v in vars(_kernels).items() if not k.startswith("__") and k not in {rewritten}}})
{imports}
remote = {remote}

'''


def _bound_source(event_kernels: ModuleType, remote: bool, names: list[tuple[str, str]]) -> str | None:
    """The generated module's text: `event_kernels`' loop functions with the program's functions and `remote` as
    globals (cacheable: no function travels as a value), or None if their text is not as expected."""
    import inspect

    parts = []
    for name in REWRITTEN:
        src = inspect.getsource(getattr(event_kernels, name).py_func)
        for params in _FUNCTION_PARAMS:
            src = src.replace(params, "")
        if "_fn, " in src:
            return None                                  # a function passed on that the rewrite does not know
        if name == "_event_loop":
            if src.count(", remote):") != 1:
                return None
            src = src.replace(", remote):", "):")
        if not src.startswith("@numba.njit("):
            return None
        parts.append(src.replace("@numba.njit(", "@numba.njit(cache=True, ", 1))
    imports = "\n".join(f"from {m} import {n} as {role}_fn"
                        for (m, n), role in zip(names, ROLES))
    head = _PRELUDE.format(kernels=event_kernels.__name__, names=", ".join(n for _, n in names),
                           rewritten=repr(REWRITTEN), imports=imports, remote=bool(remote))
    return head + "\n\n".join(parts) + "\n\nloop = _event_loop\n"


def loop_cache_dir() -> Path:
    """Where the loop modules (and numba's cache of them, in their ``__pycache__``) are kept."""
    env = os.environ.get("SVMSIM_CACHE_DIR")
    if env:
        return Path(env) / "loops"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "svmsim" / "loops"


def _importable(fn) -> tuple[str, str] | None:
    """(module, name) by which a jitted function can be imported, or None."""
    if not isinstance(fn, CPUDispatcher):
        return None
    py = fn.py_func
    module, name = getattr(py, "__module__", None), getattr(py, "__qualname__", "")
    if not module or "." in name or "<" in name:
        return None
    mod = sys.modules.get(module)
    if mod is None or getattr(mod, name, None) is not fn:
        return None
    return module, name


def _source_files(modules: list[ModuleType]) -> list[str]:
    """The files of `modules` and of every module whose jitted functions they hold as globals, transitively."""
    seen: dict[str, None] = {}
    todo = list(modules)
    names: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod.__name__ in names:
            continue
        names.add(mod.__name__)
        path = getattr(mod, "__file__", None)
        if path:
            seen[path] = None
        for value in vars(mod).values():
            if isinstance(value, CPUDispatcher):
                owner = sys.modules.get(getattr(value.py_func, "__module__", ""))
                if owner is not None and owner.__name__ not in names:
                    todo.append(owner)
    return sorted(seen)


#: loop modules kept (each about 0.7 MB with numba's cache): the least recently written go first
MAX_KEPT = 64


def _prune(folder: Path) -> None:
    """Remove the oldest loop modules and their numba cache beyond `MAX_KEPT - 1` (room for a new one)."""
    modules = sorted(folder.glob("svmsim_loop_*.py"), key=lambda p: p.stat().st_mtime)
    for old in modules[:max(0, len(modules) - (MAX_KEPT - 1))]:
        for f in [old, *(folder / "__pycache__").glob(f"{old.stem}.*")]:
            f.unlink(missing_ok=True)


def cached_loop(event_kernels: ModuleType, wake, receive, crash, recover, prefetch, remote: bool) -> Callable | None:
    """`event_kernels`' loop with these functions bound, from a cached module (written on first use), or None."""
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return None
    named = [_importable(f) for f in (wake, receive, crash, recover, prefetch)]
    if any(n is None for n in named):
        return None
    modules = [event_kernels] + [sys.modules[m] for m, _ in named]
    digest = hashlib.sha256()
    for part in (sys.version, numba.__version__, repr(named), repr(bool(remote))):
        digest.update(part.encode())
    try:
        for path in _source_files(modules):
            digest.update(path.encode())
            digest.update(Path(path).read_bytes())
    except OSError:
        return None
    text = _bound_source(event_kernels, remote, named)
    if text is None:
        return None
    digest.update(text.encode())
    stem = f"svmsim_loop_{digest.hexdigest()[:24]}"
    try:
        folder = loop_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{stem}.py"
        if not path.exists() or path.read_text() != text:
            _prune(folder)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, path)                       # atomic: a concurrent process reads old or new, whole
        module = sys.modules.get(stem)
        if module is None:
            spec = importlib.util.spec_from_file_location(stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[spec.name] = module
    except OSError:
        return None
    return module.loop
