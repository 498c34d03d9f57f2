"""Scenario parameters of paper 003's methods (the ``[algorithm]`` keys): declarations only, read when the family
registers its algorithms and a scenario is validated; `build`, `baselines_sklearn` and `distributed` make the runs.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: the default of ``settle``: the objective moves by at most 1% of its value per doubling of the iterations
SETTLE = 1e-2


class KernelParamsModel(BaseModel):
    """``[algorithm]`` keys shared by paper 003's methods."""

    model_config = ConfigDict(extra="forbid")
    kernel: Literal["gaussian", "linear", "polynomial"] = Field(
        "gaussian", description="K(x, z): gaussian exp(-||x - z||^2 / (2 sigma2)), linear <x, z>, polynomial "
                                "(gamma <x, z> + coef0)^degree")
    sigma2: float | Literal["scale"] = Field(
        "scale", description="the Gaussian's sigma^2 (paper 003's Table 2: a9a 10); scale: d Var(X) / 2 (the "
                             "Gaussian that scikit-learn's gamma = 'scale' gives)")
    gamma: float = Field(1.0, gt=0, description="the polynomial kernel's gamma")
    coef0: float = Field(0.0, description="the polynomial kernel's coef0")
    degree: int = Field(3, ge=1, description="the polynomial kernel's degree")
    lam: float | None = Field(None, gt=0, description="lambda of (2.2), lam/2 ||w||^2 + mean hinge; default 1/n "
                                                      "(the paper's no-bias setting, C = 1/(lam n) = 1)")
    epochs: float = Field(10.0, gt=0, description="iterations = epochs * n (the paper runs every method 10 epochs)")
    eval_points: int = Field(30, ge=1, description="evaluation points, log-spaced in iterations up to the budget")
    track_test: bool = Field(True, description="keep the test responses up to date (n_test kernel evaluations "
                                               "per row, counted apart as the evaluator's) for the test error at "
                                               "every evaluation point")


class SettlingParams(KernelParamsModel):
    """``[algorithm]`` keys of the methods that stop when their objective has settled (SBP, kernel Pegasos and
    SDCA; the Perceptron minimises no objective: a stretch without mistakes leaves it flat, so it runs its
    budget)."""

    settle: float = Field(SETTLE, ge=0, lt=1, description="stop before the epoch budget once the objective (2.2) "
                                                          "has moved by at most this share of its value per "
                                                          "doubling of the iterations over two evaluation "
                                                          "intervals (not a certificate: the stop reason says so); "
                                                          "0: run the whole budget")


class SBPParams(SettlingParams):
    """``[algorithm]`` keys of sbp."""

    nu: float | Literal["auto"] = Field(
        "auto", description="the slack budget nu of (2.3), in [0, 1] (water volume n nu; 0: the separable form "
                            "(3.2)); auto: L(w*)/||w*|| of the certified no-bias solution at lam (notes-003 1.3; up "
                            "to 20 000 points); a9a: 1.10e-2 (paper 003's Table 2, Adult)")
    bias: bool = Field(False, description="an unregularised bias (section 3.6, Algorithm 3 corrected)")

    @field_validator("nu")
    @classmethod
    def _nu_range(cls, value):
        if value != "auto" and not (0.0 <= value <= 1.0):
            raise ValueError(f"nu = {value!r} is out of range; allowed: a number in [0, 1] (the average slack at "
                             "||w|| <= 1; with K <= 1 every response lies in [-1, 1], so nu >= 1 covers every point "
                             "and SBP returns the mean classifier) or 'auto'")
        return value


class PegasosParams(SettlingParams):
    """``[algorithm]`` keys of kernel-pegasos."""

    project: bool = Field(True, description="project onto the ball of radius 1/sqrt(lam) after each step")


class PerceptronParams(KernelParamsModel):
    """``[algorithm]`` keys of kernel-perceptron."""


class SDCAParams(SettlingParams):
    """``[algorithm]`` keys of kernel-sdca."""


class LibsvmParams(KernelParamsModel):
    """``[algorithm]`` keys of libsvm."""

    first_budget: int = Field(256, ge=1, description="the first SMO iteration budget; budgets double until SMO "
                                                     "converges (one fit at the full budget: curve = false)")
    curve: bool = Field(True, description="fit on doubling budgets to draw the error against cost; false: one fit")
    tol: float = Field(1e-3, gt=0, description="LIBSVM's stopping tolerance (its default)")
    cache_mb: float = Field(1000.0, gt=0, description="LIBSVM's kernel cache in MB")


class RFFParams(KernelParamsModel):
    """``[algorithm]`` keys of rff."""

    max_features: int = Field(1024, ge=1, description="the largest k (2k features); k doubles from 1")


class DSBPParams(SBPParams):
    """``[algorithm]`` keys of dsbp."""

    clients: int = Field(4, ge=1, description="clients k holding shards of the training points")
