"""svmsim's compiled loops are kept on disk (`schedule.loop_cache`): every shipped gossip kernel's event loop, and the
synchronous rounds of steps that can be imported by name, come from generated modules that numba caches; a second
process loads them instead of compiling them; an edit to a source a loop is compiled from gives a new module, and
functions that cannot be imported by name fall back to the loop compiled in memory. (That every shipped
synchronous step can be imported by name is a conformance check: `conformance.check_compiled`.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from svmsim.algorithms.gadget import _kernel_crash, _kernel_prefetch, _kernel_receive, _kernel_recover, _kernel_wake
from svmsim.algorithms.pushsum import pushsum_prefetch, pushsum_receive, pushsum_wake
from svmsim.program import _kernel_no_crash, _kernel_no_prefetch, _kernel_no_recover
from svmsim.schedule import event_kernels, loop_cache

ROOT = Path(__file__).resolve().parent.parent
KERNELS = {"pushsum": (pushsum_wake, pushsum_receive, _kernel_no_crash, _kernel_no_recover, pushsum_prefetch),
           "gadget": (_kernel_wake, _kernel_receive, _kernel_crash, _kernel_recover, _kernel_prefetch)}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SVMSIM_CACHE_DIR", str(tmp_path))
    return tmp_path / "loops"


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("remote", [False, True])
def test_every_shipped_kernel_gets_a_generated_cacheable_loop(cache_dir, name, remote):
    loop = loop_cache.cached_loop(event_kernels, *KERNELS[name], remote)
    assert loop is not None
    assert loop.py_func.__module__.startswith("svmsim_loop_")
    assert type(loop._cache).__name__ == "FunctionCache"          # numba keeps it (not its NullCache)
    text = Path(sys.modules[loop.py_func.__module__].__file__).read_text()
    assert f"remote = {remote}" in text and "_fn, " not in text
    # the same functions give the same module; the other `remote` another one
    assert loop_cache.cached_loop(event_kernels, *KERNELS[name], remote) is loop
    assert loop_cache.cached_loop(event_kernels, *KERNELS[name], not remote) is not loop


def test_a_second_process_loads_the_loop_instead_of_compiling_it(tmp_path):
    code = ("import time, svmsim\n"
            "from numba.core import event as ev\n"
            "compiled = []\n"
            "class L(ev.Listener):\n"
            "    def on_start(self, e): pass\n"
            "    def on_end(self, e): compiled.append(e.data['dispatcher'].py_func.__qualname__)\n"
            "ev.register('numba:compile', L())\n"
            "r = svmsim.run('scenarios/pushsum_mixing.toml', overrides={'algorithm.nodes': 200, "
            "'algorithm.values': 'random', 'algorithm.dim': 3, 'stop.max_rounds': 2}, write=False, progress=False)\n"
            "print(r.final['messages'], '_event_loop' in compiled)\n")
    env = {**os.environ, "SVMSIM_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for out in runs:
        assert out.returncode == 0, out.stderr[-2000:]
    (m1, first), (m2, second) = (out.stdout.split() for out in runs)
    assert m1 == m2
    assert first == "True" and second == "False"            # compiled once, then loaded from numba's cache


def test_an_edit_to_a_source_of_the_loop_gives_a_new_module(cache_dir, monkeypatch):
    loop = loop_cache.cached_loop(event_kernels, *KERNELS["pushsum"], False)
    real = Path.read_bytes

    def edited(path):
        data = real(path)
        return data + b"\n# edited\n" if Path(path).as_posix().endswith("pushsum/methods.py") else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    other = loop_cache.cached_loop(event_kernels, *KERNELS["pushsum"], False)
    assert other is not None and other.py_func.__module__ != loop.py_func.__module__


def test_functions_that_cannot_be_imported_by_name_compile_in_memory(cache_dir):
    @numba.njit
    def wake(arrays, node, t, out_dst, out_tag, out_pay):
        return 0, False

    assert loop_cache.cached_loop(event_kernels, wake, pushsum_receive, _kernel_no_crash, _kernel_no_recover,
                                  _kernel_no_prefetch, False) is None
    assert not cache_dir.exists() or not list(cache_dir.glob("*.py"))


def test_old_modules_are_pruned(cache_dir, monkeypatch):
    monkeypatch.setattr(loop_cache, "MAX_KEPT", 2)
    cache_dir.mkdir(parents=True)
    for i in range(3):
        (cache_dir / f"svmsim_loop_{i:024d}.py").write_text("")
    loop_cache.cached_loop(event_kernels, *KERNELS["pushsum"], False)
    assert len(list(cache_dir.glob("svmsim_loop_*.py"))) == 2


_QUIET_STEP = """import numba


@numba.njit(cache=True, nogil=True)
def quiet_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    st[0][0] += 1.0
    return 0, -1, 0
"""

_QUIET_RUN = """import numpy as np
from numba.core import event as ev

from quiet_steps import quiet_step
from svmsim.comm.meter import Meter
from svmsim.program import SyncKernel
from svmsim.schedule import compiled_sync

compiled = []


class Compiled(ev.Listener):
    def on_start(self, e):
        pass

    def on_end(self, e):
        compiled.append(e.data["dispatcher"].py_func.__qualname__)


ev.register("numba:compile", Compiled())
state = (np.zeros(1),)
kernel = SyncKernel(state, quiet_step, ("t",), np.array([1], np.int64), 1)
mail, scratch = compiled_sync.CompiledMail(1, 4, 1), compiled_sync.CompiledMail(1, 4, 1)
mail.wake[0] = True
out = compiled_sync.run_compiled_rounds([kernel], mail, scratch, np.zeros(2, np.int64), Meter(2, ~np.eye(2, dtype=bool)),
                                        round_=0, iteration=0, max_rounds=3, max_scalars=None, max_iterations=None,
                                        observe_every=0)
print(out[0], state[0][0], "_loop_compiled" in compiled)
"""


def test_a_second_process_loads_the_synchronous_rounds_instead_of_compiling_them(tmp_path):
    """The compiled rounds of a step importable by name: the first process compiles them into a module of the cache
    directory, the second loads them from numba's cache and gets the same run."""
    (tmp_path / "quiet_steps.py").write_text(_QUIET_STEP)
    env = {**os.environ, "SVMSIM_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    runs = [subprocess.run([sys.executable, "-c", _QUIET_RUN], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for out in runs:
        assert out.returncode == 0, out.stderr[-2000:]
    first, second = (out.stdout.split() for out in runs)
    assert first[:2] == second[:2] == ["1", "1.0"]          # quiescent after the one woken step, stepped once
    assert first[2] == "True" and second[2] == "False"
    modules = list((tmp_path / "cache" / "loops").glob("svmsim_rounds_*.py"))
    assert len(modules) == 1 and "from quiet_steps import quiet_step as step_0" in modules[0].read_text()


def test_the_synchronous_rounds_of_a_step_that_cannot_be_imported_compile_in_memory(cache_dir, monkeypatch):
    import svmsim.algorithms.collective  # noqa: F401 - the module of the step named below
    from svmsim.program import SyncKernel
    from svmsim.schedule import compiled_sync

    @numba.njit
    def local_step(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
        return 0, -1, 0

    kernel = SyncKernel((np.zeros(1),), local_step, ("t",), np.array([1], np.int64), 1)
    assert not compiled_sync.loop_cacheable([kernel])
    monkeypatch.setattr(compiled_sync, "_LOOPS", {})
    loop = compiled_sync._loop((True,), ((-1, -1),), None)
    assert type(loop._cache).__name__ == "NullCache" and not cache_dir.exists()
    cached = compiled_sync._loop((True,), ((-1, -1),), (("svmsim.algorithms.collective", "collective_kernel_step"),))
    assert type(cached._cache).__name__ == "FunctionCache" and cached.py_func.__module__.startswith("svmsim_rounds_")
    text = Path(sys.modules[cached.py_func.__module__].__file__).read_text()
    assert "kinds[0][1]" not in text and "step_0(" in text



def test_a_loop_cached_under_numba_cache_dir_is_found_there(tmp_path, monkeypatch):
    """With $NUMBA_CACHE_DIR set, numba keeps a module's cache in a folder of its own there (named after the source
    folder and a hash of its path), not beside the module; `module_compiled` looks where numba writes it. The rule
    is checked against numba itself (a fresh process compiling a cached function of a module in a folder)."""
    folder = tmp_path / "loops"
    folder.mkdir()
    (folder / "mod_x.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x + 1\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(folder)!r}); import mod_x; "
                          "mod_x.f(1)"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    index = loop_cache._numba_index_dir(folder)
    assert any(index.glob("mod_x.f-*.nbi")), sorted(p.name for p in (tmp_path / "numba").rglob("*"))
    # a loop module whose index sits there counts as compiled; beside the module it would not
    monkeypatch.setenv("SVMSIM_CACHE_DIR", str(tmp_path))
    text, modules = "x = 1\n", [sys.modules["svmsim.schedule.loop_cache"]]
    stem = loop_cache._stem("svmsim_rounds", text, modules, ())
    assert not loop_cache.module_compiled("svmsim_rounds", text, modules)
    (index / f"{stem}.loop-1.py311.nbi").write_text("")
    assert loop_cache.module_compiled("svmsim_rounds", text, modules)
