"""Scale (the issue "a million gossip nodes"): a run's memory grows with nodes + edges + messages in flight, never
with nodes squared. 10^5 Push-Sum nodes for a few rounds, in a fresh process whose peak memory is read back: a dense
N x N mixing matrix (80 GB here) or any other quadratic allocation cannot come back unnoticed."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak memory from /proc (Linux)")
def test_a_hundred_thousand_push_sum_nodes_fit_in_a_bounded_memory():
    # the peak is the process's own high-water mark (VmHWM): getrusage's ru_maxrss would start from the parent's
    # peak when the child was started by vfork, as Python's subprocess does
    code = ("import svmsim; r = svmsim.run('scenarios/pushsum_mixing.toml', overrides={'algorithm.nodes': 100000, "
            "'algorithm.values': 'random', 'algorithm.dim': 4, 'stop.max_rounds': 30}, write=False, progress=False); "
            "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
            "print(r.final['messages'], r.summary['ledger_matches_declared'], hwm)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    messages, matches, peak_kb = out.stdout.split()
    assert int(messages) >= 30 * 90_000 and matches == "True"        # every node ticked about once per round
    # measured 340 MB (the interpreter, numba, the overlay's 2 * 10^5 edges as arrays, the run; 521 MB for 3 rounds
    # while the overlay was built as networkx's dicts); one dense N x N matrix alone would be 80 000 MB
    peak = int(peak_kb) * 1024
    assert peak < 1500 * 2 ** 20, f"peak memory {peak / 2 ** 20:.0f} MB for 10^5 nodes"
    # the estimate the runner checks before a run is built is close to what the run took
    from svmsim.algorithms.pushsum import PushSumParams, pushsum_memory
    from svmsim.deployment import Problem

    class _Data:
        d = 4

    estimate, _, _ = pushsum_memory(PushSumParams(nodes=100_000, values="random", dim=4),
                                    Problem(dataset=_Data(), seed=0, topology_kind="random_k_out"))
    assert 0.75 * peak < estimate < 1.25 * peak


def test_a_run_too_large_for_the_machine_is_refused_before_it_is_built(tmp_path):
    """10^9 gossip nodes: one clear message with the estimate and the machine's memory, exit status 2, no run
    directory, in well under a second of work (nothing is built)."""
    out = subprocess.run([sys.executable, "-m", "svmsim.cli", "run", "scenarios/pushsum_mixing.toml", "--set",
                          "algorithm.nodes=1000000000", "--set", "algorithm.values=random", "--out",
                          str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    message = out.stderr
    assert "this run would need about" in message and "(1,000,000,000 nodes holding 11 scalars each" in message
    assert "this machine has" in message and "allowed: fewer nodes" in message and "Traceback" not in message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind, n, params", [("random_k_out", 400, {"k": 2}), ("small_world", 300, {"k": 4, "p": 0.1}),
                                             ("grid", 400, {}), ("ring", 60, {})])
def test_large_graph_topology_facts_come_from_a_sparse_solver_and_agree_with_the_dense_ones(monkeypatch, kind, n,
                                                                                         params):
    """Above SPECTRAL_MAX_NODES the spectral gaps come from ARPACK with relative error bounds of at most
    GAP_ACCURACY that hold against the dense spectrum (the same bits on every call), and the diameter is a BFS-sweep
    lower bound, marked as one."""
    import svmsim.algorithms.pushsum.methods as pushsum
    from svmsim.topology import build_topology

    G = build_topology(kind, n, seed=3, **params)
    for mixing in ("neighbour", "metropolis", "uniform"):
        exact = pushsum.gossip_topology_info(G, mixing)
        monkeypatch.setattr(pushsum, "SPECTRAL_MAX_NODES", 10)
        sparse = pushsum.gossip_topology_info(G, mixing)
        assert pushsum.gossip_topology_info(G, mixing) == sparse               # reproducible: a fixed start vector
        monkeypatch.undo()
        bounds = {"spectral_gap": sparse["spectral_gap_error"],
                  "spectral_gap_metropolis": sparse.get("spectral_gap_metropolis_error", sparse["spectral_gap_error"])}
        for key, bound in bounds.items():
            assert 0 <= bound <= pushsum.GAP_ACCURACY
            assert abs(sparse[key] - exact[key]) <= bound * sparse[key] * (1 + 1e-9) + 1e-15
        # the mixing time is log(1/eps) / gap: its relative error follows the gap's
        gap_err = bounds["spectral_gap"]
        assert abs(sparse["mixing_time"] - exact["mixing_time"]) <= gap_err / (1 - gap_err) * sparse["mixing_time"]
        assert "spectral_gap_error" not in exact
        assert "diameter_is_lower_bound" not in exact and sparse["diameter_is_lower_bound"] is True
        assert exact["diameter"] - 2 <= sparse["diameter"] <= exact["diameter"]


@pytest.mark.parametrize("accuracy", [1e-2, 1e-8])
def test_the_sparse_solver_refines_a_gap_to_the_accuracy_asked(monkeypatch, accuracy):
    """The first loose ARPACK solve is refined from its Ritz vectors until the gap's error bound is within
    GAP_ACCURACY of it: asked for 1e-8, the gaps agree with the dense spectrum to 1e-8."""
    from svmsim.algorithms.pushsum import methods as pushsum
    from svmsim.topology import build_topology

    G = build_topology("small_world", 600, seed=5, k=4, p=0.1)
    exact = pushsum.gossip_topology_info(G, "neighbour")
    monkeypatch.setattr(pushsum, "SPECTRAL_MAX_NODES", 10)
    monkeypatch.setattr(pushsum, "GAP_ACCURACY", accuracy)
    sparse = pushsum.gossip_topology_info(G, "neighbour")
    for key in ("spectral_gap", "spectral_gap_metropolis"):
        bound = sparse[key + "_error"]
        assert bound <= accuracy
        assert abs(sparse[key] - exact[key]) <= bound * sparse[key] * (1 + 1e-9) + 1e-15


def _bipartite_matchings(m: int, d: int, seed: int):
    """d random perfect matchings between two sides of m nodes: bipartite, so Metropolis-Hastings' smallest
    eigenvalue (near -(d-1)/(d+1)) is farther from 0 than its second largest."""
    import networkx as nx
    import numpy as np

    rng = np.random.default_rng(seed)
    G = nx.Graph()
    G.add_nodes_from(range(2 * m))
    for _ in range(d):
        G.add_edges_from((i, m + int(j)) for i, j in enumerate(rng.permutation(m)))
    return G


@pytest.mark.parametrize("graph, decides", [("random_k_out", False), ("grid", False), ("bipartite", True)])
def test_the_smallest_eigenvalue_is_solved_loosely_and_refined_where_it_decides(monkeypatch, graph, decides):
    """Metropolis-Hastings' smallest eigenvalue decides its gap only where it is the one farthest from 0 (a bipartite
    graph of degree 10): its first solve is loose (FIRST_SMALLEST_TOL), and it is refined only when its interval
    reaches the gap's error (forced here by asking for a 1e-8 accuracy); the gap is within its bound of the dense
    one either way."""
    from svmsim.algorithms.pushsum import methods as pushsum
    from svmsim.topology import build_topology

    G = (_bipartite_matchings(300, 10, 0) if graph == "bipartite"
         else build_topology(graph, 3000 if graph == "random_k_out" else 900, seed=1,
                             **({"k": 2} if graph == "random_k_out" else {})))
    exact = pushsum.gossip_topology_info(G, "neighbour")
    solves = []
    ritz = pushsum._ritz
    monkeypatch.setattr(pushsum, "_ritz", lambda S, which, tol, start: solves.append((which, tol)) or ritz(
        S, which, tol, start))
    monkeypatch.setattr(pushsum, "SPECTRAL_MAX_NODES", 10)
    default = pushsum.GAP_ACCURACY
    for accuracy in (default, 1e-8) if decides else (default,):
        monkeypatch.setattr(pushsum, "GAP_ACCURACY", accuracy)
        solves.clear()
        sparse = pushsum.gossip_topology_info(G, "neighbour")
        smallest = [tol for which, tol in solves if which == "SA"]
        assert smallest[0] == pushsum.FIRST_SMALLEST_TOL
        assert len(smallest) == (1 if accuracy == default else 2), smallest
        bound, gap = sparse["spectral_gap_metropolis_error"], sparse["spectral_gap_metropolis"]
        assert bound <= accuracy and abs(gap - exact["spectral_gap_metropolis"]) <= bound * gap * (1 + 1e-9) + 1e-14

def test_the_gadget_evaluation_scores_models_in_blocks_with_the_same_bits(monkeypatch):
    """GADGET's evaluator scores every node's model on every point; in blocks of models (memory O(points + nodes),
    not points x nodes) it gives the one product's bits."""
    import numpy as np
    import scipy.sparse as sp

    import svmsim.algorithms.gadget.methods as gadget

    rng = np.random.default_rng(0)
    X = sp.random(300, 20, density=0.3, random_state=1, format="csr")
    y = np.where(rng.random(300) < 0.4, 1.0, -1.0)
    models = rng.normal(size=(57, 20))
    owner = rng.integers(-1, 57, size=300)
    whole = gadget._scores(X, y, models, owner)
    monkeypatch.setattr(gadget, "SCORE_BLOCK_VALUES", 300 * 8)              # blocks of 8 models
    for a, b in zip(whole, gadget._scores(X, y, models, owner)):
        assert np.array_equal(a, b)
    ref = gadget._score_columns(np.ascontiguousarray(X @ models.T), y, owner)
    for a, b in zip(whole, ref):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("shape", [(7, 3), (8193, 4), (20_000, 123), (100_003, 5)])
def test_the_gadget_evaluations_averages_and_distances_in_blocks_are_numpys_bit_for_bit(shape):
    """GADGET's evaluation averages and measures the nodes' models a block of rows at a time (no temporary of every
    model: 1 KB a node at d = 123); the bits are np.average's (with weights, as Push-Sum's size-weighted consensus
    uses, and without) and np.linalg.norm's, for values of very different sizes, NaN and inf included."""
    import numpy as np

    from svmsim.algorithms.gadget import _average_rows, _row_distances

    rng = np.random.default_rng(shape[0])
    A = rng.standard_normal(shape) * np.exp(4 * rng.standard_normal((shape[0], 1)))
    weights = rng.integers(0, 5, size=shape[0]).astype(np.float64) * rng.random(shape[0])
    for w in (None, weights, np.ones(shape[0])):
        average = _average_rows(A, w)
        assert np.array_equal(average, np.average(A, axis=0, weights=w))
        assert np.array_equal(_row_distances(A, average), np.linalg.norm(A - average, axis=1))
    A[shape[0] // 2, 0], A[-1, -1] = np.nan, np.inf
    assert np.array_equal(_average_rows(A, weights), np.average(A, axis=0, weights=weights), equal_nan=True)
    assert np.array_equal(_row_distances(A, 0.0), np.linalg.norm(A, axis=1), equal_nan=True)
    with pytest.raises(ZeroDivisionError, match="Weights sum to zero"):
        _average_rows(A, np.zeros(shape[0]))


@pytest.mark.parametrize("shape", [(7, 3), (1000, 123), (100_003, 5)])
def test_without_nans_the_mean_is_nanmean_bit_for_bit(shape):
    """Push-Sum's model averages its estimates with np.mean when none is NaN (np.nanmean copies every row first:
    1 KB a node at d = 123); the two must give the same bits."""
    import numpy as np

    est = np.random.default_rng(shape[0]).standard_normal(shape) * 1e3
    assert np.array_equal(np.mean(est, axis=0), np.nanmean(est, axis=0))


def test_node_rows_give_each_group_the_entries_of_its_nodes():
    """Per-node data held whole (`NodeRows`, `Ragged` pieces): any grouping of the nodes gets the same entries as a
    list of per-node dicts would give it."""
    import numpy as np
    import scipy.sparse as sp

    from svmsim.program import NodeRows, Ragged, RoleSpec

    rng = np.random.default_rng(0)
    n = 9
    sizes = rng.integers(1, 4, size=n)
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    X = sp.random(int(ptr[-1]), 5, density=0.5, format="csr", random_state=1)
    rows = NodeRows(X=Ragged(ptr, X), value=rng.standard_normal((n, 3)), omega=rng.random(n))
    as_dicts = [rows[i] for i in range(n)]
    ids = np.array([10, 11, 12, 13, 14, 15, 16, 17, 18])[::-1]
    spec_rows, spec_list = RoleSpec("peer", None, ids, rows), RoleSpec("peer", None, ids, as_dicts)
    for group in (ids, ids[[4, 0, 7]], ids[5:6]):
        got, want = spec_rows.data_for(group), spec_list.data_for(group)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert (a["X"] != b["X"]).nnz == 0 and a["X"].shape == b["X"].shape
            assert np.array_equal(a["value"], b["value"]) and a["omega"] == b["omega"]
    with pytest.raises(KeyError, match="node 99"):
        spec_rows.data_for(np.array([12, 99]))


def test_pieces_that_pick_rows_of_a_shared_array_read_like_gathered_ones():
    """A `Ragged` column with `items` (rows of a shared data set) gives each node, and each group, the pieces that
    the gathered column gives; `take` gathers them into a compact column of their own."""
    import numpy as np
    import scipy.sparse as sp

    from svmsim.program import NodeRows, Ragged, RoleSpec

    rng = np.random.default_rng(2)
    X = sp.random(12, 4, density=0.5, format="csr", random_state=3)
    y = rng.standard_normal(12)
    items = rng.permutation(12)[:10]
    ptr = np.array([0, 3, 3, 4, 8, 10])
    picked = NodeRows(X=Ragged(ptr, X, items), y=Ragged(ptr, y, items))
    gathered = NodeRows(X=Ragged(ptr, X[items]), y=Ragged(ptr, y[items]))
    for i in range(-5, 5):
        assert (picked[i]["X"] != gathered[i]["X"]).nnz == 0 and np.array_equal(picked[i]["y"], gathered[i]["y"])
    with pytest.raises(IndexError):
        picked[5]
    spec = RoleSpec("peer", None, np.arange(5), picked)
    assert spec.data_for(np.arange(5)) is picked                 # every node: the column as it is
    for group in (np.array([3, 0]), np.array([1]), np.array([4, 2, 3])):
        part = spec.data_for(group)
        col = part.columns["y"]
        assert col.items is None and part.columns["X"].items is None
        assert np.array_equal(col.values, np.concatenate([y[items[ptr[g]:ptr[g + 1]]] for g in group]))
        assert not np.shares_memory(col.values, y)
        for k, g in enumerate(group):
            assert (part[k]["X"] != gathered[int(g)]["X"]).nnz == 0
    assert [list(e["y"]) for e in picked[1:3]] == [list(e["y"]) for e in gathered[1:3]]
    with pytest.raises(ValueError, match="items hold 9 rows, but its offsets end at 10"):
        Ragged(ptr, y, items[:9])

def test_node_rows_slice_and_index_like_a_list():
    import numpy as np

    from svmsim.program import NodeRows, Ragged

    ptr = np.array([0, 2, 3, 6])
    rows = NodeRows(pts=Ragged(ptr, np.arange(6) * 10), value=np.array([1.0, 2.0, 3.0]))
    as_list = [rows[i] for i in range(3)]
    part = rows[1:]
    assert len(part) == 2 and [list(e["pts"]) for e in part] == [list(e["pts"]) for e in as_list[1:]]
    assert list(rows[-1]["pts"]) == [30, 40, 50] and rows[-1]["value"] == 3.0
    with pytest.raises(IndexError):
        rows[3]


@pytest.mark.parametrize("d, n", [(1, 200), (2, 200), (7, 200), (8, 200), (9, 200), (16, 200), (31, 200),
                                  (123, 200), (124, 200), (128, 200), (129, 200), (130, 200), (257, 200), (1000, 200),
                                  (3, 2 * 2048 + 5), (123, 2048)])
def test_the_consensus_distances_are_numpys_bit_for_bit(d, n):
    """Push-Sum's consensus error is computed in one compiled pass over the rows; it must give np.linalg.norm's bits
    on the whole-array estimates (NaN where w <= 0, then inf where not finite), whatever the row length and the
    number of rows."""
    import numpy as np

    from svmsim.algorithms.pushsum import _consensus_distances

    rng = np.random.default_rng(d + n)
    s = rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-8, 8, size=(n, 1))
    w = rng.random(n) + 0.1
    w[3], w[4], w[5], w[-1] = 0.0, -1.0, np.nan, 0.0
    s[6, 0], s[7, -1] = np.inf, np.nan
    target = rng.standard_normal(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = s / w[:, None]
    est[~(w > 0)] = np.nan
    expected = np.linalg.norm(est - target, axis=1)
    expected[~np.isfinite(expected)] = np.inf
    got = _consensus_distances(s, w, target)
    assert np.array_equal(got, expected)
    assert np.isinf(got[[3, 4, 5, 6, 7, -1]]).all() and np.isfinite(got[8:-1]).all()


def test_a_push_sum_run_holds_one_copy_of_the_neighbour_lists():
    """The event loop, the meter and the program (one group of every node) read the topology's neighbour lists
    from one read-only array, not a copy each (32 bytes a node each on a random 2-out overlay); a meter given
    writable rows keeps its own copy."""
    import numpy as np

    from svmsim.algorithms.pushsum import PushSum
    from svmsim.comm.meter import Meter
    from svmsim.engine.inproc import InProcessEngine
    from svmsim.program import NodeRows, RoleSpec
    from svmsim.topology import build_topology, neighbour_csr

    n = 500
    G = build_topology("random_k_out", n, seed=1)
    ptr, nbr = neighbour_csr(G)
    values = NodeRows(value=np.random.default_rng(0).standard_normal((n, 3)))
    run = InProcessEngine().gossip([RoleSpec("peer", PushSum(G), np.arange(n), values)], 0, G)
    state = run.engine.states[0]
    held = [run.host.adj, run.meter._nbr, state.arrays[8], state.arrays[10]]      # loop, meter, neighbours, targets
    assert all(a is nbr for a in held) and run.host.adj_ptr is ptr and run.meter._ptr is ptr
    run.run(max_time=3.0)
    assert run.outcome().ledger.totals["messages"] > 0
    own = Meter(n, (ptr.copy(), nbr.copy()))
    assert not np.shares_memory(own._nbr, nbr) and np.array_equal(own._nbr, nbr)


def test_a_run_reads_its_data_set_only_when_an_algorithm_uses_it(monkeypatch):
    """The runner hands algorithms a Problem whose data set loads on first use: Push-Sum with random values never
    reads it (a9a costs about a second and its memory at 10^5 nodes), with data means it is read once."""
    import svmsim.runner as runner
    from svmsim.data import make_dataset

    loads = []

    def counting(kwargs):
        loads.append(kwargs["name"])
        return make_dataset(kwargs)

    monkeypatch.setattr(runner, "make_dataset", counting)
    sc = {"name": "lazy", "seed": 0, "data": {"name": "iris"}, "topology": {"kind": "random_k_out"},
          "algorithm": {"name": "pushsum", "nodes": 30, "values": "random", "dim": 3},
          "schedule": {"kind": "gossip"}, "stop": {"max_rounds": 3}, "output": {"progress": False}}
    result = runner.run(sc, write=False)
    assert loads == [] and result.metrics
    sc["algorithm"] = {"name": "pushsum", "nodes": 30}
    runner.run(sc, write=False)
    assert loads == ["iris"]


def test_the_model_file_holds_what_np_savez_writes_without_its_copies(tmp_path):
    """A run's model.npz is written from the arrays themselves (np.savez copies a large array 16 MiB at a time
    through a buffer and a bytes object: 33 MB at the end of a 10^5-node Push-Sum run); each member's bytes are
    np.savez's, for C- and Fortran-ordered, strided, empty, 0-d, bool, float32, datetime and object arrays."""
    import zipfile

    import numpy as np

    from svmsim.runner import _save_npz

    rng = np.random.default_rng(0)
    arrays = {"coef": rng.standard_normal((300, 7)), "intercept": np.asarray(3.5), "ids": np.arange(5),
              "fortran": np.asfortranarray(rng.standard_normal((4, 3))), "empty": np.zeros((0, 3)),
              "mask": np.array([True, False]), "strided": rng.standard_normal((3, 4)).astype(np.float32)[:, ::2],
              "when": np.array(["2020-01-01"], dtype="datetime64[D]"), "count": np.asarray(7),
              "objects": np.array([{"a": 1}, None], dtype=object)}
    _save_npz(tmp_path / "ours.npz", arrays)
    np.savez(tmp_path / "numpy.npz", **arrays)
    ours, theirs = zipfile.ZipFile(tmp_path / "ours.npz"), zipfile.ZipFile(tmp_path / "numpy.npz")
    assert ours.namelist() == theirs.namelist() == [k + ".npy" for k in arrays]
    for name in theirs.namelist():
        assert ours.read(name) == theirs.read(name), name
        assert ours.getinfo(name).compress_type == zipfile.ZIP_STORED
    loaded = np.load(tmp_path / "ours.npz", allow_pickle=True)
    for k, a in arrays.items():
        assert loaded[k].dtype == a.dtype and (np.array_equal(loaded[k], a) or loaded[k].tolist() == a.tolist())
