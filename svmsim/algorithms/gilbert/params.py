"""Scenario parameters of gilbert and dgilbert (the ``[algorithm]`` keys): declarations only, read when the family
registers its algorithms and a scenario is validated; `methods` holds the solver, the programs and the builds."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GilbertParams(BaseModel):
    """``[algorithm]`` keys of gilbert (hard margin only; it has no parameters of its own)."""

    model_config = ConfigDict(extra="forbid")
    eps: float = Field(1e-3, gt=0, lt=1, description="target certified relative gap (also the stop.gap default)")


class DGilbertParams(BaseModel):
    """``[algorithm]`` keys of dgilbert."""

    model_config = ConfigDict(extra="forbid")
    clients: int = Field(20, ge=1, description="number of clients k")
    eps: float = Field(1e-3, gt=0, lt=1, description="target certified relative gap, for the bound lines")
