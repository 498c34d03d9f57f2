"""What an algorithm hands to the runner: a deployment of node programs (distributed) or a solver (single)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

import networkx as nx
import numpy as np

from .data import Dataset
from .program import RoleSpec

__all__ = ["Problem", "Deployment", "SingleMachineRun", "ServerClientLayout", "server_client_layout",
           "observations_by_role"]


class Problem:
    """The experiment an algorithm is built for: training/test data, seed, how data and nodes are laid out.

    dataset: the `Dataset`, or a function without arguments that loads it: then it is loaded when an algorithm first
    reads ``problem.dataset`` (Push-Sum with random values never does: a 10^5-node run does not read a9a for
    nothing). topology: a graph given by the user (Python API or scenario)."""

    def __init__(self, dataset: Dataset | Callable[[], Dataset], seed: int, partition_scheme: str = "iid",
                 partition_params: dict | None = None, topology: nx.Graph | None = None, topology_kind: str = "star",
                 topology_params: dict | None = None):
        self._dataset = dataset
        self.seed = seed
        self.partition_scheme = partition_scheme
        self.partition_params = {} if partition_params is None else partition_params
        self.topology = topology
        self.topology_kind = topology_kind
        self.topology_params = {} if topology_params is None else topology_params

    @property
    def dataset(self) -> Dataset:
        if callable(self._dataset):
            self._dataset = self._dataset()
        return self._dataset

    def replace(self, **changes) -> Problem:
        """A copy with `changes` (keyword: value, as the constructor takes them); the data set is shared."""
        kwargs = {"dataset": self._dataset, "seed": self.seed, "partition_scheme": self.partition_scheme,
                  "partition_params": self.partition_params, "topology": self.topology,
                  "topology_kind": self.topology_kind, "topology_params": self.topology_params}
        unknown = set(changes) - set(kwargs)
        if unknown:
            raise TypeError(f"Problem has no field {', '.join(sorted(unknown))}; it has {', '.join(kwargs)}")
        return Problem(**{**kwargs, **changes})

    def __repr__(self) -> str:
        data = "(not loaded)" if callable(self._dataset) else getattr(self._dataset, "name", "?")
        return (f"Problem(dataset={data}, seed={self.seed}, partition_scheme={self.partition_scheme!r}, "
                f"topology_kind={self.topology_kind!r})")


@dataclass
class Deployment:
    """A distributed algorithm ready to run.

    roles: node programs with their node ids and per-node data.
    topology: the graph messages may travel on (node ids 0..N-1).
    node_names: display names ("server", "client-3", ...), used by the ledger and the Ray dashboard: a list, or a
        `core.names.NodeNames` (names made when read, for many nodes).
    evaluate: observer: ``evaluate(observations) -> metrics`` where observations maps each role to the list of
        its groups' `observe()` results. Not communication; never metered.
    declared_scalars: ``declared_scalars(observations) -> int``: the algorithm's own count of the scalars it
        must have sent so far (held against the ledger in tests).
    bound: ``bound(eps) -> {"upper": ..., "lower": ...}``: the paper's communication bounds in scalars.
    comm_unit: (name, scalars) of the unit the paper plots communication in (e.g. ("kd", k*d)).
    model: ``model(observations) -> dict`` of final model arrays (w, coef_, intercept_, ...), from the run's last
        observations; it may reuse the arrays of one that a program handed over (`GossipProgram.hand_over`).
    info: constants and sizes to record in the run directory.
    """

    roles: list[RoleSpec]
    topology: nx.Graph
    node_names: Sequence[str]
    evaluate: Callable[[dict[str, list]], dict]
    declared_scalars: Callable[[dict[str, list]], int] | None = None
    bound: Callable[[float], dict] | None = None
    comm_unit: tuple[str, float] | None = None
    model: Callable[[dict[str, list]], dict] | None = None
    info: dict = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return self.topology.number_of_nodes()

    def adjacency(self) -> np.ndarray:
        return nx.to_numpy_array(self.topology, nodelist=range(self.n_nodes), dtype=bool)


@dataclass
class SingleMachineRun:
    """A single-machine solver: ``fit(on_check) -> model dict``; ``on_check(metrics) -> stop?`` is called at
    every evaluation point with the solver's certificate and accuracies. `measured` names metrics derived from
    wall-clock measurements (like times, no replay repeats them; e.g. an estimate from a timed probe).
    `budget` is set by the runner to the scenario's iteration budget (``stop.max_iterations``, or None) before
    `fit`, for solvers that lay out their own evaluation points. `budgets`: the ``[stop]`` budgets the solver
    honours (None: all, for a solver that calls `on_check` as it goes; a single call into a library that reports
    once at its end honours only those it passes on, and the runner refuses the others)."""

    fit: Callable[[Callable[[dict], bool], int], dict]
    info: dict = field(default_factory=dict)
    bound: Callable[[float], dict] | None = None
    measured: tuple[str, ...] = ()
    budget: int | None = None
    budgets: tuple[str, ...] | None = None


@dataclass
class ServerClientLayout:
    """Where a server-client algorithm's nodes and data go: server = node 0, clients = nodes 1..k."""

    parts: list[np.ndarray]      # training indices of each client
    topology: nx.Graph           # a star with the server at its hub
    clients: np.ndarray          # client node ids 1..k
    node_names: list[str]        # "server", "client-0", ...


def server_client_layout(problem: Problem, k: int, algorithm: str) -> ServerClientLayout:
    """Partition the training data over k clients and check (or build) the star they talk over."""
    from .data import partition
    from .errors import InfeasibleParameterError, TopologyError
    from .topology import build_topology

    n = problem.dataset.n
    if k > n:
        raise InfeasibleParameterError(f"clients = {k} exceeds the number of training points ({n}); "
                                       f"allowed: 1 <= clients <= {n}")
    parts = partition(problem.dataset.y, k, problem.partition_scheme, seed=problem.seed,
                      **problem.partition_params)
    G = problem.topology if problem.topology is not None else build_topology("star", k + 1, seed=problem.seed)
    if G.number_of_nodes() != k + 1 or G.degree(0) != k:
        raise TopologyError(f"{algorithm} needs a star with the server at node 0 and {k} clients; the given "
                            f"graph has {G.number_of_nodes()} nodes and node 0 has degree {G.degree(0)}")
    return ServerClientLayout(parts, G, np.arange(1, k + 1, dtype=np.int64),
                              ["server"] + [f"client-{i}" for i in range(k)])


def observations_by_role(observed: dict, groups) -> dict[str, list]:
    """Observations ``{gid: observation}`` by role: ``{role: [observation of each of its groups, by gid]}`` (what a
    deployment's `evaluate`, `model` and `declared_scalars` are given)."""
    out: dict[str, list] = {}
    for gid, o in sorted(observed.items()):
        out.setdefault(groups[gid].role, []).append(o)
    return out
