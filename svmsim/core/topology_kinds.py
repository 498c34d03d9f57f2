"""The registry of topology kinds: each kind's `TopologySpec` (its builder and typed parameters), how a kind is
found (built in, registered by `register_topology`, or provided by an installed plugin through the entry-point
group ``svmsim.topologies``), and the checking of a kind's parameters (`resolve_params`). `svmsim.topology_specs`
fills `TOPOLOGIES` with the built-in kinds, and `svmsim.topology` builds the graphs."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import TopologyError

__all__ = ["ParamSpec", "TopologySpec", "TOPOLOGIES", "register_topology", "topology_kinds", "topology_spec",
           "get_spec", "resolve_params"]

#: every known kind: the built-in ones (filled by `svmsim.topology`) and the registered ones
TOPOLOGIES: dict[str, "TopologySpec"] = {}

# ----------------------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a topology kind.

    ``type`` is the accepted Python type (``int``, ``float``, ``bool`` or ``str``; ``float`` also accepts ints,
    ``str`` also accepts path-like objects). ``default`` is used when the parameter is omitted; ``None`` means
    "derived from n_nodes" (explained in ``description``). ``allowed`` is a human-readable range. A ``required``
    parameter has no default and must be given.
    """

    type: type
    default: Any
    description: str
    allowed: str = ""
    required: bool = False

    def describe(self, name: str) -> str:
        """Render as ``name: type = default`` (or ``name: type (required)``) for listings."""
        if self.required:
            return f"{name}: {self.type.__name__} (required)"
        default = "auto" if self.default is None else repr(self.default)
        return f"{name}: {self.type.__name__} = {default}"


@dataclass(frozen=True)
class TopologySpec:
    """A registered topology kind: its builder, a one-line description and its parameters.

    The builder is called as ``builder(n_nodes, seed, **params)`` with every parameter resolved (defaults filled
    in, types checked) and returns a graph on nodes ``0..N-1``.
    """

    name: str
    builder: Callable[..., "networkx.Graph"]
    description: str
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    min_nodes: int = 2

    def signature(self) -> str:
        """Render as ``kind(p1: type = default, ...)`` for listings and error messages."""
        inner = ", ".join(p.describe(name) for name, p in self.params.items())
        return f"{self.name}({inner})"

    def defaults(self) -> dict[str, Any]:
        """The default value of every parameter."""
        return {name: p.default for name, p in self.params.items()}


def _allowed_params_text(spec: TopologySpec) -> str:
    if not spec.params:
        return f"topology '{spec.name}' takes no parameters"
    return "allowed parameters: " + ", ".join(p.describe(n) for n, p in spec.params.items())


def _coerce(kind: str, name: str, value: Any, p: ParamSpec) -> Any:
    """Check the type of one parameter value; return it in canonical Python type."""
    if value is None and p.default is None:
        return None
    bad = TopologyError(
        f"parameter '{name}' of topology '{kind}' must be of type {p.type.__name__}, "
        f"got {value!r} ({type(value).__name__})" + (f"; allowed: {p.allowed}" if p.allowed else "")
    )
    if p.type is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise bad
    if isinstance(value, (bool, np.bool_)):
        raise bad
    if p.type is int:
        if isinstance(value, (int, np.integer)):
            return int(value)
        raise bad
    if p.type is float:
        if isinstance(value, (int, float, np.integer, np.floating)):
            v = float(value)
            if math.isnan(v):
                raise bad
            return v
        raise bad
    if p.type is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise bad
    raise TypeError(f"unsupported parameter type {p.type!r}")  # pragma: no cover - registry bug


def register_topology(spec: TopologySpec) -> TopologySpec:
    """Make a topology kind known to scenarios (``[topology] kind``), `build_topology` and the CLI; returns it.

    A plugin calls it when its module is imported (entry-point group ``svmsim.topologies``, the entry point named
    after the kind). A kind registered again by another module is refused."""
    from ..errors import PluginError

    if not isinstance(spec, TopologySpec) or not isinstance(spec.name, str) or not spec.name:
        raise PluginError(f"register_topology takes a TopologySpec with a name, got {spec!r}")
    if not callable(spec.builder):
        raise PluginError(f"topology {spec.name!r}: builder = {spec.builder!r} is not callable; allowed: "
                          "builder(n_nodes, seed=..., **params) -> networkx.Graph")
    old = TOPOLOGIES.get(spec.name)
    if old is not None and old is not spec and old.builder.__module__ != spec.builder.__module__:
        raise PluginError(f"topology kind {spec.name!r} is registered twice: by module {old.builder.__module__} "
                          f"and by module {spec.builder.__module__}; allowed: a name of its own for each kind")
    TOPOLOGIES[spec.name] = spec
    return spec


def topology_kinds() -> list[str]:
    """Every topology kind a scenario may name: built in, registered, and installed plugins' (none imported)."""
    from .plugins import entry_points

    return list(TOPOLOGIES) + sorted(set(entry_points("topologies")) - set(TOPOLOGIES))


def topology_spec(kind: str) -> TopologySpec | None:
    """The spec of `kind`, loading its plugin on first use; None for a kind nothing provides."""
    if isinstance(kind, str) and kind not in TOPOLOGIES:
        from .plugins import entry_points, provide

        if kind in entry_points("topologies"):
            provide("topologies", kind, register_topology, lambda k: k in TOPOLOGIES, TopologySpec)
    return TOPOLOGIES.get(kind) if isinstance(kind, str) else None


def get_spec(kind: Any) -> TopologySpec:
    spec = topology_spec(kind)
    if spec is None:
        raise TopologyError(
            f"unknown topology kind {kind!r}; allowed kinds: {', '.join(sorted(topology_kinds()))}"
        )
    return spec


def resolve_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Check parameter names and types for ``kind`` and fill in defaults (no range checks, nothing built).

    Raises TopologyError for an unknown kind, an unknown or missing required parameter, or a value of the wrong
    type.
    """
    spec = get_spec(kind)
    for name in params:
        if name not in spec.params:
            raise TopologyError(
                f"unknown parameter {name!r} for topology '{kind}'; {_allowed_params_text(spec)}"
            )
    missing = [name for name, p in spec.params.items() if p.required and params.get(name) is None]
    if missing:
        raise TopologyError(
            f"topology '{kind}' needs parameter(s) {', '.join(map(repr, missing))}; {_allowed_params_text(spec)}"
        )
    resolved = spec.defaults()
    for name, value in params.items():
        resolved[name] = _coerce(kind, name, value, spec.params[name])
    return resolved
