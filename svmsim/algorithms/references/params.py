"""Scenario parameters of the scikit-learn reference solvers (the ``[algorithm]`` keys): declarations only, read
when the family registers its algorithms and a scenario is validated; `methods` holds the runs."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SVCParams(BaseModel):
    """``[algorithm]`` keys of sklearn-svc (hard margin)."""

    model_config = ConfigDict(extra="forbid")
    C: float = Field(1e10, gt=0, description="box constraint; a huge C solves the hard-margin problem")
    tol: float = Field(1e-6, gt=0, description="LIBSVM's stopping tolerance")
    dense: bool | None = Field(None, description="fit on a dense copy (default: when > 30% of entries are non-zero)")


class NuSVCParams(BaseModel):
    """``[algorithm]`` keys of sklearn-nusvc: paper 000's nu (a weight cap) or alpha, mapped to NuSVC's nu."""

    model_config = ConfigDict(extra="forbid")
    nu: float | None = Field(None, gt=0, le=1, description="weight cap of the nu-SVM (paper 000's nu)")
    alpha: float | None = Field(None, gt=0, le=1, description="nu = 1/(alpha*min(n1,n2)); the paper uses 0.85")
    tol: float = Field(1e-3, gt=0, description="LIBSVM's stopping tolerance")
    dense: bool | None = Field(None, description="fit on a dense copy (default: when > 30% of entries are non-zero)")

    @model_validator(mode="after")
    def _one_of_nu_alpha(self):
        if self.nu is not None and self.alpha is not None:
            raise ValueError("set either nu or alpha, not both")
        if self.nu is None and self.alpha is None:
            raise ValueError("set nu or alpha (the nu-SVM needs its weight cap; for the hard margin use "
                             "sklearn-svc)")
        return self


class LinearSVCParams(BaseModel):
    """``[algorithm]`` keys of sklearn-linearsvc (the C-SVM by LIBLINEAR)."""

    model_config = ConfigDict(extra="forbid")
    C: float = Field(8.0, gt=0, description="C of the C-SVM (paper 000 Table 4 uses 8)")
    loss: Literal["squared_hinge", "hinge"] = Field("squared_hinge", description="LIBLINEAR's loss")
    tol: float = Field(1e-4, gt=0, description="LIBLINEAR's stopping tolerance")
    max_iter: int = Field(1000, ge=1, description="LIBLINEAR's iteration limit")
    fit_intercept: bool = Field(True, description="fit a bias term (LIBLINEAR's intercept)")
