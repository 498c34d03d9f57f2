"""Tests that catch the four bugs a mutation study planted and the suite let through (each test names the bug it
catches), and the metrics row that went back in time."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import svmsim
from svmsim.schedule.event_kernels import COUNTERS, HEAP_KEY, heap_pop, heap_push


def test_compiled_event_heap_orders_by_time_then_priority_then_sequence():
    """Planted bug 1: the compiled heap compared the sequence number before the priority, so equal-time events
    popped as [5, 4, 0] instead of [0, 4, 5]. Random events with many ties, against a sort of the same keys."""
    rng = np.random.default_rng(17)
    for trial in range(200):
        n = int(rng.integers(1, 60))
        times = rng.integers(0, 4, n).astype(np.float64)          # few distinct times: many ties
        prios = rng.integers(0, 6, n)
        ht, hk = np.zeros(n + 1), np.zeros(n + 1, HEAP_KEY)
        ctr = np.zeros(1, COUNTERS)
        for i in range(n):
            heap_push(ht, hk, ctr, times[i], prios[i], i, 0)
        popped = [heap_pop(ht, hk, ctr) for _ in range(n)]
        want = sorted(range(n), key=lambda i: (times[i], prios[i], i))
        assert [int(p[2]) for p in popped] == want, f"trial {trial}"
    ht, hk, ctr = np.zeros(4), np.zeros(4, HEAP_KEY), np.zeros(1, COUNTERS)
    for prio in (5, 4, 0):
        heap_push(ht, hk, ctr, 1.0, prio, prio, 0)
    assert [int(heap_pop(ht, hk, ctr)[1]) for _ in range(3)] == [0, 4, 5]


@pytest.mark.parametrize("rate", [-1, 0, -0.5])
def test_schedule_rate_must_be_positive(tmp_path, rate):
    """Planted bug 2: without its > 0 bound, `svmsim validate` accepted `[schedule] rate = -1`."""
    f = tmp_path / "bad.toml"
    f.write_text(f'name = "x"\n[data]\nname = "iris"\n[topology]\nkind = "ring"\n[algorithm]\nname = "pushsum"\n'
                 f'nodes = 8\n[schedule]\nkind = "gossip"\nrate = {rate}\n[stop]\nmax_rounds = 10\n')
    out = subprocess.run([sys.executable, "-m", "svmsim.cli", "validate", str(f)], capture_output=True, text=True)
    assert out.returncode == 2
    assert f"[schedule] rate = {rate} is out of range; allowed: a number > 0" in " ".join(out.stderr.split())


@pytest.mark.parametrize("name, labels, positive, n_pos", [
    ("mushrooms", (1, 2), 1, 3916), ("phishing", (0, 1), 1, 6157), ("svmguide1", (0, 1), 1, 2000)])
def test_known_positive_labels_of_the_shared_sets(data_env, name, labels, positive, n_pos):
    """Planted bug 3 (one side): every set in KNOWN_POSITIVE_LABELS maps its documented positive class to +1; the
    counts are the data folder's MANIFEST."""
    from svmsim.data import load_dataset

    ds = load_dataset(name, test="none")
    assert ds.meta["positive_label"] == positive and ds.n_pos == n_pos


def test_breast_cancer_maps_malignant_4_to_plus_one(tmp_path):
    """Planted bug 3: LIBSVM's breast-cancer labels 2 (benign) and 4 (malignant); 4 is the positive class (the
    shared copy is already -1/+1, so a file with the original labels checks the mapping)."""
    from svmsim.data import load_dataset

    rows = ["2 1:0.1 2:0.2", "4 1:0.9 2:0.8", "2 1:0.2 2:0.1", "4 1:0.7 2:0.9", "4 1:0.8 2:0.7"]
    (tmp_path / "breast-cancer").write_text("\n".join(rows) + "\n")
    ds = load_dataset("breast-cancer", data_dir=tmp_path, test="none")
    assert ds.y.tolist() == [-1.0, 1.0, -1.0, 1.0, 1.0]


def test_a_ledger_that_differs_from_the_declared_count_is_reported(data_env, monkeypatch, capsys):
    """Planted bug 4: `ledger_matches_declared` always True passed every test. An algorithm whose declared count
    is one scalar off gets False in its summary, and the CLI says so."""
    import svmsim.algorithms.gilbert.methods as gilbert

    real = gilbert.dgilbert_scalars_per_iteration
    monkeypatch.setattr(gilbert, "dgilbert_scalars_per_iteration", lambda k, d: real(k, d) + 1)
    scenario = {"name": "off-by-one", "data": {"name": "iris"}, "algorithm": {"name": "dgilbert", "clients": 3},
                "stop": {"max_iterations": 5}, "output": {"progress": False, "plots": False}}
    res = svmsim.run(scenario, write=False)
    assert res.summary["ledger_matches_declared"] is False
    assert res.summary["declared_scalars"] == res.ledger.totals["scalars"] + 5
    from svmsim.cli import summary_lines

    assert any("differs from the algorithm's declared count" in ln for ln in summary_lines(res.scenario, res))
    monkeypatch.undo()
    good = svmsim.run(scenario, write=False)
    assert good.summary["ledger_matches_declared"] is True
    assert not any("differs" in ln for ln in summary_lines(good.scenario, good))


def test_gossip_metrics_rows_never_go_back_in_time(data_env, tmp_path):
    """The Push-Sum run of the study (iris, ring, 16 nodes, latency 0, stop at consensus 0.01) ended with a row
    stamped before the previous one; rows must be monotone in round and virtual time."""
    scenario = {"name": "pushsum-time", "data": {"name": "iris"}, "topology": {"kind": "ring"},
                "algorithm": {"name": "pushsum", "nodes": 16}, "schedule": {"kind": "gossip", "latency": 0.0},
                "stop": {"below": {"consensus_error": 1e-2}, "max_rounds": 10_000},
                "output": {"progress": False, "plots": False}}
    res = svmsim.run(scenario, write=False)
    rounds = res.column("round")
    times = res.column("virtual_time")
    assert (np.diff(rounds) >= 0).all() and (np.diff(times) >= 0).all(), list(zip(rounds[-3:], times[-3:]))
