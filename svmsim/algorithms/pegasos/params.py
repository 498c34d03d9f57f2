"""Scenario parameters of pegasos and svm-sgd (the ``[algorithm]`` keys) and the paper's stopping rule they default
to: declarations only, read when the family registers its algorithms and a scenario is validated; `methods` holds
the solvers and the builds."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The paper's stopping rule: |dF| <= 0.001 on PAPER_PATIENCE consecutive steps (notes-002 section 3).
PAPER_EPS = 1e-3
PAPER_PATIENCE = 10

#: the ``reference`` key of pegasos and gadget: the certified optimum of Eq. 1 that rel_primal and the stop reason
#: measure the run against
REFERENCE_DESCRIPTION = ("compute the certified optimum J* of Eq. 1 before the run (dual coordinate descent at "
                         "C = 1/(lam n), cached between runs) to report rel_primal and to say in the stop reason how "
                         "far from it the run ended (the paper's |dF| rule is not a certificate)")


class PegasosParams(BaseModel):
    """``[algorithm]`` keys of pegasos (centralized Pegasos on the whole training set)."""

    model_config = ConfigDict(extra="forbid")
    lam: float = Field(1e-4, gt=0, description="regularisation lambda of Eq. 1 (paper Table 2: 3.07e-5 for a9a)")
    iterations: int | None = Field(None, ge=1, description="iterations T; default: epochs * N / batch_size")
    epochs: float = Field(10.0, gt=0, description="iteration budget in passes over the data when T is not given")
    batch_size: int = Field(1, ge=1, description="mini-batch k (the paper uses 1)")
    projection: bool = Field(True, description="project onto the ball of radius 1/sqrt(lam)")
    average: bool = Field(False, description="report the average of the last half of the iterates")
    eps: float = Field(PAPER_EPS, ge=0, description="paper's stopping rule threshold on |dF| (0: off)")
    patience: int = Field(PAPER_PATIENCE, ge=1, description="consecutive steps with |dF| <= eps to stop")
    reference: bool = Field(True, description=REFERENCE_DESCRIPTION)


class SGDParams(BaseModel):
    """``[algorithm]`` keys of svm-sgd (Bottou's SVM-SGD on the whole training set)."""

    model_config = ConfigDict(extra="forbid")
    lam: float = Field(1e-4, gt=0, description="regularisation lambda of Eq. 1")
    epochs: int = Field(5, ge=1, description="passes over the data")
    fit_intercept: bool = Field(True, description="learn an unregularised bias")
    eta0: float | None = Field(None, gt=0, description="initial step; default: Bottou's heuristic")
    eps: float = Field(0.0, ge=0, description="paper's stopping rule threshold on |dF| (0: off)")
    patience: int = Field(PAPER_PATIENCE, ge=1, description="consecutive steps with |dF| <= eps to stop")
