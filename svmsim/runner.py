"""Run a scenario: data -> partition -> topology -> algorithm -> engine -> scheduler -> meter -> run directory.

`svmsim.run(...)` is the Python entry point; `svmsim run FILE` calls it. A run writes its directory atomically:
everything goes into a hidden ``.<name>.incomplete`` sibling that is renamed only when the run has finished, and
removed if the run fails, so a directory that looks finished is finished.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from . import rundir
from .core import jsonio
from .core.compile_clock import Stopwatch
from .comm.meter import Ledger, Meter
from .comm.quantities import by_kind, edge_weighted_total, quantity
from .core import deadline
from .core.metrics import is_registered, metric, stop_reason, with_distance
from .data import make_dataset
from .deployment import Deployment, Problem, SingleMachineRun, observations_by_role
from .engine.base import Engine
from .errors import EngineFailure, PluginError
from .fault_plan import FaultPlan
from .faults import declared_matches
from .config import Scenario, load_scenario
from .schedule.sync import StopReason, SyncScheduler
from .topology import from_networkx

__all__ = ["run", "RunResult", "read_run", "recorded", "write_run"]

METRIC_COLUMNS = ("iteration", "round", "messages", "scalars", "bytes", "comm_units", "wall_time", "wall_time_total",
                  "compile_time", "objective", "hull_distance", "hull_lower", "rel_gap", "duality_gap",
                  "train_accuracy", "test_accuracy")


@dataclass
class RunResult:
    """What a run produced. `metrics` is one dict per evaluation point (columns in METRIC_COLUMNS and more)."""

    scenario: Scenario
    model: dict
    metrics: list[dict]
    ledger: Ledger | None
    stop_reason: str
    run_dir: Path | None
    summary: dict = field(default_factory=dict)

    @property
    def final(self) -> dict:
        return self.metrics[-1] if self.metrics else {}

    def column(self, name: str) -> np.ndarray:
        return np.array([m.get(name, np.nan) for m in self.metrics], dtype=float)


def _problem(scenario: Scenario, topology: nx.Graph | None) -> Problem:
    kwargs = scenario.dataset_kwargs()
    part = scenario.partition
    topo = scenario.topology
    graph = from_networkx(topology) if topology is not None else None
    return Problem(dataset=lambda: make_dataset(kwargs), seed=scenario.seed, partition_scheme=part.scheme,
                   partition_params=part.params(), topology=graph, topology_kind=topo.kind,
                   topology_params=dict(topo.params))


class _Progress:
    """A tqdm bar over the stopping rule that is furthest along: the iteration budget, the time budget, or the
    certified gap's way from its first value to the target on a log scale. With none of them (a run that stops on
    a scalar budget, say) it counts iterations. The postfix shows the iteration, gap, scalars and test accuracy."""

    STEPS = 1000

    def __init__(self, enabled: bool, total: int | None, desc: str, gap: float | None = None,
                 seconds: float | None = None):
        self.bar = None
        self.total, self.gap, self.seconds = total, gap, seconds
        self.first_gap: float | None = None
        self.started = time.perf_counter()
        self.fraction_known = bool(total or gap or seconds)
        if enabled:
            from tqdm.auto import tqdm

            if self.fraction_known:
                self.bar = tqdm(total=self.STEPS, desc=desc, dynamic_ncols=True, leave=True,
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
            else:
                self.bar = tqdm(total=None, desc=desc, unit="it", dynamic_ncols=True, leave=True)
        self.last = 0

    def fraction(self, iteration: int, metrics: dict) -> float:
        """How far the run is towards its first stop, in [0, 1]."""
        parts = [0.0]
        if self.total:
            parts.append(iteration / self.total)
        if self.seconds:
            parts.append((time.perf_counter() - self.started) / self.seconds)
        gap = metrics.get("rel_gap")
        if self.gap and isinstance(gap, (int, float)) and math.isfinite(gap) and gap > 0:
            if self.first_gap is None:
                self.first_gap = max(gap, self.gap * 10)
            span = math.log(self.first_gap / self.gap)
            parts.append(math.log(self.first_gap / max(gap, self.gap)) / span if span > 0 else 1.0)
        elif self.gap and gap == 0:
            parts.append(1.0)
        return min(1.0, max(parts))

    def update(self, iteration: int, metrics: dict) -> None:
        if self.bar is None:
            return
        if self.fraction_known:
            step = round(self.STEPS * self.fraction(iteration, metrics))
            self.bar.update(max(0, step - self.last))
            self.last = max(self.last, step)
        else:
            self.bar.update(max(0, iteration - self.last))
            self.last = iteration
        post = {"it": iteration}
        if "rel_gap" in metrics:
            post["gap"] = f"{metrics['rel_gap']:.2e}"
        if "scalars" in metrics:
            post["scalars"] = f"{metrics['scalars']:.3g}"
        if "test_accuracy" in metrics:
            post["test"] = f"{metrics['test_accuracy']:.4f}"
        self.bar.set_postfix(post, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _stop_by_metrics(scenario: Scenario, metrics: dict, started: float, previous: dict | None,
                     uncertified: str | None = None) -> str | None:
    """The metric-based stopping rules: certified gap, objective change between evaluation points, time.
    `uncertified`: why the run's certificates do not hold (the stop reason then says so)."""
    stop = scenario.stop
    if stop.gap is not None and "rel_gap" not in metrics:
        from .errors import ScenarioError

        raise ScenarioError(f"[stop] gap = {stop.gap:g} stops on rel_gap (the certified relative gap), which "
                            f"algorithm {scenario.algorithm.name!r} does not report; allowed: [stop] below = "
                            "{metric = threshold} on a metric it reports: "
                            f"{', '.join(sorted(k for k, v in metrics.items() if isinstance(v, (int, float))))}")
    if stop.gap is not None and metrics["rel_gap"] <= stop.gap:
        return stop_reason("rel_gap", stop.gap, uncertified)
    if stop.objective_change is not None and previous is not None:
        change = abs(metrics.get("objective", math.nan) - previous.get("objective", math.nan))
        if change < stop.objective_change:           # NaN (no objective) never stops
            return "objective changed by < %g" % stop.objective_change
    if stop.below:
        missing = [k for k in stop.below if k not in metrics]
        if missing:
            from .errors import ScenarioError

            raise ScenarioError(f"[stop] below names metric {missing[0]!r}, which algorithm "
                                f"{scenario.algorithm.name!r} does not report; allowed: "
                                f"{', '.join(sorted(k for k, v in metrics.items() if isinstance(v, (int, float))))}")
        for name, threshold in stop.below.items():
            if metrics[name] <= threshold:
                return stop_reason(name, threshold, uncertified)
    if stop.max_seconds is not None and (deadline.expired() if deadline.is_open()
                                         else time.perf_counter() - started >= stop.max_seconds):
        return "time budget"                 # in a run, set-up counted (`core.deadline`)
    return None


def _diverged(step: int, m: dict, previous: dict | None, uncertified: str | None) -> str | None:
    """A stop reason when the objective was finite at the last evaluation point and is not now (the iterates
    overflowed: nothing later can be trusted), else None."""
    value, before = m.get("objective"), (previous or {}).get("objective")
    if not (isinstance(value, float) and isinstance(before, (int, float)) and math.isfinite(before)) \
            or math.isfinite(value):
        return None
    why = f"diverged: the objective became {value} at iteration {step} (it was {before:.6g})"
    if uncertified:
        why += ("; its messages were compressed, and a lossy codec (with error feedback above all, which on a "
                "gossip state can grow without bound) changes what the algorithm guarantees")
    return why


class _Recorder:
    """The one place that records a run's metrics rows and decides the metric-based stops, for every scheduler
    and engine: `add` appends a row (shown on the progress bar at `step`) and returns True to stop, keeping the
    reason; `reason(scheduler_reason)` is the reason the run stopped. `times` gives a row's wall-clock columns:
    ``wall_time`` (numba's compilation since the recorder started left out), ``wall_time_total`` and
    ``compile_time``."""

    def __init__(self, scenario: Scenario, progress: bool, total: int | None, max_iterations: int | None = None):
        self.scenario = scenario
        self.rows: list[dict] = []
        self.clock = Stopwatch()
        self.started = self.clock.started
        self.bar = _Progress(progress, total, scenario.name, gap=scenario.stop.gap, seconds=scenario.stop.max_seconds)
        self.max_iterations = max_iterations
        self.why: str | None = None
        self.uncertified: str | None = None     # why the certificates do not hold (compressed messages)

    def times(self) -> dict[str, float]:
        return self.clock.times()

    def add(self, step: int, m: dict) -> bool:
        previous = self.rows[-1] if self.rows else None
        diagnosis = m.pop("diagnosis", None)    # an evaluation that says the run cannot reach any target
        self.rows.append(m)
        self.bar.update(step, m)
        why = diagnosis or _diverged(step, m, previous, self.uncertified) \
            or _stop_by_metrics(self.scenario, m, self.started, previous, self.uncertified)
        if why is None and self.max_iterations is not None and m["iteration"] >= self.max_iterations:
            why = StopReason.ITERATIONS
        if why and self.why is None:
            self.why = why
        return bool(why)

    def reason(self, scheduler_reason: str, observer_reason: str = StopReason.OBSERVER) -> str:
        """The scheduler's reason, or the metric rule's when the observer stopped the run."""
        return self.why if scheduler_reason == observer_reason and self.why else scheduler_reason

    def close(self) -> None:
        self.bar.close()


def _run_distributed(scenario: Scenario, deployment: Deployment, engine: Engine, progress: bool, live):
    stop = scenario.stop
    meter = Meter(deployment.n_nodes, deployment.adjacency(), deployment.node_names)
    groups = engine.plan(deployment.roles)
    if scenario.network is not None and scenario.network.compute == "measured":
        groups = _one_group_per_node(scenario, deployment, engine)
    engine.deploy(groups, scenario.seed)
    faults = _sync_faults(scenario, deployment.n_nodes)
    compressor = _compressor(scenario, deployment.n_nodes)
    clock = None
    if scenario.network is not None:
        from .comm.edges import edge_index
        from .schedule.cluster_time import ClusterClock

        clock = ClusterClock(scenario.network.model(scenario.seed), deployment.n_nodes,
                             *edge_index(deployment.adjacency(), deployment.n_nodes))
    linear = _linear_quantities(scenario, clock)
    scheduler = SyncScheduler(engine, groups, meter, deployment.n_nodes, faults=faults,
                              compiled=None if scenario.schedule.compiled else False, clock=clock,
                              compression=compressor)
    unit = deployment.comm_unit[1] if deployment.comm_unit else 1.0
    rec = _Recorder(scenario, progress, stop.max_iterations)

    def observations():
        return observations_by_role(engine.observe(), groups)

    def on_iteration(iteration: int, round_: int) -> bool:
        m = deployment.evaluate(observations())
        m.update(iteration=iteration, round=round_, messages=meter.messages, scalars=meter.scalars,
                 bytes=meter.bytes, comm_units=meter.scalars / unit, **rec.times())
        m.update(meter.node_quantity_totals())            # e.g. kernel_evaluations: work metered per node
        if clock is not None:
            m["modelled_time"] = clock.now
        if linear:
            m.update(_linear_values(meter, linear))
        if live is not None:
            live.update(meter, m, deployment)
        if compressor is not None and compressor.lossy_used:
            rec.uncertified = UNCERTIFIED
        return rec.add(iteration, m)

    failed = lost = None
    try:
        try:
            reason = scheduler.run(max_iterations=stop.max_iterations, max_rounds=stop.max_rounds,
                                   max_scalars=stop.max_scalars, observe_every=scenario.output.eval_every,
                                   on_iteration=on_iteration)
            if reason in (StopReason.COMMUNICATION, StopReason.ROUNDS) and scheduler.iteration > 0:
                # a budget can run out mid-iteration; finish that iteration so that the final state (and the
                # certificate computed from it) is a whole iterate, as every evaluation point is (bounded: ten
                # times the rounds an iteration has taken on average, so that a program that stops reporting
                # iterations cannot hold the run; one that never reported any is not waited for)
                per_iteration = -(-scheduler.round // scheduler.iteration)
                scheduler.run(max_iterations=scheduler.iteration + 1, observe_every=0,
                              max_rounds=scheduler.round + 10 * per_iteration + 100)
        except EngineFailure as exc:      # the hosts, not the algorithm: keep what was measured, then say so
            lost = exc
            failed = reason = f"{exc} (in round {scheduler.round}, after iteration {scheduler.iteration})"
        except Exception as exc:          # noqa: BLE001 - under faults or lossy codecs, a broken algorithm is a result
            lossy = compressor is not None and compressor.lossy_used
            if faults is None and not lossy:
                raise
            under = "under the fault model" if faults is not None else "on compressed messages"
            assumes = "reliable delivery" if faults is not None else "exact messages"
            if faults is not None and lossy:
                under, assumes = "under the fault model, on compressed messages", "reliable, exact messages"
            failed = reason = (f"algorithm {scenario.algorithm.name!r} failed {under} in round {scheduler.round} "
                               f"({type(exc).__name__}: {exc}); it assumes {assumes}")
        if failed is None:
            obs = observations()
            if not rec.rows or rec.rows[-1]["iteration"] != scheduler.iteration:
                on_iteration(scheduler.iteration, scheduler.round)
            model = deployment.model(obs) if deployment.model else {}
            declared = deployment.declared_scalars(obs) if deployment.declared_scalars else None
        else:                             # the state is not trustworthy: keep the rows measured before
            model, declared = {}, None
    finally:
        rec.close()
    reason = rec.reason(reason)
    flight_messages, flight_scalars = scheduler.in_flight()
    extra = {"rounds": scheduler.round, "iterations": scheduler.iteration, "declared_scalars": declared,
             "ledger_matches_declared": None if declared is None else bool(declared == meter.scalars),
             "in_flight_at_end": {"messages": flight_messages, "scalars": flight_scalars}}
    if scheduler.iteration == 0 and failed is None:
        if meter.messages == 0:
            starters = sorted({g.role for g in groups if g.program.initiator})
            extra["warnings"] = [f"round 0 stepped the initiators ({', '.join(starters)}), but they sent no "
                                 "message, reported no iteration and asked for no wake, so nothing happened after "
                                 "it; allowed: send the first messages in round 0, or set Outbox.signals = "
                                 "{'wake': True} to be stepped again"]
        else:
            extra["warnings"] = [f"no program reported an iteration (Outbox.signals = {{'iteration': t}}) in "
                                 f"{scheduler.round} rounds, so evaluation points, [stop] max_iterations and the "
                                 f"metric rules never came; the run ended on: {reason}"]
    if getattr(engine, "host_nodes", None):
        extra["ray_hosts"] = dict(engine.host_nodes)    # host actor -> the Ray node it ran on
    if engine.recovery() is not None:
        extra["ray_recovery"] = engine.recovery()       # checkpoints taken, their cost, hosts replaced
    if lost is not None:
        extra["engine_failure"] = {"message": failed, "hosts": list(lost.hosts), "node_ids": list(lost.node_ids)}
    if clock is not None:
        extra["modelled_time"] = {"seconds": clock.now, "compute_seconds_max_node": float(clock.compute.max()),
                                  "compute_rate_range": [float(clock.rates.min()), float(clock.rates.max())],
                                  "model": scenario.network.model_dump()}
    for q, value in _linear_values(meter, linear).items():
        extra[q] = {"total": value, "unit": quantity(q).unit}
    if faults is not None:
        extra["faults"] = faults.summary()
        if reason == StopReason.QUIESCENT and extra["faults"]["dropped_total"]["messages"]:
            reason = (f"{reason}: algorithm {scenario.algorithm.name!r} stalled after the fault model dropped a "
                      "message it waited for (it assumes reliable delivery)")
        extra["ledger_matches_declared"] = declared_matches(declared, meter.scalars, extra["faults"])
        extra["failed_under_faults"] = failed is not None and lost is None
    if compressor is not None:
        _compression_summary(extra, compressor, scheduler.python_only, rec.rows, failed is not None and lost is None)
    return model, rec.rows, meter.ledger(), reason, extra


#: why a run that encoded messages with a lossy codec certifies nothing (stop reasons, summary.json)
UNCERTIFIED = "computed from compressed messages"


def _compressor(scenario: Scenario, n_nodes: int):
    """The run's `comm.compression.Compressor` (None without ``[compression]``)."""
    if scenario.compression is None:
        return None
    from .comm.compression import Compressor

    info = scenario.algorithm.info
    return Compressor(scenario.compression.spec(info.exact_tags, info.exact_tail), n_nodes, scenario.seed)


def _compression_summary(extra: dict, compressor, python_only: str | None, rows: list[dict], failed: bool) -> None:
    """The summary's ``compression`` section (codec per tag, raw and encoded bytes, ratio; see
    `Compressor.summary`; whether the rounds or events ran in Python, whether the algorithm failed), and
    ``certified``: false, with the reason, once a lossy codec encoded a message."""
    section = compressor.summary()
    section["python_rounds"] = python_only
    section["algorithm_failed"] = failed
    extra["compression"] = section
    extra["certified"] = not compressor.lossy_used
    if compressor.lossy_used:
        lossy = [t for t, s in section["tags"].items() if not s["codec"].startswith(("raw", "none"))]
        names = sorted({k for r in rows for k in r if is_registered(k) and metric(k).certificate})
        extra["certified_reason"] = (
            f"lossy codecs encoded {compressor.lossy_messages} messages (tags {', '.join(lossy)}), so the metrics "
            f"that would be certificates ({', '.join(names) or 'none reported'}) were {UNCERTIFIED}: they are not "
            "certificates")
    unused = sorted(set(compressor.spec.tags) - set(section["tags"]))
    if unused:
        extra.setdefault("warnings", []).append(
            f"[compression.tags] names tags that no message carried: {', '.join(unused)}; the tags this run sent: "
            f"{', '.join(section['tags']) or 'none'}")


def _linear_quantities(scenario: Scenario, clock) -> list[tuple[str, dict]]:
    """The registry's derived quantities that are linear in the per-edge message counts (`Quantity.per_edge`) and
    that the scenario's ``[network]`` models: (name, coefficients per message quantity and CSR edge id)."""
    if clock is None:
        return []
    out = []
    for q in by_kind("derived"):
        weights = q.per_edge(scenario.network, clock.ptr, clock.nbr) if q.per_edge is not None else None
        if weights is not None:
            out.append((q.name, weights))
    return out


def _linear_values(meter: Meter, linear: list[tuple[str, dict]]) -> dict[str, float]:
    """The values of `_linear_quantities` from what the meter counted so far (exact on the compiled rounds too:
    they count into the meter's own per-edge counters)."""
    if not linear:
        return {}
    edges = meter.edge_counts()[0]
    return {name: edge_weighted_total(edges, weights) for name, weights in linear}


# ----------------------------------------------------------------------------------------------------------------
# Faults and asynchronous gossip
# ----------------------------------------------------------------------------------------------------------------

def _one_group_per_node(scenario: Scenario, deployment: Deployment, engine: Engine):
    """Measured compute times need each node's step timed on its own: one group per node, timed where it runs (any
    grouping gives the same run: a conformance check)."""
    from .engine.base import split_roles
    from .errors import ScenarioError

    if not engine.time_steps():
        raise ScenarioError(f"[network] compute = 'measured' times each node's step where it runs; engine "
                            f"{engine.name!r} cannot time them; allowed: engine inproc or ray, or compute = 'count'")
    return split_roles(deployment.roles, {r.role: len(r.node_ids) for r in deployment.roles})


def _sync_faults(scenario: Scenario, n_nodes: int) -> FaultPlan | None:
    """The [faults] section bound for synchronous rounds (None when nothing can go wrong)."""
    model = scenario.faults.model()
    if model.is_empty:
        return None
    model.check_sync()
    return model.bind(n_nodes, scenario.seed)


def _run_gossip(scenario: Scenario, deployment: Deployment, engine: Engine, progress: bool, live):
    """Run peer programs asynchronously on virtual time, on whichever engine hosts them (`Engine.gossip`: one event
    loop in this process, or one per Ray actor; see `svmsim.schedule.gossip`).

    Metrics rows are taken every ``[schedule] eval_time`` of virtual time (default: one round) and/or every
    ``eval_messages`` messages (in-process): ``iteration`` and ``round`` are the whole rounds of virtual time
    elapsed (``floor(virtual_time / round_time)``), ``virtual_time``, ``wakes`` (clock ticks), ``sent_messages``
    and ``in_flight`` come from the scheduler, and messages/scalars/bytes are what the meter has settled so far
    (delivered or dropped; messages in flight are metered when they arrive, or at the end). Budgets:
    ``[stop] max_rounds`` / ``max_iterations`` (rounds of virtual time), ``max_scalars`` (sent), ``max_seconds``,
    ``gap`` (rel_gap at an evaluation point), and ``[schedule] max_time`` / ``max_messages``.
    """
    from .core.timing import Clock, LatencyModel
    from .schedule.gossip import GossipRun, GossipStopReason

    stop, sched = scenario.stop, scenario.schedule
    round_time = sched.effective_round_time
    budgets = [sched.max_time] + [r * round_time for r in (stop.max_rounds, stop.max_iterations) if r is not None]
    max_time = min((b for b in budgets if b is not None), default=None)
    unit = deployment.comm_unit[1] if deployment.comm_unit else 1.0
    compressor = _compressor(scenario, deployment.n_nodes)
    encoding = {} if compressor is None else {"compression": compressor}
    if encoding and not _takes(engine.gossip, "compression"):
        raise PluginError(f"engine {engine.name!r}: its gossip() takes no 'compression' argument, so it cannot encode "
                          "this run's messages; allowed: engine.name = \"inproc\" or \"ray\", or no [compression]")
    run = engine.gossip(deployment.roles, scenario.seed, deployment.topology, node_names=deployment.node_names,
                        clock=Clock(sched.clock, sched.rate, sched.jitter),
                        latency=LatencyModel(sched.latency_distribution(), sched.bandwidth, sched.edge_spread),
                        faults=scenario.faults.model(), round_time=round_time,
                        compiled=None if sched.compiled else False, **encoding)
    if not isinstance(run, GossipRun):
        raise PluginError(f"engine {engine.name!r}: gossip() returned {type(run).__name__}; allowed: a "
                          "svmsim.schedule.gossip.GossipRun (run, outcome, groups, close)")
    groups = run.groups
    rec = _Recorder(scenario, progress, None if max_time is None else int(max_time / round_time))

    def on_observe(p, observed: dict) -> bool:
        m = deployment.evaluate(observations_by_role(observed, groups))
        m.update(iteration=p.round, round=p.round, virtual_time=p.time, wakes=p.wakes, sent_messages=p.sent,
                 in_flight=p.in_flight, messages=p.messages, scalars=p.scalars, bytes=p.bytes,
                 comm_units=p.scalars / unit, **rec.times())
        if live is not None:
            live.update_totals(p.messages, p.scalars, p.bytes, m)
        if compressor is not None and compressor.lossy_used:
            rec.uncertified = UNCERTIFIED
        return rec.add(p.round, m)

    eval_time = sched.eval_time if sched.eval_time is not None else (None if sched.eval_messages else round_time)
    try:
        reason = run.run(max_time=max_time, max_messages=sched.max_messages, max_scalars=stop.max_scalars,
                         max_seconds=_seconds_left(stop.max_seconds), eval_time=eval_time,
                         eval_messages=sched.eval_messages,
                         on_observe=on_observe, with_observations=True, peek=True)
        out = run.outcome(hand_over=True)     # read here, then the model's own: no copy of every node's state
        p = out.progress
        last = rec.rows[-1] if rec.rows else None
        if last is not None and last["virtual_time"] > p.time:
            # the run stopped at an evaluation point later than its last event: the clock stands there
            p = dataclasses.replace(p, time=last["virtual_time"], round=last["round"])
        if last is None or (last["wakes"], last["sent_messages"], last["messages"], last["in_flight"]) != (
                p.wakes, p.sent, p.messages, p.in_flight):
            on_observe(p, out.observations)                  # the final state, if anything happened since
        obs = observations_by_role(out.observations, groups)
        model = deployment.model(obs) if deployment.model else {}
        declared = deployment.declared_scalars(obs) if deployment.declared_scalars else None
    finally:
        rec.close()
        run.close()
    reason = rec.reason(reason, GossipStopReason.OBSERVER)
    extra = {"rounds": p.round, "iterations": p.round, "virtual_time": p.time, "wakes": p.wakes, "events": p.events,
             "sent_messages": p.sent, "round_time": round_time, "compiled_loop": out.compiled,
             "declared_scalars": declared,
             "ledger_matches_declared": declared_matches(declared, out.ledger.totals["scalars"], out.faults),
             "faults": out.faults}
    if p.sent == 0 and p.wakes > 0:
        extra["warnings"] = [f"no peer sent a message in {p.wakes} clock ticks: the programs' wake never sent "
                             "(a GossipProgram sends from wake, as MessageBatch rows from the waking node)"]
    if compressor is not None:
        for counts in out.codec_counts:                  # what the other hosts encoded (Ray)
            compressor.absorb(counts)
        python = None if out.compiled else "the gossip event loop ran in Python" + (
            f": {out.python_reason}" if out.python_reason else "")
        _compression_summary(extra, compressor, python, rec.rows, False)
        fed = [tag for tag, t in extra["compression"]["tags"].items() if t["codec"].endswith(("+ef", "+ef21"))]
        if fed:
            extra.setdefault("warnings", []).append(
                f"error feedback on gossip messages (tags {', '.join(fed)}) compresses the nodes' state, not a "
                "gradient: what a message leaves out waits in a residual while the state moves on, and the "
                "residuals can grow without bound (a diverged objective, a consensus away from the average); see "
                "the docs page 'Compressed messages'")
    if out.stats:
        extra["ray_gossip"] = {k: v for k, v in out.stats.items() if k != "sent_per_node"}
    if getattr(run, "host_nodes", None):
        extra["ray_hosts"] = dict(run.host_nodes)       # host actor -> the Ray node it ran on
    return model, rec.rows, out.ledger, reason, extra


def _takes(function, name: str) -> bool:
    """Whether `function` accepts keyword argument `name` (by name or through ``**kwargs``)."""
    import inspect

    params = inspect.signature(function).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _seconds_left(max_seconds: float | None) -> float | None:
    """What is left of ``[stop] max_seconds`` after set-up, for a scheduler's own wall-clock budget."""
    if max_seconds is None or not deadline.is_open():
        return max_seconds
    return max(deadline.remaining(), 1e-6)


def _run_single(scenario: Scenario, solver: SingleMachineRun, progress: bool):
    stop = scenario.stop
    if solver.budgets is not None:
        budgets = ("max_iterations", "max_rounds", "max_scalars", "max_seconds")
        unheeded = [k for k in budgets if getattr(stop, k) is not None and k not in solver.budgets]
        if unheeded:
            from .errors import ScenarioError

            raise ScenarioError(
                f"[stop] {unheeded[0]} = {getattr(stop, unheeded[0])!r}: algorithm {scenario.algorithm.name!r} is "
                f"one call into a library that reports only at its end, so it cannot stop on {unheeded[0]}; "
                f"allowed: {', '.join(solver.budgets)} (passed on to the library), or no budget")
    rec = _Recorder(scenario, progress, stop.max_iterations, max_iterations=stop.max_iterations)

    def on_check(info: dict) -> bool:
        m = dict(info)
        m.update(round=0, messages=0, scalars=0, bytes=0, comm_units=0.0, **rec.times())
        return rec.add(int(m["iteration"]), m)

    try:
        eval_every = scenario.output.eval_every
        if stop.max_iterations is not None:
            eval_every = min(eval_every, stop.max_iterations)
        solver.budget = stop.max_iterations
        model = solver.fit(on_check, eval_every)
    finally:
        rec.close()
    return model, rec.rows, None, (rec.why or "solver finished"), {}


def _timing(setup: Stopwatch, set_up: dict, ran: dict) -> dict:
    """summary.json's ``timing``: where the run's wall-clock seconds went (writing the directory aside). ``seconds``
    = ``setup_seconds`` (data, reference optimum, build) + ``run_seconds`` (engine, rounds, evaluations) +
    ``compile_seconds`` (numba's compiler in either, this process; ``compile_new_seconds`` of it compiling afresh,
    the rest loading from numba's disk cache); ``run_compile_seconds``: the run's part of ``compile_seconds``."""
    return {"seconds": set_up["wall_time_total"] + ran["wall_time_total"], "setup_seconds": set_up["wall_time"],
            "run_seconds": ran["wall_time"], **setup.compile_split(), "run_compile_seconds": ran["compile_time"]}


def _prepare_run_dir(scenario: Scenario, out_dir: Path | None) -> tuple[Path, Path]:
    final = Path(out_dir) if out_dir is not None else scenario.run_directory()
    if out_dir is None and not scenario.output.run_dir and not scenario.output.overwrite:
        base, k = final, 2          # a name of its own (two runs of a scenario in one second): -2, -3, ...
        while final.exists():
            final, k = base.with_name(f"{base.name}-{k}"), k + 1
    return final, rundir.begin(final, scenario.output.overwrite, "run directory",
                               "allowed: svmsim run --overwrite (or output.overwrite = true in the scenario) to "
                               "replace it, --out DIR (or output.run_dir) for another directory, or remove it")


def _json_default(o: Any):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _cell(v: Any) -> str:
    """One metrics.csv cell: numbers as Python writes them (a NumPy scalar as its plain value), None empty."""
    if v is None:
        return ""
    if isinstance(v, np.generic):
        v = v.item()
    return repr(v)


def _write_outputs(tmp: Path, result: RunResult, bound: dict | None, comm_unit) -> None:
    (tmp / "scenario.resolved.toml").write_text(result.scenario.to_toml())
    cols = _metric_columns(result.metrics)
    with open(tmp / "metrics.csv", "w") as f:
        f.write(",".join(cols) + "\n")
        for r in result.metrics:
            f.write(",".join(_cell(r.get(c)) for c in cols) + "\n")
    if result.ledger is not None:
        result.ledger.save(tmp)
    _save_npz(tmp / "model.npz", _model_arrays(result.model))
    (tmp / "summary.json").write_text(jsonio.dumps(result.summary, default=_json_default))
    if result.scenario.output.plots and result.metrics:
        from .report import plot_run

        stop = result.scenario.stop
        targets = {**({"rel_gap": stop.gap} if stop.gap is not None else {}), **(stop.below or {})}
        plot_run(result.metrics, tmp / "convergence.png", title=result.scenario.name, bound=bound,
                 comm_unit=comm_unit, eps=getattr(result.scenario.algorithm.params, "eps", None),
                 rate=result.scenario.algorithm.info.rate, targets=targets,
                 certified=result.summary.get("certified", True))


def _metric_columns(metrics: list[dict]) -> list[str]:
    return list(METRIC_COLUMNS) + sorted({k for r in metrics for k in r} - set(METRIC_COLUMNS))


def _parse_cell(text: str) -> Any:
    """A metrics.csv cell read back (the inverse of `_cell` for the numbers, booleans and strings it writes)."""
    if text in ("nan", "inf", "-inf"):
        return float(text)
    return ast.literal_eval(text)


def _model_arrays(model: dict) -> dict[str, np.ndarray]:
    """What model.npz keeps of a model: its arrays and numbers."""
    return {k: np.asarray(v) for k, v in model.items() if isinstance(v, (np.ndarray, float, int))}


def _recorded_rows(metrics: list[dict]) -> list[dict]:
    """The metrics rows as metrics.csv records them: each value through its cell and back; an empty cell (None, or a
    column the row does not have) leaves the key out."""
    cols = _metric_columns(metrics)
    out = []
    for r in metrics:
        cells = {c: _cell(r.get(c)) for c in cols}
        out.append({c: _parse_cell(t) for c, t in cells.items() if t != ""})
    return out


def recorded(result: RunResult) -> RunResult:
    """`result` as `read_run` reads back the directory that `run` writes for it, without the disk: metrics through
    metrics.csv's cells, the summary through JSON, the model as model.npz keeps it, no ledger (its totals are
    ``summary["ledger"]``). Whatever is computed from a recorded result is the same for a run just made and for
    one read back from its directory (a resumed sweep relies on it)."""
    summary = json.loads(jsonio.dumps(result.summary, default=_json_default))
    return RunResult(result.scenario, _model_arrays(result.model), _recorded_rows(result.metrics), None,
                     summary["stop_reason"], result.run_dir, summary)


def write_run(result: RunResult, out_dir: str | Path) -> Path:
    """Write the run directory of a run made elsewhere (with ``write=False``; on a Ray worker, say), as `run` writes
    it: atomically, the same files byte for byte. Sets and returns ``result.run_dir``."""
    final_dir, tmp_dir = _prepare_run_dir(result.scenario, out_dir)
    try:
        _write_outputs(tmp_dir, result, result.summary.get("bound"), result.summary.get("comm_unit"))
        rundir.commit(tmp_dir, final_dir)
    except BaseException:
        rundir.discard(tmp_dir)
        raise
    result.run_dir = final_dir
    return final_dir


#: the files every finished run directory has (the ledger's, when the summary has ledger totals, and the plot, when
#: the scenario asks for plots and the run has metrics, come on top)
RUN_FILES = ("scenario.resolved.toml", "metrics.csv", "model.npz", "summary.json")


def read_run(directory: str | Path, scenario: Scenario | None = None) -> RunResult:
    """A finished run directory read back as a `RunResult` (see `recorded`): metrics from metrics.csv, the summary
    from summary.json, the model from model.npz, no ledger (its totals are ``summary["ledger"]``, its tables the
    ledger files). `scenario` is the scenario the directory must have been written for (default: the one it
    records). Raises ValueError naming the file when the directory is not a finished run of that scenario (a file
    missing or unreadable, another scenario)."""
    directory = Path(directory)
    missing = [f for f in RUN_FILES if not (directory / f).is_file()]
    if missing:
        raise ValueError(f"run directory {directory} has no {missing[0]}")
    text = (directory / "scenario.resolved.toml").read_text()
    if scenario is None:
        scenario = load_scenario(directory / "scenario.resolved.toml")
    elif text != scenario.to_toml():
        raise ValueError(f"run directory {directory} was written for another scenario (scenario.resolved.toml "
                         "differs)")
    try:
        summary = json.loads((directory / "summary.json").read_text())
        lines = (directory / "metrics.csv").read_text().splitlines()
        cols = lines[0].split(",")
        metrics = []
        for line in lines[1:]:
            cells = line.split(",")
            if len(cells) != len(cols):
                raise ValueError(f"a row of {len(cells)} cells under {len(cols)} columns")
            metrics.append({c: _parse_cell(t) for c, t in zip(cols, cells) if t != ""})
        with np.load(directory / "model.npz", allow_pickle=False) as npz:
            model = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, SyntaxError, KeyError, IndexError) as exc:
        raise ValueError(f"run directory {directory} cannot be read back: {type(exc).__name__}: {exc}") from None
    needed = (["ledger.json", "ledger_edges.csv", "ledger_rounds.csv"] if summary.get("ledger") is not None else [])
    if scenario.output.plots and metrics:
        needed.append("convergence.png")
    missing = [f for f in needed if not (directory / f).is_file()]
    if missing:
        raise ValueError(f"run directory {directory} has no {missing[0]}")
    return RunResult(scenario, model, metrics, None, summary["stop_reason"], directory, summary)


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """`np.savez(path, **arrays)`, with what np.load reads back the same, but a C-ordered array's bytes written
    from the array itself: np.savez copies them 16 MiB at a time through a buffer and a bytes object (33 MB at the
    end of a run that keeps 10^5 nodes' estimates)."""
    import zipfile

    from numpy.lib import format as npy

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, a in arrays.items():
            with zf.open(key + ".npy", "w", force_zip64=True) as f:
                if a.dtype.hasobject or not a.flags.c_contiguous:
                    npy.write_array(f, a, allow_pickle=True)       # as np.savez does
                else:
                    npy.write_array_header_1_0(f, npy.header_data_from_array_1_0(a))
                    f.write(a.reshape(-1).view(np.uint8))


def _track(tracker, result: RunResult) -> None:
    """Log a finished run; a tracker's failure says that the run itself is complete."""
    from .tracking import TrackingError, finished_anyway

    try:
        tracker.log_run(result)
    except TrackingError as exc:
        raise finished_anyway(exc, "run", result.run_dir) from None


def run(scenario: Scenario | dict | str | Path, *, topology: nx.Graph | None = None, engine: str | Engine | None = None,
        overrides: dict | None = None, out_dir: str | Path | None = None, write: bool = True,
        progress: bool | None = None, track: bool = True) -> RunResult:
    """Run a scenario (a `Scenario`, a dict in the TOML's shape, or a path to a TOML file).

    topology: any `networkx.Graph` to use instead of the scenario's topology (relabelled to 0..N-1).
    engine: an engine name ("inproc", "ray", "ray-cgraph", or a registered one) or an `Engine` instance; default:
        the scenario's.
    overrides: dotted keys applied to the scenario before validation, e.g. {"stop.max_iterations": 100}.
    out_dir: exact run directory (default: the scenario's output settings); write=False writes nothing.
    track: log the run to the tracker ``[output] tracking`` names (a sweep logs its points itself: False).
    """
    if not isinstance(scenario, Scenario):
        ov = dict(overrides or {})
        if isinstance(engine, str):
            ov["engine.name"] = engine
        scenario = load_scenario(scenario, overrides=ov)
    elif overrides:
        scenario = load_scenario(scenario.to_dict(), overrides=overrides)
    if isinstance(engine, str) and engine != scenario.engine.name:
        scenario = load_scenario(scenario.to_dict(), overrides={"engine.name": engine})
    progress = scenario.output.progress if progress is None else progress
    info = scenario.algorithm.info
    final_dir = tmp_dir = None
    if write:                                   # first: a directory that cannot be written is refused at once,
        final_dir, tmp_dir = _prepare_run_dir(scenario, out_dir)     # not after loading data or a reference solve
    tracker = None
    if track and scenario.output.tracking != "none":     # so is a tracker that cannot be reached
        from .tracking import tracker_for

        try:
            tracker = tracker_for(scenario.output, scenario.name)
        except BaseException:
            rundir.discard(tmp_dir)
            raise
    live = None
    own_engine = False
    setup = Stopwatch()                         # set-up: data, reference, build (compilation counted apart)
    budget = deadline.open_budget(scenario.stop.max_seconds)     # max_seconds counts set-up too
    try:
        problem = _problem(scenario, topology)
        if info.memory is not None:             # before anything of the run is built: refuse what cannot fit
            from .core.resources import check_memory

            need, what, allowed = info.memory(scenario.algorithm.params, problem)
            check_memory(need, what, allowed)
        built = info.build(scenario.algorithm.params, problem)
        set_up = setup.times()
        running = Stopwatch()
        if isinstance(built, Deployment):
            if isinstance(engine, Engine):
                eng = engine
            else:
                eng = scenario.engine.build()
                own_engine = True
            if scenario.engine.is_ray and scenario.engine.metrics:
                from .monitor import LiveMetrics

                live = LiveMetrics(scenario.name)
            try:
                if scenario.schedule.kind == "gossip":
                    model, rows, ledger, reason, extra = _run_gossip(scenario, built, eng, progress, live)
                else:
                    model, rows, ledger, reason, extra = _run_distributed(scenario, built, eng, progress, live)
                if live is not None:             # the dashboard's last point is the run's end (before Ray goes)
                    extra["live_metrics"] = {**live.finish(), "private_ray": bool(getattr(eng, "started_ray", False))}
            finally:
                if own_engine:
                    eng.close()
            bound_fn, comm_unit, binfo = built.bound, built.comm_unit, built.info
        else:
            model, rows, ledger, reason, extra = _run_single(scenario, built, progress)
            bound_fn, comm_unit, binfo = built.bound, None, built.info
        reason = with_distance(reason, rows[-1] if rows else {})
        eps = getattr(scenario.algorithm.params, "eps", None)
        bound = bound_fn(eps) if (bound_fn is not None and eps) else None
        ran = running.times()
        summary = {"scenario": scenario.name, "algorithm": info.name, "engine": scenario.engine.name,
                   "seed": scenario.seed, "stop_reason": reason, "wall_time": ran["wall_time"],
                   "timing": _timing(setup, set_up, ran), "final": rows[-1] if rows else {},
                   "ledger": ledger.totals if ledger else None, "bound": bound, "comm_unit": comm_unit,
                   "algorithm_info": binfo, **extra}
        result = RunResult(scenario, model, rows, ledger, reason, final_dir, summary)
        failure = summary.get("engine_failure")
        if failure is not None:          # what was measured stays, under a name that says the run failed
            kept = ""
            if write:
                _write_outputs(tmp_dir, result, bound, comm_unit)
                failed_dir = final_dir.with_name(final_dir.name + ".failed")
                rundir.commit(tmp_dir, failed_dir)
                kept = f"; the ledger and metrics measured before are in {failed_dir}"
            raise EngineFailure(failure["message"] + kept, failure["hosts"], failure["node_ids"])
        if write:
            _write_outputs(tmp_dir, result, bound, comm_unit)
            rundir.commit(tmp_dir, final_dir)
            tmp_dir = None
        if tracker is not None:
            _track(tracker, result)
        return result
    except BaseException:
        rundir.discard(tmp_dir)
        raise
    finally:
        deadline.close_budget(budget)
