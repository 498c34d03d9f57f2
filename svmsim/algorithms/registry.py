"""The algorithm registry: every algorithm svmsim can run from a scenario, with its parameter schema."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel

__all__ = ["AlgorithmInfo", "ALGORITHMS", "register", "get_algorithm"]


@dataclass(frozen=True)
class AlgorithmInfo:
    """What the scenario layer and the CLI need to know about an algorithm.

    name: the scenario's ``algorithm.name``.
    family: the module (paper family) it belongs to.
    paper: the paper file in the papers folder and the algorithm number.
    distributed: True for server/client or peer algorithms run by a scheduler; False for single-machine solvers.
    Params: pydantic model of its parameters (extra keys forbidden), validated from the ``[algorithm]`` table.
    build: callable ``build(params, problem) -> Deployment | Solver`` (see `svmsim.runner`).
    topologies: topology kinds it runs on (``("star",)`` for server-client algorithms).
    """

    name: str
    family: str
    paper: str
    distributed: bool
    Params: type[BaseModel]
    build: Callable
    description: str
    topologies: tuple[str, ...] = field(default=("star",))


ALGORITHMS: dict[str, AlgorithmInfo] = {}


def register(info: AlgorithmInfo) -> AlgorithmInfo:
    ALGORITHMS[info.name] = info
    return info


def get_algorithm(name: str) -> AlgorithmInfo:
    from ..errors import ScenarioError

    _load_builtin()
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ScenarioError(f"algorithm.name = {name!r} is not a known algorithm; allowed: "
                            f"{', '.join(sorted(ALGORITHMS))}") from None


def _load_builtin() -> None:
    """Import the algorithm families so that they register themselves."""
    # each family module registers its algorithms when imported
    from . import gadget, gilbert, hogwild, pegasos, pushsum, references, saddle  # noqa: F401
