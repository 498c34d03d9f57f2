"""The compiled gossip event loop is kept on disk (`schedule.loop_cache`): every shipped gossip kernel's loop comes
from a generated module that numba caches, a second process loads it instead of compiling it, an edit to a source
it is compiled from gives a new module, and functions that cannot be imported by name fall back to the loop
compiled in memory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numba
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
        return data + b"\n# edited\n" if str(path).endswith("pushsum.py") else data

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
