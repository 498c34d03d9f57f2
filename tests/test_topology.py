"""Tests for svmsim.topology."""

import math

import networkx as nx
import numpy as np
import pytest

from svmsim.errors import SvmsimError, TopologyError
from svmsim.topology import (
    TOPOLOGIES,
    build_topology,
    check_connected,
    edge_array,
    ensure_usable,
    from_networkx,
    lazy_random_walk,
    metropolis_hastings_weights,
    mixing_time,
    neighbours,
    resolve_params,
    spectral_gap,
    topology_summary,
    uniform_weights,
)

GENERATED = ["star", "ring", "tree", "hypercube", "complete", "line", "path", "grid", "random_k_out", "erdos_renyi", "small_world",
             "expander"]


def _edge_file(tmp_path, text, name="edges.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- building


def test_registry_covers_all_kinds():
    assert set(GENERATED) | {"edge_list"} == set(TOPOLOGIES)
    for spec in TOPOLOGIES.values():
        assert spec.description and "\n" not in spec.description
        assert spec.signature().startswith(spec.name + "(")


@pytest.mark.parametrize("kind", GENERATED)
@pytest.mark.parametrize("n", [12, 30])
def test_kind_builds_connected_with_right_n(kind, n):
    G = build_topology(kind, n, seed=3)
    assert G.number_of_nodes() == n
    assert sorted(G.nodes) == list(range(n))
    assert nx.is_connected(G)
    assert nx.number_of_selfloops(G) == 0
    assert G.graph["kind"] == kind


@pytest.mark.parametrize("kind", GENERATED)
def test_kind_deterministic_in_seed(kind):
    a = build_topology(kind, 24, seed=7)
    b = build_topology(kind, 24, seed=7)
    assert np.array_equal(edge_array(a), edge_array(b))


@pytest.mark.parametrize("kind", ["random_k_out", "erdos_renyi", "small_world", "expander"])
def test_random_kinds_depend_on_seed(kind):
    graphs = {edge_array(build_topology(kind, 40, seed=s)).tobytes() for s in range(4)}
    assert len(graphs) > 1


def test_star_hub_is_node_zero():
    G = build_topology("star", 9)
    assert G.degree(0) == 8
    assert all(G.degree(i) == 1 for i in range(1, 9))


def test_ring_line_complete_edge_counts():
    assert build_topology("ring", 10).number_of_edges() == 10
    assert build_topology("line", 10).number_of_edges() == 9
    assert build_topology("path", 10).number_of_edges() == 9
    assert build_topology("complete", 10).number_of_edges() == 45


def test_tree_is_networkx_balanced_tree():
    G = build_topology("tree", 15, branching=2)
    assert nx.is_isomorphic(G, nx.balanced_tree(2, 3)) and sorted(G.edges) == sorted(nx.balanced_tree(2, 3).edges)
    G = build_topology("tree", 10, branching=3)
    assert sorted(G.edges) == sorted((u, v) for u, v in nx.balanced_tree(3, 2).edges if v < 10)
    assert build_topology("tree", 5, branching=4).degree[0] == 4
    with pytest.raises(TopologyError, match="branching.*allowed: branching >= 1"):
        build_topology("tree", 5, branching=0)


def test_grid_shapes():
    G = build_topology("grid", 12, rows=3, cols=4)
    assert G.number_of_edges() == 17
    assert G.graph["grid_shape"] == (3, 4)
    assert build_topology("grid", 12).graph["grid_shape"] == (3, 4)  # most square factorisation
    assert build_topology("grid", 16).graph["grid_shape"] == (4, 4)
    assert build_topology("grid", 12, cols=6).graph["grid_shape"] == (2, 6)
    torus = build_topology("grid", 16, periodic=True)
    assert all(d == 4 for _, d in torus.degree())
    assert torus.number_of_edges() == 32
    with pytest.raises(TopologyError, match=r"3\*5"):
        build_topology("grid", 12, rows=3, cols=5)
    with pytest.raises(TopologyError, match="divide"):
        build_topology("grid", 12, rows=5)


def test_random_k_out_min_degree():
    for k in (1, 2, 3):
        G = build_topology("random_k_out", 50, seed=1, k=k)
        assert min(d for _, d in G.degree()) >= k


def test_erdos_renyi_low_p_fails_with_hint():
    with pytest.raises(TopologyError, match="larger p"):
        build_topology("erdos_renyi", 60, p=0.005)
    G = build_topology("erdos_renyi", 60, p=0.2, seed=5)
    assert nx.is_connected(G)


def test_expander_is_regular():
    G = build_topology("expander", 20, degree=3)
    assert {d for _, d in G.degree()} == {3}
    with pytest.raises(TopologyError, match="odd"):
        build_topology("expander", 21, degree=3)


# ---------------------------------------------------------------- errors


def test_unknown_kind_lists_allowed():
    with pytest.raises(TopologyError, match="allowed kinds:.*ring.*star") as info:
        build_topology("mobius", 8)
    assert isinstance(info.value, SvmsimError)


def test_unknown_param_lists_allowed():
    with pytest.raises(TopologyError, match=r"'q'.*allowed parameters: k: int = 4, p: float = 0.1"):
        build_topology("small_world", 10, q=3)
    with pytest.raises(TopologyError, match="takes no parameters"):
        build_topology("ring", 10, k=3)


@pytest.mark.parametrize(
    "kind, n, params, pattern",
    [
        ("erdos_renyi", 10, {"p": 1.5}, r"p'=1\.5.*0 <= p <= 1"),
        ("small_world", 10, {"p": -0.1}, r"0 <= p <= 1"),
        ("small_world", 10, {"k": 3}, r"even"),
        ("random_k_out", 5, {"k": 5}, r"k'=5.*k <= n_nodes-1 \(4\)"),
        ("expander", 4, {"degree": 4}, r"degree'=4"),
        ("erdos_renyi", 10, {"p": "high"}, r"type float"),
    ],
)
def test_bad_values(kind, n, params, pattern):
    with pytest.raises(TopologyError, match=pattern):
        build_topology(kind, n, **params)


@pytest.mark.parametrize("n", [1, 0, -3, 2.5, None])
def test_bad_n_nodes(n):
    with pytest.raises(TopologyError, match="n_nodes"):
        build_topology("complete", n)


def test_resolve_params_fills_defaults():
    assert resolve_params("small_world", {"p": 0}) == {"k": 4, "p": 0.0}
    assert resolve_params("grid", {}) == {"rows": None, "cols": None, "periodic": False}


# ---------------------------------------------------------------- edge lists


def test_edge_list_reads_file(tmp_path):
    path = _edge_file(tmp_path, "# a comment\n10 2\n2 3  # trailing comment\n\n3 10\n3 4\n")
    G = build_topology("edge_list", None, path=str(path))
    assert G.number_of_nodes() == 4
    assert [G.nodes[i]["label"] for i in range(4)] == [2, 3, 4, 10]  # numeric sorted order
    assert G.number_of_edges() == 4
    assert build_topology("edge_list", 4, path=path).number_of_edges() == 4
    with pytest.raises(TopologyError, match=r"4 nodes.*n_nodes=5"):
        build_topology("edge_list", 5, path=str(path))


def test_edge_list_rejects_malformed(tmp_path):
    path = _edge_file(tmp_path, "0 1\n1 2 3 4\n", name="bad.txt")
    with pytest.raises(TopologyError, match=r"bad\.txt.*line 2"):
        build_topology("edge_list", 0, path=str(path))
    with pytest.raises(TopologyError, match=r"needs parameter\(s\) 'path'.*path: str \(required\)"):
        build_topology("edge_list", 0)
    with pytest.raises(TopologyError, match="does not exist"):
        build_topology("edge_list", 0, path=str(tmp_path / "missing.txt"))
    with pytest.raises(TopologyError, match="no edges"):
        build_topology("edge_list", 0, path=str(_edge_file(tmp_path, "# only a comment\n", name="e.txt")))
    with pytest.raises(TopologyError, match="2 connected components"):
        build_topology("edge_list", 0, path=str(_edge_file(tmp_path, "a b\nc d\n", name="d.txt")))


# ---------------------------------------------------------------- user graphs


def test_from_networkx_relabels_strings():
    G = nx.Graph([("carol", "alice"), ("alice", "bob"), ("bob", "bob")])
    H = from_networkx(G)
    assert sorted(H.nodes) == [0, 1, 2]
    assert [H.nodes[i]["label"] for i in range(3)] == ["alice", "bob", "carol"]
    assert H.has_edge(0, 2) and H.has_edge(0, 1) and H.number_of_edges() == 2


def test_from_networkx_unsortable_and_directed():
    G = nx.DiGraph([(1, "x"), ("x", (2, 3)), ((2, 3), 1)])
    H = from_networkx(G)
    assert not H.is_directed()
    assert [H.nodes[i]["label"] for i in range(3)] == [1, "x", (2, 3)]  # insertion order
    assert H.number_of_edges() == 3


def test_disconnected_user_graph_rejected():
    G = nx.Graph([(0, 1), (1, 2), (3, 4), (5, 6)])
    with pytest.raises(TopologyError, match=r"3 connected components.*smallest sizes: 2, 2"):
        from_networkx(G)
    with pytest.raises(TopologyError, match="3 connected components"):
        check_connected(G)


def test_ensure_usable():
    G = nx.path_graph(4)
    assert ensure_usable(G) is G
    G.add_node(4)
    with pytest.raises(TopologyError, match="isolated"):
        ensure_usable(G)
    with pytest.raises(TopologyError, match="at least 2"):
        ensure_usable(nx.empty_graph(1))
    with pytest.raises(TopologyError, match="0..N-1"):
        ensure_usable(nx.Graph([("a", "b")]))


# ---------------------------------------------------------------- mixing matrices


@pytest.mark.parametrize("kind", ["star", "ring", "grid", "random_k_out", "small_world"])
def test_mh_weights_doubly_stochastic(kind):
    W = metropolis_hastings_weights(build_topology(kind, 20, seed=2))
    assert np.allclose(W, W.T)
    assert (W >= 0).all()
    assert np.allclose(W.sum(axis=0), 1) and np.allclose(W.sum(axis=1), 1)
    assert 0 < spectral_gap(W) <= 1


@pytest.mark.parametrize("n", [5, 10, 17])
def test_mh_ring_gap_closed_form(n):
    gap = spectral_gap(metropolis_hastings_weights(build_topology("ring", n)))
    assert gap == pytest.approx(1 - (1 / 3 + 2 / 3 * math.cos(2 * math.pi / n)), abs=1e-10)
    assert gap < spectral_gap(metropolis_hastings_weights(build_topology("complete", n)))


def test_complete_gap_is_one():
    assert spectral_gap(metropolis_hastings_weights(build_topology("complete", 8))) == pytest.approx(1.0)


def test_uniform_and_lazy_are_row_stochastic():
    G = build_topology("star", 6)
    U = uniform_weights(G)
    assert np.allclose(U.sum(axis=1), 1) and (U >= 0).all()
    assert U[0, 3] == pytest.approx(1 / 6) and U[3, 0] == pytest.approx(1 / 2)
    L = lazy_random_walk(G)
    assert np.allclose(L.sum(axis=1), 1) and np.allclose(np.diag(L), 0.5)
    assert 0 < spectral_gap(L) <= 1  # non-symmetric path through general eigvals


def test_spectral_gap_disconnected_and_mixing_time():
    G = nx.Graph([(0, 1), (2, 3)])
    assert spectral_gap(metropolis_hastings_weights(G)) == pytest.approx(0.0, abs=1e-12)
    assert mixing_time(metropolis_hastings_weights(G)) == math.inf
    W = metropolis_hastings_weights(build_topology("ring", 10))
    assert mixing_time(W, eps=1e-3) == pytest.approx(math.log(1e3) / spectral_gap(W))
    with pytest.raises(TopologyError, match="eps"):
        mixing_time(W, eps=2)


# ---------------------------------------------------------------- helpers and summary


def test_neighbours_and_edge_array():
    G = build_topology("grid", 6, rows=2, cols=3)
    nb = neighbours(G)
    assert [a.tolist() for a in nb] == [[1, 3], [0, 2, 4], [1, 5], [0, 4], [1, 3, 5], [2, 4]]
    assert all(a.dtype.kind == "i" for a in nb)
    E = edge_array(G)
    assert E.shape == (7, 2) and (E[:, 0] < E[:, 1]).all()
    assert E.tolist() == sorted(E.tolist())


def test_topology_summary():
    s = topology_summary(build_topology("ring", 10))
    assert s["n_nodes"] == 10 and s["n_edges"] == 10
    assert s["min_degree"] == s["max_degree"] == 2 and s["mean_degree"] == 2.0
    assert s["diameter"] == 5 and s["connected"] is True
    assert s["spectral_gap"] == pytest.approx(1 - (1 / 3 + 2 / 3 * math.cos(2 * math.pi / 10)))
    s = topology_summary(nx.Graph([(0, 1), (2, 3)]))
    assert s["connected"] is False and s["diameter"] is None
