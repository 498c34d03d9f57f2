"""Shared pytest fixtures."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# every Ray the tests start (the session's, the CLI's private ones, the two-node cluster) starts its worker processes
# when a task or actor needs one, not a worker per CPU when the first driver connects: idle prestarted workers (about
# 280 MB each) were most of the suite's peak memory
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")


def _uses_session_ray(item) -> bool:
    return "ray_local" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With pytest-xdist's workers (the default ``-n 2 --dist loadgroup`` of pyproject.toml), the tests that use
    Ray (marked ``ray`` or using `ray_local`) all run on one worker, one after another: one Ray at a time on the
    machine, while the other worker takes the rest. They are the suite's longest chain, so with workers they are
    collected first, and within it the tests that start a Ray of their own (a CLI's, a two-node cluster) come
    before those on the session's Ray, which is shut down after the last of them (`pytest_runtest_teardown`)."""
    ray = []
    for item in items:
        if item.get_closest_marker("ray") is not None or _uses_session_ray(item):
            item.add_marker(pytest.mark.xdist_group("ray"))
            ray.append(item)
    if ray and getattr(config.option, "numprocesses", None):    # the one long serial chain starts first
        chosen = set(map(id, ray))
        ray.sort(key=_uses_session_ray)                         # stable: their own Rays first, then the session's
        items[:] = ray + [item for item in items if id(item) not in chosen]


def pytest_runtest_teardown(item, nextitem):
    """The session's Ray goes as soon as the tests that use it are over (its processes hold several hundred MB
    that the rest of the suite does not need); a later test that asks for it starts it again."""
    if _uses_session_ray(item) and (nextitem is None or not _uses_session_ray(nextitem)):
        _stop_session_ray()


def pytest_terminal_summary(terminalreporter):
    """The number of documentation code blocks run (and checked, and not run with a reason), over every page."""
    from tests.test_docs_examples import pytest_terminal_summary_lines

    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])]
    for line in pytest_terminal_summary_lines(reports):
        terminalreporter.write_line(line)


_SESSION_RAY: dict = {}      # the temporary folder of the Ray that `ray_local` started, while it runs


def _stop_session_ray() -> None:
    temp_dir = _SESSION_RAY.pop("temp_dir", None)
    if temp_dir is not None:
        import ray

        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def ray_local():
    """One local Ray instance for the test session's Ray tests (started at the first that asks, unless Ray is
    already running; shut down after the last, or at the end of the session)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        temp_dir = tempfile.mkdtemp(prefix="svmsim-ray-")  # short path: Ray's socket paths must stay < 108 chars
        # metrics every second (Ray's floor) so that the live-metrics test sees its counters quickly
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=300 * 1024**2,
                 log_to_driver=False, _temp_dir=temp_dir, _system_config={"metrics_report_interval_ms": 1000})
        _SESSION_RAY["temp_dir"] = temp_dir
    return ray


@pytest.fixture(scope="session", autouse=True)
def _session_ray_stops_at_the_end():
    yield
    _stop_session_ray()


def shared_data_path() -> Path:
    """The LIBSVM sets: ``SVMSIM_DATA_DIR`` when it names a folder, else ``shared/data`` beside the checkout."""
    named = os.environ.get("SVMSIM_DATA_DIR")
    if named and Path(named).is_dir():
        return Path(named).resolve()
    return Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The project's shared data folder (skips when it is not there)."""
    path = shared_data_path()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} not found")
    return path


@pytest.fixture(scope="session")
def load(shared_data_dir):
    """Load a data set by name from the shared folder, once per session."""
    from svmsim.data import load_dataset

    cache = {}

    def _load(name, **kw):
        key = (name, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = load_dataset(name, data_dir=shared_data_dir, **kw)
        return cache[key]

    return _load


@pytest.fixture
def data_env(shared_data_dir, monkeypatch):
    """SVMSIM_DATA_DIR pointing at the shared data folder (for scenario runs and the CLI)."""
    monkeypatch.setenv("SVMSIM_DATA_DIR", str(shared_data_dir))
    return shared_data_dir


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """svmsim's caches (reference optima, compiled round and event loops) go to a temporary folder of this test
    session, not the user's ~/.cache/svmsim. The folder is shared by the session's xdist workers (and the Ray
    workers and subprocesses they start, which inherit the variable), so a loop or a reference one of them made is
    loaded by the others instead of being made again (both caches write whole files under temporary names)."""
    import os

    old = os.environ.get("SVMSIM_CACHE_DIR")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base    # pytest-N/, above popen-gwK/
    folder = shared / "svmsim-cache"
    folder.mkdir(exist_ok=True)
    os.environ["SVMSIM_CACHE_DIR"] = str(folder)
    yield
    if old is None:
        os.environ.pop("SVMSIM_CACHE_DIR", None)
    else:
        os.environ["SVMSIM_CACHE_DIR"] = old


@pytest.fixture
def checkpoints_on_schedule(monkeypatch):
    """Checkpoints exactly every `checkpoint_every` calls (not later when one is slow against the calls between,
    which the journal allows for: see `ray_actors.MAX_CHECKPOINT_SHARE`), so the test knows where they are."""
    from svmsim.engine import ray_actors

    monkeypatch.setattr(ray_actors, "MAX_CHECKPOINT_SHARE", 1e9)
