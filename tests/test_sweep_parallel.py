"""`svmsim sweep --jobs N` and `--resume`: the same files whatever runs the points and in whatever order they
finish, a failing point recorded while the others go on, and an interrupted sweep continued to the same files."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from svmsim import runner
from svmsim.cli import main
from svmsim.runner import read_run, recorded
from svmsim.sweep import SweepInterrupted, plan_sweep, run_sweep
from svmsim.core.metrics import WALL_CLOCK_METRICS

ROOT = Path(__file__).resolve().parents[1]

# iris, Saddle-DSVC with 3 clients: about a second a point; k = 200 clients is more than iris's 150 points, which
# only the run finds out (the partition), so those points fail while the others complete
SWEEP = """\
name = "sweep-par"
seed = 0
[data]
name = "iris"
[partition]
scheme = "stratified"
[algorithm]
name = "saddle-dsvc"
clients = 3
[stop]
max_iterations = 200000
[output]
eval_every = 25
progress = false
[sweep.grid]
eps = [1e-1, 1e-2]
k = [3, 200]
"""


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    return path


def _timed(name: str) -> bool:
    """A column or key that measures wall-clock time (wall_time, wall_time_total, compile_time, cost_wall_time...)
    or holds such measures (summary.json's timing)."""
    name = name.strip()
    return "wall_time" in name or name in WALL_CLOCK_METRICS or name == "timing"


def _mask_table_columns(lines: list[str], sep: str) -> list[str]:
    """Blank the cells of columns whose header names a wall time (one table: header first)."""
    out = []
    wall: set[int] = set()
    for line in lines:
        cells = line.split(sep)
        if any(_timed(c) for c in cells):
            wall = {i for i, c in enumerate(cells) if _timed(c)}
            out.append(line)
            continue
        out.append(sep.join("" if i in wall else c for i, c in enumerate(cells)))
    return out


def _mask_json(value):
    if isinstance(value, dict):
        return {k: (None if _timed(k) else _mask_json(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v) for v in value]
    return value


def _masked(path: Path):
    """A file's content with its wall-time values blanked (the only thing that may differ between two runs)."""
    if path.suffix == ".json":
        return _mask_json(json.loads(path.read_text()))
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(path.read_text())))
        wall = {i for i, c in enumerate(rows[0]) if _timed(c)}
        return [rows[0]] + [["" if i in wall else c for i, c in enumerate(r)] for r in rows[1:]]
    if path.suffix == ".md":
        return _mask_table_columns(path.read_text().splitlines(), " | ")
    if path.name == "summary.txt":
        lines = path.read_text().splitlines()
        cut = lines[0].find("wall_time")
        return [line[:cut] for line in lines] if cut >= 0 else lines
    return path.read_bytes()


def _tree(directory: Path) -> dict[str, object]:
    return {str(p.relative_to(directory)): _masked(p) for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_same_files(a: Path, b: Path) -> None:
    ta, tb = _tree(a), _tree(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name] == tb[name], name


def sequential_sweep(sweep_file: Path, out: Path) -> subprocess.CompletedProcess:
    """`svmsim sweep FILE --out OUT` in a process of its own, as a user runs it: the reference that sweeps run
    elsewhere (pool workers, Ray tasks, another node) are held to."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "svmsim.cli", "sweep", str(sweep_file), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, env=env, timeout=600)


def test_jobs_2_writes_the_files_of_the_sequential_sweep_and_records_the_failing_points(sweep_file, tmp_path):
    seq, par = tmp_path / "seq", tmp_path / "par"
    r = sequential_sweep(sweep_file, seq)
    assert r.returncode == 3, r.stderr[-2000:]
    err = r.stderr
    assert "2 of 4 points failed" in err and "clients = 200 exceeds the number of training points" in err
    res = run_sweep(sweep_file, out=par, progress=False, jobs=2)
    assert_same_files(seq, par)
    # grid order, whatever order the workers finished in; the failed points are rows with their error
    assert [(r["eps"], r["k"], r["status"]) for r in res.rows] == [
        (0.1, 3, "ok"), (0.1, 200, "failed"), (0.01, 3, "ok"), (0.01, 200, "failed")]
    assert [r["k"] for r in res.failed] == [200, 200]
    assert "exceeds the number of training points" in res.failed[0]["error"]
    assert res.runs[1] is None and res.runs[0].ledger is not None
    assert sorted(p.name for p in (par / "runs").iterdir()) == ["saddle-dsvc__eps=0.01__k=3",
                                                              "saddle-dsvc__eps=0.1__k=3"]
    md = (par / "sweep.md").read_text()
    assert "2 of 4 points failed" in md and "| failed |" in md
    rows = list(csv.DictReader(open(par / "sweep.csv")))
    assert [r["status"] for r in rows] == ["ok", "failed", "ok", "failed"]
    assert rows[0]["reached"] == "True" and rows[1]["cost_scalars"] == ""


def test_a_sweep_without_failures_has_no_status_column(tmp_path):
    spec = {"name": "ok", "seed": 0, "data": {"name": "iris"}, "partition": {"scheme": "stratified"},
            "algorithm": {"name": "saddle-dsvc", "clients": 3}, "stop": {"max_iterations": 50},
            "output": {"eval_every": 25, "progress": False}, "sweep": {"grid": {"k": [2, 3]}}}
    res = run_sweep(spec, out=tmp_path / "sw", progress=False)
    assert not res.failed and all("status" not in r for r in res.rows)
    assert "status" not in (tmp_path / "sw" / "sweep.csv").read_text().splitlines()[0]


def test_a_run_read_back_from_its_directory_is_the_recorded_run(tmp_path):
    (_, points) = plan_sweep(SWEEP_DICT, [("eps", [1e-2])])
    res = runner.run(points[0].scenario, out_dir=tmp_path / "run", progress=False)
    back, mine = read_run(tmp_path / "run", points[0].scenario), recorded(res)
    assert back.metrics == mine.metrics and back.summary == mine.summary and back.stop_reason == mine.stop_reason
    assert back.metrics[-1]["rel_gap"] == res.metrics[-1]["rel_gap"]      # floats exactly, through their text
    assert sorted(back.model) == sorted(mine.model)
    other = plan_sweep(SWEEP_DICT, [("eps", [1e-1])])[1][0].scenario
    with pytest.raises(ValueError, match="another scenario"):
        read_run(tmp_path / "run", other)
    (tmp_path / "run" / "metrics.csv").unlink()
    with pytest.raises(ValueError, match="has no metrics.csv"):
        read_run(tmp_path / "run", points[0].scenario)


SWEEP_DICT = {"name": "sweep-par", "seed": 0, "data": {"name": "iris"}, "partition": {"scheme": "stratified"},
              "algorithm": {"name": "saddle-dsvc", "clients": 3}, "stop": {"max_iterations": 200000},
              "output": {"eval_every": 25, "progress": False}}


def test_resume_reruns_only_the_points_without_a_finished_run(sweep_file, tmp_path, monkeypatch):
    full = tmp_path / "full"
    run_sweep(sweep_file, out=full, progress=False)
    again = tmp_path / "again"
    shutil.copytree(full, again)
    kept = again / "runs" / "saddle-dsvc__eps=0.1__k=3"
    damaged = again / "runs" / "saddle-dsvc__eps=0.01__k=3"
    (damaged / "ledger_rounds.csv").unlink()                     # a run directory partly removed
    (again / "runs" / "stale-point").mkdir()                     # not a point of this sweep
    before = {p.name: p.stat().st_mtime_ns for p in kept.iterdir()}
    ran = []
    real = runner.run

    def counting(scenario, **kw):
        ran.append(kw["out_dir"].name)
        return real(scenario, **kw)

    monkeypatch.setattr(runner, "run", counting)
    res = run_sweep(sweep_file, out=again, progress=False, resume=True)
    # the damaged point and the two failed ones ran again; the finished one was read back, its files untouched
    assert ran == ["saddle-dsvc__eps=0.1__k=200", "saddle-dsvc__eps=0.01__k=3", "saddle-dsvc__eps=0.01__k=200"]
    assert {p.name: p.stat().st_mtime_ns for p in kept.iterdir()} == before
    assert res.runs[0].ledger is None and res.runs[0].run_dir == kept       # read back: the totals are in summary
    assert_same_files(full, again)
    assert not list(tmp_path.glob(".*incomplete"))


def test_an_interrupted_sweep_keeps_its_finished_points_and_resumes_to_the_same_files(sweep_file, tmp_path,
                                                                                     monkeypatch):
    full = tmp_path / "full"
    run_sweep(sweep_file, out=full, progress=False)
    real = runner.run
    calls = []

    def interrupted_third(scenario, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(scenario, **kw)

    monkeypatch.setattr(runner, "run", interrupted_third)
    out = tmp_path / "sw"
    with pytest.raises(SweepInterrupted) as info:
        run_sweep(sweep_file, out=out, progress=False)
    assert (info.value.done, info.value.total) == (2, 4)
    assert not out.exists() and info.value.directory == tmp_path / ".sw.incomplete"
    assert [p.name for p in (info.value.directory / "runs").iterdir()] == ["saddle-dsvc__eps=0.1__k=3"]
    monkeypatch.setattr(runner, "run", real)
    run_sweep(sweep_file, out=out, progress=False, resume=True)
    assert_same_files(full, out)


def _ctrl_c_as_a_shell_gives_it() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_sigint_stops_the_workers_and_resume_finishes_the_sweep(tmp_path):
    """A real Ctrl-C to `svmsim sweep --jobs 2`: the sweep exits 130 and says where its finished points are; no
    directory looks finished; --resume ends with the files of an uninterrupted sweep."""
    path = tmp_path / "seeds.toml"
    # two short points, then two long ones (about 5 s of rounds each here, 100x the short): the interrupt lands while
    # the long ones run, so the sweep cannot have finished before it. `[compression]` (codec "none": the same
    # numbers) keeps every round in Python, so a point's length does not depend on whether an earlier process left
    # the compiled loop in the cache (in it, 20,000 iterations take milliseconds)
    path.write_text(SWEEP.replace("eps = [1e-1, 1e-2]\nk = [3, 200]",
                                  '"stop.max_iterations" = [200, 20000]\nseed = [0, 1]')
                    .replace("max_iterations = 200000", "max_iterations = 200000\ngap = 1e-9")
                    .replace("eval_every = 25", "eval_every = 2000")
                    .replace("[sweep.grid]", '[compression]\ncodec = "none"\n[sweep.grid]'))
    out = tmp_path / "sw"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # the sweep gets Ctrl-C as a shell gives it: SIGINT neither ignored nor blocked, whatever this test process
    # inherited or a library of an earlier test set (a child inherits both across exec)
    inherited = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    proc = subprocess.Popen([sys.executable, "-m", "svmsim.cli", "sweep", str(path), "--jobs", "2", "--out", str(out),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path, preexec_fn=_ctrl_c_as_a_shell_gives_it)
    runs = tmp_path / ".sw.incomplete" / "runs"
    started = time.time()
    deadline = started + 240
    while time.time() < deadline and proc.poll() is None:
        if runs.is_dir() and any(not p.name.startswith(".") for p in runs.iterdir()):
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    seen = sorted(p.name for p in runs.iterdir())
    proc.send_signal(signal.SIGINT)
    sent = time.time() - started
    out_text, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, (f"SIGINT at {sent:.1f} s, runs then {seen}, this process's SIGINT "
                                    f"{inherited}; stderr {err[-1500:]!r}; stdout {out_text[-1500:]!r}")
    assert "interrupted after" in err and "--resume --out" in err and "Traceback" not in err
    assert not out.exists()
    finished = [p.name for p in runs.iterdir() if not p.name.startswith(".")]
    assert 1 <= len(finished) <= 2 and all("=20000" not in name for name in finished), finished
    res = run_sweep(path, out=out, progress=False, resume=True, jobs=2)
    assert not res.failed and len(res.rows) == 4
    seq = tmp_path / "seq"
    sequential_sweep(path, seq)
    assert_same_files(seq, out)


def test_bad_jobs_and_resume_arguments_get_clear_errors(sweep_file, tmp_path, capsys):
    assert main(["sweep", str(sweep_file), "--jobs", "0", "--out", str(tmp_path / "a")]) == 2
    assert "jobs = 0 is invalid; allowed: an integer >= 1" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--resume"]) == 2
    assert "--resume needs the sweep directory" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--resume", "--no-runs", "--out", str(tmp_path / "b")]) == 2
    assert "from their run directories; allowed: --resume without" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--jobs", "2", "--engine", "ray", "--out", str(tmp_path / "c")]) == 2
    assert "runs on a Ray engine" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--jobs", "2", "--ray", "--out", str(tmp_path / "d")]) == 2
    assert "--ray and --jobs 2 both say where the points run" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--address", "auto", "--out", str(tmp_path / "e")]) == 2
    assert "allowed: --address with" in capsys.readouterr().err
    assert not any(p.name != "sweep.toml" for p in tmp_path.iterdir())


@pytest.mark.ray
def test_ray_tasks_write_the_files_of_the_sequential_sweep(sweep_file, tmp_path, ray_local):
    """--ray: each point a Ray task (on the session's Ray, which the sweep leaves running); the run directories are
    written by the sweep from the runs the tasks return, the same files as a sweep run here."""
    seq, on_ray = tmp_path / "seq", tmp_path / "ray"
    sequential_sweep(sweep_file, seq)
    res = run_sweep(sweep_file, out=on_ray, progress=False, ray=True)
    assert_same_files(seq, on_ray)
    assert [r["k"] for r in res.failed] == [200, 200] and ray_local.is_initialized()
    assert res.runs[0].run_dir == on_ray / "runs" / "saddle-dsvc__eps=0.1__k=3"


_TWO_NODE_SWEEP = r'''
import json, sys
from pathlib import Path
import ray
from ray.cluster_utils import Cluster
from svmsim.sweep import run_sweep

sweep_file, out = Path(sys.argv[1]), Path(sys.argv[2])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
try:
    res = run_sweep(sweep_file, out=out, progress=False, ray=True, address=cluster.address)
    nodes = sorted(node.node_id for node in cluster.list_all_nodes())
    print(json.dumps({"ran_on": res.nodes, "nodes": nodes, "failed": [r["k"] for r in res.failed]}))
finally:
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()
'''


@pytest.mark.ray
def test_a_sweep_on_a_two_node_cluster_runs_on_both_nodes_and_writes_the_sequential_files(sweep_file, tmp_path):
    """`svmsim sweep --ray --address`: a two-node Ray cluster on this machine (ray.cluster_utils.Cluster, in a
    process of its own so that the session's Ray is left alone), one CPU a node: the points are spread over both
    nodes, and the sweep's files are the sequential sweep's (wall times aside)."""
    seq, on_cluster = tmp_path / "seq", tmp_path / "cluster"
    sequential_sweep(sweep_file, seq)
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    r = subprocess.run([sys.executable, "-c", _TWO_NODE_SWEEP, str(sweep_file), str(on_cluster)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(out["nodes"]) == 2 and set(out["ran_on"]) == set(out["nodes"])
    assert out["failed"] == [200, 200]
    assert_same_files(seq, on_cluster)


def test_a_sweep_worker_shares_the_cores_with_the_others():
    """N workers that each kept a BLAS thread per core were slower together than one point after another (12-point
    bench at n = 8000: --jobs 2 at 1.2x the sequential time; 0.59x with one thread each): a worker's BLAS uses
    cores // jobs threads."""
    import subprocess
    import sys

    code = ("import multiprocessing as mp, numpy\n"
            "from threadpoolctl import threadpool_info\n"
            "from svmsim.sweep import _init_worker\n"
            "_init_worker(mp.get_context('spawn').SimpleQueue(), 1)\n"
            "print(sorted({p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1]"
