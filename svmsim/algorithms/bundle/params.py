"""Scenario parameters of paper 004's methods (the ``[algorithm]`` keys), and the shape of pragam-b's root probe
(`projection`) that they name: declarations only, read when the family registers its algorithms and a scenario
is validated; `build` and `liblinear` make the runs."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..allreduce_params import AllreducePattern, pattern_field

#: what a probe all-reduces: g(nu) and its slopes to the right and to the left (sums), the nearest kinks below and
#: above nu (max and min)
PROBE_WIDTH = 5
PROBE_COMBINE = ("sum", "sum", "sum", "max", "min")


class BundleParams(BaseModel):
    """``[algorithm]`` keys shared by paper 004's methods."""

    model_config = ConfigDict(extra="forbid")
    lam: float = Field(1e-4, gt=0, description="regularisation lambda of J(w) = lam/2 |w|^2 + mean hinge (the "
                                               "paper's a9a value is 2^-18 = 3.8147e-06; C = 1/(lam n))")
    workers: int = Field(1, ge=1, description="machines K holding blocks of the examples (1: the paper's single "
                                              "machine); the iterates are the same for every K")
    allreduce: AllreducePattern = pattern_field(
        "all-reduce pattern (any registered in svmsim.comm.patterns); auto: the topology's own (star, ring, tree; "
        "binomial on a hypercube; ring on complete; torus on a periodic grid)")
    branching: int = Field(2, ge=1, description="the tree all-reduce's branching (not the binomial's)")
    band_certificate: bool = Field(False, description="also report rel_band_gap: the gap against a lower bound from "
                                                      "the best iterate's margin band (certified; not metered)")


class PragamParams(BundleParams):
    """``[algorithm]`` keys of pragam and pragam-b."""

    lipschitz_safety: float = Field(1e-6, ge=0, description="L = (1 + safety) sigma_max(X)^2 / lam (Algorithm 1 "
                                                            "needs an over-estimate; sigma_max by ARPACK)")


class PragamBParams(PragamParams):
    """``[algorithm]`` keys of pragam-b: those of pragam and the pattern of its root probes."""

    probe_allreduce: AllreducePattern = pattern_field(
        f"pragam-b over K > 1 workers: the pattern of its root probes' all-reduce of {PROBE_WIDTH} scalars; auto: "
        f"the all-reduce's own, or the binomial tree where that has rings of more than {PROBE_WIDTH} workers (a "
        "ring all-reduce needs a scalar per member)")


class BMRMParams(BundleParams):
    """``[algorithm]`` keys of ls-bmrm."""


class QPBMRMParams(BundleParams):
    """``[algorithm]`` keys of qp-bmrm."""

    max_bundle: int = Field(2000, ge=2, description="planes kept; when full, planes with alpha = 0 leave, or all "
                                                    "are aggregated into one")
    qp_tol: float = Field(1e-3, gt=0, lt=1, description="the inner QP stops at a duality gap <= qp_tol times the "
                                                        "current certified outer gap")
    qp_max_steps: int = Field(100_000, ge=1, description="SMO steps per inner solve before it counts as failed")


class PegasosNParams(BundleParams):
    """``[algorithm]`` keys of pegasos-n."""

    project: bool = Field(True, description="project onto the ball of radius 1/sqrt(lam) after each step")


class LiblinearParams(BaseModel):
    """``[algorithm]`` keys of liblinear."""

    model_config = ConfigDict(extra="forbid")
    lam: float = Field(1e-4, gt=0, description="lambda of J (C = 1/(lam n))")
    max_epochs: int = Field(4096, ge=1, description="the largest epoch budget (budgets double from 1)")
