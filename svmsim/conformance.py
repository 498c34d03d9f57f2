"""The checks every registered algorithm passes (design principle 9), generated per algorithm as scikit-learn's
``check_estimator`` generates them per estimator.

``yield_checks(info)`` yields ``(name, check)`` pairs; ``check(info, problem)`` runs a small experiment and raises
AssertionError with a message that says what differed. `tests/test_conformance.py` runs every check of every
registered algorithm, one test id each (``test_conformance[saddle-dsvc-grouping]``).

Distributed algorithms (``info.distributed``; ``info.build(params, problem)`` gives a `Deployment`), run on the
in-process engine:

* ``grouping``: one group per role (the in-process engine's plan) and every role split into 2 and into 3 groups
  (``split_roles``) give the same run bit for bit: ledger, metrics rows, final metrics, model arrays, declared
  count, and the per-node observations where they can be compared (arrays with one row per node, concatenated in
  node order; integer counters, summed over a role's groups; a role played by one node: all of it).
* ``ledger``: the algorithm's declared count equals the meter: ``declared_scalars(observations)`` = the metered
  scalars for synchronous rounds; for gossip, declared + duplicated = delivered + dropped (the runner's rule),
  with and without a fault model that drops and duplicates messages.
* ``replay``: the same seed gives the same run twice (ledger, metrics rows less wall-clock times, model arrays,
  all bit for bit).
* ``seed``: another seed changes the run (ledger, rows or model) -- for randomised algorithms.
* ``compiled``: the compiled loop (``SyncScheduler(compiled=True)`` / ``GossipScheduler(compiled=None)``, over
  the programs' ``NodeProgram.kernel`` / ``GossipProgram.kernel``) gives the Python loop's run
  (``compiled=False``), bit for bit; for synchronous rounds also with every role in 3 groups. A deployment none
  of whose programs lends a compiled step fails this check unless the algorithm declares why it has none
  (``Conformance.skips``).
* ``restore``: synchronous rounds: every group's state, pickled mid-run and taken up by a fresh copy of its
  program as deployed (unpickled and initialised), continues the run bit for bit: what a Ray host actor that
  replaces a lost one does. A program must keep everything a step depends on in its state.
* ``travel``: every program pickles (as the Ray engines send it to a host) without a numba function by value: a
  function kept on the program instance would reach the host as a new dispatcher, compiled there afresh outside
  numba's disk cache (a program reads its numba functions from its module or class).
* ``params``: bad parameters are refused clearly: for every key of ``info.Params``, a value out of its range and
  a value of the wrong type, and an unknown key, raise pydantic's ValidationError from ``info.Params(...)`` and a
  ScenarioError from ``svmsim.config.load_scenario`` that names the key and says what is allowed.

Single-machine algorithms (``not info.distributed``; the build gives a `SingleMachineRun`): ``replay``, ``seed``
and ``params``. The scikit-learn style estimators that some families expose (``SaddleSVC``, ``GilbertSVC``,
``PegasosSVC``, ...) are held to scikit-learn's own conventions by ``sklearn.utils.estimator_checks.
check_estimator``; these checks do not repeat it.

Declaring an algorithm. The declarations live with the algorithm, in its ``AlgorithmInfo(conformance=
Conformance(...))`` (`svmsim.algorithms.registry.Conformance`): small valid parameters under which every check runs in
a few seconds (few clients or nodes, a short budget), variants for code paths of their own, overrides of
`DEFAULT_RUN` (the data, topology and budget of the small run) where the defaults do not fit, and the checks that do
not apply, each with the reason, which the report shows (as scikit-learn's tags do); a check that is not switched
off must pass. An algorithm without declarations fails every check, saying what to declare.

Running the checks: ``svmsim check NAME`` prints a table of every check of every variant; `check_algorithm` returns
the same results; a plugin's own pytest suite runs one test per check with `pytest_cases`::

    @pytest.mark.parametrize("case", conformance.pytest_cases("my-subgrad"))
    def test_conformance(case):
        case.run_in_pytest()
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from .algorithms.registry import AlgorithmInfo, Conformance, get_algorithm
from .deployment import observations_by_role

__all__ = ["DEFAULT_RUN", "declarations", "variants", "CheckSkipped", "Check", "yield_checks", "check_names",
           "variant_label", "small_params", "small_problem", "small_scenario", "run_small", "SmallRun",
           "DISTRIBUTED_CHECKS", "SINGLE_CHECKS", "check_grouping", "check_ledger", "check_replay", "check_seed",
           "check_compiled", "check_restore", "check_travel", "compiled_functions_by_value", "check_params", "Case",
           "cases", "pytest_cases", "CheckResult", "check_algorithm"]

# ----------------------------------------------------------------------------------------------------------------
# Declarations: each algorithm's own (AlgorithmInfo.conformance), over these defaults
# ----------------------------------------------------------------------------------------------------------------

#: defaults of the small runs (an algorithm's ``Conformance.run`` overrides them):
#: data: `svmsim.data.make_dataset` spec; topology: (kind, params) for gossip deployments (server-client ones
#: build their own star); iterations / observe_every: synchronous budget and observation step (single machine:
#: the iteration at which the run is stopped, and the evaluation step); max_time / eval_time: virtual-time budget
#: and observation step of gossip runs; seed: the problem's seed (the `seed` check uses seed + 1).
DEFAULT_RUN: dict[str, Any] = {"data": {"name": "iris"}, "topology": ("random_k_out", {"k": 2}), "iterations": 30,
                               "observe_every": 10, "max_time": 30.0, "eval_time": 5.0, "seed": 3}


def declarations(info: AlgorithmInfo) -> Conformance:
    """The algorithm's `Conformance` declarations; AssertionError saying what to declare if it has none."""
    if info.conformance is None:
        raise AssertionError(
            f"algorithm {info.name!r} declares no conformance parameters; every algorithm declares small valid "
            f"parameters for the checks with AlgorithmInfo(..., conformance=Conformance(params={{...}})) (a few "
            f"clients or nodes, a short budget), so that the conformance checks can run it")
    return info.conformance


def variants(info: AlgorithmInfo) -> list[dict[str, Any]]:
    """The algorithm's declared variants (parameter sets merged over its small parameters); [] without any."""
    return [dict(v) for v in info.conformance.variants] if info.conformance is not None else []


class CheckSkipped(Exception):
    """A check that does not apply to the algorithm; ``reason`` says why (the test turns it into a skip)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


Check = Callable[[AlgorithmInfo, Any], None]


def small_params(info: AlgorithmInfo) -> dict[str, Any]:
    """The algorithm's declared small parameters; AssertionError if it declares none."""
    return dict(declarations(info).params)


def run_settings(info: AlgorithmInfo) -> dict[str, Any]:
    """`DEFAULT_RUN` with the algorithm's declared overrides."""
    run = dict(info.conformance.run) if info.conformance is not None else {}
    return {**DEFAULT_RUN, **run}


def small_problem(info: AlgorithmInfo, seed: int | None = None):
    """The small `Problem` the checks build the algorithm for (data and topology from `run_settings`)."""
    from .data import make_dataset
    from .deployment import Problem

    s = run_settings(info)
    kind, kind_params = _small_topology(info)
    return Problem(make_dataset(dict(s["data"])), seed=s["seed"] if seed is None else int(seed),
                   topology_kind=kind, topology_params=dict(kind_params))


def _small_topology(info: AlgorithmInfo) -> tuple[str, dict]:
    """The small run's topology: the declared one (`run_settings`), or a star for a server-client algorithm that
    does not run on it."""
    kind, kind_params = run_settings(info)["topology"]
    if "star" in info.topologies and not info.supports(kind):
        return "star", {}
    return kind, dict(kind_params)


# ----------------------------------------------------------------------------------------------------------------
# One small run, recorded the way the runner records it
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class SmallRun:
    """What one small run produced: the stop reason, metrics rows at the observation points, the final metrics,
    the model, the declared count, the ledger (None for a single machine), the observations by role, the groups,
    whether the compiled loop ran, the fault summary (gossip), the metered scalars, whether the states were handed
    to fresh programs, and whether the compiled rounds' steps can be imported by name (their loop cached on disk)."""

    reason: str
    rows: list[dict]
    final: dict
    model: dict
    declared: int | None = None
    ledger: Any = None
    observations: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)
    compiled: bool = False
    faults: dict | None = None
    scalars: int = 0
    restored: bool = False
    loop_cacheable: bool | None = None


def _is_gossip(deployment) -> bool:
    from .program import GossipProgram

    return all(isinstance(spec.program, GossipProgram) for spec in deployment.roles)


def _build(info: AlgorithmInfo, problem, params: dict | None = None):
    return info.build(info.Params(**(small_params(info) if params is None else params)), problem)


def run_small(info: AlgorithmInfo, problem, *, params: dict | None = None, hosts: dict[str, int] | int | None = None,
              compiled: bool | None = False, faults=None, restore_at: int | None = None) -> SmallRun:
    """Build `info` with its small parameters for `problem` and run it to its small budget.

    params: the algorithm's parameters (default: its declared small parameters).
    hosts: None for the in-process engine's plan (one group per role), else groups per role (an int: for every
    role) as `split_roles` makes them. compiled: the scheduler's `compiled` argument. faults: a gossip fault model.
    restore_at: synchronous rounds only: before this round, every group is taken over by a fresh copy of its program
    (unpickled from its deploy-time pickle and initialised) with the pickled and unpickled state, as a Ray host
    actor that replaces a lost one is (`SmallRun.restored` says whether the run reached that round).
    """
    built = _build(info, problem, params)
    from .deployment import Deployment

    if not isinstance(built, Deployment):
        return _run_single(info, built)
    if _is_gossip(built):
        return _run_gossip(info, built, problem.seed, hosts, compiled, faults)
    if faults is not None:
        raise ValueError("run_small: fault models are only used with gossip deployments here")
    return _run_sync(info, built, problem.seed, hosts, compiled, restore_at)


def _engine(roles, hosts, restore_at: int | None = None):
    """An in-process engine whose plan is the default one (hosts None) or `split_roles` with `hosts` per role, which
    counts how often it lent the programs' compiled steps, and which (`restore_at`) hands every group's state over
    to a fresh program before that round."""
    import pickle

    from .engine.base import split_roles
    from .engine.inproc import InProcessEngine

    class _Engine(InProcessEngine):
        lent = 0
        restored = False
        cacheable = None

        def deploy(self, groups, seed):
            if restore_at is not None:          # what a replacement actor is deployed with: the programs as deployed
                self.deployed = [pickle.dumps(g.program) for g in groups], seed
            super().deploy(groups, seed)

        def step(self, round_, inboxes):
            if round_ == restore_at:
                self._restore()
            return super().step(round_, inboxes)

        def _restore(self):
            blobs, seed = self.deployed
            states = pickle.loads(pickle.dumps(self.states))
            fresh = [dataclasses.replace(g, program=pickle.loads(b)) for g, b in zip(self.groups, blobs)]
            for g in fresh:
                g.program.init(g.node_ids, g.node_data, seed)
            self.groups, self.states, self.restored = fresh, states, True

        def plan(self, roles_):
            if hosts is None:
                return super().plan(roles_)
            per_role = hosts if isinstance(hosts, dict) else {spec.role: int(hosts) for spec in roles_}
            return split_roles(roles_, per_role)

        def kernels(self):
            kernels = super().kernels()
            if kernels is not None:
                from .schedule.compiled_sync import loop_cacheable

                self.lent += 1
                self.cacheable = loop_cacheable(kernels)
            return kernels

    return _Engine()


def _run_sync(info, dep, seed, hosts, compiled, restore_at=None) -> SmallRun:
    from .comm.meter import Meter
    from .schedule.sync import SyncScheduler

    s = run_settings(info)
    engine = _engine(dep.roles, hosts, restore_at)
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = SyncScheduler(engine, groups, meter, dep.n_nodes, compiled=compiled)
    rows: list[dict] = []

    def on_iteration(iteration: int, round_: int) -> bool:
        m = dep.evaluate(observations_by_role(engine.observe(), groups))
        m.update(iteration=iteration, round=round_, messages=meter.messages, scalars=meter.scalars, bytes=meter.bytes)
        rows.append(m)
        return False

    reason = sched.run(max_iterations=s["iterations"], observe_every=s["observe_every"], on_iteration=on_iteration)
    obs = observations_by_role(engine.observe(), groups)
    final = dep.evaluate(obs)
    final.update(iteration=sched.iteration, round=sched.round)
    model = dep.model(obs) if dep.model else {}
    declared = dep.declared_scalars(obs) if dep.declared_scalars else None
    return SmallRun(reason, rows, final, model, declared, meter.ledger(), obs, groups, engine.lent > 0, None,
                    meter.scalars, engine.restored, engine.cacheable)


def _run_gossip(info, dep, seed, hosts, compiled, faults) -> SmallRun:
    from .comm.meter import Meter
    from .core.timing import Distribution, LatencyModel
    from .schedule.gossip import GossipScheduler

    s = run_settings(info)
    engine = _engine(dep.roles, hosts)
    groups = engine.plan(dep.roles)
    engine.deploy(groups, seed)
    meter = Meter(dep.n_nodes, dep.adjacency(), dep.node_names)
    sched = GossipScheduler(engine, groups, meter, dep.topology, seed=seed, compiled=compiled, faults=faults,
                            latency=LatencyModel(Distribution.lognormal(0.05, 0.5), edge_spread=0.3))
    rows: list[dict] = []

    def on_observe(p, observed) -> bool:
        m = dep.evaluate(observations_by_role(observed, groups))
        m.update(round=p.round, virtual_time=p.time, wakes=p.wakes, events=p.events, sent_messages=p.sent,
                 sent_scalars=p.sent_scalars, in_flight=p.in_flight, messages=p.messages, scalars=p.scalars,
                 bytes=p.bytes)
        rows.append(m)
        return False

    reason = sched.run(max_time=s["max_time"], eval_time=s["eval_time"], on_observe=on_observe, with_observations=True)
    out = sched.outcome()
    obs = observations_by_role(out.observations, groups)
    final = dep.evaluate(obs)
    p = out.progress
    final.update(round=p.round, virtual_time=p.time, wakes=p.wakes, events=p.events, sent_messages=p.sent)
    model = dep.model(obs) if dep.model else {}
    declared = dep.declared_scalars(obs) if dep.declared_scalars else None
    return SmallRun(reason, rows, final, model, declared, out.ledger, obs, groups, bool(out.compiled), out.faults,
                    int(out.ledger.totals["scalars"]))


def _run_single(info, solver) -> SmallRun:
    s = run_settings(info)
    last = s["iterations"]
    rows: list[dict] = []

    def on_check(metrics: dict) -> bool:
        rows.append({k: v for k, v in metrics.items() if k not in solver.measured})
        return int(metrics["iteration"]) >= last

    model = solver.fit(on_check, min(s["observe_every"], last))
    return SmallRun("solver finished", rows, rows[-1] if rows else {}, model)


# ----------------------------------------------------------------------------------------------------------------
# Comparing runs
# ----------------------------------------------------------------------------------------------------------------

def _is_wall_clock(key: str) -> bool:
    """Metrics that measure wall-clock time ("time", "wall_time", "wall_time_total", "fit_time", ...), which no
    replay repeats; virtual time is part of the run."""
    from .core.metrics import WALL_CLOCK_METRICS

    return key in WALL_CLOCK_METRICS or ((key == "time" or key.endswith("_time")) and key != "virtual_time")


def _strip_times(row: dict) -> dict:
    return {k: v for k, v in row.items() if not _is_wall_clock(k)}


def _difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where `a` and `b` differ (bit for bit for floats and arrays; NaN equals NaN), or None."""
    here = path or "value"
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{here}: keys differ ({sorted(map(str, set(a) ^ set(b)))} in one only)"
        for k in a:
            d = _difference(a[k], b[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{here}: lengths differ ({len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return f"{here}: shapes differ ({x.shape} vs {y.shape})"
        numeric = x.dtype.kind in "fcbiu" and y.dtype.kind in "fcbiu"
        floats = x.dtype.kind in "fc" and y.dtype.kind in "fc"
        same = np.array_equal(x, y, equal_nan=floats)
        if not same:
            equal = (x == y) | (np.isnan(x) & np.isnan(y)) if floats else x == y
            bad = np.flatnonzero(~np.asarray(equal).ravel()) if numeric else []
            where = f" first at flat index {int(bad[0])}: {x.ravel()[bad[0]]!r} vs {y.ravel()[bad[0]]!r}" \
                if len(bad) else ""
            return f"{here}: arrays differ{where}"
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    if _is_plain(a) and _is_plain(b):
        return None if a == b else f"{here}: {a!r} vs {b!r}"
    return None          # objects (e.g. a fitted estimator) are compared through their arrays elsewhere


def _is_plain(v) -> bool:
    return isinstance(v, (bool, int, float, str, type(None), np.generic))


def _model_arrays(model: dict) -> dict:
    """The model's arrays and numbers (what a run directory's model.npz holds)."""
    return {k: v for k, v in model.items() if isinstance(v, (np.ndarray, float, int, np.generic))}


def _ledger_difference(a, b) -> str | None:
    if a is None and b is None:
        return None
    if a.equals(b):
        return None
    for name in ("totals", "by_tag", "dropped_by_tag"):
        if getattr(a, name) != getattr(b, name):
            return f"ledger {name}: {getattr(a, name)} vs {getattr(b, name)}"
    for name in ("edges", "rounds", "iteration_rounds"):
        if not np.array_equal(getattr(a, name), getattr(b, name)):
            return f"ledger {name} differ (per-edge or per-round counts)"
    return "ledgers differ"


def _per_node(run: SmallRun) -> dict[str, dict]:
    """Per role, what can be compared across groupings: a role of one node -> its observation; otherwise arrays
    with one row per node (concatenated in node order), integer counters (summed over the role's groups), and
    other arrays concatenated in node order (e.g. one row per data point), compared where both runs give the
    same shape (a block per group, such as a copy of the model in every group, gives different shapes)."""
    out: dict[str, dict] = {}
    for role, observed in run.observations.items():
        groups = [g for g in run.groups if g.role == role]
        if sum(len(g.node_ids) for g in groups) == 1:
            out[role] = {"observation": observed[0]}
            continue
        if not all(isinstance(o, dict) for o in observed):
            continue
        sizes = [len(g.node_ids) for g in groups]
        merged: dict[str, Any] = {}
        for key in set.intersection(*(set(o) for o in observed)):
            values = [o[key] for o in observed]
            if all(isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == n for v, n in zip(values, sizes)):
                merged[f"{key} (per node)"] = np.concatenate(values)
                continue
            if all(_is_integer(v) for v in values) and len({np.shape(v) for v in values}) == 1:
                merged[f"{key} (role total)"] = sum(np.asarray(v, dtype=np.int64) for v in values)
            if all(isinstance(v, np.ndarray) and v.ndim >= 1 for v in values) \
                    and len({v.shape[1:] for v in values}) == 1:
                merged[f"{key} (rows in node order)"] = np.concatenate(values)
        out[role] = merged
    return out


def _is_integer(v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "iu"


def _per_node_difference(a: SmallRun, b: SmallRun) -> str | None:
    pa, pb = _per_node(a), _per_node(b)
    for role in sorted(set(pa) & set(pb)):
        for key in sorted(set(pa[role]) & set(pb[role])):
            if not key.endswith("(per node)") and np.shape(pa[role][key]) != np.shape(pb[role][key]):
                continue             # one entry per group, or one block per group: not a per-node quantity
            d = _difference(pa[role][key], pb[role][key], f"observations[{role!r}] {key}")
            if d:
                return d
    return None


def _run_difference(a: SmallRun, b: SmallRun, per_node: bool = True) -> str | None:
    """The first way two runs differ: ledger, metrics rows (less wall-clock times), final metrics, model arrays,
    declared count, per-node observations, stop reason."""
    d = _ledger_difference(a.ledger, b.ledger)
    if d:
        return d
    if len(a.rows) != len(b.rows):
        return f"number of metrics rows: {len(a.rows)} vs {len(b.rows)}"
    for i, (x, y) in enumerate(zip(a.rows, b.rows)):
        d = _difference(_strip_times(x), _strip_times(y), f"metrics row {i}")
        if d:
            return d
    d = (_difference(_strip_times(a.final), _strip_times(b.final), "final metrics")
         or _difference(_model_arrays(a.model), _model_arrays(b.model), "model")
         or _difference(a.declared, b.declared, "declared scalars"))
    if d:
        return d
    if per_node:
        d = _per_node_difference(a, b)
        if d:
            return d
    if a.reason != b.reason:
        return f"stop reason: {a.reason!r} vs {b.reason!r}"
    return None


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------

def _deployment_kind(info, problem, params=None) -> str:
    from .deployment import Deployment

    built = _build(info, problem, params)
    if not isinstance(built, Deployment):
        return "single"
    return "gossip" if _is_gossip(built) else "sync"


def check_grouping(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """Any grouping of nodes onto hosts gives the same run: the engine's plan vs every role in 2 and in 3 groups."""
    base = run_small(info, problem, params=params)
    for n_groups in (2, 3):
        split = run_small(info, problem, params=params, hosts=n_groups)
        assert len(split.groups) > len(base.groups), (
            f"{info.name}: {n_groups} groups per role made no more groups than the engine's plan "
            f"({len(base.groups)}); the small run needs a role of several nodes")
        d = _run_difference(base, split)
        assert d is None, (
            f"{info.name}: splitting every role into {n_groups} groups (split_roles, {len(split.groups)} groups) "
            f"changed the run against one group per role ({len(base.groups)} groups): {d}. A program must give the "
            f"same per-node results for any split of its role (per-node quantities per node, reductions over "
            f"senders in (src, dst) order)")


def check_ledger(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """The declared count equals the meter (gossip: declared + duplicated = delivered + dropped)."""
    from .faults import declared_matches

    run = run_small(info, problem, params=params)
    assert run.declared is not None, (
        f"{info.name}: its Deployment has no declared_scalars; an algorithm states the scalars it must have sent "
        f"(or declares why it cannot: Conformance(skips={{'ledger': '...'}}))")
    assert run.scalars > 0, f"{info.name}: the small run sent no message ({run.reason}); the check is vacuous"
    if run.faults is None:
        assert run.declared == run.scalars, (
            f"{info.name}: declared_scalars(observations) = {run.declared} but the meter counted {run.scalars} "
            f"scalars (by tag: {run.ledger.by_tag})")
        return
    assert declared_matches(run.declared, run.scalars, run.faults), (
        f"{info.name}: declared_scalars(observations) = {run.declared} but the meter counted {run.scalars} scalars "
        f"(fault-free gossip: they must be equal)")
    from .faults import FaultModel

    faulty = run_small(info, problem, params=params, faults=FaultModel(drop=0.2, duplicate=0.1))
    f = faulty.faults
    duplicated = sum(rec["scalars"] for rec in f["duplicated"].values())
    dropped = f["dropped_total"]["scalars"]
    assert duplicated > 0 and dropped > 0, (
        f"{info.name}: the fault model dropped {dropped} and duplicated {duplicated} scalars; the small run is too "
        f"short to test the rule")
    assert declared_matches(faulty.declared, faulty.scalars, f), (
        f"{info.name}: under drops and duplicates, declared {faulty.declared} + duplicated {duplicated} != "
        f"delivered {faulty.scalars} + dropped {dropped}")


def check_replay(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """The same seed gives the same run twice, bit for bit (less wall-clock times)."""
    a = run_small(info, problem, params=params)
    b = run_small(info, problem, params=params)
    d = _run_difference(a, b)
    assert d is None, f"{info.name}: two runs with seed {problem.seed} differ: {d}"
    assert a.rows or a.model, f"{info.name}: the small run recorded nothing to compare ({a.reason})"


def check_seed(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """Another seed changes the run (a randomised algorithm that ignores its seed would replay one stream)."""
    a = run_small(info, problem, params=params)
    b = run_small(info, problem.replace(seed=problem.seed + 1), params=params)
    assert _run_difference(a, b, per_node=False) is not None, (
        f"{info.name}: seeds {problem.seed} and {problem.seed + 1} gave the same run (ledger, metrics rows and "
        f"model); if the algorithm is deterministic, declare it: Conformance(skips={{'seed': 'why'}})")


def compiled_functions_by_value(program) -> list[str]:
    """The numba functions that pickling `program` carries by value (module.qualname each): what a Ray host gets
    as a new dispatcher, compiled afresh there without numba's disk cache. A program reads its numba functions from
    its module or its class; one kept on the instance travels this way."""
    import io
    import pickle

    from numba.core.dispatcher import Dispatcher

    found: list[str] = []

    class _Pickler(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, Dispatcher):
                found.append(f"{obj.py_func.__module__}.{obj.py_func.__qualname__}")
            return NotImplemented

    _Pickler(io.BytesIO()).dump(program)
    return sorted(set(found))


def check_travel(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """Each program travels to a Ray host without numba functions by value (the host loads them from numba's disk
    cache instead of compiling them afresh)."""
    for spec in _build(info, problem, params).roles:
        carried = compiled_functions_by_value(spec.program)
        assert not carried, (
            f"{info.name}: its {spec.role!r} program pickles the numba function(s) {', '.join(carried)} by value, "
            "so every Ray host compiles them afresh, outside numba's disk cache (half a minute for a large step); "
            "allowed: numba functions read from the module or the class (a property that returns one), not kept "
            "on the instance")


def check_compiled(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """The compiled loop gives the Python loop's run, bit for bit."""
    kind = _deployment_kind(info, problem, params)
    python = run_small(info, problem, params=params, compiled=False)
    compiled = run_small(info, problem, params=params, compiled=True if kind == "sync" else None)
    assert compiled.compiled, (
        f"{info.name}: no program of its deployment lent a compiled step ({kind} scheduler), so the compiled loop "
        f"never ran; offer NodeProgram.kernel / GossipProgram.kernel, or declare in "
        f"Conformance(skips={{'compiled': 'why there is none'}})")
    assert not python.compiled, f"{info.name}: compiled=False still ran the compiled loop"
    d = _run_difference(python, compiled)
    assert d is None, f"{info.name}: the compiled loop and the Python loop differ: {d}"
    if kind == "sync":
        assert compiled.loop_cacheable, (
            f"{info.name}: a compiled step of its programs cannot be imported by its module and name, so the rounds "
            "that call it are compiled afresh in every process (tens of seconds) instead of loaded from the disk "
            "cache (schedule.loop_cache); allowed: steps that are module-level numba functions")
        # the compiled synchronous loop hosts any number of groups
        split = run_small(info, problem, params=params, hosts=3, compiled=True)
        d = _run_difference(python, split)
        assert split.compiled and d is None, (
            f"{info.name}: the compiled loop over 3 groups per role differs from the Python loop over one group "
            f"per role: {d or 'the compiled loop did not run'}")


def _kinds(annotation) -> set[str]:
    """What a field's annotation accepts: "number", "bool", "str", "literal" (None left out), unions flattened."""
    import typing

    if annotation is type(None):
        return set()
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"literal"}
    if origin is not None and typing.get_args(annotation):
        return set().union(*(_kinds(a) for a in typing.get_args(annotation)))
    return {bool: {"bool"}, int: {"number"}, float: {"number"}, str: {"str"}}.get(annotation, {"other"})


def _bad_values(annotation, metadata) -> list[tuple[Any, str]]:
    """(value, what is wrong) pairs that a field of this annotation and these constraints must refuse: a value just
    outside each bound, and a string that is no allowed choice (for a field that takes no free string)."""
    bad: list[tuple[Any, str]] = []
    for c in metadata:
        for attr, outside in (("ge", lambda v: v - 1), ("gt", lambda v: v), ("le", lambda v: v + 1),
                              ("lt", lambda v: v)):
            bound = getattr(c, attr, None)
            if bound is not None:
                bad.append((outside(bound), f"out of range ({attr} {bound})"))
    kinds = _kinds(annotation)
    if kinds and not kinds & {"str", "other"}:
        bad.append(("no-such-value", "wrong type or not an allowed choice"))
    return bad


def _minimal_scenario(info: AlgorithmInfo, params: dict) -> dict:
    s = run_settings(info)
    scenario = {"name": f"conformance-{info.name}", "seed": s["seed"], "data": dict(s["data"]),
                "algorithm": {"name": info.name, **params}, "stop": {"max_iterations": s["iterations"]},
                "output": {"progress": False, "plots": False}}
    if "star" not in info.topologies:
        kind, kind_params = s["topology"]
        scenario["topology"] = {"kind": kind, **kind_params}
    return scenario


def small_scenario(info: AlgorithmInfo, params: dict | None = None) -> dict:
    """The small run as a scenario (a dict in the TOML's shape) that `svmsim.run` runs: the small problem's data,
    topology and seed (`small_problem`), the declared budget (``iterations``; rounds of virtual time for gossip),
    evaluated every ``observe_every`` iterations, no progress bar, no plots; `params` default to the declared small
    parameters."""
    scenario = _minimal_scenario(info, small_params(info) if params is None else dict(params))
    kind, kind_params = _small_topology(info)
    scenario["topology"] = {"kind": kind, **kind_params}
    scenario["output"]["eval_every"] = int(run_settings(info)["observe_every"])
    return scenario


def check_restore(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """A program's state is all it keeps: pickled mid-run and taken up by a fresh copy of the deployed program, it
    continues the run bit for bit (what a Ray host actor that replaces a lost one does, `engine.ray_engine`)."""
    if _deployment_kind(info, problem, params) != "sync":
        raise CheckSkipped("gossip hosts checkpoint their whole event loop with the programs' states "
                           "(engine.ray_gossip, tests/test_windows.py); this check is for synchronous rounds")
    base = run_small(info, problem, params=params)
    at = max(1, int(base.final["round"]) // 2)
    restored = run_small(info, problem, params=params, restore_at=at)
    assert restored.restored, f"{info.name}: the small run ended before round {at}; the check is vacuous"
    d = _run_difference(base, restored)
    assert d is None, (
        f"{info.name}: every group's state pickled before round {at} and taken up by a fresh copy of its program "
        f"changed the run: {d}. A node program must keep everything a step depends on in its state (not on the "
        f"program object), so that a Ray host that replaces a lost one continues the run exactly")


def check_params(info: AlgorithmInfo, problem, params: dict | None = None) -> None:
    """Bad parameters are refused: ValidationError from Params, a ScenarioError naming the key from a scenario."""
    from pydantic import ValidationError

    from .config import load_scenario
    from .errors import ScenarioError

    good = small_params(info) if params is None else dict(params)
    info.Params(**good)
    load_scenario(_minimal_scenario(info, good))        # the small parameters make a valid scenario
    cases: list[tuple[str, Any, str]] = [("no_such_parameter", 1, "unknown key")]
    for key, f in info.Params.model_fields.items():
        cases += [(key, value, why) for value, why in _bad_values(f.annotation, f.metadata)]
    assert len(cases) > 1 or not info.Params.model_fields, f"{info.name}: no bad value could be derived"
    for key, value, why in cases:
        params = {**good, key: value}
        try:
            info.Params(**params)
        except ValidationError:
            pass
        else:
            raise AssertionError(f"{info.name}: {info.Params.__name__}({key}={value!r}) was accepted ({why})")
        try:
            load_scenario(_minimal_scenario(info, params))
        except ScenarioError as exc:
            msg = str(exc)
            assert key in msg, f"{info.name}: the error for {key} = {value!r} ({why}) does not name the key: {msg}"
            assert "allowed" in msg or "expected" in msg, (
                f"{info.name}: the error for {key} = {value!r} ({why}) does not say what is allowed: {msg}")
        else:
            raise AssertionError(f"{info.name}: a scenario with [algorithm] {key} = {value!r} was accepted ({why})")


#: (name, check) of distributed algorithms, in the order they run
DISTRIBUTED_CHECKS: tuple[tuple[str, Check], ...] = (
    ("grouping", check_grouping), ("ledger", check_ledger), ("replay", check_replay), ("seed", check_seed),
    ("compiled", check_compiled), ("restore", check_restore), ("travel", check_travel), ("params", check_params))
#: (name, check) of single-machine algorithms
SINGLE_CHECKS: tuple[tuple[str, Check], ...] = (
    ("replay", check_replay), ("seed", check_seed), ("params", check_params))


def _skipped(reason: str) -> Check:
    def check(info, problem):
        raise CheckSkipped(reason)

    return check


def variant_label(variant: dict[str, Any]) -> str:
    """``alpha=0.85,projection=newton``: a variant's name in test ids."""
    return ",".join(f"{k}={v}" for k, v in variant.items())


def yield_checks(info: AlgorithmInfo, variant: dict[str, Any] | None = None) -> Iterator[tuple[str, Check]]:
    """The checks of `info`, as (name, check); a check switched off in its ``Conformance.skips`` raises
    `CheckSkipped(reason)`. With `variant` (one of `variants(info)`), the checks run with those parameters over its
    small parameters."""
    checks = DISTRIBUTED_CHECKS if info.distributed else SINGLE_CHECKS
    skips = dict(info.conformance.skips) if info.conformance is not None else {}
    unknown = set(skips) - {name for name, _ in checks}
    if unknown:
        raise AssertionError(f"{info.name}: Conformance.skips names checks it does not have: {sorted(unknown)}; "
                             f"allowed: {', '.join(name for name, _ in checks)}")
    for name, check in checks:
        if name in skips:
            yield name, _skipped(skips[name])
        elif variant is None:
            yield name, check
        else:
            yield name, _with_variant(check, variant)


def _with_variant(check, variant: dict[str, Any]) -> Check:
    def run(info, problem):
        return check(info, problem, params={**small_params(info), **variant})

    return run


def check_names(info: AlgorithmInfo) -> list[str]:
    """The names of the checks `yield_checks(info)` yields."""
    return [name for name, _ in (DISTRIBUTED_CHECKS if info.distributed else SINGLE_CHECKS)]


# ----------------------------------------------------------------------------------------------------------------
# Running the checks: one case per algorithm, variant and check (svmsim check, a plugin's pytest suite)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One check of one algorithm (and variant): what a test id or a row of `svmsim check` stands for."""

    algorithm: str
    check: str
    variant: tuple[tuple[str, Any], ...] | None = None

    @property
    def variant_params(self) -> dict[str, Any] | None:
        return None if self.variant is None else dict(self.variant)

    @property
    def label(self) -> str:
        """``name`` or ``name[key=value,...]``."""
        return self.algorithm if self.variant is None else f"{self.algorithm}[{variant_label(dict(self.variant))}]"

    @property
    def id(self) -> str:
        return f"{self.label}-{self.check}"

    def run(self) -> None:
        """Run the check: returns if it passes; AssertionError says what differed; CheckSkipped says why it does not
        apply."""
        info = get_algorithm(self.algorithm)
        check = dict(yield_checks(info, self.variant_params))[self.check]
        check(info, small_problem(info))

    def run_in_pytest(self) -> None:
        """`run`, with a check that does not apply reported as a pytest skip with its reason."""
        import pytest

        try:
            self.run()
        except CheckSkipped as skip:
            pytest.skip(f"{self.label} {self.check}: {skip.reason}")


def cases(*names: str, with_variants: bool = True, checks: tuple[str, ...] | None = None) -> list[Case]:
    """Every check of every named algorithm (all registered ones when none is named), and of each declared variant.
    `checks` keeps only those check names."""
    from .algorithms.registry import algorithm_names

    out = []
    for name in names or tuple(algorithm_names()):
        info = get_algorithm(name)
        if checks is not None:
            unknown = sorted(set(checks) - set(check_names(info)))
            if unknown:
                raise ValueError(f"{name} has no check {', '.join(unknown)}; allowed: {', '.join(check_names(info))}")
        for variant in [None] + (variants(info) if with_variants else []):
            frozen = None if variant is None else tuple(variant.items())
            out += [Case(name, check, frozen) for check in check_names(info) if checks is None or check in checks]
    return out


def pytest_cases(*names: str, with_variants: bool = True) -> list:
    """`cases` as ``pytest.param(case, id=case.id)``, for ``@pytest.mark.parametrize("case", ...)`` in a plugin's
    own test suite; run each with ``case.run_in_pytest()``."""
    import pytest

    return [pytest.param(c, id=c.id) for c in cases(*names, with_variants=with_variants)]


@dataclass
class CheckResult:
    """What running a `Case` gave: ``status`` is "passed", "failed" (message: what differed) or "skipped" (message:
    why the check does not apply); ``seconds`` the time it took."""

    case: Case
    status: str
    seconds: float
    message: str = ""


def check_algorithm(*names: str, with_variants: bool = True, checks: tuple[str, ...] | None = None,
                    on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Run every check of the named algorithms (see `cases`); a failing check is recorded, not raised, so the
    others run. `on_result` is called after each (e.g. to print a row)."""
    import time

    results = []
    for case in cases(*names, with_variants=with_variants, checks=checks):
        started = time.perf_counter()
        try:
            case.run()
        except CheckSkipped as skip:
            status, message = "skipped", skip.reason
        except AssertionError as exc:
            status, message = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - the algorithm's own error is a failed check, reported as such
            status, message = "failed", f"{type(exc).__name__}: {exc}"
        else:
            status, message = "passed", ""
        result = CheckResult(case, status, time.perf_counter() - started, message)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
