"""gossip-pegasos: every peer runs Pegasos on its own shard and averages its model with its neighbours' by gossip.

Objective (no bias): P(w) = lam/2 |w|^2 + 1/n sum_i max(0, 1 - y_i w.x_i).

At each tick of its clock (`wake`) a peer that has not finished
  1. draws one of its points i (its own seeded stream) and takes the Pegasos step with eta = 1/(lam t):
     w <- (1 - eta lam) w + eta y_i x_i  if y_i w.x_i < 1,  else  w <- (1 - eta lam) w;
  2. pushes w to a neighbour drawn uniformly (one message of d scalars, tag "w").
A peer receiving w' averages: w <- (w + w') / 2 (`receive`: one message at a time, in event order). A peer stops
after `steps` ticks; the run ends when every peer has (the algorithm finishes by itself).
"""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from svmsim.api import (ANY_TOPOLOGY, AlgorithmInfo, Conformance, Deployment, GossipProgram, InfeasibleParameterError,
                        MessageBatch, Outbox, RoleSpec, build_topology, partition, register)


class GossipPegasosParams(BaseModel):
    """``[algorithm]`` keys of gossip-pegasos."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(8, ge=2, description="number of peers (each holds one shard of the training set)")
    lam: float = Field(1e-2, gt=0, description="regularisation lambda")
    steps: int = Field(200, ge=1, description="Pegasos steps (clock ticks) of each peer before it stops")


class Peer(GossipProgram):
    """A group of peers as one struct of arrays: W holds one model per row."""

    role = "peer"

    def __init__(self, neighbours: list, lam: float, steps: int, d: int):
        self.neighbours, self.lam, self.steps, self.d = neighbours, lam, steps, d

    def init(self, node_ids, node_data, seed):
        ids = np.asarray(node_ids, dtype=np.int64)
        return {"ids": ids, "W": np.zeros((len(ids), self.d)), "t": np.zeros(len(ids), dtype=np.int64),
                "sent": 0, "X": [part["X"] for part in node_data], "y": [part["y"] for part in node_data],
                "rng": [np.random.default_rng([seed, int(n)]) for n in ids]}

    def wake(self, st, nodes, times):
        out = Outbox()
        src, dst, rows = [], [], []
        for node in nodes:                      # one event at a time, in event order
            j = int(np.searchsorted(st["ids"], node))
            if st["t"][j] >= self.steps:
                continue
            rng = st["rng"][j]
            i = int(rng.integers(len(st["y"][j])))
            st["t"][j] += 1
            eta = 1.0 / (self.lam * st["t"][j])
            x = np.asarray(st["X"][j][i].todense()).ravel() if hasattr(st["X"][j], "tocsr") else st["X"][j][i]
            y = st["y"][j][i]
            w = st["W"][j]
            hit = y * (w @ x) < 1.0
            w *= 1.0 - eta * self.lam
            if hit:
                w += eta * y * x
            nbrs = self.neighbours[int(node)]
            src.append(int(node))
            dst.append(int(nbrs[rng.integers(len(nbrs))]))
            rows.append(w.copy())
        if src:
            out.send(MessageBatch("w", np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                                  np.array(rows)))
            st["sent"] += len(src)
        if (st["t"] >= self.steps).all():
            out.signals = {"done": True}
        return st, out

    def receive(self, st, batch, times):
        rows = batch.rows()
        for k, node in enumerate(batch.dst):    # one message at a time, in event order
            j = int(np.searchsorted(st["ids"], node))
            st["W"][j] = (st["W"][j] + rows[k]) / 2.0
        return st, Outbox()

    def observe(self, st):
        return {"ids": st["ids"].copy(), "W": st["W"].copy(), "t": st["t"].copy(), "sent": st["sent"]}


def objective(w, X, y, lam) -> float:
    return float(lam / 2 * w @ w + np.maximum(0.0, 1.0 - y * (X @ w)).mean())


def build(params: GossipPegasosParams, problem) -> Deployment:
    ds = problem.dataset
    m = params.nodes
    if m > ds.n:
        raise InfeasibleParameterError(f"nodes = {m} exceeds the number of training points ({ds.n}); allowed: "
                                       f"2 <= nodes <= {ds.n}")
    G = problem.topology if problem.topology is not None else build_topology(
        problem.topology_kind, m, seed=problem.seed, **problem.topology_params)
    if G.number_of_nodes() != m:
        raise InfeasibleParameterError(f"the topology has {G.number_of_nodes()} nodes but nodes = {m}; allowed: "
                                       "nodes equal to the graph's")
    parts = partition(ds.y, m, problem.partition_scheme, seed=problem.seed, **problem.partition_params)
    shards = [{"X": ds.X[p], "y": ds.y[p]} for p in parts]
    neighbours = [np.array(sorted(G.neighbors(i)), dtype=np.int64) for i in range(m)]
    ids = np.arange(m, dtype=np.int64)
    roles = [RoleSpec("peer", Peer(neighbours, params.lam, params.steps, ds.d), ids, shards)]

    def average(obs):
        W = np.concatenate([o["W"] for o in obs["peer"]])
        return W.mean(axis=0), W

    def evaluate(obs):
        w, W = average(obs)
        metrics = {"objective": objective(w, ds.X, ds.y, params.lam),
                   "consensus_spread": float(np.abs(W - w).max()),
                   "train_accuracy": float(np.mean(np.where(ds.X @ w >= 0, 1.0, -1.0) == ds.y))}
        if ds.X_test is not None:
            metrics["test_accuracy"] = float(np.mean(np.where(ds.X_test @ w >= 0, 1.0, -1.0) == ds.y_test))
        return metrics

    return Deployment(roles=roles, topology=G, node_names=[f"peer-{i}" for i in range(m)], evaluate=evaluate,
                      declared_scalars=lambda obs: ds.d * sum(o["sent"] for o in obs["peer"]),
                      model=lambda obs: {"coef": average(obs)[0]}, info={"nodes": m})


ALGORITHM = register(AlgorithmInfo(
    name="gossip-pegasos", family="svmsim-extras", paper="Pegasos steps with gossip averaging",
    distributed=True, Params=GossipPegasosParams, build=build,
    topologies=ANY_TOPOLOGY, metrics=("objective", "train_accuracy", "test_accuracy"),
    description="gossip Pegasos: a Pegasos step per clock tick, the model pushed to a random neighbour, averaged",
    scheduler="gossip", finishes_by_itself=True,
    conformance=Conformance(
        params={"nodes": 7, "steps": 20},
        skips={"compiled": "its programs offer no compiled step (GossipProgram.kernel returns None)"})))
