"""Engines: where node programs run (in-process, Ray actors, Ray compiled graphs).

The engine classes are imported on first use, so that reading the names of the engines (the configuration does,
to validate a scenario) imports neither numba nor Ray."""
from __future__ import annotations

import importlib

ENGINES = ("inproc", "ray", "ray-cgraph")
GOSSIP_MODES = ("free", "deterministic")     # how Ray gossip hosts keep time (`engine.ray_gossip`)

__all__ = ["Engine", "split_roles", "InProcessEngine", "ENGINES", "GOSSIP_MODES", "make_engine", "RayGossipRun"]

_LAZY = {"Engine": ".base", "split_roles": ".base", "InProcessEngine": ".inproc", "RayGossipRun": ".ray_gossip"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(name: str, **options):
    """Build an engine by name: 'inproc', 'ray' (actors) or 'ray-cgraph' (actors driven by a compiled graph)."""
    if name == "inproc":
        from .inproc import InProcessEngine

        return InProcessEngine()
    if name in ("ray", "ray-cgraph"):
        from .ray_engine import RayEngine

        return RayEngine(compiled=(name == "ray-cgraph"), **options)
    from ..errors import ScenarioError

    raise ScenarioError(f"engine.name = {name!r} is not an engine; allowed: {', '.join(ENGINES)}")
