"""The algorithm registry: every algorithm svmsim can run from a scenario, with its parameter schema and the
declarations that live with it (scheduler, whether it finishes by itself, how the conformance suite runs it).

Algorithms come from three places, all through `register`:

* the built-in families: every module or package under `svmsim/algorithms/` that registers an algorithm with
  ``register(AlgorithmInfo(name="...", ...))`` is indexed by reading its source for those names (nothing is
  imported), and a family is imported only when one of its algorithms is asked for, so validating a scenario
  imports (and compiles) nothing but the algorithm it names;
* installed distributions, through the entry-point group ``svmsim.algorithms`` (`core.plugins`): the entry point's
  name is the algorithm's name, its value a module that registers it when imported, or an `AlgorithmInfo` (or a
  list of them);
* a module that a scenario names (``[algorithm] module = "mypkg.algo"``), imported before the name is looked up.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Callable

from pydantic import BaseModel

from ..core import plugins
from ..errors import PluginError, ScenarioError

__all__ = ["AlgorithmInfo", "Conformance", "ALGORITHMS", "SCHEDULERS", "ANY_TOPOLOGY", "register", "get_algorithm",
           "algorithm_names", "load_all", "load_module", "plugin_errors"]

_HERE = Path(__file__).resolve().parent
#: modules here that are not families
_NOT_FAMILIES = {"registry", "conformance", "collective"}
#: how a family names what it registers: ``AlgorithmInfo(name="...")`` (the name first, a literal string)
_REGISTERED_NAME = re.compile(r"AlgorithmInfo\(\s*name\s*=\s*[\"']([A-Za-z0-9_.+-]+)[\"']")
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
#: the schedulers an algorithm can run on: synchronous rounds, or asynchronous gossip on virtual time
SCHEDULERS = ("sync", "gossip")
#: `AlgorithmInfo.topologies` of an algorithm that runs on any connected topology
ANY_TOPOLOGY = ("any",)
#: the metrics the runner writes into every evaluation row, whatever the algorithm
RUN_METRICS = frozenset({"iteration", "round", "messages", "scalars", "bytes", "comm_units", "wall_time",
                         "wall_time_total", "compile_time"})
#: ... of a distributed run besides (nodes_up with faults; the metered quantities, `comm.quantities`, are too)
DISTRIBUTED_METRICS = frozenset({"nodes_up"})
#: ... of a gossip run besides (virtual time, clock ticks, messages sent and in flight)
GOSSIP_METRICS = frozenset({"virtual_time", "wakes", "sent_messages", "in_flight"})


@dataclass(frozen=True)
class Conformance:
    """How the conformance suite (`svmsim.conformance`) runs an algorithm: declared with the algorithm.

    params: small valid ``[algorithm]`` parameters under which every check runs in a few seconds (few clients or
        nodes, a short budget). Required for `svmsim check` and `conformance.yield_checks`.
    variants: further parameter sets, each merged over `params`, for code paths of their own (every check runs on
        each as well).
    run: overrides of `conformance.DEFAULT_RUN` (the small run's data, topology and budget), e.g.
        ``{"data": {"name": "heart_scale"}, "topology": ("complete", {})}``.
    skips: check name -> why it does not apply (the report shows the reason, as scikit-learn's tags do); a check
        that is not skipped must pass.
    """

    params: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...] = ()
    run: Mapping[str, Any] = field(default_factory=dict)
    skips: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.params, Mapping):
            raise TypeError(f"Conformance.params must be a dict of [algorithm] parameters, got "
                            f"{type(self.params).__name__}")
        variants = tuple(self.variants)
        if not all(isinstance(v, Mapping) for v in variants):
            raise TypeError("Conformance.variants must be a sequence of dicts of [algorithm] parameters")
        object.__setattr__(self, "variants", variants)
        for check, reason in dict(self.skips).items():
            if not isinstance(reason, str) or len(reason.strip()) < 10:
                raise TypeError(f"Conformance.skips[{check!r}] needs the reason the check does not apply (a "
                                f"sentence), got {reason!r}")


@dataclass(frozen=True)
class AlgorithmInfo:
    """What the scenario layer, the CLI and the conformance suite need to know about an algorithm.

    name: the scenario's ``algorithm.name`` (letters, digits, ``_ . + -``).
    family: the family (paper, or package) it belongs to.
    paper: the paper and the algorithm number it implements (free text for an algorithm of one's own).
    distributed: True for server/client or peer algorithms run by a scheduler; False for single-machine solvers.
    Params: pydantic model of its parameters (extra keys forbidden), validated from the ``[algorithm]`` table.
    build: callable ``build(params, problem) -> Deployment | SingleMachineRun`` (see `svmsim.deployment`); a
        ``deferred("package.module:build_fn")`` (`core.plugins.deferred`) names it without importing it, so that
        registering the algorithm, listing it and validating its scenarios import none of its numerics.
    description: one line for listings.
    topologies: topology kinds it runs on (``("star",)`` for server-client algorithms; `ANY_TOPOLOGY` for peers that
        run on any connected graph, the kinds of topology plugins included).
    memory: optional ``memory(params, problem) -> (bytes, what, allowed)``: the run's peak memory estimated from
        the parameters and the loaded problem before anything is built (the runner refuses a run that would not
        fit, `core.resources.check_memory`); `what` says what the estimate is made of, `allowed` what to change.
        May be `deferred` as `build` may.
    scheduler: ``"sync"`` (synchronous rounds; its programs are `NodeProgram`s) or ``"gossip"`` (asynchronous
        gossip on virtual time; its programs are `GossipProgram`s). ``[schedule] kind = "auto"`` takes it.
    finishes_by_itself: whether a run ends without a stopping rule (every node stops by the algorithm's own rule, or
        a single-machine solver returns): True, False, or ``f(params) -> bool``. A scenario without a ``[stop]`` rule
        is accepted only for such an algorithm, and a gossip run with faults needs no budget.
    conformance: how `svmsim check` and `svmsim.conformance` run it (`Conformance`).
    metrics: the metrics (columns of metrics.csv) its evaluations may report, under any of its parameters and with
        or without a test set, beside the runner's (`reported_metrics` adds them; e.g.
        ``("objective", "rel_gap", "gap_upper", "gap_lower", "train_accuracy")``), under their registered names
        (`svmsim.core.metrics`: ``rel_gap`` only for a certified relative gap). ``[stop] gap`` and ``[stop] below``
        are checked against them when the scenario is validated; None (not declared): only when the run reports its
        first evaluation.
    rate: the paper's rate of convergence in iterations, ``(metric, p)``: `metric` falls as O(1/k^p) (e.g.
        ``("rel_gap", 2.0)`` for Pragam's duality gap, ``("rel_gap", 1.0)`` for BMRM's). The run plot draws the
        reference C/k^p through the metric's first point, labelled as an order (the constant is not the paper's).
    exact_tags: message tags whose payload every receiver must read exactly as sent (`comm.compression`): the result
        of an all-reduce that every worker holds as one replicated copy (a host keeps one copy for all the workers it
        hosts), or indices, counts and flags sent as floats. A lossy codec never encodes them: ``[compression]``'s
        default codec leaves them raw, and a ``[compression.tags]`` table that names one with a lossy codec is
        refused. A name also covers the ``name:width`` tags of a collective that sends several widths.
    exact_tail: per message tag, the trailing scalars of every row that every receiver must read as sent while a
        codec may encode the rest (e.g. ``{"push": 1}``: a Push-Sum share's weight after its d sums). They travel
        raw, at 8 bytes each, beside the encoding.
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
    scheduler: str = "sync"
    finishes_by_itself: bool | Callable[[Any], bool] = False
    conformance: Conformance | None = None
    metrics: tuple[str, ...] | None = None
    rate: tuple[str, float] | None = None
    exact_tags: tuple[str, ...] = ()
    exact_tail: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        if self.metrics is not None:
            if isinstance(self.metrics, str) or not all(isinstance(m, str) for m in self.metrics):
                raise TypeError(f"AlgorithmInfo.metrics of {self.name!r} must be a tuple of metric names, got "
                                f"{self.metrics!r}")
            object.__setattr__(self, "metrics", tuple(self.metrics))

    def reported_metrics(self) -> frozenset[str] | None:
        """Every metric a run of this algorithm may report: its own `metrics` and the runner's (`RUN_METRICS`; for a
        distributed algorithm also `DISTRIBUTED_METRICS` and the metered quantities', for gossip `GOSSIP_METRICS`);
        None when the algorithm does not declare its own."""
        if self.metrics is None:
            return None
        out = frozenset(self.metrics) | RUN_METRICS
        if self.distributed:
            from ..comm.quantities import QUANTITIES

            out |= DISTRIBUTED_METRICS | frozenset(q.name for q in QUANTITIES)
        if self.scheduler == "gossip":
            out |= GOSSIP_METRICS
        return out

    def supports(self, kind: str) -> bool:
        """Whether the algorithm runs on topology `kind`."""
        return kind in self.topologies or ANY_TOPOLOGY[0] in self.topologies

    def finishes(self, params: Any) -> bool:
        """Whether a run with these parameters ends by itself (see `finishes_by_itself`)."""
        f = self.finishes_by_itself
        return bool(f(params)) if callable(f) else bool(f)

    @property
    def module(self) -> str:
        """The module that defines the algorithm (its build function's)."""
        return getattr(self.build, "__module__", None) or "?"


#: the algorithms registered so far (`load_all` imports every family and plugin)
ALGORITHMS: dict[str, AlgorithmInfo] = {}
_INDEX: dict[str, str] | None = None
#: entry points that failed to load in `load_all(strict=False)`: name -> the error
_PLUGIN_ERRORS: dict[str, str] = {}


def _invalid(info: Any) -> str | None:
    """What is wrong with a registration, or None."""
    if not isinstance(info, AlgorithmInfo):
        return f"register() takes an AlgorithmInfo, got {type(info).__name__}"
    if not isinstance(info.name, str) or not _NAME.fullmatch(info.name):
        return f"name = {info.name!r} is not an algorithm name; allowed: letters, digits, '_', '.', '+' and '-'"
    if not (isinstance(info.Params, type) and issubclass(info.Params, BaseModel)):
        return f"Params = {info.Params!r} is not a pydantic model class (a subclass of pydantic.BaseModel)"
    if not callable(info.build):
        return f"build = {info.build!r} is not callable; allowed: build(params, problem) -> Deployment"
    if info.scheduler not in SCHEDULERS:
        return f"scheduler = {info.scheduler!r} is not a scheduler; allowed: {', '.join(map(repr, SCHEDULERS))}"
    if info.scheduler == "gossip" and not info.distributed:
        return "scheduler = 'gossip' needs distributed = True (gossip runs peers)"
    if isinstance(info.topologies, str) or not all(isinstance(t, str) for t in info.topologies):
        return f"topologies = {info.topologies!r} is not a tuple of topology kinds"
    if info.conformance is not None and not isinstance(info.conformance, Conformance):
        return f"conformance = {info.conformance!r} is not a Conformance"
    if info.metrics is not None and (isinstance(info.metrics, str)
                                     or not all(isinstance(m, str) for m in info.metrics)):
        return f"metrics = {info.metrics!r} is not a tuple of metric names"
    if info.rate is not None and not (isinstance(info.rate, tuple) and len(info.rate) == 2
                                      and isinstance(info.rate[0], str) and isinstance(info.rate[1], (int, float))
                                      and info.rate[1] > 0):
        return f"rate = {info.rate!r} is not a rate; allowed: (metric name, p > 0), the metric falling as O(1/k^p)"
    if isinstance(info.exact_tags, str) or not all(isinstance(t, str) for t in info.exact_tags):
        return f"exact_tags = {info.exact_tags!r} is not a tuple of message tags"
    if not (isinstance(info.exact_tail, Mapping) and all(isinstance(t, str) and isinstance(c, int) and c >= 1
                                                         for t, c in info.exact_tail.items())):
        return f"exact_tail = {info.exact_tail!r} is not a mapping of message tags to counts >= 1"
    if not (isinstance(info.finishes_by_itself, bool) or callable(info.finishes_by_itself)):
        return f"finishes_by_itself = {info.finishes_by_itself!r}; allowed: True, False or f(params) -> bool"
    return None


def register(info: AlgorithmInfo) -> AlgorithmInfo:
    """Make `info` known to scenarios, the CLI and the conformance suite; returns it (usable as an expression).

    A name registered again by another module is refused (PluginError naming both), so a plugin cannot shadow a
    built-in algorithm by accident; registering again from the same module (a reload) replaces the entry."""
    problem = _invalid(info)
    if problem:
        where = getattr(getattr(info, "build", None), "__module__", None)
        raise PluginError(f"algorithm {getattr(info, 'name', '?')!r}" + (f" (module {where})" if where else "")
                          + f": {problem}")
    old = ALGORITHMS.get(info.name)
    if old is not None and old is not info and old.module != info.module:
        raise PluginError(f"algorithm name {info.name!r} is registered twice: by module {old.module} and by module "
                          f"{info.module}; allowed: a name of its own for each algorithm")
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


def _registered_by(loaded: Any) -> None:
    """Register what an entry point's value holds: a module registers when imported; an AlgorithmInfo, or an
    iterable of them, is registered here."""
    if isinstance(loaded, ModuleType):
        return
    items = [loaded] if isinstance(loaded, AlgorithmInfo) else loaded
    if not isinstance(items, Iterable) or isinstance(items, (str, bytes, Mapping)):
        raise PluginError(f"it gives {type(loaded).__name__}; allowed: a module that calls register(...), an "
                          "AlgorithmInfo, or a list of them")
    for info in items:
        register(info)


def _load_entry_point(name: str) -> None:
    ep = plugins.entry_points("algorithms")[name]
    if name in _index():
        raise PluginError(f"entry point {name!r} = {ep.value!r} (group svmsim.algorithms) names a built-in algorithm; "
                          "allowed: a name of its own")
    loaded = plugins.load_entry_point("algorithms", name)
    try:
        _registered_by(loaded)
    except PluginError as exc:
        raise PluginError(f"entry point {name!r} = {ep.value!r} (group svmsim.algorithms): {exc}") from None
    if name not in ALGORITHMS:
        mine = sorted(n for n, i in ALGORITHMS.items() if i.module.startswith(ep.value.split(":")[0]))
        raise PluginError(f"entry point {name!r} = {ep.value!r} (group svmsim.algorithms) registers no algorithm "
                          f"named {name!r}" + (f" (it registers {', '.join(mine)})" if mine else "")
                          + "; allowed: the entry point's name is the algorithm's, registered with "
                          "register(AlgorithmInfo(name=..., ...)) when the module is imported")


def load_module(module: str, base: str | Path | None = None, name: str | None = None,
                what: str = "algorithm.module") -> ModuleType:
    """Import a module that registers algorithms (``[algorithm] module``), looked for beside `base` first; with
    `name`, the module must register that algorithm. `what` names the key in messages."""
    before = set(ALGORITHMS)
    mod = plugins.import_module(module, base, what=what)
    if name is not None and name not in ALGORITHMS:
        mine = sorted(n for n, i in ALGORITHMS.items() if i.module == module or i.module.startswith(module + "."))
        new = sorted(set(ALGORITHMS) - before)
        listed = mine or new
        raise PluginError(f"{what} = {module!r} registers no algorithm named {name!r}"
                          + (f"; it registers {', '.join(listed)}" if listed else
                             "; it registers none: a plugin module calls svmsim.api.register(AlgorithmInfo(name=..., "
                             "...)) when imported"))
    return mod


def algorithm_names() -> list[str]:
    """Every algorithm a scenario may name, sorted: built in, registered, and installed plugins' entry points
    (nothing is imported)."""
    return sorted(set(_index()) | set(ALGORITHMS) | set(plugins.entry_points("algorithms")))


def get_algorithm(name: str) -> AlgorithmInfo:
    """The algorithm `name`, importing its family or plugin on first use; ScenarioError naming the known ones
    otherwise, PluginError when a plugin that should provide it cannot."""
    if isinstance(name, str) and name not in ALGORITHMS:
        if name in _index():
            importlib.import_module(_index()[name])
        elif name in plugins.entry_points("algorithms"):
            _load_entry_point(name)
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ScenarioError(f"algorithm.name = {name!r} is not a known algorithm; allowed: "
                            f"{', '.join(algorithm_names())} (or one of your own: name its module with "
                            "[algorithm] module = \"...\", or install it with an entry point in group "
                            "svmsim.algorithms)") from None


def load_all(strict: bool = True) -> dict[str, AlgorithmInfo]:
    """Import every family and every installed plugin (for listings); returns `ALGORITHMS`. With ``strict=False``
    a plugin that fails to load is left out and its error kept (`plugin_errors`)."""
    for module in sorted(set(_index().values())):
        importlib.import_module(module)
    for name in sorted(plugins.entry_points("algorithms")):
        if name in ALGORITHMS:
            continue
        try:
            _load_entry_point(name)
        except PluginError as exc:
            if strict:
                raise
            _PLUGIN_ERRORS[name] = str(exc)
    return ALGORITHMS


def plugin_errors() -> Mapping[str, str]:
    """Entry points that `load_all(strict=False)` could not load: name -> why."""
    return MappingProxyType(_PLUGIN_ERRORS)
