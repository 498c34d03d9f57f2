"""Scenario parameters of gadget (the ``[algorithm]`` keys): declarations only, read when the family registers its
algorithm and a scenario is validated; `methods` holds the peers and the build."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..pegasos.params import PAPER_EPS, PAPER_PATIENCE, REFERENCE_DESCRIPTION


#: above this many nodes GADGET's per-node means come from a fixed sample of this many nodes' models (eval_nodes):
#: scoring each model is a pass over the data (10^5 nodes on 2·10^5 points: minutes per evaluation)
EVAL_NODES = 1000


class GadgetParams(BaseModel):
    """``[algorithm]`` keys of gadget."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(10, ge=2, description="number of nodes m (the paper uses 10)")
    lam: float = Field(1e-4, gt=0, description="regularisation lambda of Eq. 1 (paper Table 2: 3.07e-5 for a9a)")
    gossip: Literal["push-sum", "pairwise"] = Field("push-sum", description="Push-Sum shares or pairwise averaging")
    rounds: int = Field(1, ge=1, description="gossip ticks per local step (R Push-Sum rounds per step)")
    mixing: Literal["neighbour", "metropolis", "uniform"] = Field(
        "neighbour", description="row i of B: 1/deg i, Metropolis-Hastings, or 1/(deg i + 1) with self")
    size_weighted: bool = Field(True, description="Push-Sum weights start at n_i/mean(n): n_i-weighted consensus")
    project_local: bool = Field(True, description="step (f): project after the local step")
    project_gossip: bool = Field(True, description="step (h): project after the gossip")
    eps: float = Field(PAPER_EPS, ge=0, description="paper's stopping rule threshold on |dF| (0: off)")
    patience: int = Field(PAPER_PATIENCE, ge=1, description="consecutive steps with |dF| <= eps to finish")
    iterations: int | None = Field(None, ge=1, description="T: local steps after which a node finishes")
    average: bool = Field(False, description="each node outputs the average of its last T/2 iterates (needs T)")
    eval_nodes: int = Field(EVAL_NODES, ge=0, description="node models scored for the per-node means (objective, "
                            "accuracies): every node up to this many, above it a fixed seeded sample of this many "
                            "(an estimate, reported as nodes_scored; 0: every node); the average model and the "
                            "consensus use every node")
    reference: bool = Field(True, description=REFERENCE_DESCRIPTION)

    @model_validator(mode="after")
    def _average_needs_iterations(self):
        if self.average and self.iterations is None:
            raise ValueError("average = true averages the last half of T local steps, so T must be known; allowed: "
                             "iterations = T, or average = false")
        return self
