"""The algorithm registry: every algorithm svmsim can run from a scenario, with its parameter schema.

Families are found by discovery, not by a list: every module or package under `svmsim/algorithms/` that registers
an algorithm with ``register(AlgorithmInfo(name="...", ...))`` is indexed by reading its source for those names
(nothing is imported), and a family is imported only when one of its algorithms is asked for, so validating a
scenario imports (and compiles) nothing but the algorithm it names. A new family is one module or package here.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

__all__ = ["AlgorithmInfo", "ALGORITHMS", "register", "get_algorithm", "algorithm_names", "load_all"]

_HERE = Path(__file__).resolve().parent
#: modules here that are not families
_NOT_FAMILIES = {"registry", "conformance", "collective"}
#: how a family names what it registers: ``AlgorithmInfo(name="...")`` (the name first, a literal string)
_REGISTERED_NAME = re.compile(r"AlgorithmInfo\(\s*name\s*=\s*[\"']([A-Za-z0-9_.+-]+)[\"']")


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
    memory: optional ``memory(params, problem) -> (bytes, what, allowed)``: the run's peak memory estimated from
        the parameters and the loaded problem before anything is built (the runner refuses a run that would not
        fit, `core.resources.check_memory`); `what` says what the estimate is made of, `allowed` what to change.
    """

    name: str
    family: str
    paper: str
    distributed: bool
    Params: type[BaseModel]
    build: Callable
    description: str
    topologies: tuple[str, ...] = field(default=("star",))
    memory: Callable | None = None


#: the algorithms of the families imported so far (`load_all` imports every family)
ALGORITHMS: dict[str, AlgorithmInfo] = {}
_INDEX: dict[str, str] | None = None


def register(info: AlgorithmInfo) -> AlgorithmInfo:
    ALGORITHMS[info.name] = info
    return info


def _family_sources(name: str, is_package: bool) -> list[Path]:
    if is_package:
        return sorted((_HERE / name).rglob("*.py"))
    return [_HERE / f"{name}.py"]


def _index() -> dict[str, str]:
    """algorithm name -> the family module that registers it, read from the sources under this package."""
    global _INDEX
    if _INDEX is None:
        index: dict[str, str] = {}
        for mod in pkgutil.iter_modules([str(_HERE)]):
            if mod.name in _NOT_FAMILIES or mod.name.startswith("_"):
                continue
            for path in _family_sources(mod.name, mod.ispkg):
                for algo in _REGISTERED_NAME.findall(path.read_text(encoding="utf-8")):
                    index.setdefault(algo, f"{__package__}.{mod.name}")
        _INDEX = index
    return _INDEX


def algorithm_names() -> list[str]:
    """Every algorithm a scenario may name, sorted (no family is imported)."""
    return sorted(set(_index()) | set(ALGORITHMS))


def get_algorithm(name: str) -> AlgorithmInfo:
    """The algorithm `name`, importing its family on first use; ScenarioError naming the known ones otherwise."""
    from ..errors import ScenarioError

    if name not in ALGORITHMS and isinstance(name, str) and name in _index():
        importlib.import_module(_index()[name])
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ScenarioError(f"algorithm.name = {name!r} is not a known algorithm; allowed: "
                            f"{', '.join(algorithm_names())}") from None


def load_all() -> dict[str, AlgorithmInfo]:
    """Import every family (for listings); returns `ALGORITHMS`."""
    for module in sorted(set(_index().values())):
        importlib.import_module(module)
    return ALGORITHMS
