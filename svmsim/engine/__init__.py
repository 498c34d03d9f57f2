"""Engines: where node programs run (in-process, Ray actors, Ray compiled graphs)."""
from .base import Engine, split_roles
from .inproc import InProcessEngine

ENGINES = ("inproc", "ray", "ray-cgraph")

__all__ = ["Engine", "split_roles", "InProcessEngine", "ENGINES", "make_engine", "RayGossipRun"]


def __getattr__(name: str):
    if name == "RayGossipRun":          # gossip on Ray actors (imported on first use)
        from .ray_gossip import RayGossipRun

        return RayGossipRun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(name: str, **options) -> Engine:
    """Build an engine by name: 'inproc', 'ray' (actors) or 'ray-cgraph' (actors driven by a compiled graph)."""
    if name == "inproc":
        return InProcessEngine()
    if name in ("ray", "ray-cgraph"):
        from .ray_engine import RayEngine

        return RayEngine(compiled=(name == "ray-cgraph"), **options)
    from ..errors import ScenarioError

    raise ScenarioError(f"engine.name = {name!r} is not an engine; allowed: {', '.join(ENGINES)}")
