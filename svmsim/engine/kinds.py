"""The registry of engines: each engine's `EngineKind` (how it is built from a scenario's ``[engine]`` table, its own
keys, what it can run), found built in (registered by the package, `svmsim.engine`), registered by
`register_engine`, or provided by an installed plugin through the entry-point group ``svmsim.engines``. Nothing here
imports numba or Ray: the engine classes load when an engine is built."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..core.params import ParamSpec, check_params
from ..errors import ScenarioError

if TYPE_CHECKING:                                  # pragma: no cover
    from .base import Engine

__all__ = ["EngineKind", "ENGINE_KINDS", "register_engine", "engine_names", "engine_kind", "get_engine_kind",
           "GOSSIP_MODES", "RAY_KEYS", "check_engine_params",
           "ray_engine_names"]

#: how Ray gossip hosts keep time (`engine.ray_gossip`)
GOSSIP_MODES = ("free", "deterministic")
#: the keys of [engine] that the Ray engines read (every other engine ignores them)
RAY_KEYS = ("actors", "address", "dashboard", "metrics", "colocate", "gossip", "checkpoint_every", "recover")

#: every known engine: the built-in ones (below) and the registered ones
ENGINE_KINDS: dict[str, "EngineKind"] = {}


@dataclass(frozen=True)
class EngineKind:
    """A registered engine.

    ``factory(**options) -> Engine`` builds it (`make_engine` calls it with keyword options). ``options(settings)``
    maps a scenario's ``[engine]`` table (every key, defaults filled in; the engine's own `params` among them) to
    those options; by default the engine's own parameters are passed as they are. ``params``: the engine's own keys
    of ``[engine]`` beside ``name``. ``ray``: it runs on Ray and reads the Ray keys (``actors``, ``address``, ...;
    live metrics are exported). ``no_gossip``: why it cannot run the gossip scheduler (empty: it can, through
    ``Engine.gossip``).
    """

    name: str
    factory: Callable[..., "Engine"]
    description: str
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    options: Callable[[Mapping[str, Any]], dict] | None = None
    ray: bool = False
    no_gossip: str = ""

    def options_from(self, settings: Mapping[str, Any]) -> dict:
        """The factory's keyword options for these ``[engine]`` settings."""
        if self.options is not None:
            return dict(self.options(settings))
        return {k: settings[k] for k in self.params if k in settings}

    def signature(self) -> str:
        return f"{self.name}({', '.join(p.describe(n) for n, p in self.params.items())})"


def register_engine(kind: EngineKind) -> EngineKind:
    """Make an engine known to scenarios (``[engine] name``), `make_engine`, ``--engine`` and the CLI; returns it.

    A plugin calls it when its module is imported (entry-point group ``svmsim.engines``, the entry point named after
    the engine). An engine registered again by another module is refused."""
    from ..errors import PluginError

    if not isinstance(kind, EngineKind) or not isinstance(kind.name, str) or not kind.name:
        raise PluginError(f"register_engine takes an EngineKind with a name, got {kind!r}")
    if not callable(kind.factory):
        raise PluginError(f"engine {kind.name!r}: factory = {kind.factory!r} is not callable; allowed: "
                          "factory(**options) -> Engine")
    clash = sorted(set(kind.params) & {"name", *RAY_KEYS})
    if clash:
        raise PluginError(f"engine {kind.name!r}: parameter {clash[0]!r} is a key of [engine] already; allowed: "
                          "names of its own")
    old = ENGINE_KINDS.get(kind.name)
    if old is not None and old is not kind and old.factory.__module__ != kind.factory.__module__:
        raise PluginError(f"engine {kind.name!r} is registered twice: by module {old.factory.__module__} and by "
                          f"module {kind.factory.__module__}; allowed: a name of its own for each engine")
    ENGINE_KINDS[kind.name] = kind
    return kind


def engine_names() -> list[str]:
    """Every engine a scenario may name: built in, registered, and installed plugins' (none imported)."""
    from ..core.plugins import registered_names

    return registered_names("engines", ENGINE_KINDS)


def ray_engine_names() -> list[str]:
    """The registered engines that run on Ray."""
    return [name for name, kind in ENGINE_KINDS.items() if kind.ray]


def engine_kind(name: str) -> EngineKind | None:
    """The engine `name`, loading its plugin on first use; None for a name nothing provides."""
    from ..core.plugins import find_registered

    return find_registered("engines", ENGINE_KINDS, name, register_engine, EngineKind)


def get_engine_kind(name: str) -> EngineKind:
    kind = engine_kind(name)
    if kind is None:
        raise ScenarioError(f"engine.name = {name!r} is not an engine; allowed: {', '.join(engine_names())}")
    return kind


def check_engine_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """An engine's own keys checked (names, types, ranges) with defaults filled in."""
    kind = get_engine_kind(name)
    return check_params(f"engine '{name}'", params, kind.params, ScenarioError)
