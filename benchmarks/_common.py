"""Shared helpers of svmsim's benchmarks: data location, timing, result files."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def data_dir() -> Path:
    env = os.environ.get("SVMSIM_DATA_DIR")
    return Path(env) if env else HERE.parent.parent / "shared" / "data"


def median_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "processor": platform.processor() or platform.machine()},
               "when": time.strftime("%Y-%m-%d %H:%M:%S"), **payload}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2))
    return path


def table(rows: list[dict], cols: list[str]) -> str:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in cols}
    line = "  ".join(c.ljust(widths[c]) for c in cols)
    out = [line, "  ".join("-" * widths[c] for c in cols)]
    for r in rows:
        out.append("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in cols))
    return "\n".join(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def gossip_cli_run(scenario: Path, sets: dict, workdir: Path, engine: str = "inproc", actors: int = 1) -> dict:
    """One gossip scenario through the CLI in a fresh process (`sets`: its --set overrides; live metrics and plots
    off), and what it cost: messages and rounds to the stop, the stop reason and final consensus error (where the
    run reports one); the process's wall time end to end; the run's own wall time (the gossip loop from its start to
    the stop decision, evaluations included: the last metrics row's ``wall_time``); set-up (end to end minus the
    run: imports, data, topology and its facts, deployment, Ray's start, writing the run directory); messages per
    second end to end and over the run; the process's peak memory (RSS; a Ray host actor is not its child, so its
    memory is not in it). The CLI runs this checkout's svmsim (its root is the process's directory and first on its
    path), not an installed copy or the caller's directory's."""
    import shutil
    import subprocess
    import sys

    workdir, scenario = Path(workdir).resolve(), Path(scenario).resolve()
    out = workdir / f"{engine}-{actors}-{len(list(workdir.iterdir()))}"
    sets = {**sets, "output.plots": "false", "engine.metrics": "false"}
    cmd = [sys.executable, "-m", "svmsim.cli", "run", str(scenario), "--engine", engine, "--out", str(out),
           "--no-progress", "--quiet"]
    if engine != "inproc":
        cmd += ["--actors", str(actors)]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    t0 = time.perf_counter()
    err = workdir / f"{out.name}.stderr"
    # this checkout's svmsim, whatever the caller's directory (first on `python -m`'s path) or installed copy
    root = str(HERE.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if env.get("SVMSIM_DATA_DIR"):                  # relative to the caller's directory, not the checkout's
        env["SVMSIM_DATA_DIR"] = str(Path(env["SVMSIM_DATA_DIR"]).resolve())
    with open(err, "w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, cwd=root, env=env)
        _, status, usage = os.wait4(proc.pid, 0)        # (its own peak memory, not the largest child's so far)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{engine} run of {scenario.name} {sets} failed ({code}):\n{err.read_text()[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    final = summary["final"]
    run_wall = float(final["wall_time"])
    messages = int(summary["sent_messages"])
    nodes = int(summary.get("algorithm_info", {}).get("nodes", sets.get("algorithm.nodes", 0)))
    row = {"engine": engine, "actors": actors if engine != "inproc" else None, "nodes": nodes,
           "messages": messages, "rounds": summary["rounds"], "stop_reason": summary["stop_reason"],
           "consensus_error": final.get("consensus_error"), "wall_s": wall, "run_s": run_wall,
           "setup_s": wall - run_wall, "messages_per_s_total": messages / wall, "messages_per_s_run": messages / run_wall,
           "peak_rss_gb": usage.ru_maxrss * 1024 / 1e9}
    ray = summary.get("ray_gossip")
    if ray:
        row.update(cross_host_fraction=ray["cross_host_fraction"], cross_host_calls=ray["cross_host_calls"],
                   late_fraction=ray["late_fraction"])
    shutil.rmtree(out, ignore_errors=True)
    return row
