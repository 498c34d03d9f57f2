"""What an algorithm hands to the runner: a deployment of node programs (distributed) or a solver (single)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import networkx as nx
import numpy as np

from .data import Dataset
from .program import RoleSpec

__all__ = ["Problem", "Deployment", "SingleMachineRun"]


@dataclass
class Problem:
    """The experiment an algorithm is built for: training/test data, seed, how data and nodes are laid out."""

    dataset: Dataset
    seed: int
    partition_scheme: str = "iid"
    partition_params: dict = field(default_factory=dict)
    topology: nx.Graph | None = None          # a graph given by the user (Python API or scenario)
    topology_kind: str = "star"
    topology_params: dict = field(default_factory=dict)


@dataclass
class Deployment:
    """A distributed algorithm ready to run.

    roles: node programs with their node ids and per-node data.
    topology: the graph messages may travel on (node ids 0..N-1).
    node_names: display names ("server", "client-3", ...), used by the ledger and the Ray dashboard.
    evaluate: observer: ``evaluate(observations) -> metrics`` where observations maps each role to the list of
        its groups' `observe()` results. Not communication; never metered.
    declared_scalars: ``declared_scalars(observations) -> int``: the algorithm's own count of the scalars it
        must have sent so far (held against the ledger in tests).
    bound: ``bound(eps) -> {"upper": ..., "lower": ...}``: the paper's communication bounds in scalars.
    comm_unit: (name, scalars) of the unit the paper plots communication in (e.g. ("kd", k*d)).
    model: ``model(observations) -> dict`` of final model arrays (w, coef_, intercept_, ...).
    info: constants and sizes to record in the run directory.
    """

    roles: list[RoleSpec]
    topology: nx.Graph
    node_names: list[str]
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
    every evaluation point with the solver's certificate and accuracies."""

    fit: Callable[[Callable[[dict], bool], int], dict]
    info: dict = field(default_factory=dict)
    bound: Callable[[float], dict] | None = None
