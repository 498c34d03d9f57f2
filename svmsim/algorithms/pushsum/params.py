"""Scenario parameters of pushsum (the ``[algorithm]`` keys): declarations only, read when the family registers its
algorithm and a scenario is validated; `methods` holds the peers and the build."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PushSumParams(BaseModel):
    """``[algorithm]`` keys of pushsum (runs on the gossip scheduler: see ``[schedule]``)."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(20, ge=2, description="number of nodes (a graph given in Python sets it; it must then match)")
    variant: Literal["pushsum", "running-sum", "pairwise"] = Field("pushsum", description="see the module docs")
    mixing: Literal["neighbour", "metropolis", "uniform"] = Field("neighbour", description="target distribution")
    share: float = Field(0.5, gt=0, lt=1, description="fraction of (s, w) pushed per tick")
    values: Literal["data_mean", "random"] = Field("data_mean", description="what each node averages")
    dim: int | None = Field(None, ge=1, description="length of the random vectors (values = \"random\"; default 10)")
    weighted: bool = Field(False, description="weight nodes by their number of points (values = \"data_mean\")")
    max_wakes: int | None = Field(None, ge=1, description="each node stops after this many clock ticks")

    @model_validator(mode="after")
    def _keys_that_apply(self) -> "PushSumParams":
        if self.values == "random" and self.dim is None:
            self.dim = 10
        if self.dim is not None and self.values != "random":
            raise ValueError(f"dim = {self.dim} applies to values = \"random\" only (with data_mean the data set's "
                             "dimension is used)")
        if self.weighted and self.values != "data_mean":
            raise ValueError("weighted = true applies to values = \"data_mean\" only (random values have no points)")
        return self
