"""Scenario parameters of paper 001's methods (the ``[algorithm]`` keys): declarations only, read when the family
registers its algorithms and a scenario is validated; `build` makes the runs."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..allreduce_params import AllreducePattern, pattern_field


class DistributedParams(BaseModel):
    """``[algorithm]`` keys shared by paper 001's distributed methods."""

    model_config = ConfigDict(extra="forbid")
    workers: int = Field(16, ge=1, description="number of machines K (the paper uses 16)")
    C: float = Field(1.0, gt=0, description="loss weight C of the primal (1); the paper uses C = 1")
    loss: Literal["hinge", "squared_hinge"] = Field("hinge", description="hinge (L1-SVM) or squared_hinge (L2-SVM)")
    allreduce: AllreducePattern = pattern_field(
        "all-reduce pattern (any registered in svmsim.comm.patterns); auto: the topology's own (star, ring, tree; "
        "binomial on a hypercube; ring on complete; torus on a periodic grid)")
    branching: int = Field(2, ge=1, description="the tree all-reduce's branching (not the binomial's)")
    passes: int = Field(1, ge=1, description="local coordinate-descent passes per iteration (the paper uses 1)")


class BQOParams(DistributedParams):
    """``[algorithm]`` keys of bqo-e."""

    tau: float = Field(1e-3, gt=0, description="tau of H = Q~ + (s + tau) I for the L1 loss (L2 uses 0)")


class BQOAParams(BQOParams):
    """``[algorithm]`` keys of bqo-a."""

    armijo_beta: float = Field(0.5, gt=0, lt=1, description="Armijo's backtracking factor beta")
    armijo_sigma: float = Field(0.1, gt=0, lt=1, description="Armijo's sufficient-decrease sigma")


class TronParams(DistributedParams):
    """``[algorithm]`` keys of tron (the L2-SVM only: its primal must be differentiable)."""

    loss: Literal["squared_hinge"] = Field("squared_hinge", description="squared_hinge only (a Newton method "
                                                                        "needs the differentiable L2 loss)")
    passes: int = Field(1, ge=1, le=1, description="not used by TRON (kept for a shared grid)")


class DualCDParams(BaseModel):
    """``[algorithm]`` keys of dual-cd (one machine)."""

    model_config = ConfigDict(extra="forbid")
    C: float = Field(1.0, gt=0, description="loss weight C of the primal (1)")
    loss: Literal["hinge", "squared_hinge"] = Field("hinge", description="hinge (L1-SVM) or squared_hinge (L2-SVM)")
