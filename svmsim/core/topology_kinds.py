"""The registry of topology kinds: each kind's `TopologySpec` (its builder and typed parameters), how a kind is
found (built in, registered by `register_topology`, or provided by an installed plugin through the entry-point
group ``svmsim.topologies``), and the checking of a kind's parameters (`resolve_params`). `svmsim.topology_specs`
fills `TOPOLOGIES` with the built-in kinds, and `svmsim.topology` builds the graphs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import TopologyError
from .params import ParamSpec, check_params

if TYPE_CHECKING:                                  # pragma: no cover
    import networkx

__all__ = ["ParamSpec", "TopologySpec", "TOPOLOGIES", "register_topology", "topology_kinds", "topology_spec",
           "get_spec", "resolve_params"]

#: every known kind: the built-in ones (filled by `svmsim.topology`) and the registered ones
TOPOLOGIES: dict[str, "TopologySpec"] = {}

# ----------------------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------------------


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
    from .plugins import registered_names

    return registered_names("topologies", TOPOLOGIES)


def topology_spec(kind: str) -> TopologySpec | None:
    """The spec of `kind`, loading its plugin on first use; None for a kind nothing provides."""
    from .plugins import find_registered

    return find_registered("topologies", TOPOLOGIES, kind, register_topology, TopologySpec)


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
    return check_params(f"topology '{kind}'", params, spec.params, TopologyError)
