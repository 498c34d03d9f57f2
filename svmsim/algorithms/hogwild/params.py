"""Scenario parameters of hogwild (the ``[algorithm]`` keys): declarations only, read when the family registers its
algorithm and a scenario is validated; `methods` holds the programs and the build."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class HogwildParams(BaseModel):
    """``[algorithm]`` keys of hogwild."""

    model_config = ConfigDict(extra="forbid")
    clients: int = Field(20, ge=1, description="number of clients k (paper 000 uses 20)")
    C: float = Field(32.0, gt=0, description="C of the C-SVM (paper 000 Appendix D uses 32)")
    steps_per_message: int = Field(16, ge=1, description="samples m a client batches into one pull/write")
    delay: int = Field(0, ge=0, description="extra cycles a write waits before the server applies it")
    step_scale: float = Field(0.1, gt=0, description="eta0 = step_scale / max_i(|x_i|^2 + 1), the first step size")
    t0_epochs: float = Field(1.0, gt=0, description="eta_t = eta0/(1 + t/T0) with T0 = t0_epochs * n steps")
    turn_order: Literal["shuffled", "fixed"] = Field("shuffled", description="client order in each cycle")
    fit_intercept: bool = Field(True, description="learn the free bias b")
