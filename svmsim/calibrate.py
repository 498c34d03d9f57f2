"""`svmsim calibrate`: measure the cluster at hand and write the ``[network]`` table that models it.

Two measurements, on the machine (a private local Ray) or the Ray cluster it joins:

* **Messages.** One actor calls another with payloads of several sizes (a Ray call carrying b bytes, what svmsim's
  Ray engines send); the median time of a call, halved for one way, is fitted by least squares to
  ``t(b) = latency + b / bandwidth``, the alpha-beta model of `schedule.cluster_time`. The fit's residual (relative
  RMS over the sizes) says how well two numbers describe the link. On a cluster of several Ray nodes the two actors
  sit on different nodes, so the table describes the network between them; on one machine it describes Ray's own
  path between processes (its per-call cost dominates the latency).
* **Compute.** Each Ray node runs a sparse pass (a CSR matrix-vector product and an axpy: two operations per
  nonzero, as paper 001's and paper 004's programs count their work) until about half a second has gone by; its
  rate is operations per second. The table's ``compute_rate`` is the median over the nodes, each node's rate is
  listed in a comment.
* **A scenario's own steps** (``scenario``, ``--scenario FILE``). Instead of the sparse pass's rate, the scenario
  runs for `STEP_ROUNDS` rounds on its own engine (in process, or on its Ray host actors), each node in a group
  of its own and each step timed where it runs (what ``compute = "measured"`` times), and the median time of the
  steps of each declared work is fitted by least squares to ``t(w) = step_overhead + w / compute_rate``: the rate
  of the operations this program declares as its steps run there, and the fixed cost of a step (the Python side of
  a step: building its inputs and outputs, calling the compiled step). A program that declares no work gives the
  median step as the overhead.
* **Hops through the engine** (``hop = "engine"``, ``--hop engine``). svmsim's Ray engine does not send a message
  from host to host: the driver collects each host's outbox with the reply to its round's call and hands it to the
  receiver with the next call. This measures that hop (two nodes on two hosts sending each other b bytes every
  round; the median round) and fits the same alpha-beta model with relative errors: a table that models runs on
  svmsim's Ray engine itself rather than the network between the hosts.

The table is printed (or written with ``--out``) with the measurements as comments above it.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import numba
import numpy as np

from .comm.message import MessageBatch, Outbox
from .errors import ScenarioError, SvmsimError
from .program import NodeProgram, RoleSpec

__all__ = ["Calibration", "HOPS", "HopProgram", "SIZES", "QUICK_SIZES", "calibrate", "fit_alpha_beta", "fit_steps",
           "measure_compute_rate", "measure_engine_hops", "measure_steps"]

#: payload sizes of the message measurement (bytes)
SIZES = (0, 1_000, 10_000, 100_000, 1_000_000, 4_000_000)
QUICK_SIZES = (0, 10_000, 1_000_000)


def fit_alpha_beta(sizes, seconds, weights=None) -> tuple[float, float, float]:
    """The least-squares fit of ``seconds = alpha + sizes / beta``: (alpha, beta, relative RMS residual), each point
    weighted by `weights` (default: alike). alpha is kept >= 0 (a negative intercept is refitted through the
    origin); beta is inf where the times do not grow with the size."""
    b = np.asarray(sizes, np.float64)
    t = np.asarray(seconds, np.float64)
    c = np.ones_like(b) if weights is None else np.asarray(weights, np.float64)
    if b.shape != t.shape or c.shape != b.shape or b.size < 2 or np.unique(b).size < 2:
        raise ValueError("fit_alpha_beta needs times for at least two different sizes")
    slope, alpha = np.polyfit(b, t, 1, w=np.sqrt(c))
    if alpha < 0:
        alpha, slope = 0.0, float((c * b) @ t / ((c * b) @ b))
    slope = max(float(slope), 0.0)
    fitted = alpha + slope * b
    mean = float(c @ t / c.sum())
    residual = float(np.sqrt(c @ (t - fitted) ** 2 / c.sum()) / mean) if mean > 0 else 0.0
    return float(alpha), (1.0 / slope if slope > 0 else math.inf), residual


@numba.njit(cache=True, nogil=True)
def _sparse_pass(indptr, indices, values, x, y):
    """y = A x, then x += 1e-12 y[:d] (two operations per nonzero, and a few per row)."""
    for i in range(indptr.shape[0] - 1):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            acc += values[p] * x[indices[p]]
        y[i] = acc
    for j in range(x.shape[0]):
        x[j] += 1e-12 * y[j % y.shape[0]]


def measure_compute_rate(seconds: float = 0.5, rows: int = 20_000, cols: int = 2_000, density: float = 0.01,
                         seed: int = 0) -> float:
    """Operations per second of this process on a sparse pass (2 per nonzero), timed over about `seconds`."""
    rng = np.random.default_rng(seed)
    per_row = max(1, int(cols * density))
    indices = np.sort(rng.integers(0, cols, (rows, per_row)), axis=1).ravel().astype(np.int64)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    values = rng.standard_normal(indices.size)
    x, y = rng.standard_normal(cols), np.zeros(rows)
    _sparse_pass(indptr, indices, values, x, y)                 # compiled (or loaded) before the clock starts
    passes, start = 0, time.perf_counter()
    while True:
        _sparse_pass(indptr, indices, values, x, y)
        passes += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * indices.size * passes / elapsed


#: iterations between the evaluation points of `measure_steps`'s run (where its time budget is checked)
EVAL_EVERY = 10
#: rounds of a scenario whose steps `measure_steps` times
STEP_ROUNDS = 400
#: steps a declared work needs to enter `fit_steps` (where two works have as many)
MIN_LEVEL_STEPS = 3


def measure_steps(scenario, rounds: int = STEP_ROUNDS, seconds: float = 120.0) -> list[tuple[float, float]]:
    """(declared work, seconds) of every node step of `scenario` (a `Scenario` of synchronous rounds) run for
    `rounds` rounds (or its own budget, or `seconds`, whichever ends it first) on its own engine (in process, or on
    its Ray hosts), each node in a group of its own and each step timed where it runs (``compute = "measured"``; an
    evaluation point every `EVAL_EVERY` iterations, where the time budget is checked); each node's first step
    (which loads its compiled code) is left out."""
    from .config import load_scenario
    from .runner import run

    data = scenario.to_dict()
    data.update(network=dict(data.get("network") or {}, compute="measured"),
                stop=dict(data["stop"], max_seconds=float(seconds),
                          max_rounds=min(int(rounds), data["stop"].get("max_rounds") or int(rounds))),
                output=dict(data["output"], progress=False, plots=False, eval_every=EVAL_EVERY, tracking="none"))
    data.pop("sweep", None)
    timed_scenario = load_scenario(data)
    engine = timed_scenario.engine.build()
    samples: list[tuple[float, float]] = []
    stepped: set[int] = set()
    step = engine.step

    def timed(round_, inboxes):
        out = step(round_, inboxes)
        for gid, outbox in out.items():
            if gid not in stepped:             # a node's first step loads its compiled code: not a step's cost
                stepped.add(gid)
                continue
            work = (outbox.signals or {}).get("work")
            samples.append((float(np.sum(work)) if work is not None else 0.0, engine.step_seconds[gid]))
        return out

    engine.step = timed
    try:
        run(timed_scenario, engine=engine, write=False, progress=False, track=False)
    finally:
        engine.close()
    return samples


def fit_steps(samples) -> tuple[float, float | None, float]:
    """(step_overhead, compute_rate, relative RMS residual) of ``seconds = step_overhead + work / compute_rate``,
    fitted to the median seconds of the steps of each declared work (weighted by their number; works declared by
    fewer than `MIN_LEVEL_STEPS` steps left out where two works have more); compute_rate None where fewer than two
    different works were declared or the time did not grow with the work (the overhead is then the median step)."""
    works = np.array([w for w, _ in samples], np.float64)
    secs = np.array([t for _, t in samples], np.float64)
    if works.size == 0:
        raise ValueError("fit_steps needs at least one timed step")
    levels, counts = np.unique(works, return_counts=True)
    medians = np.array([np.median(secs[works == w]) for w in levels])
    common = counts >= MIN_LEVEL_STEPS   # a work a node declared once or twice: one-off steps, left out of the fit
    if common.sum() >= 2:
        levels, medians, counts = levels[common], medians[common], counts[common]
    if levels.size >= 2:                # each work's median weighted by its steps
        overhead, rate, residual = fit_alpha_beta(levels, medians, counts)
        if math.isfinite(rate):
            return overhead, rate, residual
    return float(np.median(secs)), None, 0.0


class HopProgram(NodeProgram):
    """Two nodes that send each other `width` doubles every round (the engine hop `measure_engine_hops` times)."""

    role = "peer"
    initiator = True

    def __init__(self, width: int):
        self.width = int(width)

    def init(self, node_ids, node_data, seed):
        return {"ids": [int(i) for i in node_ids], "payload": np.zeros((1, self.width))}

    def step(self, state, inbox, round_):
        out = Outbox()
        for node in state["ids"]:
            out.send(MessageBatch("hop", np.array([node]), np.array([1 - node]), state["payload"]))
        return state, out


def measure_engine_hops(sizes, rounds: int = 60) -> list[float]:
    """Median seconds of a round of svmsim's Ray engine (``actors = 2``) in which each of two nodes, on hosts of
    their own, sends the other a message of each size in bytes (rounded to whole doubles, at least one): what a
    message hop costs when the driver relays it (a host's reply, then the other host's next call, with the
    scheduler's routing and metering between)."""
    from .comm.meter import Meter
    from .engine.ray_engine import RayEngine
    from .schedule.sync import SyncScheduler

    out = []
    adjacency = np.array([[False, True], [True, False]])
    for size in sizes:
        engine = RayEngine(actors=2, recover=False)       # on the Ray this process is connected to
        try:
            groups = engine.plan([RoleSpec("peer", HopProgram(max(1, int(size) // 8)), np.array([0, 1]),
                                           [None, None])])
            engine.deploy(groups, 0)
            scheduler = SyncScheduler(engine, groups, Meter(2, adjacency), 2, compiled=False)
            scheduler.run(max_rounds=5)                                  # warm: the first calls set up
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                scheduler.run(max_rounds=scheduler.round + 1)
                times.append(time.perf_counter() - start)
            out.append(float(statistics.median(times)))
        finally:
            engine.close()
    return out


@dataclass
class Calibration:
    """What `calibrate` measured and fitted."""

    sizes: tuple
    seconds: list                  # median one-way seconds per size
    latency: float
    bandwidth: float
    residual: float
    node_rates: dict               # Ray node id -> operations per second
    between_nodes: bool            # the two actors sat on different Ray nodes
    wall_seconds: float = 0.0
    notes: list = field(default_factory=list)
    hop: str = "direct"            # "direct": one actor calls another; "engine": a hop relayed by svmsim's Ray engine
    program: str | None = None     # the scenario whose steps were timed (None: the sparse pass)
    program_rate: float | None = None
    step_overhead: float = 0.0
    steps_residual: float = 0.0
    steps: int = 0                 # node steps timed

    @property
    def compute_rate(self) -> float:
        """The scenario's rate where its steps were timed, else the median sparse-pass rate of the nodes."""
        if self.program_rate is not None:
            return float(self.program_rate)
        return float(statistics.median(self.node_rates.values()))

    def table(self) -> str:
        """The ``[network]`` table, with the measurements as comments."""
        where = "between two Ray nodes" if self.between_nodes else "between two processes of one machine"
        if self.hop == "engine":
            lines = [f"# svmsim calibrate, {time.strftime('%Y-%m-%d %H:%M')}: a message of b bytes relayed by "
                     f"svmsim's Ray engine {where}", "# (a host's reply to the driver, then the other host's next "
                     "call), median round, fitted by t = latency + b / bandwidth (relative errors)"]
        else:
            lines = [f"# svmsim calibrate, {time.strftime('%Y-%m-%d %H:%M')}: a Ray call carrying b bytes {where},",
                     "# one way (half the median round trip), fitted by t = latency + b / bandwidth"]
        lines += ["#   bytes    " + " ".join(f"{s:>10d}" for s in self.sizes),
                  "#   seconds  " + " ".join(f"{t:10.3g}" for t in self.seconds),
                  f"#   fit residual (relative RMS over the sizes): {100 * self.residual:.1f} %",
                  "# a sparse pass (2 operations per nonzero) on each Ray node, operations per second:"]
        lines += [f"#   {node[:12]}  {rate:.3g}" for node, rate in sorted(self.node_rates.items())]
        if self.program is not None:
            lines += [f"# compute: {self.steps} node steps of scenario {self.program!r} timed where its engine runs "
                      "them, fitted by", "#   t = step_overhead + declared work / compute_rate (relative RMS "
                      f"residual {100 * self.steps_residual:.1f} %)"]
        lines += [f"# {n}" for n in self.notes]
        bandwidth = self.bandwidth if math.isfinite(self.bandwidth) else 1e12
        lines += ["[network]", f"latency = {self.latency:.4g}", f"bandwidth = {bandwidth:.4g}",
                  f"compute_rate = {self.compute_rate:.4g}"]
        if self.program is not None:
            lines.append(f"step_overhead = {self.step_overhead:.4g}")
        lines.append("")
        return "\n".join(lines)


def _ray():
    import ray

    return ray


def _actors():
    ray = _ray()

    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, payload) -> int:
            return len(payload)

        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=0)
    class Pinger:
        def measure(self, echo, sizes, repeats) -> list:
            """Median one-way seconds per size (half the round trip of a call carrying the payload)."""
            out = []
            for size in sizes:
                payload = np.zeros(size, np.uint8)
                ray.get(echo.echo.remote(payload))                  # warm: the first call of a size sets up
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    ray.get(echo.echo.remote(payload))
                    times.append((time.perf_counter() - start) / 2)
                out.append(float(statistics.median(times)))
            return out

    @ray.remote(num_cpus=1)
    def compute_rate(seconds):
        return ray.get_runtime_context().get_node_id(), measure_compute_rate(seconds)

    return Echo, Pinger, compute_rate


#: how a message hop is measured: one Ray actor calling another ("direct": the network between hosts), or a
#: message relayed by svmsim's Ray engine ("engine": what a hop costs a run on that engine)
HOPS = ("direct", "engine")


def calibrate(address: str | None = None, *, sizes=SIZES, repeats: int = 30, compute_seconds: float = 0.5,
              scenario=None, hop: str = "direct", step_rounds: int = STEP_ROUNDS) -> Calibration:
    """Measure the Ray cluster at `address` (None: a private local Ray, stopped afterwards). `hop`: see `HOPS`.
    With `scenario` (a `Scenario` of synchronous rounds) its own steps over `step_rounds` rounds, timed where its
    engine runs them, give the compute rate and the step overhead."""
    if hop not in HOPS:
        raise ScenarioError(f"calibrate --hop {hop!r} is unknown; allowed: {', '.join(HOPS)}")
    if scenario is not None:
        check_scenario(scenario)
    ray = _ray()
    from ray.exceptions import GetTimeoutError, RayError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .engine.ray_actors import ensure_ray, release_actors

    started = time.perf_counter()
    own = ensure_ray(address, {})
    actors = []
    try:
        Echo, Pinger, compute_rate = _actors()
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        if hop == "engine":
            seconds = measure_engine_hops(sizes, rounds=max(int(repeats), 5))
            latency, bandwidth, residual = fit_alpha_beta(sizes, seconds, 1.0 / np.square(seconds))
        else:
            place = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes[:2]] if len(nodes) > 1 \
                else [None] * 2
            echo = Echo.options(scheduling_strategy=place[0]).remote() if place[0] else Echo.remote()
            pinger = Pinger.options(scheduling_strategy=place[1]).remote() if place[1] else Pinger.remote()
            actors = [echo, pinger]
            seconds = ray.get(pinger.measure.remote(echo, list(sizes), int(repeats)), timeout=300)
            latency, bandwidth, residual = fit_alpha_beta(sizes, seconds)
        on_node = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes]
        rates = dict(ray.get([compute_rate.options(scheduling_strategy=where).remote(compute_seconds)
                              for where in on_node], timeout=300))
        notes = []
        if len(nodes) == 1:
            notes.append("one Ray node: the latency is Ray's cost of a call between processes, not a network's")
        fit = {}
        if scenario is not None:
            samples = measure_steps(scenario, step_rounds)
            if not samples:
                raise SvmsimError(f"calibrate --scenario: no step of {scenario.name!r} was timed; allowed: a "
                                  "scenario whose rounds run for a while (its [stop] budget)")
            overhead, rate, steps_residual = fit_steps(samples)
            if rate is None:
                notes.append("the steps did not grow with the declared work (or none was declared): the sparse "
                             "pass's rate, and the median step as the overhead")
            fit = {"program": scenario.name, "program_rate": rate, "step_overhead": overhead,
                   "steps_residual": steps_residual, "steps": len(samples)}
        return Calibration(tuple(sizes), seconds, latency, bandwidth, residual, rates, len(nodes) > 1,
                           time.perf_counter() - started, notes, hop=hop, **fit)
    except RayTaskError as err:           # what failed inside a task or a host: as itself
        from .engine.ray_actors import raise_original

        raise_original(err)
    except (GetTimeoutError, RayError) as err:
        raise SvmsimError(f"calibrate: the Ray measurement failed ({type(err).__name__}: {str(err).splitlines()[0]}); "
                          "allowed: a Ray cluster whose nodes answer within 300 s (--address, or none for a local "
                          "Ray)") from None
    finally:
        release_actors(actors, own)


def check_scenario(scenario) -> None:
    """Refuse a scenario whose steps cannot be timed (not synchronous rounds) before anything is measured."""
    from .algorithms.registry import get_algorithm

    info = get_algorithm(scenario.algorithm.name)
    if not info.distributed or info.scheduler != "sync":
        kind = "gossip" if info.distributed else "single-machine"
        raise ScenarioError(f"calibrate --scenario: {scenario.algorithm.name!r} is a {kind} algorithm, whose time "
                            "[network] does not model; allowed: a scenario of synchronous rounds (svmsim list "
                            "algorithms)")


def check_out_path(path: str) -> None:
    """Refuse an output path that cannot be written before anything is measured."""
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ScenarioError(f"--out {path!r} cannot be written (a folder, or a file in a folder that does not exist "
                            "or is not writable); allowed: a file path in a writable folder")
