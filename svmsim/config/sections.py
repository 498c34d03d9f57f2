"""The tables of a scenario that stand alone: ``[data]``, ``[partition]``, ``[topology]``, ``[engine]``,
``[algorithm]``, ``[stop]`` and ``[output]``. Unknown keys are errors and values are checked strictly."""
from __future__ import annotations

import inspect
import math
import os
from typing import Any, ClassVar, Mapping

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
                      model_serializer, model_validator)

from svmsim.errors import PluginError, ScenarioError, TopologyError

from .lower import (BUILTIN_DATASETS, GOSSIP_MODES, PARTITION_SCHEMES, SCALINGS, SYNTHETIC_KINDS, check_engine_params,
                    engine_kind, engine_names, ray_engine_names,
                    AlgorithmInfo, ParamSpec, algorithm_names, get_algorithm, load_module,
                    partition_scheme, partition_schemes, resolve_params, scheme_params, topology_kinds, topology_spec)
from .messages import TYPE_WORDS, choice, describe_field, fail, issue, key_path, several
from .values import DEFAULT_SYNTHETIC_KIND, SYNTHETIC_KEYS, as_plain_str, is_int, is_number, show


# Arguments of a partition scheme / synthetic generator that are not scenario keys.
_GENERATOR_ARGS = ("seed", "return_info")


class SectionModel(BaseModel):
    """Base of all scenario models: unknown keys are errors, and types are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def allowed_text(text: str) -> dict[str, str]:
    """A field's ``json_schema_extra`` saying what it allows, as error messages show it (see `describe_field`)."""
    return {"allowed": text}


class DataSection(SectionModel):
    """``[data]``: the data set, its test set and, for synthetic data, the generator's parameters."""

    name: str = Field(min_length=1, description="the training set: a LIBSVM set read by name from the data "
                                                "directory, a path to a LIBSVM file, a built-in set, or 'synthetic' "
                                                "(generated, see kind)", json_schema_extra=allowed_text(
        f"a data set in the data directory, a file path, {', '.join(map(repr, BUILTIN_DATASETS))} or 'synthetic'"))
    data_dir: str | None = Field(None, min_length=1, description="the directory LIBSVM sets are read from by name "
                                 "(plain, .xz, .bz2 or .gz files); default: $SVMSIM_DATA_DIR",
                                 json_schema_extra=allowed_text("a directory path"))
    test: str = Field("auto", description="the test set: 'auto' reads <name>.t beside the training file when there "
                                          "is one, 'none' gives no test set; otherwise a set name or a path",
                      json_schema_extra=allowed_text("'auto', 'none', or a test set name or path"))
    holdout: float | None = Field(None, gt=0, lt=1, description="split a random test set of this fraction off the "
                                                               "training data (seeded by the scenario's seed), "
                                                               "instead of reading a test set")
    positive_label: int | float | None = Field(None, description="the raw label that becomes +1 (every other label "
                                                                 "becomes -1); needed for a file whose labels are "
                                                                 "not -1/+1 and whose set has no built-in positive "
                                                                 "label")
    # the LIBSVM reader's largest feature index (scikit-learn's svmlight reader keeps 32-bit indices)
    n_features: int | None = Field(None, ge=1, le=2**31 - 1, description="the number of features of the training and the test "
                                                          "set (default: the larger of the two files')")
    scale: str = Field("none", description="feature scaling, fitted on the training set (after a holdout split) "
                                           "and applied to the test set as well", json_schema_extra=allowed_text(
        "a feature scaling: " + ", ".join(f"'{k}' ({v})" for k, v in SCALINGS.items())))
    # synthetic data only
    kind: str | None = Field(None, description="synthetic data: the generator (default 'separable'); each kind "
                                               "takes the keys listed with it")
    n: int | None = Field(None, ge=2, description="synthetic data: the number of points")
    d: int | None = Field(None, ge=1, description="synthetic data: the number of features")
    beta: float | None = Field(None, ge=0, le=1, description="synthetic data: the smallest distance of a point to the "
                                                            "random plane, as a fraction of the largest (the "
                                                            "classes are separated by a slab of width 2*beta*D)")
    flip_band: float | None = Field(None, ge=0, le=1, description="synthetic data: points closer to the plane than "
                                                                 "this get a random label (sparse_nonseparable: "
                                                                 "relative to the largest distance)")
    density: float | None = Field(None, gt=0, le=1, description="synthetic data: the fraction of non-zero features "
                                                               "of a row (round(density*d), at least 1)")
    zero_plane: bool | None = Field(None, description="synthetic data: add the zero plane (paper 004's corrected "
                                                      "instance, optimum 0 at w = 0); false leaves it out (optimum "
                                                      "below 0)")
    positive_class: int | None = Field(None, ge=0, le=9, description="synthetic data: the digit class labelled +1 "
                                                                    "(the other nine are -1)")
    noise: float | None = Field(None, ge=0, le=1, description="synthetic data: the standard deviation of the "
                                                             "Gaussian noise added to every pixel")
    positive_fraction: float | None = Field(None, gt=0, lt=1, description="synthetic data: the fraction of the "
                                                                         "points in the +1 class")
    max_norm: float | None = Field(None, ge=1, description="synthetic data: every row is scaled by a factor drawn "
                                                          "uniformly from [1, max_norm]")
    zero_rows: float | None = Field(None, ge=0, le=1, description="synthetic data: the fraction of the rows that "
                                                                 "are all zero")
    duplicates: float | None = Field(None, ge=0, le=1, description="synthetic data: the fraction of the rows that "
                                                                  "are exact copies of other rows")
    constant: float | None = Field(None, allow_inf_nan=False, description="synthetic data: the value of the "
                                                                          "constant feature on every row that is not "
                                                                          "all zero (0: no constant feature)")

    @field_validator("name", "data_dir", "test", mode="before")
    @classmethod
    def _paths_as_str(cls, value: Any) -> Any:
        return as_plain_str(value)

    @field_validator("scale")
    @classmethod
    def _known_scaling(cls, value: str) -> str:
        if value not in SCALINGS:
            raise choice("scale", value, "a feature scaling", tuple(SCALINGS))
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str | None) -> str | None:
        if value is not None and value not in SYNTHETIC_KINDS:
            raise choice("kind", value, "a synthetic data kind", SYNTHETIC_KINDS)
        return value

    @model_validator(mode="after")
    def _cross_check(self) -> "DataSection":
        errors: list[dict[str, Any]] = []
        given = [k for k in SYNTHETIC_KEYS if getattr(self, k) is not None]
        if self.name != "synthetic":
            for key in given:
                errors.append(issue(("data", key), (
                    f"{key} = {show(getattr(self, key))} only applies to synthetic data (name = \"synthetic\"), "
                    f"not to data set {self.name!r}; allowed keys for a non-synthetic set: "
                    "name, data_dir, test, holdout, positive_label, n_features, scale")))
        else:
            if self.kind is None:
                self.kind = DEFAULT_SYNTHETIC_KIND
            accepted = _synthetic_params(self.kind)
            for key in given:
                if key != "kind" and key not in accepted:
                    errors.append(issue(("data", key), (
                        f"{key} does not apply to synthetic kind {self.kind!r}; allowed keys for this kind: "
                        f"kind, {', '.join(accepted)}")))
            for key, default in accepted.items():
                if getattr(self, key) is None:
                    if default is inspect.Parameter.empty:
                        errors.append(issue(("data", key), (
                            f"synthetic kind {self.kind!r} needs key '{key}'; "
                            f"allowed: {describe_field(type(self).model_fields[key])}")))
                    else:
                        setattr(self, key, default)
            if self.kind == "separable" and self.beta is not None and self.beta <= 0:
                errors.append(issue(("data", "beta"), (
                    f"beta = {show(self.beta)} is out of range for synthetic kind 'separable'; "
                    "allowed: a number in (0, 1]")))
        if self.data_dir is not None and (self.name == "synthetic" or self.name in BUILTIN_DATASETS):
            source = "synthetic data is generated" if self.name == "synthetic" else f"{self.name!r} ships with svmsim"
            errors.append(issue(("data", "data_dir"), (
                f"data_dir = {show(self.data_dir)} does not apply: {source}, not read from a data directory; "
                "allowed: no data_dir for this set (it applies to LIBSVM sets read by name)")))
        test_given = self.test.strip().lower() not in ("", "auto", "none")
        if self.holdout is not None and test_given:
            errors.append(issue(("data", "holdout"), (
                f"holdout = {show(self.holdout)} and test = {show(self.test)} are both given; "
                "allowed: either a test set or a holdout fraction, not both")))
        if errors:
            raise several(errors)
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
    return scheme_params(PARTITION_SCHEMES[scheme])


class PartitionSection(SectionModel):
    """``[partition]``: how the training points are split over the nodes. A scheme of a plugin (entry-point group
    ``svmsim.partitions``) takes its own keyword parameters as keys beside ``scheme``."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    scheme: str = Field("iid", description="the partition scheme: a built-in one or one of a plugin (entry-point "
                                           "group svmsim.partitions), whose own keys sit next to scheme")
    skew: float | None = Field(None, ge=0, le=1, description="label_skew: the fraction of every part reserved for "
                                                            "its dominant class")
    alpha: float | None = Field(None, gt=0, description="unequal: the Dirichlet concentration of the part sizes "
                                                       "(smaller: more unequal sizes)")

    @field_validator("scheme")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        try:
            known = partition_scheme(value)
        except PluginError as exc:
            raise fail(str(exc), ("partition", "scheme")) from None
        if known is None:
            raise choice("scheme", value, "a partition scheme", partition_schemes())
        return value

    @model_validator(mode="after")
    def _scheme_keys(self) -> "PartitionSection":
        accepted = _scheme_params(self.scheme)
        errors = []
        for key, value in (self.model_extra or {}).items():
            if key not in accepted or key in ("skew", "alpha"):
                errors.append(issue(("partition", key), (
                    f"unknown key '{key}' for scheme {self.scheme!r}; allowed: scheme"
                    + "".join(f", {k}" for k in accepted))))
            elif not isinstance(value, (bool, int, float, str)):
                errors.append(issue(("partition", key), f"{key} = {show(value)}; allowed: a number, a boolean or "
                                                          "a string"))
        for key, default in accepted.items():
            if key not in ("skew", "alpha") and default is inspect.Parameter.empty \
                    and key not in (self.model_extra or {}):
                errors.append(issue(("partition", key), f"scheme {self.scheme!r} needs key '{key}'"))
        for key in ("skew", "alpha"):
            value = getattr(self, key)
            if key in accepted:
                if value is None and accepted[key] is not inspect.Parameter.empty:
                    setattr(self, key, float(accepted[key]))
            elif value is not None:
                users = [s for s in PARTITION_SCHEMES if key in _scheme_params(s)]
                errors.append(issue(("partition", key), (
                    f"{key} = {show(value)} does not apply to scheme {self.scheme!r}; "
                    f"allowed: {key} only with scheme {' or '.join(map(repr, users))}"
                    + (f"; scheme {self.scheme!r} takes {', '.join(accepted)}" if accepted
                       else f"; scheme {self.scheme!r} takes no parameters"))))
        if errors:
            raise several(errors)
        return self

    def params(self) -> dict[str, Any]:
        """Keyword arguments of :func:`svmsim.data.partition` for this scheme (besides ``scheme``)."""
        extra = self.model_extra or {}
        return {k: getattr(self, k) if k in ("skew", "alpha") else extra.get(k, default)
                for k, default in _scheme_params(self.scheme).items()}


def _topology_type_ok(value: Any, spec: ParamSpec) -> bool:
    if spec.type is bool:
        return isinstance(value, (bool, np.bool_))
    if spec.type is int:
        return is_int(value)
    if spec.type is float:
        return is_number(value) and not math.isnan(float(value))
    if spec.type is str:
        return isinstance(value, (str, os.PathLike))
    return isinstance(value, spec.type)  # pragma: no cover - future parameter types


class TopologySection(SectionModel):
    """``[topology]``: ``kind`` plus that kind's parameters (held in ``params``, defaults filled in).

    In the file the parameters sit next to ``kind``: ``[topology] kind = "grid"  rows = 4``.
    """

    kind: str = Field("star", description="the graph the nodes communicate over; the kind's parameters sit next to "
                                          "kind in the same table")
    params: dict[str, Any] = Field(default_factory=dict, description="the kind's parameters, defaults filled in")

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        data = dict(value)
        kind = data.pop("kind", "star")
        if not isinstance(kind, str):
            raise fail(f"kind = {show(kind)} has the wrong type: expected a string", ("topology", "kind"))
        try:
            spec = topology_spec(kind)
        except PluginError as exc:
            raise fail(str(exc), ("topology", "kind")) from None
        if spec is None:
            raise choice("kind", kind, "a topology kind", topology_kinds(), ("topology", "kind"))
        nested = data.get("params")
        if isinstance(nested, Mapping) and "params" not in spec.params:
            data.pop("params")
            data = {**dict(nested), **data}
        errors = []
        allowed = ", ".join(p.describe(n) for n, p in spec.params.items()) or "none (it takes no parameters)"
        for key, val in data.items():
            if key not in spec.params:
                errors.append(issue(("topology", key), (
                    f"unknown key '{key}' for topology kind '{kind}'; allowed keys: kind, and the parameters "
                    f"of '{kind}': {allowed}")))
            elif not _topology_type_ok(val, spec.params[key]):
                p = spec.params[key]
                errors.append(issue(("topology", key), (
                    f"{key} = {show(val)} has the wrong type: expected {TYPE_WORDS.get(p.type, p.type.__name__)}"
                    + (f" ({p.allowed})" if p.allowed else ""))))
        for key, p in spec.params.items():
            if p.required and data.get(key) is None:
                errors.append(issue(("topology", key), (
                    f"topology kind '{kind}' needs key '{key}'; allowed: {p.allowed or p.description}")))
        if errors:
            raise several(errors)
        try:
            resolved = resolve_params(kind, data)
        except TopologyError as exc:  # pragma: no cover - the checks above mirror resolve_params
            raise fail(str(exc), ("topology",)) from None
        return {"kind": kind, "params": {k: as_plain_str(v) for k, v in resolved.items()}}

    def __getitem__(self, key: str) -> Any:
        return self.params[key]


class EngineSection(SectionModel):
    """``[engine]``: where the node programs run. An engine of a plugin (entry-point group ``svmsim.engines``) takes
    its own keys beside ``name``; the Ray keys apply to the Ray engines."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    name: str = Field("inproc", description="where the node programs run: inproc (this process), ray (actors), "
                                            "ray-cgraph (actors driven by a Ray compiled graph), or an engine of a "
                                            "plugin (svmsim list engines)")
    actors: int = Field(2, ge=1, description="Ray: host actors per role played by several nodes")
    address: str = Field("", description="Ray: a cluster to join (auto, or HOST:PORT); empty starts a private one")
    dashboard: bool = Field(False, description="Ray: start the private instance's dashboard")
    metrics: bool = Field(True, description="Ray: export live counters and gauges (ray.util.metrics)")
    colocate: bool = Field(True, description="Ray: single-node roles (the server) share the first client host's "
                                             "actor")
    gossip: str = Field("free", description="Ray gossip: free (each host on its own clock; fast, runs differ) or "
                                            "deterministic (time windows: the in-process run bit for bit; needs a "
                                            "latency with a positive minimum)")
    checkpoint_every: int = Field(100, ge=1, description="Ray: rounds (windows, for deterministic gossip) between "
                                                         "the driver's checkpoints of every host (later while the "
                                                         "last one took over 5% of the time since)")
    recover: bool = Field(True, description="Ray, synchronous rounds and deterministic gossip: replace a host actor "
                                            "that dies, restored from its last checkpoint, and replay the rounds "
                                            "since (false: a lost host ends the run)")

    @field_validator("name")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        try:
            known = engine_kind(value)
        except PluginError as exc:
            raise fail(str(exc), ("engine", "name")) from None
        if known is None:
            raise choice("name", value, "an engine", engine_names())
        return value

    @model_validator(mode="after")
    def _engine_keys(self) -> "EngineSection":
        """Keys beyond the fixed ones are the named engine's own, checked against its parameters."""
        extra = self.model_extra or {}
        kind = engine_kind(self.name)
        unknown = [key for key in extra if key not in kind.params]
        if unknown:
            own = ", ".join(p.describe(n) for n, p in kind.params.items()) or "none (it takes no parameters)"
            raise several([issue(("engine", key), (
                f"unknown key '{key}' for engine '{self.name}'; allowed keys: {', '.join(type(self).model_fields)}, "
                f"and the parameters of '{self.name}': {own}")) for key in unknown])
        try:
            resolved = check_engine_params(self.name, extra)
        except ScenarioError as exc:
            raise fail(str(exc), ("engine",)) from None
        for key, value in resolved.items():
            self.__pydantic_extra__[key] = value
        return self

    @field_validator("gossip")
    @classmethod
    def _known_gossip_mode(cls, value: str) -> str:
        if value not in GOSSIP_MODES:
            raise choice("gossip", value, "a mode of gossip on Ray", GOSSIP_MODES)
        return value

    @model_validator(mode="after")
    def _ray_only(self) -> "EngineSection":
        if self.address and not self.is_ray:
            raise fail(
                f"address = {show(self.address)} needs a Ray engine but name = {self.name!r}; "
                f"allowed: set name to one of {', '.join(ray_engine_names())}, or remove address",
                ("engine", "address"),
            )
        if self.address and self.dashboard:
            raise fail(
                "dashboard = true starts a local Ray instance's dashboard, but address = "
                f"{show(self.address)} joins an existing cluster; allowed: dashboard = false with address",
                ("engine", "dashboard"),
            )
        return self

    @property
    def is_ray(self) -> bool:
        return engine_kind(self.name).ray

    @property
    def kind(self):
        """The engine's registered `EngineKind`."""
        return engine_kind(self.name)

    def settings(self) -> dict:
        """Every key of the table, the engine's own among them, with defaults filled in."""
        return self.model_dump()

    def build(self):
        """A new engine of this table (its kind's factory with the table's options)."""
        kind = self.kind
        return kind.factory(**kind.options_from(self.settings()))


def _lookup_algorithm(name: str) -> AlgorithmInfo | None:
    """The algorithm `name`, or None when nothing provides it; a plugin that should but cannot is an error."""
    try:
        return get_algorithm(name)
    except PluginError as exc:
        raise fail(str(exc), ("algorithm", "name")) from None
    except ScenarioError:
        return None


class AlgorithmSection(SectionModel):
    """``[algorithm]``: ``name`` of a registered algorithm; ``params`` is an instance of its ``Params`` model.

    In the file the parameters sit next to ``name``: ``[algorithm] name = "saddle-dsvc"  eps = 1e-3``. ``module``
    names a Python module that registers the algorithm when imported (an algorithm of one's own that is not
    installed): it is looked for in the scenario file's folder, then on ``sys.path``.
    """

    name: str = Field(description="a registered algorithm (built in, installed as a plugin, or registered by "
                                  "module); its parameters sit next to name")
    module: str | None = Field(None, description="a Python module that registers the algorithm when imported, "
                                                 "looked for in the scenario file's folder, then on sys.path")
    params: Any  # an instance of the algorithm's Params model (validated in _resolve)

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, Mapping):
            return value
        data = dict(value)
        module = data.pop("module", None)
        if module is not None:
            if not isinstance(module, str):
                raise fail(f"module = {show(module)} has the wrong type: expected a string (a module name such as "
                           "'mypkg.algo')", ("algorithm", "module"))
            named = data.get("name") if isinstance(data.get("name"), str) else None
            try:
                load_module(module, (info.context or {}).get("base"), named, what="module")
            except ScenarioError as exc:
                raise fail(str(exc), ("algorithm", "module")) from None
        if "name" not in data:
            raise fail(f"required key 'name' is missing; allowed: {', '.join(algorithm_names()) or '(none)'}",
                        ("algorithm", "name"))
        name = data.pop("name")
        if not isinstance(name, str):
            raise fail(f"name = {show(name)} has the wrong type: expected a string", ("algorithm", "name"))
        info = _lookup_algorithm(name)
        if info is None:
            raise choice("name", name, "a known algorithm", algorithm_names(), ("algorithm", "name"))
        Params = info.Params
        nested = data.get("params")
        if isinstance(nested, Params) and len(data) == 1:
            return {"name": name, "module": module, "params": nested}
        if isinstance(nested, Mapping) and "params" not in Params.model_fields:
            data.pop("params")
            data = {**dict(nested), **data}
        params, errors = _validate_params(Params, data)
        if errors:
            raise several([dict(e, loc=("algorithm",) + tuple(e["loc"])) for e in errors], Params, name)
        return {"name": name, "module": module, "params": params}

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
        # pragma: no mutate start (equivalent: an unknown key's message names the key, not its value or context)
        {"type": "extra_forbidden", "loc": (k,), "input": v, "ctx": {}} for k, v in data.items() if k not in known
        # pragma: no mutate end
    ]
    body = {k: v for k, v in data.items() if k in known}
    try:
        obj = Params.model_validate(body, strict=True)
        return (None, errors) if errors else (obj, [])
    except ValidationError as exc:
        coercions = [
            e for e in exc.errors(include_url=False)  # pragma: no mutate (equivalent: no message prints the URL)
            if e["type"] in _COERCION_ERRORS and isinstance(e.get("input"), (str, bool, int, float))
        ]
    errors += coercions
    try:
        obj = Params.model_validate(body)
    except ValidationError as exc:
        seen = {key_path(e["loc"]) for e in coercions}
        errors += [e for e in exc.errors(include_url=False)  # pragma: no mutate (equivalent: no message prints the URL)
                   if key_path(e["loc"]) not in seen]
        return None, errors
    return (None, errors) if errors else (obj, [])


#: the largest iteration or round budget (and evaluation interval) a scenario may ask for: 10^12 steps of a
#: microsecond each take eleven days, so a larger number is not a budget but a run that never ends
MAX_STEPS = 10**12
#: the largest scalar or message budget (10^15: a thousand times the scalars 10^12 steps of the smallest message send)
MAX_COUNT = 10**15


class StopSection(SectionModel):
    """``[stop]``: the run stops as soon as any of the given limits is reached (at least one is needed, unless the
    algorithm finishes by itself: `Scenario` checks it).

    A round or communication budget that runs out in the middle of a synchronous iteration lets that iteration
    finish (its messages are metered), so the final state is a whole iterate."""

    max_iterations: int | None = Field(None, ge=1, le=MAX_STEPS, description="stop after this many iterations (gossip: rounds of "
                                                              "virtual time)")
    max_rounds: int | None = Field(None, ge=1, le=MAX_STEPS, description="stop after this many communication rounds (gossip: "
                                                          "rounds of virtual time)")
    max_scalars: int | None = Field(None, ge=1, le=MAX_COUNT, description="stop once this many scalars have been sent (the "
                                                           "ledger's count)")
    max_seconds: float | None = Field(None, gt=0, description="stop after this many seconds of wall-clock time, "
                                                               "set-up included (a reference solve still running "
                                                               "then gives up, and the run stops at its first "
                                                               "evaluation)")
    gap: float | None = Field(None, gt=0, lt=1, description="stop at the first evaluation point whose certified "
                                                           "relative gap (rel_gap) is at most this")
    # paper 000's practical rule (section 5): stop when the objective changed by less than this between two
    # consecutive evaluation points; not certified, so not the default
    objective_change: float | None = Field(None, gt=0, description="stop when the objective changed by less than "
                                                                  "this between two consecutive evaluation points "
                                                                  "(paper 000's practical rule; not certified)")
    # any metric the algorithm reports, at or below a threshold at an evaluation point, e.g. {rel_dual = 1e-3}
    below: dict[str, float] | None = Field(None, description="stop when a named metric is at or below its "
                                                            "threshold at an evaluation point",
                                           json_schema_extra=allowed_text(
        "a table of metric names (columns of metrics.csv) and thresholds, e.g. {rel_dual = 1e-3}"))

    @field_validator("below")
    @classmethod
    def _check_below(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("an empty table stops nothing; allowed: at least one metric = threshold")
        for name, threshold in value.items():
            if not name.isidentifier():
                raise ValueError(f"{name!r} is not a metric name; allowed: a column of metrics.csv, e.g. rel_dual")
            if not math.isfinite(threshold):
                raise ValueError(f"{name} = {threshold!r}; allowed: a finite threshold")
        return value

    def limits(self) -> dict[str, Any]:
        """The limits that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def _without_unset_energy(dumped: dict) -> dict:
    """A [network] table or link as dumped, without the energy keys that are not set (a run without energy
    settings resolves and summarises as it did before they existed)."""
    for key in ("energy_per_message", "energy_per_byte"):
        if dumped.get(key, 0) is None:
            del dumped[key]
    return dumped


class LinkOverride(SectionModel):
    """One ``[[network.links]]`` entry: the link between nodes a and b (both directions)."""

    a: int = Field(ge=0, description="one end of the link (a node id)")
    b: int = Field(ge=0, description="the other end of the link (a node id)")
    latency: float | None = Field(None, ge=0, description="seconds per message on this link (default: [network] "
                                                         "latency)")
    bandwidth: float | None = Field(None, gt=0, description="bytes per second of this link (default: [network] "
                                                           "bandwidth)")
    energy_per_message: float | None = Field(None, ge=0, description="joules per message on this link (default: "
                                                                     "[network] energy_per_message)")
    energy_per_byte: float | None = Field(None, ge=0, description="joules per byte on this link (default: [network] "
                                                                  "energy_per_byte)")

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        return _without_unset_energy(handler(self))


class NodeOverride(SectionModel):
    """One ``[[network.nodes]]`` entry: a node whose compute rate differs from the table's."""

    id: int = Field(ge=0, description="the node id")
    compute_rate: float = Field(gt=0, description="operations per second of this node")


class NetworkSection(SectionModel):
    """``[network]``: the modelled cluster of synchronous runs (alpha-beta links and compute rate). When the table
    is given, every metrics row gets ``modelled_time`` (see `svmsim.schedule.cluster_time`); the compiled rounds
    keep it as the Python rounds do (with ``compute = "measured"`` the rounds run in Python, where steps are
    timed). With ``energy_per_message`` or ``energy_per_byte`` (here or on a link) the rows also get ``energy``
    (the quantity ``energy`` of `svmsim.comm.quantities`). A heterogeneous cluster: ``profile`` (named defaults),
    ``compute_spread`` / ``link_spread`` (log-normal spreads drawn from the run's seed), ``[[network.nodes]]`` and
    ``[[network.links]]`` (one by one) and ``trace`` (a CSV file of nodes and links); the most specific wins: a
    node or link of the table, then of the trace, then the spread around the table's (or profile's) values."""

    PROFILE_KEYS: ClassVar[tuple] = ("latency", "bandwidth", "compute_rate", "compute_spread", "link_spread")
    _trace: Any = PrivateAttr(None)

    latency: float = Field(50e-6, ge=0, description="alpha: seconds per message on a link")
    bandwidth: float = Field(1.25e9, gt=0, description="beta: bytes per second of a link (1.25e9: 10 Gbit/s)")
    compute_rate: float = Field(1e9, gt=0, description="operations per second of a node (the work its program "
                                                       "declares per step)")
    links: list[LinkOverride] = Field(default_factory=list, description="links whose latency, bandwidth or energy "
                                                                        "differ from the defaults: [[network.links]] "
                                                                        "entries with keys a, b, latency, bandwidth, "
                                                                        "energy_per_message, energy_per_byte")
    step_overhead: float = Field(0.0, ge=0, description="seconds each step of a node costs beyond its declared work "
                                                        "(the fixed cost of a step in the node's runtime; count "
                                                        "mode; svmsim calibrate --scenario measures it)")
    compute: str = Field("count", description="how the compute time of a step is modelled",
                         json_schema_extra=allowed_text(
        "'count' (step_overhead + the work each step declares / compute_rate) or 'measured' (each node's step "
        "timed where it runs: in process or on its Ray host)"))
    energy_per_message: float | None = Field(None, ge=0, description="joules per delivered message on a link "
                                                                     "(the energy column; absent: 0)")
    energy_per_byte: float | None = Field(None, ge=0, description="joules per byte of a delivered message on a link "
                                                                  "(the energy column; absent: 0)")
    profile: str | None = Field(None, description="a named cluster whose latency, bandwidth, compute rate and "
                                                  "spreads are the defaults of this table",
                                json_schema_extra=allowed_text("'datacenter-10g', 'wan' or 'edge' (svmsim list "
                                                               "profiles says what each is)"))
    compute_spread: float = Field(0.0, ge=0, le=5, description="sigma of a log-normal factor on each node's compute "
                                                              "rate (median: compute_rate; drawn from the seed)")
    link_spread: float = Field(0.0, ge=0, le=5, description="sigma of a log-normal factor on each link's latency "
                                                           "(and 1/bandwidth), drawn from the seed")
    nodes: list[NodeOverride] = Field(default_factory=list, description="nodes whose compute rate differs: "
                                                                        "[[network.nodes]] entries with keys id, "
                                                                        "compute_rate")
    trace: str | None = Field(None, min_length=1, description="a CSV file of node compute rates and link latencies "
                                                              "and bandwidths (columns kind, node, peer, "
                                                              "compute_rate, latency, bandwidth), looked for beside "
                                                              "the scenario file",
                              json_schema_extra=allowed_text("a CSV file path"))

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """As dumped (the resolved scenario, the summary): the profile's values written out, so that the dump
        reads back to the same cluster; the heterogeneity keys and the step overhead only where set (a homogeneous table
        dumps as it did before they existed)."""
        out = _without_unset_energy(handler(self))
        out.update(self.settings())
        unset = {"profile": None, "nodes": [], "trace": None, "step_overhead": 0.0}
        if self.profile is None:           # else a spread of 0 must stay written out, against the profile's
            unset.update(compute_spread=0.0, link_spread=0.0)
        for key, value in unset.items():
            if out.get(key) == value:
                del out[key]
        return out

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str | None) -> str | None:
        from svmsim.schedule.cluster_profiles import PROFILES

        if value is not None and value not in PROFILES:
            raise ValueError(f"profile = {value!r} is unknown; allowed: {', '.join(repr(p) for p in PROFILES)}")
        return value

    @model_validator(mode="after")
    def _read_trace(self, info: ValidationInfo):
        """A trace file is found beside the scenario file first, and read (checked) now."""
        from svmsim.schedule.cluster_profiles import read_trace

        if self.trace is not None:
            path = self.trace
            base = (info.context or {}).get("base")
            if base is not None and not os.path.isabs(path) and os.path.exists(os.path.join(base, path)):
                path = os.path.join(base, path)
            try:
                self._trace = read_trace(path)
            except ScenarioError as exc:
                raise fail(str(exc).removeprefix("[network] "), ("network", "trace")) from None
            self.trace = os.path.abspath(path)         # the file read: the resolved scenario reads it again
        return self

    def settings(self) -> dict:
        """latency, bandwidth, compute_rate and the spreads: the keys given, else the profile's, else the defaults."""
        from svmsim.schedule.cluster_profiles import PROFILES

        base = PROFILES[self.profile][0] if self.profile is not None else {}
        return {k: getattr(self, k) if k in self.model_fields_set or k not in base else base[k]
                for k in self.PROFILE_KEYS}

    @field_validator("compute")
    @classmethod
    def _compute_mode(cls, value: str) -> str:
        if value not in ("count", "measured"):
            raise ValueError(f"compute = {value!r} is unknown; allowed: 'count' or 'measured'")
        return value

    def model(self, seed: int = 0):
        """The `NetworkModel` of this table for a run of seed `seed` (which draws the spreads)."""
        from svmsim.schedule.cluster_time import NetworkModel

        trace = self._trace
        node_rates = dict(trace.node_rates) if trace is not None else {}
        links = dict(trace.links) if trace is not None else {}
        node_rates.update({n.id: n.compute_rate for n in self.nodes})
        links.update({(min(ln.a, ln.b), max(ln.a, ln.b)): (ln.latency, ln.bandwidth) for ln in self.links})
        return NetworkModel(compute=self.compute, links=links, node_rates=node_rates, seed=int(seed), trace=trace,
                            step_overhead=self.step_overhead, **self.settings())


#: the experiment trackers ``[output] tracking`` names (`svmsim.tracking`)
TRACKERS = ("none", "mlflow")


class OutputSection(SectionModel):
    """``[output]``: where results go and what is produced."""

    dir: str = Field("runs", min_length=1, description="the folder run directories are written in, as "
                                                       "<dir>/<name>-<seed>-<timestamp>",
                     json_schema_extra=allowed_text("a directory path"))
    run_dir: str | None = Field(None, min_length=1, description="the exact run directory (instead of one in dir)",
                                json_schema_extra=allowed_text("a directory path"))
    eval_every: int = Field(1000, ge=1, le=MAX_STEPS, description="iterations between evaluation points (rows of metrics.csv) of "
                                                    "synchronous rounds and single-machine solvers")
    plots: bool = Field(True, description="draw the run's figures into the run directory")
    progress: bool = Field(True, description="show a progress bar (svmsim run --no-progress or --quiet turn it off)")
    overwrite: bool = Field(False, description="replace an existing run directory of the same path")
    tracking: str = Field("none", description="log the run (a sweep: a parent run and one child per point) to an "
                                              "experiment tracker: 'mlflow' (needs svmsim[mlflow]) or 'none'",
                          json_schema_extra=allowed_text("'none' or 'mlflow'"))
    tracking_uri: str | None = Field(None, min_length=1, description="the tracker's store: sqlite:///FILE, "
                                     "http://HOST:PORT, file:DIR (default: MLFLOW_TRACKING_URI, else "
                                     "sqlite:///mlflow.db in the working directory)",
                                     json_schema_extra=allowed_text("a tracking URI"))
    experiment: str | None = Field(None, min_length=1, description="the tracker's experiment the run goes in "
                                   "(default: the scenario's name)", json_schema_extra=allowed_text("a name"))

    @field_validator("dir", "run_dir", mode="before")
    @classmethod
    def _paths_as_str(cls, value: Any) -> Any:
        return as_plain_str(value)

    @field_validator("tracking")
    @classmethod
    def _known_tracker(cls, value: str) -> str:
        if value not in TRACKERS:
            raise choice("tracking", value, "an experiment tracker", TRACKERS)
        return value

    @field_validator("dir", "run_dir")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\0" in value:
            raise ValueError(f"{value!r} contains a NUL character; allowed: a directory path without NUL characters")
        return value
