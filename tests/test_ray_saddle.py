"""Saddle-DSVC on the Ray engines: the same ledger and iterates as in process; live metrics reach Prometheus."""
from __future__ import annotations

import dataclasses
import json
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from svmsim.algorithms.saddle import SaddleDSVCParams, build_saddle_dsvc  # noqa: E402
from svmsim.comm import Meter  # noqa: E402
from svmsim.deployment import Problem  # noqa: E402
from svmsim.engine import InProcessEngine  # noqa: E402
from svmsim.engine.ray_engine import RayEngine  # noqa: E402
from svmsim.schedule import SyncScheduler  # noqa: E402

pytestmark = pytest.mark.ray


def _run(engine, ds, T=60, compiled=None, **kw):
    dep = build_saddle_dsvc(SaddleDSVCParams(clients=20, **kw), Problem(ds, seed=2))
    groups = engine.plan(dep.roles)
    engine.deploy(groups, 2)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names, keep_log=not compiled)
    sched = SyncScheduler(engine, groups, meter, dep.n_nodes, compiled=compiled)
    sched.run(max_iterations=T)
    obs = {}
    for gid, o in sorted(engine.observe().items()):
        obs.setdefault(groups[gid].role, []).append(o)
    p = np.zeros(ds.n)
    for o in obs["client"]:
        p[o["index"]] = o["p"]
    return meter, obs["client"][0]["w"], p, [g.host for g in groups]


def assert_same_ledger(a, b):
    """Field by field (every counted quantity, per tag, edge, round and node; iteration ends)."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        elif isinstance(x, dict) and any(isinstance(v, np.ndarray) for v in x.values()):
            assert sorted(x) == sorted(y), f.name
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=f"{f.name}[{k}]")
        else:
            assert x == y, f.name
    assert a.equals(b)


# the nu variant's rounds are the hard margin's plus the cap rounds, which the in-process conformance checks hold
# (its Ray check runs with -m slow)
@pytest.mark.parametrize("kw", [{}, pytest.param({"alpha": 0.85}, marks=pytest.mark.slow)], ids=["hard", "nu"])
def test_dsvc_same_ledger_and_iterates_on_every_engine(ray_local, load, kw):
    """One run through every path: the Python loop, the compiled loop (in-process), Ray actors and the Ray
    compiled graph give the same ledger, field by field, and the same iterates, bit for bit."""
    ds = load("heart_scale")
    m0, w0, p0, _ = _run(InProcessEngine(), ds, **kw)
    mc, wc, pc, _ = _run(InProcessEngine(), ds, compiled=True, **kw)
    assert_same_ledger(mc.ledger(), m0.ledger())
    np.testing.assert_array_equal(wc, w0)
    np.testing.assert_array_equal(pc, p0)
    for compiled in (False, True):
        eng = RayEngine(compiled=compiled, actors=2, round_timeout=300)   # the first round may compile (numba)
        try:
            m1, w1, p1, hosts = _run(eng, ds, **kw)
        finally:
            eng.close()
        assert hosts == ["client-0..9+server", "client-0..9+server", "client-10..19"]   # server co-located
        assert_same_ledger(m1.ledger(), m0.ledger())
        assert m1.message_rows() == m0.message_rows()
        np.testing.assert_array_equal(w1, w0)      # bit for bit: per-client sums do not depend on the hosts
        np.testing.assert_array_equal(p1, p0)


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _wait_for_scalars(port: int, scenario: str, want: float) -> float:
    """The scalars that Prometheus shows for `scenario` (summed over role="all"), once they reach `want` or after
    40 s (Ray exports every second)."""
    deadline = time.time() + 40
    exported = -1.0
    while time.time() < deadline and exported != want:
        lines = [ln for ln in _scrape(port).splitlines() if ln.startswith("ray_svmsim_scalars_total{")
                 and f'scenario="{scenario}"' in ln and 'role="all"' in ln]
        exported = sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)
        if exported != want:
            time.sleep(0.5)
    return exported


def test_live_metrics_reach_the_prometheus_endpoint(ray_local, data_env):
    """Runs a scenario on the Ray engine (the session's Ray exports metrics every second) and scrapes them."""
    import svmsim
    from svmsim.monitor import METRIC_NAMES

    port = ray.nodes()[0]["MetricsExportPort"]
    scenario = {"name": "metrics-probe", "seed": 0, "data": {"name": "iris"},
                "engine": {"name": "ray", "actors": 2, "metrics": True},
                "algorithm": {"name": "saddle-dsvc", "clients": 4},
                "stop": {"max_iterations": 300}, "output": {"eval_every": 50, "progress": False}}
    res = svmsim.run(scenario, write=False)
    want = res.ledger.totals["scalars"]
    live = res.summary["live_metrics"]          # the run itself waited for its final counters (a joined Ray)
    assert live["final_exported"] is True and live["private_ray"] is False and str(port) in live["endpoint"]
    assert _scrape(port) and _wait_for_scalars(port, "metrics-probe", want) == want  # the ledger's totals
    again = svmsim.run(scenario, write=False)   # the same name adds to the same series: counted from its start
    assert again.summary["live_metrics"]["final_exported"] is True
    assert _wait_for_scalars(port, "metrics-probe", 2 * want) == 2 * want
    text = _scrape(port)
    assert "ray_svmsim_rel_gap" in text and "ray_svmsim_accuracy" in text
    assert 'tag="coord"' in text and 'role="client"' in text
    # a gossip run on Ray exports its totals at every evaluation point
    gossip = {"name": "metrics-gossip", "seed": 1, "data": {"name": "iris"},
              "topology": {"kind": "random_k_out", "k": 2}, "engine": {"name": "ray", "actors": 2},
              "algorithm": {"name": "pushsum", "nodes": 12}, "schedule": {"eval_time": 2.0},
              "stop": {"max_rounds": 10}, "output": {"progress": False}}
    g = svmsim.run(gossip, write=False)
    assert g.summary["live_metrics"]["final_exported"] is True
    assert _wait_for_scalars(port, "metrics-gossip", g.ledger.totals["scalars"]) == g.ledger.totals["scalars"]
    # node work (paper 003's kernel evaluations) is exported beside the messages
    kernel = {"name": "metrics-kernel", "seed": 0, "data": {"name": "heart_scale"},
              "engine": {"name": "ray", "actors": 2, "metrics": True},
              "algorithm": {"name": "dsbp", "clients": 3, "nu": 0.05, "epochs": 1},
              "stop": {"max_seconds": 300}, "output": {"eval_every": 50, "progress": False}}
    k = svmsim.run(kernel, write=False)
    want_work = k.final["kernel_evaluations"]
    assert want_work == k.final["iteration"] * 270
    def exported():
        return [ln for ln in _scrape(port).splitlines() if ln.startswith("ray_svmsim_node_work_total")
                and "metrics-kernel" in ln and "kernel_evaluations" in ln]

    deadline = time.time() + 30
    while time.time() < deadline and not (exported() and float(exported()[0].split()[-1]) >= want_work):
        time.sleep(1)
    assert exported() and float(exported()[0].split()[-1]) == want_work
    # the shipped Grafana dashboard only uses metric names svmsim exports
    dash = json.loads((Path(__file__).resolve().parents[1] / "dashboards" /
                       "svmsim_grafana_dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for name in METRIC_NAMES:
        assert f"ray_{name}" in exprs
    for used in {w for w in exprs.replace("(", " ").replace("{", " ").split() if w.startswith("ray_svmsim")}:
        base = used[len("ray_"):].removesuffix("_total")
        assert base in METRIC_NAMES


@pytest.mark.parametrize("name, pattern, compiled", [
    ("bqo-e", "ring", True), ("bqo-e", "tree", False),                 # each engine's path is held by one of these
    pytest.param("bqo-e", "ring", False, marks=pytest.mark.slow),      # two; TRON's protocol (an all-reduce per
    pytest.param("tron", "tree", False, marks=pytest.mark.slow),       # CG step) compiles its own kernels in the
    pytest.param("tron", "tree", True, marks=pytest.mark.slow)])       # Ray workers: minutes on a cold cache
def test_paper001_same_ledger_and_iterates_on_ray(ray_local, load, name, pattern, compiled):
    """Paper 001's workers (one all-reduce per iteration; TRON's per gradient and CG step) on Ray actors or the
    Ray compiled graph: the in-process ledger, field by field, and the same w and alpha, bit for bit."""
    from svmsim.algorithms.bqo import build_distributed
    from svmsim.algorithms.bqo.build import BQOParams, TronParams

    ds = load("heart_scale")
    params = (BQOParams if name == "bqo-e" else TronParams)(workers=6, allreduce=pattern)

    def run(engine, compiled=None):
        dep = build_distributed(name, params, Problem(ds, seed=1, topology_kind="complete"))
        groups = engine.plan(dep.roles)
        engine.deploy(groups, 1)
        meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names, keep_log=not compiled)
        # TRON's iteration is a gradient all-reduce and one per CG step (dozens of rounds): two iterations do
        SyncScheduler(engine, groups, meter, dep.n_nodes, compiled=compiled).run(
            max_iterations=8 if name == "bqo-e" else 2)
        obs = [o for _, o in sorted(engine.observe().items())]
        alpha = np.concatenate([o.get("alpha", np.zeros(0)) for o in obs])
        return meter, obs[0]["group"]["w"], alpha

    m0, w0, a0 = run(InProcessEngine())
    eng = RayEngine(compiled=compiled, actors=2, round_timeout=600)   # the first round may compile (numba)
    try:
        m1, w1, a1 = run(eng)
    finally:
        eng.close()
    assert_same_ledger(m1.ledger(), m0.ledger())
    assert m1.message_rows() == m0.message_rows()
    np.testing.assert_array_equal(w1, w0)
    np.testing.assert_array_equal(a1, a0)


def test_the_metrics_endpoint_never_starts_a_ray(monkeypatch):
    """Asked after the run's Ray has gone, `metrics_endpoint` says there is none instead of asking Ray's runtime
    context (which would start a fresh local Ray, as ray.get_runtime_context() does when none is initialised)."""
    import ray

    import svmsim.monitor as monitor

    def started():
        raise AssertionError("metrics_endpoint asked Ray's runtime context with no Ray initialised")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "get_runtime_context", started)
    assert monitor.metrics_endpoint() is None


def test_the_final_export_wait_reports_and_never_fails_the_run(monkeypatch):
    """Ray that cannot say where its metrics agent is (or an endpoint that does not answer): finish() reports that
    the final counters were not seen, within its wait, instead of raising at the end of a finished run."""
    import svmsim.monitor as monitor

    live = object.__new__(monitor.LiveMetrics)
    live.scenario, live._baseline, live._exported = "s", None, 10.0

    def broken():
        raise RuntimeError("no node")

    monkeypatch.setattr(monitor, "metrics_endpoint", broken)
    assert live._shown() == 0.0
    out = live.finish(wait=0.5)
    assert out["final_exported"] is False and out["endpoint"] is None and out["waited_s"] < 0.5
    monkeypatch.setattr(monitor, "metrics_endpoint", lambda: "http://127.0.0.1:9/metrics")   # nothing listens
    out = live.finish(wait=0.5)
    assert out["final_exported"] is False and out["endpoint"] == "http://127.0.0.1:9/metrics"
