"""Communication topologies: building, validating and analysing networkx graphs.

In svmsim every node id is an integer ``0..N-1`` (engines index arrays by it). Graphs built here follow that
rule; a graph supplied by the user is relabelled by :func:`from_networkx`, which keeps the original node name in
the node attribute ``"label"``.

Main entry points:

* :func:`build_topology` -- build a graph of a registered kind (see :data:`TOPOLOGIES`; the built-in kinds are
  declared in `svmsim.topology_specs`, their builders are the ``build_<kind>`` functions here);
* :func:`from_networkx`, :func:`check_connected`, :func:`ensure_usable` -- accept and validate user graphs;
* :func:`metropolis_hastings_weights`, :func:`uniform_weights`, :func:`lazy_random_walk` -- mixing matrices;
* :func:`spectral_gap`, :func:`mixing_time`, :func:`topology_summary` -- analysis;
* :func:`neighbours`, :func:`edge_array` -- array views used by the engines.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any, Callable

import networkx as nx
import numpy as np

from svmsim.core.array_graph import ArrayGraph, held_edges
from svmsim.errors import TopologyError
from svmsim.numerics.sampling import k_out_draws
from svmsim.topology_specs import (TOPOLOGIES, ParamSpec, TopologySpec, get_spec, register_topology, resolve_params,
                                   topology_kinds, topology_spec)

__all__ = [
    "ParamSpec",
    "TopologySpec",
    "TOPOLOGIES",
    "register_topology",
    "topology_kinds",
    "topology_spec",
    "MAX_RESAMPLE_TRIES",
    "build_topology",
    "resolve_params",
    "from_networkx",
    "check_connected",
    "ensure_usable",
    "metropolis_hastings_weights",
    "uniform_weights",
    "lazy_random_walk",
    "spectral_gap",
    "mixing_time",
    "topology_summary",
    "neighbours",
    "mixing_rows",
    "mixing_probabilities",
    "MIXING_RULES",
    "edge_array",
]

#: How many seeds (``seed, seed+1, ...``) random builders try before giving up on a connected graph.
MAX_RESAMPLE_TRIES = 100

#: Above this many nodes :func:`topology_summary` does not compute the diameter.
DIAMETER_MAX_NODES = 2000


def _check_seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TopologyError(f"topology seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_n_nodes(kind: str, n_nodes: Any, min_nodes: int) -> int:
    if isinstance(n_nodes, (bool, np.bool_)) or not isinstance(n_nodes, (int, np.integer)):
        raise TopologyError(
            f"n_nodes for topology '{kind}' must be an integer >= {min_nodes}, got {n_nodes!r}"
        )
    if n_nodes < min_nodes:
        raise TopologyError(
            f"n_nodes for topology '{kind}' must be >= {min_nodes}, got {int(n_nodes)}"
        )
    return int(n_nodes)


def build_topology(kind: str, n_nodes: int | None, *, seed: int = 0, **params: Any) -> nx.Graph:
    """Build a connected topology of a registered ``kind`` on nodes ``0..n_nodes-1``.

    Deterministic given ``seed``. Random kinds that must be resampled to get a connected graph try ``seed``,
    ``seed+1``, ... (the seed that succeeded is stored in ``G.graph["seed_used"]``). For ``edge_list``,
    ``n_nodes`` may be ``None`` or ``0`` to take the number of nodes from the file.

    The returned graph carries ``G.graph["kind"]``, ``G.graph["params"]`` (resolved) and ``G.graph["seed"]``.
    Raises TopologyError for an unknown kind or parameter, or a value out of range.
    """
    spec = get_spec(kind)
    resolved = resolve_params(kind, params)
    seed = _check_seed(seed)
    if kind == "edge_list" and (n_nodes is None or (not isinstance(n_nodes, bool) and n_nodes == 0)):
        n = None
    else:
        n = _check_n_nodes(kind, n_nodes, spec.min_nodes)
    G = spec.builder(n, seed, **resolved)
    G.graph.setdefault("seed_used", seed)
    G.graph.update(kind=kind, params=resolved, seed=seed)
    ensure_usable(G, what=f"topology '{kind}'")
    return G


# ----------------------------------------------------------------------------------------------------------------
# Builders
# ----------------------------------------------------------------------------------------------------------------


def _range_error(kind: str, name: str, value: Any, allowed: str) -> TopologyError:
    return TopologyError(f"parameter '{name}'={value!r} of topology '{kind}' is out of range; allowed: {allowed}")


def _canonical_graph(n: int, edges: Any = ()) -> nx.Graph:
    """A graph with nodes ``0..n-1`` inserted in order, plus ``edges`` (pairs, or an (E, 2) integer array; self-loops
    dropped)."""
    if isinstance(edges, np.ndarray):
        return ArrayGraph(n, edges)                # networkx's dicts only if something reads them
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from((int(u), int(v)) for u, v in edges if u != v)
    return G


def _resample_connected(
    kind: str, seed: int, make: Callable[[int], nx.Graph], hint: str
) -> nx.Graph:
    """Call ``make(s)`` for ``s = seed, seed+1, ...`` until the graph is connected."""
    for attempt in range(MAX_RESAMPLE_TRIES):
        G = make(seed + attempt)
        if G.number_of_nodes() > 0 and _components(G)[0] == 1:
            G.graph["seed_used"] = seed + attempt
            return G
    raise TopologyError(
        f"topology '{kind}' was disconnected for all {MAX_RESAMPLE_TRIES} seeds tried "
        f"({seed}..{seed + MAX_RESAMPLE_TRIES - 1}); {hint}"
    )


def build_star(n: int, seed: int) -> nx.Graph:
    return _canonical_graph(n, np.column_stack([np.zeros(n - 1, dtype=np.int64), np.arange(1, n)]))


def build_ring(n: int, seed: int) -> nx.Graph:
    return _canonical_graph(n, np.column_stack([np.arange(n), (np.arange(n) + 1) % n]))


def build_tree(n: int, seed: int, branching: int) -> nx.Graph:
    """The first n nodes of a balanced tree in heap (breadth-first) numbering, as networkx's `balanced_tree`:
    node 0 is the root and the parent of node i is (i - 1) // branching."""
    if branching < 1:
        raise _range_error("tree", "branching", branching, "branching >= 1")
    return _canonical_graph(n, np.column_stack([(np.arange(1, n) - 1) // branching, np.arange(1, n)]))


def build_hypercube(n: int, seed: int) -> nx.Graph:
    """Node i is linked to i XOR 2^j for every j with i XOR 2^j < n: the hypercube for n a power of two, its first
    n nodes otherwise (connected: clearing i's bits one at a time walks to node 0)."""
    return _canonical_graph(n, ((i, i ^ (1 << j)) for i in range(n) for j in range(max(1, n - 1).bit_length())
                                if i < i ^ (1 << j) < n))


def build_complete(n: int, seed: int) -> nx.Graph:
    return _canonical_graph(n, ((i, j) for i in range(n) for j in range(i + 1, n)))


def build_line(n: int, seed: int) -> nx.Graph:
    return _canonical_graph(n, np.column_stack([np.arange(n - 1), np.arange(1, n)]))


def _square_factors(n: int) -> tuple[int, int]:
    """``(rows, cols)`` with ``rows * cols == n``, ``rows <= cols`` and ``rows`` as large as possible."""
    rows = math.isqrt(n)
    while n % rows:
        rows -= 1
    return rows, n // rows


def build_grid(n: int, seed: int, rows: int | None, cols: int | None, periodic: bool) -> nx.Graph:
    for name, value in (("rows", rows), ("cols", cols)):
        if value is not None and not 1 <= value <= n:
            raise _range_error("grid", name, value, f"1 <= {name} <= n_nodes ({n})")
    if rows is None and cols is None:
        rows, cols = _square_factors(n)
    elif rows is None or cols is None:
        given_name, given = ("rows", rows) if rows is not None else ("cols", cols)
        if n % given:
            raise TopologyError(
                f"grid: {given_name}={given} does not divide n_nodes={n}; "
                f"allowed: a divisor of {n}, or give both rows and cols with rows*cols == n_nodes"
            )
        rows, cols = (given, n // given) if rows is not None else (n // given, given)
    if rows * cols != n:
        raise TopologyError(
            f"grid: rows*cols = {rows}*{cols} = {rows * cols} does not equal n_nodes={n}; "
            "allowed: rows*cols == n_nodes"
        )
    edges = []
    for r in range(rows):
        for c in range(cols):
            u = r * cols + c
            if c + 1 < cols:
                edges.append((u, u + 1))
            elif periodic and cols > 2:
                edges.append((u, r * cols))
            if r + 1 < rows:
                edges.append((u, u + cols))
            elif periodic and rows > 2:
                edges.append((u, c))
    G = _canonical_graph(n, edges)
    G.graph["grid_shape"] = (rows, cols)
    return G


def build_random_k_out(n: int, seed: int, k: int) -> nx.Graph:
    if not 1 <= k <= n - 1:
        raise _range_error("random_k_out", "k", k, f"1 <= k <= n_nodes-1 ({n - 1})")

    def make(s: int) -> nx.Graph:
        # node i links to k distinct others drawn by rng.choice(n - 1, k, replace=False), node by node (one
        # compiled pass with the same bits: numerics.sampling)
        picks = k_out_draws(n, k, s)
        return _canonical_graph(n, np.column_stack([np.repeat(np.arange(n, dtype=np.int64), k), picks.ravel()]))

    return _resample_connected("random_k_out", seed, make, "use a larger k (k >= 2 is connected w.h.p.)")


def build_erdos_renyi(n: int, seed: int, p: float | None) -> nx.Graph:
    if p is None:
        p = min(1.0, 2.0 * math.log(n) / n)
    if not 0.0 <= p <= 1.0:
        raise _range_error("erdos_renyi", "p", p, "0 <= p <= 1")
    hint = f"use a larger p (p={p:g}; ln(N)/N = {math.log(n) / n:.3g} is the connectivity threshold)"
    if p == 0.0:
        raise TopologyError(f"topology 'erdos_renyi' with p=0 has no edges and is disconnected; {hint}")
    G = _resample_connected(
        "erdos_renyi", seed, lambda s: _canonical_graph(n, nx.fast_gnp_random_graph(n, p, seed=s).edges()), hint
    )
    G.graph["p"] = p
    return G


def build_small_world(n: int, seed: int, k: int, p: float) -> nx.Graph:
    if not 2 <= k <= n - 1 or k % 2:
        raise _range_error("small_world", "k", k, f"even k with 2 <= k <= n_nodes-1 ({n - 1})")
    if not 0.0 <= p <= 1.0:
        raise _range_error("small_world", "p", p, "0 <= p <= 1")
    try:
        H = nx.connected_watts_strogatz_graph(n, k, p, tries=MAX_RESAMPLE_TRIES, seed=seed)
    except nx.NetworkXError as exc:
        raise TopologyError(
            f"topology 'small_world' (k={k}, p={p:g}) stayed disconnected after {MAX_RESAMPLE_TRIES} tries; "
            f"use a larger k or a smaller p ({exc})"
        ) from exc
    return _canonical_graph(n, H.edges())


def build_expander(n: int, seed: int, degree: int) -> nx.Graph:
    if not 2 <= degree <= n - 1:
        raise _range_error("expander", "degree", degree, f"2 <= degree <= n_nodes-1 ({n - 1})")
    if (n * degree) % 2:
        raise TopologyError(
            f"topology 'expander': n_nodes*degree = {n}*{degree} is odd, so no {degree}-regular graph exists; "
            "allowed: n_nodes*degree even"
        )
    return _resample_connected(
        "expander",
        seed,
        lambda s: _canonical_graph(n, nx.random_regular_graph(degree, n, seed=s).edges()),
        "use a larger degree",
    )


def _read_edge_list(path: str) -> nx.Graph:
    """Validate the edge-list file line by line, then read it with networkx."""
    if not os.path.isfile(path):
        raise TopologyError(f"edge list file '{path}' does not exist or is not a file")
    tokens_seen: list[str] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, raw in enumerate(fh, start=1):
                content = raw.split("#", 1)[0].split()
                if not content:
                    continue
                if len(content) != 2:
                    raise TopologyError(
                        f"edge list file '{path}', line {lineno}: expected one edge 'u v' (two node names), "
                        f"got {raw.strip()!r}"
                    )
                tokens_seen.extend(content)
    except UnicodeDecodeError as exc:
        raise TopologyError(f"edge list file '{path}' is not UTF-8 text ({exc})") from exc
    except OSError as exc:
        raise TopologyError(f"cannot read edge list file '{path}': {exc}") from exc
    if not tokens_seen:
        raise TopologyError(f"edge list file '{path}' contains no edges")

    def is_int(tok: str) -> bool:
        try:
            int(tok)
        except ValueError:
            return False
        return True

    nodetype = int if all(is_int(t) for t in tokens_seen) else None
    return nx.read_edgelist(path, comments="#", nodetype=nodetype, data=False, create_using=nx.Graph)


def build_edge_list(n: int | None, seed: int, path: str | None) -> nx.Graph:
    if path is None or not str(path).strip():
        raise TopologyError("topology 'edge_list' needs parameter 'path' (a text file with one edge 'u v' per line)")
    G = from_networkx(_read_edge_list(path), validate=False)
    if n is not None and G.number_of_nodes() != n:
        raise TopologyError(
            f"edge list file '{path}' has {G.number_of_nodes()} nodes but n_nodes={n}; "
            "set n_nodes to match, or to 0/None to take it from the file"
        )
    G.graph["path"] = path
    return G


# ----------------------------------------------------------------------------------------------------------------
# User graphs and validation
# ----------------------------------------------------------------------------------------------------------------


def _is_canonical(G: nx.Graph) -> bool:
    if held_edges(G) is not None:                  # nodes 0..N-1 by construction
        return True
    n = G.number_of_nodes()
    if set(map(type, G)) == {int}:                 # the usual case, checked without a Python loop over nodes
        ids = np.fromiter(G, dtype=np.int64, count=n) if n and max(G) < 2 ** 63 and min(G) >= 0 else None
        return ids is not None and bool(np.array_equal(np.sort(ids), np.arange(n)))
    return all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in G) and set(
        int(v) for v in G
    ) == set(range(n))


def _require_canonical(G: Any) -> None:
    if not isinstance(G, nx.Graph):
        raise TopologyError(f"expected a networkx graph, got {type(G).__name__}")
    if not _is_canonical(G):
        raise TopologyError(
            "graph nodes must be the integers 0..N-1; convert user graphs with svmsim.topology.from_networkx"
        )


def from_networkx(G: nx.Graph, *, validate: bool = True) -> nx.Graph:
    """Return a copy of ``G`` as an svmsim topology: undirected, simple, nodes ``0..N-1``.

    Nodes are numbered in sorted order if their names are mutually comparable, else in insertion order; the
    original name is stored in node attribute ``"label"`` (a graph whose nodes are already ``0..N-1`` keeps its
    numbering and any existing ``"label"``). Node, edge and graph attributes are copied. A directed graph is made
    undirected: an edge in either direction becomes one undirected edge. Parallel edges of a multigraph are merged.
    Self-loops are dropped. With ``validate=True`` the result must pass :func:`ensure_usable`.
    """
    if not isinstance(G, nx.Graph):
        raise TopologyError(f"expected a networkx graph, got {type(G).__name__}")
    canonical = _is_canonical(G)
    if canonical:
        order = sorted(G.nodes, key=int)
    else:
        try:
            order = sorted(G.nodes)
        except TypeError:
            order = list(G.nodes)
    index = {v: i for i, v in enumerate(order)}
    H = nx.Graph()
    H.graph.update(G.graph)
    for v in order:
        data = dict(G.nodes[v])
        if canonical:
            data.setdefault("label", int(v))
        else:
            data["label"] = v
        H.add_node(index[v], **data)
    for u, v, data in G.edges(data=True):
        if u != v:
            H.add_edge(index[u], index[v], **data)
    if validate:
        ensure_usable(H, what="user topology")
    return H


def check_connected(G: nx.Graph, what: str = "topology") -> None:
    """Raise TopologyError if ``G`` is empty or disconnected, naming the component count and smallest sizes."""
    if not isinstance(G, nx.Graph):
        raise TopologyError(f"{what}: expected a networkx graph, got {type(G).__name__}")
    if G.number_of_nodes() == 0:
        raise TopologyError(f"{what} has no nodes")
    if _is_canonical(G):
        count, sizes = _components(G)
    else:
        comps = list(nx.weakly_connected_components(G) if G.is_directed() else nx.connected_components(G))
        count, sizes = len(comps), sorted(len(c) for c in comps)
    if count > 1:
        shown = ", ".join(map(str, sizes[:5])) + (", ..." if len(sizes) > 5 else "")
        raise TopologyError(
            f"{what} is disconnected: {count} connected components (smallest sizes: {shown}; "
            f"largest: {sizes[-1]} of {G.number_of_nodes()} nodes); every node must be reachable"
        )


def ensure_usable(G: nx.Graph, what: str = "topology") -> nx.Graph:
    """Check that ``G`` can be simulated: nodes ``0..N-1``, N >= 2, no isolated node, connected. Returns ``G``."""
    if not isinstance(G, nx.Graph):
        raise TopologyError(f"{what}: expected a networkx graph, got {type(G).__name__}")
    if G.is_directed():
        raise TopologyError(f"{what} is directed; convert it with svmsim.topology.from_networkx")
    n = G.number_of_nodes()
    if n < 2:
        raise TopologyError(f"{what} has {n} node(s); at least 2 are needed")
    if not _is_canonical(G):
        raise TopologyError(
            f"{what}: nodes must be the integers 0..N-1; convert user graphs with svmsim.topology.from_networkx"
        )
    src, dst = _adjacency(G)
    isolated = np.flatnonzero(np.bincount(src[src != dst], minlength=n) == 0).tolist()   # self-loops alone
    if isolated:
        shown = ", ".join(map(str, isolated[:10])) + (", ..." if len(isolated) > 10 else "")
        raise TopologyError(f"{what} has {len(isolated)} isolated node(s) (no neighbours): {shown}")
    check_connected(G, what)
    return G


# ----------------------------------------------------------------------------------------------------------------
# Engine helpers
# ----------------------------------------------------------------------------------------------------------------


def _adjacency(G: nx.Graph) -> tuple[np.ndarray, np.ndarray]:
    """Every (node, neighbour) pair of a graph with integer nodes, as int64 arrays (src, dst), self-loops included:
    an undirected graph lists each edge from both ends, a directed one its successors. Read from networkx's
    adjacency dicts by C-level iteration (no Python loop over nodes or edges: 0.3 s for 10^6 nodes and 2·10^6
    edges, against 14 s through ``G.edges()``)."""
    E = held_edges(G)
    if E is not None:
        return np.concatenate([E[:, 0], E[:, 1]]), np.concatenate([E[:, 1], E[:, 0]])
    adj = G._adj                                   # the dict of dicts behind G.adj (a read-only view of it)
    n = len(adj)
    nodes = np.fromiter(adj, dtype=np.int64, count=n)
    counts = np.fromiter(map(len, adj.values()), dtype=np.int64, count=n)
    dst = np.fromiter(itertools.chain.from_iterable(adj.values()), dtype=np.int64, count=int(counts.sum()))
    return np.repeat(nodes, counts), dst


#: Up to this many adjacency pairs (each undirected edge counts twice) :func:`_components` joins the components in
#: Python rather than importing scipy for its compiled search (scipy's import costs more than the search saves)
SMALL_GRAPH_PAIRS = 4096


def _components(G: nx.Graph) -> tuple[int, list[int]]:
    """(number of connected components, their sizes in ascending order) of a graph with nodes 0..N-1 (weakly
    connected ones for a directed graph), by scipy's compiled search on its adjacency (by a union-find in Python
    for a small graph)."""
    n = G.number_of_nodes()
    src, dst = _adjacency(G)
    if src.shape[0] <= SMALL_GRAPH_PAIRS:
        sizes = np.unique(_union_find_labels(n, src.tolist(), dst.tolist()), return_counts=True)[1]
        return int(sizes.shape[0]), sorted(sizes.tolist())
    import scipy.sparse
    import scipy.sparse.csgraph

    A = scipy.sparse.csr_array((np.ones(src.shape[0], dtype=np.int8), (src, dst)), shape=(n, n))
    count, labels = scipy.sparse.csgraph.connected_components(A, directed=True, connection="weak")
    return int(count), sorted(np.bincount(labels, minlength=count).tolist())


def _union_find_labels(n: int, src: list[int], dst: list[int]) -> np.ndarray:
    """Each node's root after joining the ends of every pair (src[i], dst[i]): equal roots, one component."""
    parent = list(range(n))

    def root(u: int) -> int:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for u, v in zip(src, dst):
        ru, rv = root(u), root(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return np.array([root(u) for u in range(n)], dtype=np.int64)


def edge_array(G: nx.Graph) -> np.ndarray:
    """Edges as an ``(E, 2)`` int64 array with ``u < v`` per row, rows sorted lexicographically (no self-loops)."""
    _require_canonical(G)
    n = G.number_of_nodes()
    src, dst = _adjacency(G)
    if G.is_directed():                            # an edge in either direction, or both, is one undirected edge
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        keep = lo != hi
        key = np.unique(lo[keep] * n + hi[keep])
    else:                                          # each edge once, from its smaller end
        keep = src < dst
        key = np.sort(src[keep] * n + dst[keep])
    if not key.size:
        return np.empty((0, 2), dtype=np.int64)
    return np.stack(np.divmod(key, n), axis=1)


def neighbours(G: nx.Graph) -> list[np.ndarray]:
    """``out[i]`` is the sorted int64 array of the neighbours of node ``i`` (self excluded)."""
    ptr, values = neighbour_csr(G)
    return np.split(values, ptr[1:-1])


#: the key of `neighbour_csr`'s arrays in a graph's networkx cache
_CSR_CACHE_KEY = "svmsim.neighbour_csr"


def neighbour_csr(G: nx.Graph) -> tuple[np.ndarray, np.ndarray]:
    """`neighbours` as CSR arrays (ptr, values): node i's sorted neighbours are ``values[ptr[i]:ptr[i + 1]]`` (what
    the event loop checks sends against and the meter indexes its edge counters by; O(edges), not N x N; built from
    the edge array in vectorised NumPy, no Python loop over nodes).

    The arrays are read-only and kept in the graph's networkx cache, which networkx clears when the graph's nodes or
    edges change (``G.__networkx_cache__``): a run's event loop, meter and mixing rows share one copy (40 bytes a
    node on a random 2-out overlay, three times over before)."""
    cache = getattr(G, "__networkx_cache__", None)
    held = cache.get(_CSR_CACHE_KEY) if cache is not None else None
    if held is not None:
        return held
    E = edge_array(G)
    n = G.number_of_nodes()
    src = np.concatenate([E[:, 0], E[:, 1]])
    dst = np.concatenate([E[:, 1], E[:, 0]])
    order = np.lexsort((dst, src))
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(src, minlength=n))
    nbr = dst[order].astype(np.int64)
    ptr.flags.writeable = nbr.flags.writeable = False
    if cache is not None:
        cache[_CSR_CACHE_KEY] = (ptr, nbr)
    return ptr, nbr


def _degrees(G: nx.Graph) -> tuple[int, np.ndarray, np.ndarray]:
    E = edge_array(G)
    n = G.number_of_nodes()
    return n, E, np.bincount(E.ravel(), minlength=n).astype(np.int64)


# ----------------------------------------------------------------------------------------------------------------
# Mixing matrices
# ----------------------------------------------------------------------------------------------------------------


def expected_edges(kind: str, n: int, params: dict | None = None) -> int:
    """About how many undirected edges `build_topology(kind, n, **params)` makes, without building it (an upper
    bound for the random kinds; for a memory estimate before a run). An edge list counts its file's lines."""
    p = dict(params or {})
    if kind in ("star", "tree", "line", "path"):
        return max(0, n - 1)
    if kind == "ring":
        return n
    if kind == "complete":
        return n * (n - 1) // 2
    if kind == "hypercube":
        return n * max(1, (n - 1).bit_length()) // 2
    if kind == "grid":
        return 2 * n
    if kind == "random_k_out":
        return int(p.get("k", 2)) * n
    if kind == "erdos_renyi":
        prob = p.get("p")
        prob = min(1.0, 2.0 * math.log(max(n, 2)) / max(n, 1)) if prob is None else float(prob)
        return int(prob * n * (n - 1) / 2) + n
    if kind == "small_world":
        return int(p.get("k", 4)) * n // 2
    if kind == "expander":
        return int(p.get("degree", 4)) * n // 2
    if kind == "edge_list" and p.get("path"):
        try:
            with open(p["path"], "rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0
    return 2 * n


#: the mixing rules of `mixing_rows` (the names the gossip algorithms take)
MIXING_RULES = ("neighbour", "metropolis", "uniform")


def mixing_rows(G: nx.Graph, mixing: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of a gossip mixing matrix B in sparse form, O(edges): ``(ptr, nbr, prob)`` with node i's sorted
    neighbours ``nbr[ptr[i]:ptr[i + 1]]`` (as `neighbour_csr`) and the probability of each; the rest of row i,
    ``1 - sum``, is B_ii (a tick without an exchange). `mixing`: "neighbour" b_ij = 1/deg i (the random walk
    D^-1 A, `lazy_random_walk` with laziness 0), "metropolis" 1/(1 + max(deg i, deg j))
    (`metropolis_hastings_weights`), "uniform" 1/(deg i + 1) (`uniform_weights`, whose B_ii is 1/(deg i + 1) too).
    The dense functions give the same off-diagonal values; this form serves any number of nodes."""
    if mixing not in MIXING_RULES:
        raise TopologyError(f"mixing = {mixing!r} is not a mixing rule; allowed: {', '.join(MIXING_RULES)}")
    ptr, nbr = neighbour_csr(G)
    return ptr, nbr, mixing_probabilities(ptr, nbr, mixing)


def mixing_probabilities(ptr: np.ndarray, nbr: np.ndarray, mixing: str) -> np.ndarray:
    """The probabilities of `mixing_rows` from the rows (ptr, nbr) of `neighbour_csr`."""
    if mixing not in MIXING_RULES:
        raise TopologyError(f"mixing = {mixing!r} is not a mixing rule; allowed: {', '.join(MIXING_RULES)}")
    deg = np.diff(ptr).astype(np.float64)
    row = np.repeat(np.arange(deg.shape[0]), np.diff(ptr))
    if mixing == "neighbour":
        prob = 1.0 / deg[row]
    elif mixing == "uniform":
        prob = 1.0 / (deg[row] + 1.0)
    else:
        prob = 1.0 / (1.0 + np.maximum(deg[row], deg[nbr]))
    return prob


def metropolis_hastings_weights(G: nx.Graph) -> np.ndarray:
    """Metropolis-Hastings mixing matrix: ``W_ij = 1/(1+max(deg_i, deg_j))`` on edges, ``W_ii = 1 - sum_j W_ij``.

    Symmetric, doubly stochastic and nonnegative for any graph.
    """
    n, E, deg = _degrees(G)
    W = np.zeros((n, n))
    if len(E):
        u, v = E[:, 0], E[:, 1]
        w = 1.0 / (1.0 + np.maximum(deg[u], deg[v]))
        W[u, v] = w
        W[v, u] = w
    W[np.diag_indices(n)] = 1.0 - W.sum(axis=1)
    return W


def uniform_weights(G: nx.Graph) -> np.ndarray:
    """Each node averages itself and its neighbours equally: ``W_ij = 1/(deg_i+1)`` for ``j`` in ``N(i) ∪ {i}``.

    Row stochastic; symmetric (hence doubly stochastic) only for regular graphs.
    """
    n, E, deg = _degrees(G)
    W = np.zeros((n, n))
    inv = 1.0 / (deg + 1.0)
    if len(E):
        u, v = E[:, 0], E[:, 1]
        W[u, v] = inv[u]
        W[v, u] = inv[v]
    W[np.diag_indices(n)] = inv
    return W


def lazy_random_walk(G: nx.Graph, laziness: float = 0.5) -> np.ndarray:
    """Lazy random walk ``W = laziness*I + (1-laziness)*D^{-1}A`` (row stochastic; isolated nodes stay put)."""
    if not 0.0 <= laziness <= 1.0:
        raise TopologyError(f"laziness={laziness!r} is out of range; allowed: 0 <= laziness <= 1")
    n, E, deg = _degrees(G)
    W = np.zeros((n, n))
    if len(E):
        u, v = E[:, 0], E[:, 1]
        safe = np.maximum(deg, 1)
        W[u, v] = (1.0 - laziness) / safe[u]
        W[v, u] = (1.0 - laziness) / safe[v]
    W[np.diag_indices(n)] = np.where(deg > 0, laziness, 1.0)
    return W


# ----------------------------------------------------------------------------------------------------------------
# Analysis
# ----------------------------------------------------------------------------------------------------------------


def _as_square(W: Any) -> np.ndarray:
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise TopologyError(f"expected a non-empty square matrix, got shape {W.shape}")
    return W


def spectral_gap(W: np.ndarray) -> float:
    """``1 - |lambda_2|``, where ``|lambda_2|`` is the second largest eigenvalue modulus of ``W``.

    For a stochastic matrix the largest modulus is 1, so the gap is in ``[0, 1]``; it is 0 for a disconnected or
    periodic (e.g. bipartite with zero diagonal) chain. Uses ``scipy.linalg.eigvalsh`` when ``W`` is symmetric
    and general eigenvalues otherwise. A 1x1 matrix has gap 1.
    """
    W = _as_square(W)
    if W.shape[0] == 1:
        return 1.0
    import scipy.linalg

    if np.allclose(W, W.T, rtol=0.0, atol=1e-12):
        eig = scipy.linalg.eigvalsh(W)
    else:
        eig = scipy.linalg.eigvals(W)
    moduli = np.sort(np.abs(eig))[::-1]
    return float(min(1.0, max(0.0, 1.0 - moduli[1])))


def mixing_time(W: np.ndarray, eps: float = 1e-2) -> float:
    """Estimated number of gossip iterations to shrink disagreement by a factor ``eps``: ``log(1/eps) / gap``.

    Since ``|lambda_2|^t = (1-gap)^t <= exp(-gap*t)``, after this many iterations the non-consensus part of a
    symmetric ``W`` has contracted by at least ``eps``; it slightly overestimates the exact
    ``log(1/eps) / log(1/|lambda_2|)``. Returns ``inf`` when the gap is 0.
    """
    if not 0.0 < eps < 1.0:
        raise TopologyError(f"eps={eps!r} is out of range; allowed: 0 < eps < 1")
    gap = spectral_gap(W)
    if gap <= 0.0:
        return math.inf
    return math.log(1.0 / eps) / gap


def topology_summary(G: nx.Graph) -> dict[str, Any]:
    """Key facts about a topology.

    Keys: ``n_nodes``, ``n_edges``, ``min_degree``, ``mean_degree``, ``max_degree``, ``diameter`` (``None`` if
    N > 2000 or disconnected), ``spectral_gap`` (of the Metropolis-Hastings matrix), ``connected``,
    ``n_components``.
    """
    n, E, deg = _degrees(G)
    if n == 0:
        return dict(n_nodes=0, n_edges=0, min_degree=0, mean_degree=0.0, max_degree=0, diameter=None,
                    spectral_gap=0.0, connected=False, n_components=0)
    import scipy.sparse
    import scipy.sparse.csgraph

    A = scipy.sparse.coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(n, n)).tocsr()
    n_comp, _ = scipy.sparse.csgraph.connected_components(A, directed=False)
    connected = n_comp == 1
    diameter = None
    if connected and n <= DIAMETER_MAX_NODES:
        dist = scipy.sparse.csgraph.shortest_path(A, method="D", directed=False, unweighted=True)
        diameter = int(dist.max())
    return dict(
        n_nodes=n,
        n_edges=int(len(E)),
        min_degree=int(deg.min()),
        mean_degree=float(deg.mean()),
        max_degree=int(deg.max()),
        diameter=diameter,
        spectral_gap=spectral_gap(metropolis_hastings_weights(G)),
        connected=bool(connected),
        n_components=int(n_comp),
    )
