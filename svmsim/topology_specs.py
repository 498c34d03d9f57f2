"""The built-in topology kinds: each kind's parameters and description (`TopologySpec`), registered in
`core.topology_kinds`' registry. The builders are `svmsim.topology`'s ``build_<kind>`` functions, named here and
imported when a graph is built, so that checking a scenario's ``[topology]`` table or listing the kinds imports
neither networkx nor scipy. Importing `svmsim.topology` imports this module: every built-in kind is known wherever
graphs are built.
"""
from __future__ import annotations

from svmsim.core.plugins import deferred
from svmsim.core.topology_kinds import (TOPOLOGIES, ParamSpec, TopologySpec, get_spec, register_topology,
                                        resolve_params, topology_kinds, topology_spec)

__all__ = ["ParamSpec", "TopologySpec", "TOPOLOGIES", "register_topology", "topology_kinds", "topology_spec",
           "get_spec", "resolve_params"]


def _builder(kind: str):
    """`svmsim.topology`'s ``build_<kind>``, imported when a graph of that kind is first built."""
    return deferred(f"svmsim.topology:build_{kind}")


TOPOLOGIES.update({
    spec.name: spec
    for spec in (
        TopologySpec("star", _builder("star"), "Star: node 0 is the hub (server), nodes 1..N-1 are leaves (clients)."),
        TopologySpec("ring", _builder("ring"), "Cycle 0-1-...-(N-1)-0.", min_nodes=3),
        TopologySpec(
            "tree",
            _builder("tree"),
            "Balanced tree in heap numbering: node 0 is the root, the parent of node i is (i-1) // branching.",
            {"branching": ParamSpec(int, 2, "children per inner node", "branching >= 1")},
        ),
        TopologySpec("complete", _builder("complete"), "Complete graph: every pair of nodes is connected."),
        TopologySpec("hypercube", _builder("hypercube"),
                     "Hypercube: node i is linked to i XOR 2^j (below N); carries the binomial all-reduce."),
        TopologySpec("line", _builder("line"), "Path 0-1-...-(N-1)."),
        TopologySpec("path", _builder("line"), "Alias of 'line': path 0-1-...-(N-1)."),
        TopologySpec(
            "grid",
            _builder("grid"),
            "2-D grid (row-major ids r*cols+c), optionally periodic (torus).",
            {
                "rows": ParamSpec(int, None, "number of rows; default: most square factorisation of N",
                                  "divisor of n_nodes"),
                "cols": ParamSpec(int, None, "number of columns; default: n_nodes // rows", "divisor of n_nodes"),
                "periodic": ParamSpec(bool, False, "wrap around both dimensions (torus)", "true or false"),
            },
        ),
        TopologySpec(
            "random_k_out",
            _builder("random_k_out"),
            "Each node picks k distinct random out-neighbours; undirected union (gossip-style overlay).",
            {"k": ParamSpec(int, 2, "out-neighbours picked by each node", "1 <= k <= n_nodes-1")},
        ),
        TopologySpec(
            "erdos_renyi",
            _builder("erdos_renyi"),
            "Erdos-Renyi G(N, p), resampled (seed, seed+1, ...) until connected.",
            {"p": ParamSpec(float, None, "edge probability; default: min(1, 2 ln(N)/N)", "0 <= p <= 1")},
        ),
        TopologySpec(
            "small_world",
            _builder("small_world"),
            "Connected Watts-Strogatz small world: ring lattice with k neighbours, rewired with prob. p.",
            {
                "k": ParamSpec(int, 4, "each node joins its k nearest ring neighbours", "even, 2 <= k <= n_nodes-1"),
                "p": ParamSpec(float, 0.1, "rewiring probability", "0 <= p <= 1"),
            },
        ),
        TopologySpec(
            "expander",
            _builder("expander"),
            "Random degree-regular graph (an expander w.h.p.), resampled until connected.",
            {"degree": ParamSpec(int, 4, "degree of every node", "2 <= degree <= n_nodes-1, n_nodes*degree even")},
        ),
        TopologySpec(
            "edge_list",
            _builder("edge_list"),
            "Read from a text file with one edge 'u v' per line ('#' comments); nodes relabelled in sorted order.",
            {"path": ParamSpec(str, None, "path of the edge list file", "an existing text file", required=True)},
        ),
    )
})
