"""Engines: where node programs run (in-process, Ray actors, Ray compiled graphs).

The engine classes are imported on first use, so that reading the names of the engines (the configuration does,
to validate a scenario) imports neither numba nor Ray."""
from __future__ import annotations

import importlib

from typing import Any, Mapping

from .kinds import (ENGINE_KINDS, GOSSIP_MODES, EngineKind, engine_kind, engine_names, get_engine_kind,
                    register_engine)

__all__ = ["Engine", "split_roles", "InProcessEngine", "GOSSIP_MODES", "make_engine", "RayGossipRun", "EngineKind",
           "ENGINE_KINDS", "register_engine", "engine_names", "engine_kind"]

_LAZY = {"Engine": ".base", "split_roles": ".base", "InProcessEngine": ".inproc", "RayGossipRun": ".ray_gossip"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(name: str, **options):
    """Build an engine by name ('inproc', 'ray': actors, 'ray-cgraph': actors driven by a compiled graph, or a
    registered one) with its factory's keyword options."""
    return get_engine_kind(name).factory(**options)


# ----------------------------------------------------------------------------------------------------------------
# Built-in engines
# ----------------------------------------------------------------------------------------------------------------


def _inproc(**options):
    from .inproc import InProcessEngine

    return InProcessEngine(**options)


def _ray(**options):
    from .ray_engine import RayEngine

    return RayEngine(**options)


def _ray_cgraph(**options):
    from .ray_engine import RayEngine

    return RayEngine(compiled=True, **options)


def _ray_options(s: Mapping[str, Any]) -> dict:
    """RayEngine's options from the Ray keys of [engine]."""
    return {"actors": s["actors"], "address": s["address"] or None, "colocate": s["colocate"],
            "gossip": s["gossip"], "checkpoint_every": s["checkpoint_every"], "recover": s["recover"],
            "init_options": {"include_dashboard": s["dashboard"]}}


register_engine(EngineKind("inproc", _inproc, "every node program in this process; deterministic and cheap",
                           options=lambda s: {}))
register_engine(EngineKind("ray", _ray, "Ray actors, one remote call per host and round (gossip: free hosts that "
                                        "send to each other)", options=_ray_options, ray=True))
register_engine(EngineKind(
    "ray-cgraph", _ray_cgraph, "Ray actors driven in lockstep by a Ray compiled graph (synchronous rounds)",
    options=_ray_options, ray=True,
    no_gossip="drives actors in lockstep through a compiled graph (synchronous rounds), but the gossip scheduler "
              "runs free actors that send to each other directly"))
