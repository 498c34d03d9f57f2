"""The ``[sweep]`` table of a scenario file: its schema and checks (`svmsim.sweep` plans and runs the sweep).

``load_scenario`` checks the table of a sweep file and otherwise ignores it, so that ``svmsim validate`` and
``svmsim run`` accept sweep files. The models are built on first use (``defer_build``): a scenario without a
``[sweep]`` table does not pay for them.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from svmsim.errors import ScenarioError

from .messages import error_from_validation
from .values import show


#: short parameter names and the scenario keys they stand for (eps also sets stop.gap)
SHORT_NAMES = {"eps": "algorithm.eps", "d": "data.d", "n": "data.n", "k": "algorithm.clients",
               "clients": "algorithm.clients", "seed": "seed"}
_SCALAR = (bool, int, float, str)


class Variant(BaseModel):
    """One algorithm compared on every grid point: its ``[algorithm]`` table, other dotted overrides, and the
    dotted keys or tables of the file it leaves out (``unset``, e.g. ``["topology", "schedule"]`` for a
    single-machine baseline beside a peer algorithm)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    label: str = Field(min_length=1)
    algorithm: dict[str, Any] | None = None
    set: dict[str, Any] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)


XAxis = Literal["comm_units", "scalars", "bytes", "wall_time", "iteration", "round", "modelled_time", "kernel_evaluations",
                "inner_products", "solver_time"]


class Figure(BaseModel):
    """One more curve figure of a sweep (``[[sweep.figures]]``): metric `y` against `x`, one panel per grid point."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    y: str = Field(min_length=1)
    x: XAxis = "iteration"


class SweepSpec(BaseModel):
    """The ``[sweep]`` table of a scenario file (see `svmsim.sweep` for each key)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    variants: list[Variant] = Field(default_factory=list)
    plot: str = "objective"
    x: XAxis = "comm_units"
    figures: list[Figure] = Field(default_factory=list)
    title: str = ""
    target: float | None = Field(None, gt=0)
    target_metric: str = Field("rel_gap", min_length=1)
    targets: list[float] = Field(default_factory=list)
    table_metrics: list[str] = Field(default_factory=list)
    against: str | None = Field(None, min_length=1)
    against_y: list[str] = Field(default_factory=list)
    against_by: str | None = Field(None, min_length=1)
    against_fit: Literal["variant", "by"] = "variant"
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    trials: str | None = Field(None, min_length=1)
    trials_columns: list[str] | None = None
    warmup: bool = False

    @field_validator("table_metrics")
    @classmethod
    def _named(cls, value: list[str]) -> list[str]:
        if any(not m.isidentifier() for m in value) or len(set(value)) != len(value):
            raise ValueError("table_metrics must be distinct metric names (columns of metrics.csv), e.g. "
                             "[\"rel_dual\", \"rel_primal\"]")
        return value

    @field_validator("against_y", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("targets")
    @classmethod
    def _positive(cls, value: list[float]) -> list[float]:
        if any(not (isinstance(v, (int, float)) and v > 0) for v in value):
            raise ValueError("targets must be numbers > 0, e.g. [1e-2, 1e-3, 1e-4]")
        return value

    @field_validator("grid")
    @classmethod
    def _check_grid(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            check_param(key, values)
        return grid


def describe_allowed() -> str:
    return ", ".join(SHORT_NAMES) + ", or a dotted scenario key such as algorithm.beta or data.d"


def check_param(key: str, values: list[Any]) -> None:
    """A grid entry must name a known parameter and give a non-empty list of plain values of one kind."""
    if key not in SHORT_NAMES and "." not in key:
        raise ScenarioError(f"sweep parameter {key!r} is unknown; allowed: {describe_allowed()}")
    if not isinstance(values, list) or not values:
        raise ScenarioError(f"sweep parameter {key} has an empty list of values; allowed: one or more values, "
                            f"e.g. --param {key}=1,2,3")
    for v in values:
        if not isinstance(v, _SCALAR):
            raise ScenarioError(f"sweep parameter {key} has value {v!r} of type {type(v).__name__}; allowed: "
                                "numbers, booleans or strings")
    if key == "eps":
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ScenarioError(f"sweep parameter eps has value {v!r}; allowed: numbers in (0, 1), e.g. "
                                    "--param eps=1e-2,1e-3")
    if key in ("d", "n", "k", "clients", "seed"):
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ScenarioError(f"sweep parameter {key} has value {v!r}; allowed: integers, e.g. "
                                    f"--param {key}=8,32,128")
    if len(set(map(repr, values))) != len(values):
        raise ScenarioError(f"sweep parameter {key} lists a value twice: {values}")


def check_sweep_table(table: Any, where: str) -> SweepSpec:
    """The validated ``[sweep]`` table, or a ScenarioError naming what is wrong."""
    if not isinstance(table, Mapping):
        raise ScenarioError(f"{where}: sweep = {show(table)} is not a table; allowed: a [sweep] table with grid, "
                            "variants, plot, x, title")
    try:
        return _SweepFile.model_validate({"sweep": dict(table)}).sweep
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: sweep.grid: {exc}") from None
    except ValidationError as exc:
        raise error_from_validation(exc, where, {}, _SweepFile) from None


class _SweepFile(BaseModel):
    """The root that error messages name keys from (``sweep.title``, ``sweep.variants[0].label``)."""

    model_config = ConfigDict(defer_build=True)
    sweep: SweepSpec
