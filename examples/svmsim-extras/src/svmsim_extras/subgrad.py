"""subgrad-svm: a distributed full-batch subgradient method for the linear SVM, in synchronous rounds.

Objective (no bias): P(w) = lam/2 |w|^2 + 1/n sum_i max(0, 1 - y_i w.x_i).

One iteration takes two rounds:
  round 2t:   the server broadcasts w_t to the k clients                      (k messages of d scalars, tag "w")
  round 2t+1: client j answers g_j = -sum_{i in shard j, y_i w.x_i < 1} y_i x_i  (k messages of d scalars, tag "g")
  round 2t+2: the server steps w_{t+1} = w_t - (lam w_t + sum_j g_j / n) / (lam (t+1)) and broadcasts it
so the run sends 2 k d scalars per iteration, which `declared` counts from the programs' own counters.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field

from svmsim.api import (AlgorithmInfo, Conformance, Deployment, MessageBatch, NodeProgram, Outbox, RoleSpec,
                        frozen_ids, register, server_client_layout)


class SubgradParams(BaseModel):
    """``[algorithm]`` keys of subgrad-svm."""

    model_config = ConfigDict(extra="forbid")

    clients: int = Field(4, ge=1, description="number of clients k (each holds one shard of the training set)")
    lam: float = Field(1e-2, gt=0, description="regularisation lambda")


class Server(NodeProgram):
    """Node 0: holds w, starts iteration 0 (an initiator is stepped in round 0 with an empty inbox)."""

    role = "server"
    initiator = True

    def __init__(self, d: int, lam: float, n: int):
        self.d, self.lam, self.n = d, lam, n

    def init(self, node_ids, node_data, seed):
        return {"clients": frozen_ids(node_data[0]), "w": np.zeros(self.d), "t": 0, "broadcasts": 0}

    def step(self, st, inbox, round_):
        out = Outbox()
        grads = inbox.get("g")
        if grads is not None:                   # the answers to w_t: take the step, iteration t is complete
            g = self.lam * st["w"] + grads.rows().sum(axis=0) / self.n
            st["t"] += 1
            st["w"] = st["w"] - g / (self.lam * st["t"])
            out.signals = {"iteration": st["t"]}
        out.send(MessageBatch.broadcast("w", 0, st["clients"], st["w"]))
        st["broadcasts"] += 1
        return st, out

    def observe(self, st):
        return {"w": st["w"].copy(), "t": st["t"], "broadcasts": st["broadcasts"]}


class Client(NodeProgram):
    """Clients: each answers the hinge subgradient of its shard. A group of clients is one struct of arrays (their
    stacked shards), so a step is one sparse product over the group, whatever the grouping."""

    role = "client"

    def init(self, node_ids, node_data, seed):
        X = sp.vstack([sp.csr_matrix(part["X"]) for part in node_data], format="csr")
        y = np.concatenate([part["y"] for part in node_data])
        owner = np.repeat(np.arange(len(node_ids)), [len(part["y"]) for part in node_data])
        return {"ids": frozen_ids(node_ids), "X": X, "y": y, "owner": owner, "answers": 0}

    def step(self, st, inbox, round_):
        w_batch = inbox["w"]
        w = w_batch.rows()[0]                   # every client of the group gets the same w
        y = st["y"]
        violated = y * (st["X"] @ w) < 1.0
        # row j of `pick` holds -y_i for client j's violated points: pick @ X sums them per client, in row order
        pick = sp.csr_matrix((-y[violated], (st["owner"][violated], np.flatnonzero(violated))),
                             shape=(len(st["ids"]), len(y)))
        g = (pick @ st["X"]).toarray()
        pos = np.searchsorted(st["ids"], w_batch.dst)
        out = Outbox()
        out.send(MessageBatch.gather("g", w_batch.dst, 0, g[pos]))
        st["answers"] += len(pos)
        return st, out

    def observe(self, st):
        return {"answers": st["answers"]}


def hinge_objective(w, X, y, lam) -> float:
    return float(lam / 2 * w @ w + np.maximum(0.0, 1.0 - y * (X @ w)).mean())


def build(params: SubgradParams, problem) -> Deployment:
    ds = problem.dataset
    k = params.clients
    layout = server_client_layout(problem, k, "subgrad-svm")
    shards = [{"X": ds.X[part], "y": ds.y[part]} for part in layout.parts]
    roles = [RoleSpec("server", Server(ds.d, params.lam, ds.n), np.array([0]), [layout.clients]),
             RoleSpec("client", Client(), layout.clients, shards)]

    def evaluate(obs):
        w = obs["server"][0]["w"]
        m = {"objective": hinge_objective(w, ds.X, ds.y, params.lam),
             "train_accuracy": float(np.mean(np.where(ds.X @ w >= 0, 1.0, -1.0) == ds.y))}
        if ds.X_test is not None:
            m["test_accuracy"] = float(np.mean(np.where(ds.X_test @ w >= 0, 1.0, -1.0) == ds.y_test))
        return m

    def declared(obs):                          # k d per broadcast, d per answer
        broadcasts = obs["server"][0]["broadcasts"]
        answers = sum(o["answers"] for o in obs["client"])
        return ds.d * (k * broadcasts + answers)

    return Deployment(roles=roles, topology=layout.topology, node_names=layout.node_names, evaluate=evaluate,
                      declared_scalars=declared, model=lambda obs: {"coef": obs["server"][0]["w"]},
                      comm_unit=("kd", float(k * ds.d)), info={"k": k, "scalars_per_iteration": 2 * k * ds.d})


ALGORITHM = register(AlgorithmInfo(
    name="subgrad-svm", family="svmsim-extras", paper="full-batch subgradient descent, step 1/(lam t)",
    distributed=True, Params=SubgradParams, build=build, topologies=("star",),
    metrics=("objective", "train_accuracy", "test_accuracy"),
    description="distributed subgradient SVM: server broadcasts w, clients answer their shard's hinge subgradient",
    conformance=Conformance(
        params={"clients": 5},
        skips={"seed": "deterministic: a full-batch subgradient method draws no random numbers",
               "compiled": "its programs offer no compiled step (NodeProgram.kernel returns None)"})))
