"""Scenario parameters of saddle-svc and saddle-dsvc (the ``[algorithm]`` keys): declarations only, read when a
scenario is validated; `build` makes the runs."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SaddleParams(BaseModel):
    """``[algorithm]`` keys of saddle-svc. Leave nu and alpha unset for the hard margin."""

    model_config = ConfigDict(extra="forbid")
    nu: float | None = Field(None, gt=0, le=1, description="weight cap of the nu-SVM (this paper's nu)")
    alpha: float | None = Field(None, gt=0, le=1, description="nu = 1/(alpha*min(n1,n2)); the paper uses 0.85")
    eps: float = Field(1e-3, gt=0, lt=1, description="accuracy epsilon (sets gamma = eps*beta/(2 ln n))")
    beta: Literal["auto"] | Annotated[float, Field(gt=0)] = Field(
        "auto", description="the paper's beta: 'auto' restarts with a smaller beta read off the certificate when "
                            "the gap stalls (see SaddleSVC), or a number fixed for the whole run")
    q: Literal["data", "log"] | float = Field("data", description="q = sqrt(d)max|X| ('data'), sqrt(ln n) or a number")
    projection: Literal["newton", "rule3", "sort"] = Field("newton", description="nu-projection rule")

    @model_validator(mode="after")
    def _one_of_nu_alpha(self):
        if self.nu is not None and self.alpha is not None:
            raise ValueError("set either nu or alpha, not both")
        return self


class SaddleDSVCParams(SaddleParams):
    """``[algorithm]`` keys of saddle-dsvc: those of saddle-svc plus the number of clients k."""

    clients: int = Field(20, ge=1, description="number of clients k")
    beta: Literal["auto"] | Annotated[float, Field(gt=0)] = Field(
        "auto", description="the paper's beta: 'auto' restarts as saddle-svc does, the server certifying the iterate "
                            "every check_every iterations (k(d + 22) scalars and about 12k per probe of the capped "
                            "minimum, in the ledger), or a number fixed for the whole run (the paper's setting)")
    check_every: int | None = Field(
        None, ge=1, description="beta = 'auto': iterations between certificate checks (default: the paper's T at "
                                "beta = 1, between 250 and 5000, as saddle-svc's estimator; set it to saddle-svc's "
                                "output.eval_every to follow a saddle-svc run's restarts)")
    projection: Literal["rule3", "newton"] = Field(
        "rule3", description="distributed nu-projection: Rule 3 rounds from c = 1 (Algorithm 4), or Newton steps "
                             "from the previous iteration's multiplier (the single machine's rule)")
