"""A networkx graph held as an edge array until networkx code reads its dicts.

A networkx graph keeps a dict per node and per edge. Filling them for 10^6 nodes and 2·10^6 random edges takes
15-20 s and about 1 GB, and a gossip run needs none of it: its engines, meter and topology facts read the
adjacency as arrays. `ArrayGraph(n, edges)` is an undirected ``nx.Graph`` on nodes ``0..n-1`` that stores only
the edge array. The first read of its dicts (``G._adj`` or ``G._node``: ``G.adj``, ``G.nodes``, ``G.edges``,
``G[u]``, any networkx algorithm, a copy) builds them exactly as ``add_nodes_from(range(n))`` then
``add_edges_from(edges)`` would (same insertion orders, one attribute dict shared by both directions of an edge)
and turns the object into a plain ``nx.Graph``. Until then the node and edge counts, iteration over the nodes,
membership and `held_edges` answer from the array.
"""
from __future__ import annotations

import networkx as nx
import numpy as np

__all__ = ["ArrayGraph", "held_edges"]


class ArrayGraph(nx.Graph):
    """An undirected graph on nodes ``0..n_nodes-1`` with the edges of the (E, 2) integer array `edges`, in order
    (self-loops dropped; a repeated edge, in either direction, keeps its first place), held as arrays until its
    networkx dicts are read (see the module docstring)."""

    def __init__(self, n_nodes: int, edges: np.ndarray, **attr):
        super().__init__(**attr)
        E = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if E.size and (E.min() < 0 or E.max() >= n_nodes):
            raise ValueError(f"edge endpoints must lie in 0..{n_nodes - 1}")
        E = E[E[:, 0] != E[:, 1]]
        key = np.minimum(E[:, 0], E[:, 1]) * max(n_nodes, 1) + np.maximum(E[:, 0], E[:, 1])
        _, first = np.unique(key, return_index=True)
        self.__dict__["_pending"] = (int(n_nodes), E[np.sort(first)])

    # networkx reads and writes its dicts through these two names; reading builds them
    _adj = property(lambda self: self._held("_adj"), lambda self, value: self.__dict__.__setitem__("_adj", value))
    _node = property(lambda self: self._held("_node"), lambda self, value: self.__dict__.__setitem__("_node", value))

    def _held(self, name: str) -> dict:
        self._materialize()
        return self.__dict__[name]

    def _materialize(self) -> None:
        n, E = self.__dict__.pop("_pending")
        node = {i: self.node_attr_dict_factory() for i in range(n)}
        adj = {i: self.adjlist_inner_dict_factory() for i in range(n)}
        for u, v in zip(E[:, 0].tolist(), E[:, 1].tolist()):
            data = self.edge_attr_dict_factory()
            adj[u][v] = data
            adj[v][u] = data
        self.__dict__["_node"], self.__dict__["_adj"] = node, adj
        self.__networkx_cache__.clear()
        self.__class__ = nx.Graph                  # from now on a plain graph: no property between it and its dicts

    def number_of_nodes(self) -> int:
        return self.__dict__["_pending"][0]

    def __len__(self) -> int:
        return self.__dict__["_pending"][0]

    def __iter__(self):
        return iter(range(self.__dict__["_pending"][0]))

    def __contains__(self, n) -> bool:
        if type(n) is int:
            return 0 <= n < self.__dict__["_pending"][0]
        return super().__contains__(n)

    def number_of_edges(self, u=None, v=None) -> int:
        if u is None and v is None:
            return int(self.__dict__["_pending"][1].shape[0])
        return super().number_of_edges(u, v)

    def __reduce__(self):
        n, E = self.__dict__["_pending"]
        return _rebuild, (n, E, dict(self.graph))


def _rebuild(n, E, graph):
    G = ArrayGraph(n, E)
    G.graph.update(graph)
    return G


def held_edges(G: nx.Graph) -> np.ndarray | None:
    """The (E, 2) edge array of an `ArrayGraph` whose dicts are not built yet, or None for any other graph."""
    pending = G.__dict__.get("_pending") if type(G) is ArrayGraph else None
    return None if pending is None else pending[1]
