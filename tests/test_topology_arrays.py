"""Large topologies without networkx's dicts: the k-out draws in one compiled pass (same bits as NumPy's
`choice` loop they replace), `ArrayGraph` (dicts built only when read, exactly as networkx builds them) and the
array paths of the topology checks."""

import hashlib
import pickle

import networkx as nx
import numpy as np
import pytest

from svmsim.core.array_graph import ArrayGraph, held_edges
from svmsim.errors import TopologyError
from svmsim.numerics.sampling import k_out_draws
from svmsim.topology import build_topology, check_connected, edge_array, ensure_usable, neighbour_csr


def _choice_loop(n, k, seed):
    rng = np.random.default_rng(seed)
    out = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        picks = rng.choice(n - 1, size=k, replace=False)
        picks[picks >= i] += 1
        out[i] = picks
    return out


# (n, k, seed): Floyd's set for small and large k, the tail shuffle above 10 000 candidates with k > 1/50 of them
@pytest.mark.parametrize("n,k,seed", [(2, 1, 0), (5, 4, 1), (100, 2, 3), (100, 30, 4), (1000, 999, 1),
                                      (10002, 2, 5), (10002, 300, 6),
                                      pytest.param(20001, 401, 8, marks=pytest.mark.slow)])   # 4e8 draws: 40 s
def test_k_out_draws_are_the_choice_loops(n, k, seed):
    assert np.array_equal(k_out_draws(n, k, seed), _choice_loop(n, k, seed))


def test_k_out_draws_refuse_an_impossible_k():
    with pytest.raises(ValueError, match="1 <= k <= n - 1"):
        k_out_draws(5, 5, 0)


def _digest(G):
    h = hashlib.sha256()
    for u in G:
        h.update(repr((u, list(G.adj[u]))).encode())
    return h.hexdigest()[:20]


#: every node's neighbours, in order, of graphs built before the compiled draws and the array graphs
RECORDED = {("random_k_out", 7, 2, 0): "b2da77de4ca2d0442a79", ("random_k_out", 1000, 2, 0): "b890db3c3e1ff3a92b42",
            ("random_k_out", 1000, 999, 3): "b4dfe949ec307adff26d",
            ("random_k_out", 20001, 3, 1): "c653b63ae931401a0f6c",
            ("random_k_out", 20001, 401, 2): "0e4b9558be5fc2d2f92e",
            ("ring", 50, None, 0): "bc92b7bf54f7d795b261", ("star", 30, None, 0): "6f7f83d6193565ef8fd5",
            ("tree", 40, 3, 0): "38c78d47555ea5bab380", ("line", 25, None, 0): "e930accea19a42f9a4d7"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c[1] * (c[2] or 1) > 10**6 else c
                                  for c in sorted(RECORDED, key=str)])     # 8 million edges: a minute of networkx
def test_built_graphs_are_the_recorded_ones(case):
    kind, n, param, seed = case
    params = {"random_k_out": {"k": param}, "tree": {"branching": param}}.get(kind, {})
    G = build_topology(kind, n, seed=seed, **params)
    assert _digest(G) == RECORDED[case]


def _edges_with_repeats(n, m, seed):
    rng = np.random.default_rng(seed)
    E = rng.integers(0, n, size=(m, 2))
    return np.vstack([E, E[:5, ::-1], E[5:8], [[3, 3]]])      # reversed and repeated edges, a self-loop


def test_an_array_graph_becomes_the_graph_networkx_builds():
    n, E = 40, _edges_with_repeats(40, 120, 0)
    G, H = ArrayGraph(n, E, name="g"), nx.Graph(name="g")
    H.add_nodes_from(range(n))
    H.add_edges_from((int(u), int(v)) for u, v in E if u != v)
    # answered from the array
    assert (len(G), G.number_of_nodes(), G.number_of_edges()) == (n, n, H.number_of_edges())
    assert list(G) == list(range(n)) and 5 in G and 40 not in G and -1 not in G
    assert held_edges(G) is not None and type(G) is ArrayGraph
    # the first read builds the dicts, in networkx's orders, and leaves a plain graph
    assert [list(G.adj[u]) for u in G] == [list(H.adj[u]) for u in H]
    assert held_edges(G) is None and type(G) is nx.Graph
    assert list(G.edges()) == list(H.edges()) and G.graph == H.graph
    G.edges[E[0, 0], E[0, 1]]["weight"] = 2.0                  # one dict for both directions, as networkx's
    assert G[E[0, 1]][E[0, 0]]["weight"] == 2.0
    assert nx.utils.graphs_equal(pickle.loads(pickle.dumps(G)), G)


def test_an_array_graph_travels_as_its_array():
    G = ArrayGraph(6, np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]))
    G.graph["kind"] = "line"
    C = pickle.loads(pickle.dumps(G))
    assert type(C) is ArrayGraph and held_edges(C) is not None and C.graph == {"kind": "line"}
    assert list(C.edges()) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    with pytest.raises(ValueError, match="0..5"):
        ArrayGraph(6, np.array([[0, 6]]))


def test_the_checks_of_a_large_overlay_leave_its_dicts_unbuilt():
    G = build_topology("random_k_out", 100_000, seed=0)
    ensure_usable(G)
    check_connected(G)
    ptr, nbr = neighbour_csr(G)
    E = edge_array(G)
    assert held_edges(G) is not None
    assert ptr[-1] == nbr.shape[0] == 2 * E.shape[0] == 2 * G.number_of_edges()
    assert (E[:, 0] < E[:, 1]).all() and (np.diff(E[:, 0] * 100_000 + E[:, 1]) > 0).all()


@pytest.mark.parametrize("graph", ["array", "networkx"])
def test_the_neighbour_rows_are_kept_read_only_until_the_graph_changes(graph):
    """`neighbour_csr` keeps one read-only copy in the graph's networkx cache; adding or removing an edge or a node
    clears it, and the next call sees the change."""
    import networkx as nx

    G = build_topology("ring", 8) if graph == "array" else nx.cycle_graph(8)
    ptr, nbr = neighbour_csr(G)
    assert not ptr.flags.writeable and not nbr.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        nbr[0] = 5
    again = neighbour_csr(G)
    assert again[0] is ptr and again[1] is nbr
    G.add_edge(0, 4)
    ptr, nbr = neighbour_csr(G)
    assert nbr[ptr[0]:ptr[1]].tolist() == [1, 4, 7] and nbr[ptr[4]:ptr[5]].tolist() == [0, 3, 5]
    G.remove_node(7)
    G.add_edge(0, 6)
    ptr, nbr = neighbour_csr(G)
    assert ptr.shape == (8,) and nbr[ptr[0]:ptr[1]].tolist() == [1, 4, 6]


def test_mixing_probabilities_name_an_unknown_rule_and_match_the_rows():
    from svmsim.errors import TopologyError
    from svmsim.topology import MIXING_RULES, mixing_probabilities, mixing_rows

    G = build_topology("random_k_out", 50, seed=2)
    ptr, nbr = neighbour_csr(G)
    for rule in MIXING_RULES:
        assert np.array_equal(mixing_probabilities(ptr, nbr, rule), mixing_rows(G, rule)[2])
    with pytest.raises(TopologyError, match="mixing = 'lazy' is not a mixing rule; allowed: "):
        mixing_probabilities(ptr, nbr, "lazy")


def test_a_disconnected_array_graph_is_named_as_before():
    G = ArrayGraph(6, np.array([[0, 1], [1, 2], [3, 4], [4, 5]]))
    with pytest.raises(TopologyError, match=r"2 connected components \(smallest sizes: 3, 3; largest: 3 of 6"):
        check_connected(G, "topology")
    with pytest.raises(TopologyError, match=r"1 isolated node\(s\) \(no neighbours\): 5"):
        ensure_usable(ArrayGraph(6, np.array([[0, 1], [1, 2], [2, 3], [3, 4], [5, 5]])))


@pytest.mark.parametrize("directed", [False, True])
def test_small_graphs_count_their_components_as_scipy_does(directed, monkeypatch):
    """Up to `SMALL_GRAPH_PAIRS` adjacency pairs the components are joined in Python, without importing scipy: the
    same count and sizes as scipy's search, on random graphs with and without isolated nodes and self-loops."""
    import svmsim.topology as T

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        G = nx.DiGraph() if directed else nx.Graph()
        G.add_nodes_from(range(n))
        G.add_edges_from(rng.integers(0, n, size=(int(rng.integers(0, 2 * n)), 2)).tolist())
        small = T._components(G)
        with monkeypatch.context() as m:
            m.setattr(T, "SMALL_GRAPH_PAIRS", -1)
            assert T._components(G) == small, (n, sorted(G.edges()))
