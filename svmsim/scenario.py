"""Scenario files: one TOML file (or dict) describes a whole svmsim experiment.

A scenario names the data, how training points are partitioned over nodes, the topology, the engine, the
algorithm and its parameters, the stopping rule, the seed and the outputs::

    name = "quickstart"
    seed = 0

    [data]
    name = "iris"

    [algorithm]
    name = "saddle-dsvc"
    eps = 1e-3

    [stop]
    max_iterations = 100000

Entry points:

* :func:`load_scenario` -- read a TOML file or a dict, apply dotted-key overrides, validate;
* :func:`validate_file` -- the same for ``svmsim validate``;
* :func:`parse_override` / :func:`parse_overrides` -- ``"engine.name=ray"`` strings from the command line;
* :func:`dump_toml` -- write a resolved scenario (``Scenario.to_dict()``) back as TOML.

Every problem is reported as one :class:`~svmsim.errors.ScenarioError` whose message names the file, the key,
the bad value and what is allowed, e.g. ``quick.toml: [stop] gap = 2.0 is out of range; allowed: a number in
(0, 1)``. Values are checked strictly: a string is never silently turned into a number, nor a number into a
boolean.
"""

from __future__ import annotations

import copy
import datetime as _dt
import inspect
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping

import annotated_types
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from svmsim.algorithms.registry import ALGORITHMS, AlgorithmInfo, get_algorithm
from svmsim.data import BUILTIN_DATASETS, PARTITION_SCHEMES, SCALINGS, SYNTHETIC_KINDS
from svmsim.engine import ENGINES
from svmsim.errors import ScenarioError, TopologyError
from svmsim.faults import FAULT_KEYS, FaultModel
from svmsim.schedule.gossip import CLOCKS, Distribution
from svmsim.topology import TOPOLOGIES, ParamSpec, resolve_params

from .config.sweep_table import check_sweep_table
from .config.values import (DEFAULT_SYNTHETIC_KIND, RAY_ENGINES, SECTIONS, SYNTHETIC_KEYS, TOP_KEYS, dump_toml)
from .config.values import as_plain_str as _as_plain_str
from .config.values import is_int as _is_int
from .config.values import is_number as _is_number
from .config.values import normalise as _normalise
from .config.values import plain as _plain
from .config.values import show as _show

__all__ = [
    "Scenario",
    "DataSection",
    "PartitionSection",
    "TopologySection",
    "EngineSection",
    "AlgorithmSection",
    "StopSection",
    "OutputSection",
    "ScheduleSection",
    "FaultsSection",
    "SECTIONS",
    "SYNTHETIC_KEYS",
    "RAY_ENGINES",
    "load_scenario",
    "validate_file",
    "parse_override",
    "parse_overrides",
    "apply_overrides",
    "dump_toml",
]

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_NAME_ALLOWED = "letters, digits, '_', '.' and '-' (at least one character, no spaces)"

# Arguments of a partition scheme / synthetic generator that are not scenario keys.
_SCHEME_ARGS = ("y", "n_parts", "rng", "n")
_GENERATOR_ARGS = ("seed", "return_info")


# ----------------------------------------------------------------------------------------------------------------
# Error helpers used inside the models
# ----------------------------------------------------------------------------------------------------------------


def _fail(message: str, loc: tuple | None = None) -> PydanticCustomError:
    """A validation error carrying a complete message; ``loc`` (absolute key path) overrides pydantic's."""
    ctx: dict[str, Any] = {"message": message}
    if loc is not None:
        ctx["loc"] = tuple(loc)
    return PydanticCustomError("svmsim", "{message}", ctx)


def _issue(loc: tuple, message: str) -> dict[str, Any]:
    """One entry of a list of problems found in a section (see :func:`_several`)."""
    return {"type": "svmsim", "loc": tuple(loc), "input": None, "ctx": {"message": message}}


def _several(errors: list[dict[str, Any]], params_model: type[BaseModel] | None = None,
             algorithm: str | None = None) -> PydanticCustomError:
    """A validation error bundling several problems (absolute locations), expanded again by the formatter."""
    text = "; ".join(_format_error(e, params_model, algorithm) for e in errors)
    ctx = {"message": text, "errors": errors, "params_model": params_model, "algorithm": algorithm}
    return PydanticCustomError("svmsim_nested", "{message}", ctx)


def _choice(key: str, value: Any, what: str, allowed: Iterable[str], loc: tuple | None = None):
    shown = ", ".join(allowed) or "(none registered)"
    return _fail(f"{key} = {value!r} is not {what}; allowed: {shown}", loc)


# ----------------------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------------------


class _Section(BaseModel):
    """Base of all scenario models: unknown keys are errors, and types are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _allowed(text: str) -> dict[str, str]:
    return {"allowed": text}


class DataSection(_Section):
    """``[data]``: the data set, its test set and, for synthetic data, the generator's parameters."""

    name: str = Field(min_length=1, json_schema_extra=_allowed(
        f"a data set in the data directory, a file path, {', '.join(map(repr, BUILTIN_DATASETS))} or 'synthetic'"))
    data_dir: str | None = Field(None, min_length=1, json_schema_extra=_allowed("a directory path"))
    test: str = Field("auto", json_schema_extra=_allowed("'auto', 'none', or a test set name or path"))
    holdout: float | None = Field(None, gt=0, lt=1)
    positive_label: int | float | None = None
    n_features: int | None = Field(None, ge=1)
    scale: str = Field("none", json_schema_extra=_allowed(
        "a feature scaling: " + ", ".join(f"'{k}' ({v})" for k, v in SCALINGS.items())))
    # synthetic data only
    kind: str | None = None
    n: int | None = Field(None, ge=2)
    d: int | None = Field(None, ge=1)
    beta: float | None = Field(None, ge=0, le=1)
    flip_band: float | None = Field(None, ge=0, le=1)
    density: float | None = Field(None, gt=0, le=1)

    @field_validator("name", "data_dir", "test", mode="before")
    @classmethod
    def _paths_as_str(cls, value: Any) -> Any:
        return _as_plain_str(value)

    @field_validator("scale")
    @classmethod
    def _known_scaling(cls, value: str) -> str:
        if value not in SCALINGS:
            raise _choice("scale", value, "a feature scaling", tuple(SCALINGS))
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str | None) -> str | None:
        if value is not None and value not in SYNTHETIC_KINDS:
            raise _choice("kind", value, "a synthetic data kind", SYNTHETIC_KINDS)
        return value

    @model_validator(mode="after")
    def _cross_check(self) -> "DataSection":
        errors: list[dict[str, Any]] = []
        given = [k for k in SYNTHETIC_KEYS if getattr(self, k) is not None]
        if self.name != "synthetic":
            for key in given:
                errors.append(_issue(("data", key), (
                    f"{key} = {_show(getattr(self, key))} only applies to synthetic data (name = \"synthetic\"), "
                    f"not to data set {self.name!r}; allowed keys for a non-synthetic set: "
                    "name, data_dir, test, holdout, positive_label, n_features, scale")))
        else:
            if self.kind is None:
                self.kind = DEFAULT_SYNTHETIC_KIND
            accepted = _synthetic_params(self.kind)
            for key in given:
                if key != "kind" and key not in accepted:
                    errors.append(_issue(("data", key), (
                        f"{key} does not apply to synthetic kind {self.kind!r}; allowed keys for this kind: "
                        f"kind, {', '.join(accepted)}")))
            for key, default in accepted.items():
                if getattr(self, key) is None:
                    if default is inspect.Parameter.empty:
                        errors.append(_issue(("data", key), (
                            f"synthetic kind {self.kind!r} needs key '{key}'; "
                            f"allowed: {_describe_field(type(self).model_fields[key])}")))
                    else:
                        setattr(self, key, default)
            if self.kind == "separable" and self.beta is not None and self.beta <= 0:
                errors.append(_issue(("data", "beta"), (
                    f"beta = {_show(self.beta)} is out of range for synthetic kind 'separable'; "
                    "allowed: a number in (0, 1]")))
        test_given = self.test.strip().lower() not in ("", "auto", "none")
        if self.holdout is not None and test_given:
            errors.append(_issue(("data", "holdout"), (
                f"holdout = {_show(self.holdout)} and test = {_show(self.test)} are both given; "
                "allowed: either a test set or a holdout fraction, not both")))
        if errors:
            raise _several(errors)
        return self

    @property
    def is_synthetic(self) -> bool:
        return self.name == "synthetic"

    def synthetic_params(self) -> dict[str, Any]:
        """The generator's keyword arguments (``kind`` included); empty for a non-synthetic set."""
        if not self.is_synthetic:
            return {}
        return {k: getattr(self, k) for k in SYNTHETIC_KEYS if getattr(self, k) is not None}


def _synthetic_params(kind: str) -> dict[str, Any]:
    """Scenario keys accepted by the generator of ``kind`` (besides ``kind``), mapped to their defaults."""
    sig = inspect.signature(SYNTHETIC_KINDS[kind])
    return {name: p.default for name, p in sig.parameters.items() if name not in _GENERATOR_ARGS}


def _scheme_params(scheme: str) -> dict[str, Any]:
    """Keys accepted by a partition scheme, mapped to their defaults."""
    sig = inspect.signature(PARTITION_SCHEMES[scheme])
    return {name: p.default for name, p in sig.parameters.items() if name not in _SCHEME_ARGS}


class PartitionSection(_Section):
    """``[partition]``: how the training points are split over the nodes."""

    scheme: str = "iid"
    skew: float | None = Field(None, ge=0, le=1)
    alpha: float | None = Field(None, gt=0)

    @field_validator("scheme")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if value not in PARTITION_SCHEMES:
            raise _choice("scheme", value, "a partition scheme", PARTITION_SCHEMES)
        return value

    @model_validator(mode="after")
    def _scheme_keys(self) -> "PartitionSection":
        accepted = _scheme_params(self.scheme)
        errors = []
        for key in ("skew", "alpha"):
            value = getattr(self, key)
            if key in accepted:
                if value is None and accepted[key] is not inspect.Parameter.empty:
                    setattr(self, key, float(accepted[key]))
            elif value is not None:
                users = [s for s in PARTITION_SCHEMES if key in _scheme_params(s)]
                errors.append(_issue(("partition", key), (
                    f"{key} = {_show(value)} does not apply to scheme {self.scheme!r}; "
                    f"allowed: {key} only with scheme {' or '.join(map(repr, users))}"
                    + (f"; scheme {self.scheme!r} takes {', '.join(accepted)}" if accepted
                       else f"; scheme {self.scheme!r} takes no parameters"))))
        if errors:
            raise _several(errors)
        return self

    def params(self) -> dict[str, Any]:
        """Keyword arguments of :func:`svmsim.data.partition` for this scheme (besides ``scheme``)."""
        return {k: getattr(self, k) for k in _scheme_params(self.scheme)}


def _topology_type_ok(value: Any, spec: ParamSpec) -> bool:
    if spec.type is bool:
        return isinstance(value, (bool, np.bool_))
    if spec.type is int:
        return _is_int(value)
    if spec.type is float:
        return _is_number(value) and not math.isnan(float(value))
    if spec.type is str:
        return isinstance(value, (str, os.PathLike))
    return isinstance(value, spec.type)  # pragma: no cover - future parameter types


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


class TopologySection(_Section):
    """``[topology]``: ``kind`` plus that kind's parameters (held in ``params``, defaults filled in).

    In the file the parameters sit next to ``kind``: ``[topology] kind = "grid"  rows = 4``.
    """

    kind: str = "star"
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        data = dict(value)
        kind = data.pop("kind", "star")
        if not isinstance(kind, str):
            raise _fail(f"kind = {_show(kind)} has the wrong type: expected a string", ("topology", "kind"))
        if kind not in TOPOLOGIES:
            raise _choice("kind", kind, "a topology kind", sorted(TOPOLOGIES), ("topology", "kind"))
        spec = TOPOLOGIES[kind]
        nested = data.get("params")
        if isinstance(nested, Mapping) and "params" not in spec.params:
            data.pop("params")
            data = {**dict(nested), **data}
        errors = []
        allowed = ", ".join(p.describe(n) for n, p in spec.params.items()) or "none (it takes no parameters)"
        for key, val in data.items():
            if key not in spec.params:
                errors.append(_issue(("topology", key), (
                    f"unknown key '{key}' for topology kind '{kind}'; allowed keys: kind, and the parameters "
                    f"of '{kind}': {allowed}")))
            elif not _topology_type_ok(val, spec.params[key]):
                p = spec.params[key]
                errors.append(_issue(("topology", key), (
                    f"{key} = {_show(val)} has the wrong type: expected {_TYPE_WORDS.get(p.type, p.type.__name__)}"
                    + (f" ({p.allowed})" if p.allowed else ""))))
        for key, p in spec.params.items():
            if p.required and data.get(key) is None:
                errors.append(_issue(("topology", key), (
                    f"topology kind '{kind}' needs key '{key}'; allowed: {p.allowed or p.description}")))
        if errors:
            raise _several(errors)
        try:
            resolved = resolve_params(kind, data)
        except TopologyError as exc:  # pragma: no cover - the checks above mirror resolve_params
            raise _fail(str(exc), ("topology",)) from None
        return {"kind": kind, "params": {k: _as_plain_str(v) for k, v in resolved.items()}}

    def __getitem__(self, key: str) -> Any:
        return self.params[key]


class EngineSection(_Section):
    """``[engine]``: where the node programs run."""

    name: str = "inproc"
    actors: int = Field(2, ge=1)
    address: str = ""
    dashboard: bool = False
    metrics: bool = True
    colocate: bool = True   # Ray: single-node roles (the server) share the first client host's actor

    @field_validator("name")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ENGINES:
            raise _choice("name", value, "an engine", ENGINES)
        return value

    @model_validator(mode="after")
    def _ray_only(self) -> "EngineSection":
        if self.address and self.name not in RAY_ENGINES:
            raise _fail(
                f"address = {_show(self.address)} needs a Ray engine but name = {self.name!r}; "
                f"allowed: set name to one of {', '.join(RAY_ENGINES)}, or remove address",
                ("engine", "address"),
            )
        if self.address and self.dashboard:
            raise _fail(
                "dashboard = true starts a local Ray instance's dashboard, but address = "
                f"{_show(self.address)} joins an existing cluster; allowed: dashboard = false with address",
                ("engine", "dashboard"),
            )
        return self

    @property
    def is_ray(self) -> bool:
        return self.name in RAY_ENGINES


def _lookup_algorithm(name: str) -> AlgorithmInfo | None:
    try:
        return get_algorithm(name)
    except ScenarioError:
        return None


class AlgorithmSection(_Section):
    """``[algorithm]``: ``name`` of a registered algorithm; ``params`` is an instance of its ``Params`` model.

    In the file the parameters sit next to ``name``: ``[algorithm] name = "saddle-dsvc"  eps = 1e-3``.
    """

    name: str
    params: Any  # an instance of the algorithm's Params model (validated in _resolve)

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        data = dict(value)
        if "name" not in data:
            raise _fail(f"required key 'name' is missing; allowed: {', '.join(sorted(ALGORITHMS)) or '(none)'}",
                        ("algorithm", "name"))
        name = data.pop("name")
        if not isinstance(name, str):
            raise _fail(f"name = {_show(name)} has the wrong type: expected a string", ("algorithm", "name"))
        info = _lookup_algorithm(name)
        if info is None:
            raise _choice("name", name, "a known algorithm", sorted(ALGORITHMS), ("algorithm", "name"))
        Params = info.Params
        nested = data.get("params")
        if isinstance(nested, Params) and len(data) == 1:
            return {"name": name, "params": nested}
        if isinstance(nested, Mapping) and "params" not in Params.model_fields:
            data.pop("params")
            data = {**dict(nested), **data}
        params, errors = _validate_params(Params, data)
        if errors:
            raise _several([dict(e, loc=("algorithm",) + tuple(e["loc"])) for e in errors], Params, name)
        return {"name": name, "params": params}

    @property
    def info(self) -> AlgorithmInfo:
        """The registry entry of this algorithm."""
        return get_algorithm(self.name)


# Strict-mode type errors that mean "a value of another scalar type would have been coerced".
_COERCION_ERRORS = {"int_type", "float_type", "bool_type", "string_type", "int_from_float"}


def _field_names(model: type[BaseModel]) -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        names.add(name)
        if field.alias:
            names.add(field.alias)
    return names


def _validate_params(Params: type[BaseModel], data: dict[str, Any]) -> tuple[BaseModel | None, list[dict]]:
    """Validate an algorithm's parameters; return ``(instance, [])`` or ``(None, errors)``.

    Unknown keys are errors whatever the model's own ``extra`` setting. Scalars are checked strictly (``"20"`` is
    not an integer, ``1`` is not a boolean), while other conversions the model accepts in its own mode (a TOML
    list for a tuple, a string for a path or an enum) stay allowed.
    """
    known = _field_names(Params)
    errors: list[dict] = [
        {"type": "extra_forbidden", "loc": (k,), "input": v, "ctx": {}} for k, v in data.items() if k not in known
    ]
    body = {k: v for k, v in data.items() if k in known}
    try:
        obj = Params.model_validate(body, strict=True)
        return (None, errors) if errors else (obj, [])
    except ValidationError as exc:
        coercions = [
            e for e in exc.errors(include_url=False)
            if e["type"] in _COERCION_ERRORS and isinstance(e.get("input"), (str, bool, int, float))
        ]
    errors += coercions
    try:
        obj = Params.model_validate(body)
    except ValidationError as exc:
        seen = {_key_path(e["loc"]) for e in coercions}
        errors += [e for e in exc.errors(include_url=False) if _key_path(e["loc"]) not in seen]
        return None, errors
    return (None, errors) if errors else (obj, [])


class StopSection(_Section):
    """``[stop]``: the run stops as soon as any of the given limits is reached (at least one is needed).

    A round or communication budget that runs out in the middle of a synchronous iteration lets that iteration
    finish (its messages are metered), so the final state is a whole iterate."""

    max_iterations: int | None = Field(None, ge=1)
    max_rounds: int | None = Field(None, ge=1)
    max_scalars: int | None = Field(None, ge=1)
    max_seconds: float | None = Field(None, gt=0)
    gap: float | None = Field(None, gt=0, lt=1)
    # paper 000's practical rule (section 5): stop when the objective changed by less than this between two
    # consecutive evaluation points; not certified, so not the default
    objective_change: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _some_rule(self) -> "StopSection":
        if all(getattr(self, k) is None for k in type(self).model_fields):
            raise _fail(
                "no stopping rule is set, so the run would never stop; allowed: set at least one of "
                + ", ".join(type(self).model_fields),
                ("stop",),
            )
        return self

    def limits(self) -> dict[str, Any]:
        """The limits that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class OutputSection(_Section):
    """``[output]``: where results go and what is produced."""

    dir: str = Field("runs", min_length=1, json_schema_extra=_allowed("a directory path"))
    run_dir: str | None = Field(None, min_length=1, json_schema_extra=_allowed("a directory path"))
    eval_every: int = Field(1000, ge=1)
    plots: bool = True
    progress: bool = True
    overwrite: bool = False

    @field_validator("dir", "run_dir", mode="before")
    @classmethod
    def _paths_as_str(cls, value: Any) -> Any:
        return _as_plain_str(value)


# ----------------------------------------------------------------------------------------------------------------
# [schedule] and [faults]
# ----------------------------------------------------------------------------------------------------------------

#: schedulers: "auto" takes the algorithm's own (its Params' ``scheduler`` class attribute, else "sync")
SCHEDULERS = ("auto", "sync", "gossip")

#: [schedule] keys that only the gossip scheduler uses
GOSSIP_SCHEDULE_KEYS = ("clock", "rate", "jitter", "latency", "bandwidth", "edge_spread", "round_time", "eval_time",
                        "eval_messages", "max_time", "max_messages")


class ScheduleSection(_Section):
    """``[schedule]``: synchronous rounds or asynchronous gossip, and gossip's virtual-time model.

    ``kind = "auto"`` (the default) takes the algorithm's scheduler: gossip for peer algorithms (pushsum, gadget),
    synchronous rounds for server-client ones. Gossip keys (see `svmsim.schedule.gossip`): every node's clock
    (``clock`` poisson | periodic, ``rate`` ticks per unit of virtual time, ``jitter`` for periodic clocks); a
    message's ``latency`` (a number, or a table ``{kind = "constant" | "uniform" | "exponential" | "lognormal",
    ...}``), ``edge_spread`` (sigma of a fixed log-normal factor per edge) and ``bandwidth`` (adds bytes/bandwidth);
    ``round_time``, the virtual time of one ledger round and one metrics ``iteration`` (default 1/rate); evaluation
    every ``eval_time`` of virtual time (default round_time) or every ``eval_messages`` messages; the budgets
    ``max_time`` (virtual time) and ``max_messages`` (beside [stop]'s: max_rounds and max_iterations count rounds
    of virtual time). ``compiled = false`` forces the Python loop of either scheduler (same results, slower): the
    gossip event loop, or the synchronous rounds of programs that offer a compiled step (in-process engine; by
    default those move to the compiled loop once a run has spent a few seconds in Python rounds).
    """

    kind: str = "auto"
    clock: str = "poisson"
    rate: float = Field(1.0, gt=0)
    jitter: float = Field(0.0, ge=0, lt=1)
    latency: Any = Field(0.01, validate_default=True, json_schema_extra=_allowed(
        "a number >= 0, or a table {kind = ..., ...} with kind constant (value), uniform (low, high), exponential "
        "(mean) or lognormal (median, sigma)"))
    bandwidth: float | None = Field(None, gt=0)
    edge_spread: float = Field(0.0, ge=0)
    round_time: float | None = Field(None, gt=0)
    eval_time: float | None = Field(None, gt=0)
    eval_messages: int | None = Field(None, ge=1)
    max_time: float | None = Field(None, gt=0)
    max_messages: int | None = Field(None, ge=1)
    compiled: bool = True

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise _choice("kind", value, "a scheduler", SCHEDULERS)
        return value

    @field_validator("clock")
    @classmethod
    def _known_clock(cls, value: str) -> str:
        if value not in CLOCKS:
            raise _choice("clock", value, "a clock", CLOCKS)
        return value

    @field_validator("latency", mode="before")
    @classmethod
    def _latency_distribution(cls, value: Any) -> dict:
        try:
            return Distribution.from_config(value, "latency").to_config()
        except ScenarioError as exc:
            raise _fail(str(exc), ("schedule", "latency")) from None

    @model_validator(mode="after")
    def _clock_keys(self) -> "ScheduleSection":
        if self.jitter and self.clock != "periodic":
            raise _fail(f"jitter = {_show(self.jitter)} applies to the periodic clock only; allowed: "
                        "clock = \"periodic\", or jitter = 0", ("schedule", "jitter"))
        return self

    def gossip_keys_given(self) -> list[str]:
        """The gossip-only keys that the file sets."""
        return [k for k in GOSSIP_SCHEDULE_KEYS if k in self.model_fields_set]

    def latency_distribution(self) -> Distribution:
        return Distribution.from_config(self.latency, "latency")

    @property
    def effective_round_time(self) -> float:
        """Virtual time per ledger round / metrics iteration."""
        return self.round_time if self.round_time is not None else 1.0 / self.rate


class FaultsSection(_Section):
    """``[faults]``: what goes wrong; by default nothing (see `svmsim.faults` for what each key does).

    drop, duplicate: per-message probabilities in [0, 1); delay with delay_time: probability and distribution of
    an extra delay; crash (a fraction) or crash_nodes (a list), crash_time, recover_time, recover_state; stragglers
    or straggler_nodes with straggler_factor; churn_rate, churn_downtime, churn_state; seed (default: the scenario's).
    """

    drop: float = Field(0.0, ge=0, lt=1)
    duplicate: float = Field(0.0, ge=0, lt=1)
    delay: float = Field(0.0, ge=0, le=1)
    delay_time: Any = Field(None, json_schema_extra=_allowed(
        "a number >= 0, or a table {kind = ..., ...} with kind constant, uniform, exponential or lognormal"))
    crash: float = Field(0.0, ge=0, le=1)
    crash_nodes: list[int] = Field(default_factory=list)
    crash_time: float = Field(0.0, ge=0)
    recover_time: float | None = Field(None, gt=0)
    recover_state: bool = True
    stragglers: float = Field(0.0, ge=0, le=1)
    straggler_nodes: list[int] = Field(default_factory=list)
    straggler_factor: float = Field(4.0, ge=1)
    churn_rate: float = Field(0.0, ge=0)
    churn_downtime: float = Field(1.0, gt=0)
    churn_state: bool = True
    seed: int | None = Field(None, ge=0)

    @field_validator("delay_time", mode="before")
    @classmethod
    def _delay_distribution(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return Distribution.from_config(value, "delay_time").to_config()
        except ScenarioError as exc:
            raise _fail(str(exc), ("faults", "delay_time")) from None

    @model_validator(mode="after")
    def _consistent(self) -> "FaultsSection":
        try:
            self.model()
        except ScenarioError as exc:
            text = str(exc)
            key = next((k for k in FAULT_KEYS if text.startswith(f"faults.{k} ")), None)
            raise _fail(text.removeprefix("faults."), ("faults", key) if key else ("faults",)) from None
        return self

    def model(self) -> FaultModel:
        """The fault model these settings describe."""
        return FaultModel.from_config(self.model_dump())

    @property
    def is_empty(self) -> bool:
        return self.model().is_empty


def _optional_section() -> Any:
    """An optional table: when it is left out, its defaults are validated like a given table."""
    return Field(default_factory=dict, validate_default=True)


class Scenario(_Section):
    """A validated scenario: the whole experiment.

    ``scenario.algorithm.params.<key>`` reads an algorithm parameter, ``scenario.topology.params`` holds the
    resolved topology parameters, and :meth:`to_dict` returns the fully resolved plain dict (defaults filled
    in), suitable for :func:`dump_toml` or ``json.dumps``.
    """

    name: str
    description: str = ""
    seed: int = Field(0, ge=0)
    data: DataSection
    partition: PartitionSection = _optional_section()
    topology: TopologySection = _optional_section()
    engine: EngineSection = _optional_section()
    algorithm: AlgorithmSection
    stop: StopSection = _optional_section()
    output: OutputSection = _optional_section()
    schedule: ScheduleSection = _optional_section()
    faults: FaultsSection = _optional_section()

    _source: str | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise _fail(f"name = {_show(value)} is not a valid scenario name; allowed: {_NAME_ALLOWED}")
        return value

    @model_validator(mode="after")
    def _cross_check(self) -> "Scenario":
        supported = self.algorithm.info.topologies
        if self.topology.kind not in supported:
            raise _fail(
                f"kind = {self.topology.kind!r} is not supported by algorithm {self.algorithm.name!r}; "
                f"allowed: {', '.join(supported)}",
                ("topology", "kind"),
            )
        self._check_schedule()
        return self

    def _check_schedule(self) -> None:
        """Resolve ``[schedule] kind = "auto"`` to the algorithm's scheduler; keys and faults must fit it."""
        info = self.algorithm.info
        natural = getattr(info.Params, "scheduler", "sync")
        schedule = self.schedule
        if schedule.kind == "auto":
            schedule.kind = natural
        elif schedule.kind != natural:
            raise _fail(f"kind = {schedule.kind!r} is not supported by algorithm {self.algorithm.name!r} (it runs "
                        f"{'in synchronous rounds' if natural == 'sync' else 'on the gossip scheduler'}); allowed: "
                        f"{natural!r} or 'auto'", ("schedule", "kind"))
        if schedule.kind == "gossip" and self.engine.name == "ray-cgraph":
            raise _fail("name = 'ray-cgraph' drives actors in lockstep through a compiled graph (synchronous rounds), "
                        "but the gossip scheduler runs free actors that send to each other directly; allowed with "
                        "gossip: name = \"inproc\" or \"ray\"", ("engine", "name"))
        if schedule.kind == "gossip" and not self.faults.is_empty:
            stop = self.stop
            budgets = (stop.max_iterations, stop.max_rounds, stop.max_scalars, stop.max_seconds,
                       schedule.max_time, schedule.max_messages)
            ends = getattr(self.algorithm.params, "finishes_by_itself", None)
            if all(b is None for b in budgets) and not (ends is not None and ends()):
                raise _fail("a gossip run with faults needs a budget: lost messages can keep a consensus error "
                            "from ever reaching [stop] gap or objective_change, so the run might never end; "
                            "allowed: set [stop] max_rounds, max_iterations, max_scalars or max_seconds, or "
                            "[schedule] max_time or max_messages", ("stop",))
        if schedule.kind != "gossip":
            given = schedule.gossip_keys_given()
            if given:
                raise _fail(f"{given[0]} applies to the gossip scheduler, but algorithm {self.algorithm.name!r} runs "
                            "in synchronous rounds; allowed keys with kind = \"sync\": kind, compiled",
                            ("schedule", given[0]))
            if not self.faults.is_empty:
                if not info.distributed:
                    raise _fail(f"algorithm {self.algorithm.name!r} runs on a single machine, so there are no "
                                "messages or nodes to fail; allowed: no [faults] section", ("faults",))
                try:
                    self.faults.model().check_sync()
                except ScenarioError as exc:
                    raise _fail(str(exc), ("faults",)) from None

    def __eq__(self, other: object) -> bool:
        """Scenarios are equal when all their settings are (where they were loaded from does not matter)."""
        if not isinstance(other, Scenario):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable

    # -- derived views ---------------------------------------------------------------------------------------

    @property
    def source(self) -> str | None:
        """The file this scenario was loaded from (None for a dict)."""
        return self._source

    def to_dict(self) -> dict[str, Any]:
        """The fully resolved scenario as a plain dict of sections (no ``None`` values; see module docs).

        Loading the result again gives an equal scenario: ``load_scenario(s.to_dict()) == s``.
        """
        out: dict[str, Any] = {"name": self.name, "description": self.description, "seed": self.seed}
        for section in SECTIONS:
            model = getattr(self, section)
            if section == "topology":
                body = {"kind": model.kind, **model.params}
            elif section == "algorithm":
                body = {"name": model.name, **_plain(model.params)}
            elif (section == "schedule" and model.kind != "gossip") or (section == "faults" and model.is_empty):
                continue                                       # synchronous rounds, no faults: the defaults
            else:
                body = model.model_dump()
            out[section] = _plain(body)
        return out

    def to_toml(self) -> str:
        """:meth:`to_dict` written as TOML."""
        return dump_toml(self.to_dict())

    def dataset_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`svmsim.data.load_dataset` for this scenario (seeded by ``seed``)."""
        d = self.data
        kwargs: dict[str, Any] = {"name": d.name, "data_dir": d.data_dir, "test": d.test,
                                  "positive_label": d.positive_label, "n_features": d.n_features,
                                  "scale": d.scale}
        if d.holdout is not None:
            kwargs.update(holdout=d.holdout, holdout_seed=self.seed)
        if d.is_synthetic:
            kwargs.update(d.synthetic_params(), seed=self.seed)
        return kwargs

    def run_directory(self, timestamp: str | None = None) -> Path:
        """``output.run_dir`` if set, else ``<output.dir>/<name>-<seed>-<timestamp>`` (timestamp defaults to now)."""
        if self.output.run_dir:
            return Path(self.output.run_dir)
        if timestamp is None:
            timestamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        return Path(self.output.dir) / f"{self.name}-{self.seed}-{timestamp}"


# ----------------------------------------------------------------------------------------------------------------
# Error formatting
# ----------------------------------------------------------------------------------------------------------------


def _key_path(loc: Iterable[Any]) -> str:
    """``("algorithm", "steps", 0)`` -> ``"algorithm.steps[0]"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_UNION_TAGS = {"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set", "frozenset", "none",
               "decimal", "date", "datetime", "path", "enum"}
_UNION_TAG_RE = re.compile(r"^(function-|constrained-|lax-or-strict|json-or-python|tagged-union|nullable|"
                           r"literal\[|list\[|dict\[|tuple\[|set\[|frozenset\[|union\[)")


def _clean_loc(loc: Iterable[Any]) -> tuple:
    """Drop union-member tags that pydantic adds to locations (e.g. ``('data', 'positive_label', 'int')``)."""
    loc = tuple(loc)
    if len(loc) <= 2:
        return loc
    head, rest = loc[:2], loc[2:]
    return head + tuple(
        p for p in rest if not (isinstance(p, str) and (p in _UNION_TAGS or _UNION_TAG_RE.match(p)))
    )


def _split_loc(loc: tuple) -> tuple[str, tuple]:
    """``("stop", "gap")`` -> ``("[stop] ", ("gap",))``; top-level keys get no section prefix."""
    if loc and loc[0] in SECTIONS:
        return f"[{loc[0]}] ", loc[1:]
    return "", loc


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _field_for(loc: tuple, params_model: type[BaseModel] | None) -> FieldInfo | None:
    """The pydantic field a location points at, if any."""
    if not loc:
        return None
    if len(loc) == 1:
        return Scenario.model_fields.get(loc[0])
    section, key = loc[0], loc[1]
    if section == "algorithm" and key != "name":
        if params_model is None or not isinstance(key, str):
            return None
        fields = params_model.model_fields
        return fields.get(key) or next((f for f in fields.values() if f.alias == key), None)
    field = Scenario.model_fields.get(section)
    model = field.annotation if field is not None else None
    if isinstance(model, type) and issubclass(model, BaseModel) and isinstance(key, str):
        return model.model_fields.get(key)
    return None


def _base_type(annotation: Any) -> Any:
    """``int | None`` -> ``int``; anything else unchanged."""
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if args and len(args) == 1 and getattr(annotation, "__origin__", None) is not list:
        return args[0]
    return annotation


def _describe_field(field: FieldInfo | None, ctx: Mapping[str, Any] | None = None) -> str:
    """What a field allows, e.g. ``a number in (0, 1)`` or ``an integer >= 1``."""
    extra = field.json_schema_extra if field is not None else None
    if isinstance(extra, Mapping) and "allowed" in extra:
        return str(extra["allowed"])
    lo = hi = None
    if field is not None:
        for m in field.metadata:
            for attr, side in (("gt", "lo("), ("ge", "lo["), ("lt", "hi)"), ("le", "hi]")):
                v = getattr(m, attr, None)
                if v is not None and isinstance(m, (annotated_types.BaseMetadata, annotated_types.Interval)):
                    if side.startswith("lo"):
                        lo = (side[2], v)
                    else:
                        hi = (side[2], v)
    if lo is None and hi is None and ctx:
        for attr, side in (("gt", "("), ("ge", "[")):
            if attr in ctx:
                lo = (side, ctx[attr])
        for attr, side in (("lt", ")"), ("le", "]")):
            if attr in ctx:
                hi = (side, ctx[attr])
    base = _base_type(field.annotation) if field is not None else None
    noun = "an integer" if base is int else "a number"
    if lo and hi:
        return f"{noun} in {lo[0]}{_num(lo[1])}, {_num(hi[1])}{hi[0]}"
    if lo:
        return f"{noun} {'>' if lo[0] == '(' else '>='} {_num(lo[1])}"
    if hi:
        return f"{noun} {'<' if hi[0] == ')' else '<='} {_num(hi[1])}"
    if base in _TYPE_WORDS:
        return _TYPE_WORDS[base]
    return "see the documentation of this key"


_EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list", "frozen_set_type": "a list",
    "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table",
}
_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
          "string_too_short", "string_too_long", "multiple_of"}


def _allowed_keys(section: str, params_model: type[BaseModel] | None, algorithm: str | None) -> str:
    if section == "algorithm":
        names = sorted(params_model.model_fields) if params_model is not None else []
        return f"allowed keys for {algorithm}: {', '.join(names) if names else '(none besides name)'}"
    model = Scenario.model_fields[section].annotation
    return f"allowed keys: {', '.join(model.model_fields)}"


def _format_error(e: Mapping[str, Any], params_model: type[BaseModel] | None = None,
                  algorithm: str | None = None) -> str:
    """One error as ``[section] key = value <what is wrong>; allowed: ...``."""
    ctx = e.get("ctx") or {}
    etype = e["type"]
    loc = _clean_loc(ctx.get("loc", e.get("loc", ())))
    prefix, rest = _split_loc(loc)
    key = _key_path(rest)
    value = e.get("input")
    if etype == "svmsim":
        return prefix + str(ctx["message"])
    if etype == "extra_forbidden":
        if not rest:  # pragma: no cover - an extra key always has a location
            return prefix + "unknown key"
        if len(loc) == 1:
            kind = "section" if isinstance(value, Mapping) else "key"
            return (f"unknown top-level {kind} '{loc[0]}'; allowed: {', '.join(TOP_KEYS)}, "
                    f"and the sections {', '.join(f'[{s}]' for s in SECTIONS)}")
        return f"{prefix}unknown key '{key}'; {_allowed_keys(loc[0], params_model, algorithm)}"
    if etype == "missing":
        if len(loc) == 1 and loc[0] in SECTIONS:
            return f"required section [{loc[0]}] is missing"
        field = _field_for(loc, params_model)
        return f"{prefix}required key '{key}' is missing; allowed: {_describe_field(field)}"
    what = f"{key} = {_show(value)} " if key else f"{_show(value)} " if not prefix else ""
    if etype in _EXPECTED:
        if etype in ("dict_type", "model_type", "model_attributes_type") and len(loc) == 1 and loc[0] in SECTIONS:
            return f"{loc[0]} = {_show(value)} has the wrong type: expected a table [{loc[0]}]"
        return f"{prefix}{what}has the wrong type: expected {ctx.get('_expected', _EXPECTED[etype])}"
    if etype in ("too_short", "too_long"):
        bound = f"at least {ctx.get('min_length')}" if etype == "too_short" else f"at most {ctx.get('max_length')}"
        return f"{prefix}{what}has {ctx.get('actual_length', 'a wrong number of')} items; allowed: {bound} items"
    if etype in _RANGE:
        allowed = _describe_field(_field_for(loc, params_model), ctx)
        if etype == "string_too_short":
            return f"{prefix}{what}is too short; allowed: {allowed}"
        if etype == "string_too_long":
            return f"{prefix}{what}is too long; allowed: {allowed}"
        if etype == "finite_number":
            return f"{prefix}{what}is not a finite number; allowed: {allowed}"
        return f"{prefix}{what}is out of range; allowed: {allowed}"
    if etype in ("literal_error", "enum"):
        return f"{prefix}{what}is not allowed; allowed: {ctx.get('expected', '?')}"
    if etype == "string_pattern_mismatch":
        return f"{prefix}{what}does not match; allowed: strings matching {ctx.get('pattern', '?')}"
    msg = str(e.get("msg", etype))
    for lead in ("Value error, ", "Assertion failed, "):
        if msg.startswith(lead):
            msg = msg[len(lead):]
    return f"{prefix}{what}is invalid: {msg}" if what else f"{prefix}{msg}"


def _flatten_errors(errors: Iterable[Mapping[str, Any]], params_model=None, algorithm=None):
    """Expand bundled errors; yield ``(error, params_model, algorithm)``."""
    for e in errors:
        if e["type"] == "svmsim_nested":
            ctx = e["ctx"]
            yield from _flatten_errors(ctx["errors"], ctx.get("params_model"), ctx.get("algorithm"))
        else:
            yield e, params_model, algorithm


def _merge_unions(items: list[tuple[dict, Any, Any]]) -> list[tuple[dict, Any, Any]]:
    """Merge wrong-type errors that pydantic reports once per member of a union (same location)."""
    out: list[tuple[dict, Any, Any]] = []
    by_loc: dict[tuple, dict] = {}
    for e, pm, alg in items:
        loc = _clean_loc((e.get("ctx") or {}).get("loc", e.get("loc", ())))
        if e["type"] in _EXPECTED and e["type"] not in ("dict_type", "model_type", "model_attributes_type"):
            first = by_loc.get(loc)
            if first is not None:
                words = first["ctx"]["_expected"]
                new = _EXPECTED[e["type"]]
                if new not in words.split(" or "):
                    first["ctx"]["_expected"] = f"{words} or {new}"
                continue
            e = dict(e, ctx=dict(e.get("ctx") or {}, _expected=_EXPECTED[e["type"]]))
            by_loc[loc] = e
        out.append((e, pm, alg))
    return out


def _error_from_validation(exc: ValidationError, where: str, overrides: Mapping[str, Any]) -> ScenarioError:
    items = _merge_unions(list(_flatten_errors(exc.errors(include_url=False))))
    lines = []
    for e, pm, alg in items:
        text = _format_error(e, pm, alg)
        loc = _clean_loc((e.get("ctx") or {}).get("loc", e.get("loc", ())))
        dotted = _key_path(loc)
        if dotted in overrides:
            text += f" (set by the override {dotted}={_show(overrides[dotted])})"
        elif dotted and any(k.startswith(dotted + ".") for k in overrides):
            text += " (set by an override " + ", ".join(k for k in overrides if k.startswith(dotted + ".")) + ")"
        if text not in lines:
            lines.append(text)
    if len(lines) == 1:
        return ScenarioError(f"{where}: {lines[0]}")
    return ScenarioError(f"{where} has {len(lines)} errors:\n" + "\n".join(f"  {line}" for line in lines))


# ----------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def _read_toml(path: Path, where: str) -> dict[str, Any]:
    if not path.exists():
        full = "" if path.is_absolute() else f" (looked for {path.absolute()})"
        raise ScenarioError(f"scenario file '{where}' does not exist{full}")
    if not path.is_file():
        raise ScenarioError(f"scenario file '{where}' is not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{where} is not valid TOML: it is not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file '{where}': {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_POSITION.search(msg)
        if m:
            msg = f"line {m.group(1)}, column {m.group(2)}: {msg[:m.start()]}"
        else:
            msg = msg.replace(" (at end of document)", "")
            if msg != str(exc):
                msg = f"at the end of the file: {msg}"
        raise ScenarioError(f"{where} is not valid TOML: {msg}") from None


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any] | None, where: str = "scenario") \
        -> dict[str, Any]:
    """Set dotted keys (``{"engine.name": "ray", "seed": 3}``) in a copy of the raw scenario dict."""
    out = copy.deepcopy(raw)
    for dotted, value in (overrides or {}).items():
        if not isinstance(dotted, str) or not dotted or any(not p for p in dotted.split(".")):
            raise ScenarioError(f"{where}: override key {dotted!r} is invalid; allowed: dotted keys such as "
                                "'engine.name' or 'algorithm.eps'")
        parts = dotted.split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                prefix = ".".join(parts[: i + 1])
                raise ScenarioError(f"{where}: override {dotted} cannot be applied: {prefix} = {_show(child)} is "
                                    "not a table")
            node = child
        node[parts[-1]] = _normalise(value)
    return out


def load_scenario(source: str | os.PathLike | Mapping[str, Any],
                  overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Load and validate a scenario from a TOML file path or a dict.

    ``overrides`` maps dotted keys to values (``{"engine.name": "ray", "algorithm.eps": 1e-4}``); they are
    applied before validation. Raises :class:`ScenarioError` describing every problem found.
    """
    overrides = dict(overrides or {})
    if isinstance(source, Mapping):
        where, path = "scenario", None
        raw = _normalise(source)
    elif isinstance(source, (str, os.PathLike)):
        where, path = os.fspath(source), Path(source)
        raw = _read_toml(path, where)
    else:
        raise ScenarioError(f"a scenario must be a TOML file path or a dict, got {type(source).__name__}")
    raw = apply_overrides(raw, overrides, where)
    if "sweep" in raw:                 # a sweep file's [sweep] table: checked here, used by `svmsim sweep`
        raw = dict(raw)
        check_sweep_table(raw.pop("sweep"), where)
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise _error_from_validation(exc, where, overrides) from None
    if path is not None:
        scenario._source = str(path)
    return scenario


def validate_file(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Validate a scenario file (for ``svmsim validate``); returns the scenario or raises ScenarioError."""
    if isinstance(path, Mapping):
        raise ScenarioError("validate_file expects the path of a scenario file; use load_scenario for a dict")
    return load_scenario(path, overrides)


_OVERRIDE_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``"key.path=value"`` into ``(key, value)``; the value is read as a TOML value.

    ``eps=1e-4`` gives a float, ``clients=20`` an int, ``plots=false`` a bool, ``name="a b"`` a string,
    ``steps=[1, 2]`` a list; anything that is not a TOML value (a bare word such as ``ray``) is a string.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ScenarioError(f"override {text!r} is invalid; allowed: key=value, e.g. engine.name=ray or "
                            "algorithm.eps=1e-4")
    key, value = (s.strip() for s in text.split("=", 1))
    if not _OVERRIDE_KEY.fullmatch(key):
        raise ScenarioError(f"override {text!r} has an invalid key {key!r}; allowed: dotted keys of letters, "
                            "digits, '_' and '-', e.g. algorithm.eps")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value
    if isinstance(parsed, (_dt.date, _dt.time, _dt.datetime, dict)):
        return key, value
    return key, parsed


def parse_overrides(texts: Iterable[str]) -> dict[str, Any]:
    """Parse several ``key=value`` strings (later ones win)."""
    return dict(parse_override(t) for t in texts)
