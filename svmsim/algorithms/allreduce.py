"""K workers that run one all-reduce after another (not a family: it registers no algorithm). Paper 001's BQO
workers and TRON, and paper 004's Pragam, BMRM and Pegasos-n workers, are all of this shape: each worker holds its
block of the examples and a replicated model, computes a local contribution, all-reduces it, and updates the
replicated model identically from the total.

* the compiled round driver: `allreduce_receive` at the start of every round (FIRST, WAITING or COMPLETE),
  `allreduce_start` once the members' inputs are written;
* `AllreduceWorker`, the node program's base (its numba state carries the collective's fields, see
  `comm.collectives.state_with_collective`, and a per-member ``work`` count that feeds the modelled time);
* the layout a scenario gives such a run: K workers, the all-reduce pattern checked against the topology, the
  partition, and the ledger's declared count of an iteration under way (the ``[algorithm]`` keys and topologies
  such runs share are declared in `allreduce_params`).
"""
from __future__ import annotations

import numpy as np

from ..comm.collectives import (
    PATTERNS,
    Plan,
    aux_collective,
    collective_receive,
    collective_reset,
    collective_start,
)
from ..comm.patterns import get_pattern
from ..core.jit import inner
from ..errors import DataError, InfeasibleParameterError, TopologyError
from ..program import NodeProgram, SyncKernel, kernel_step
from .allreduce_params import WORKER_TOPOLOGIES, AllreducePattern, pattern_field

__all__ = [
    "COMPLETE",
    "FIRST",
    "PATTERN_FOR_TOPOLOGY",
    "WAITING",
    "WORKER_TOPOLOGIES",
    "AllreducePattern",
    "AllreduceWorker",
    "WorkerLayout",
    "allreduce_receive",
    "allreduce_start",
    "aux_start",
    "check_pattern_edges",
    "check_problem",
    "declared_scalars",
    "partial_steps",
    "pattern_field",
    "worker_layout",
]

#: where a program that runs one all-reduce after another stands at the start of a round
FIRST, WAITING, COMPLETE = range(3)


@inner
def allreduce_receive(st, round_, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    """The start of every round of a program that runs one all-reduce after another: note the round, clear the
    step's work, apply this round's collective messages. Returns (n_out, FIRST) before any all-reduce started (the
    caller writes its members' inputs and calls `allreduce_start`), (n_out, WAITING) while one is under way and
    (n_out, COMPLETE) in the round every participant holds the result (the plan's `rounds()` after its start: an
    all-reduce followed by a barrier)."""
    st.last_round[0] = round_
    st.work[:] = 0.0
    if st.started[0] == 0:
        return 0, FIRST
    n_out = collective_receive(st, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload,
                               0)
    if round_ - st.start_round[0] < st.rounds_needed:
        return n_out, WAITING
    return n_out, COMPLETE


@inner
def allreduce_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out):
    """Start the next all-reduce this round, from the inputs in the members' rows of `st.value`."""
    collective_reset(st)
    n_out = collective_start(st, out_tag, out_src, out_dst, out_payload, n_out)
    st.start_round[0] = round_
    return n_out


@inner
def aux_start(st, round_, out_tag, out_src, out_dst, out_payload, n_out):
    """Start the state's auxiliary collective this round (`comm.collectives.aux_collective`; its rounds since
    ``st.aux_start_round`` tell when it is complete), from the inputs in the members' rows of its ``value``."""
    aux = aux_collective(st)
    collective_reset(aux)
    n_out = collective_start(aux, out_tag, out_src, out_dst, out_payload, n_out)
    st.aux_start_round[0] = round_
    return n_out


class AllreduceWorker(NodeProgram):
    """A worker whose compiled step runs one all-reduce after another (tags "partial" up, "total" down); its state
    is ``(numba state, max_out, node ids)`` and the numba state's ``work`` feeds the modelled time. Node data:
    ``{"X": CSR shard, "y": labels in {-1, +1}}`` per worker. Every worker is an initiator."""

    role = "worker"
    initiator = True
    step_function = None          # the numba round step

    def __init__(self, plan_: Plan, dim: int):
        self.plan, self.dim = plan_, dim
        table = plan_.tag_table("partial", "total") or [("partial", plan_.d)]
        self.tags = tuple(t for t, _ in table)
        self.widths = np.array([w for _, w in table], np.int64)

    def tag_ids(self) -> dict:
        return {t: i for i, t in enumerate(self.tags)}

    def kernel(self, state):
        st, max_out, _ = state
        return SyncKernel(st, self.step_function, self.tags, self.widths, max_out, work=st.work)

    def step(self, state, inbox, round_):
        return state, kernel_step(self.kernel(state), inbox, round_)


# ---------------------------------------------------------------------------------------------------------------
# the layout of a run
# ---------------------------------------------------------------------------------------------------------------

#: the all-reduce pattern that `allreduce = "auto"` picks for a topology kind (each pattern's `auto_kinds`; a
#: pattern may also accept a kind by its parameters, as the torus takes a periodic grid: `Pattern.fits`)
PATTERN_FOR_TOPOLOGY = {kind: name for name in PATTERNS for kind in get_pattern(name).auto_kinds}


def check_problem(ds, workers: int) -> None:
    """One clear error for a binary problem the workers cannot solve."""
    if ds.n_pos == 0 or ds.n_neg == 0:
        raise DataError(f"data set '{ds.name}' has only one class ({ds.n} points labelled "
                        f"{'+1' if ds.n_neg == 0 else '-1'}); allowed: labels of both classes")
    if workers > ds.n:
        raise InfeasibleParameterError(f"workers = {workers} exceeds the number of training points ({ds.n}); "
                                       f"allowed: 1 <= workers <= {ds.n}")


def _topology(problem, workers: int):
    from ..topology import build_topology

    if problem.topology is not None:
        return problem.topology
    kind = problem.topology_kind
    if kind == "ring" and workers < 3:
        kind = "line" if workers == 2 else "complete"
    if workers == 1:                       # one machine: nothing to send
        import networkx as nx

        G = nx.empty_graph(1)
        G.graph["kind"] = problem.topology_kind
        return G
    return build_topology(kind, workers, seed=problem.seed, **problem.topology_params)


def _pattern(allreduce: str, problem, G) -> str:
    if allreduce != "auto":
        return allreduce
    kind = G.graph.get("kind", problem.topology_kind)
    if kind == "line" and G.number_of_nodes() <= 2:          # one link: the ring of two workers
        return "ring"
    params = dict(problem.topology_params or {})
    fits = [name for name in PATTERNS if get_pattern(name).fits(kind, params, G)]
    if not fits:
        raise TopologyError(f"allreduce = 'auto' has no pattern for topology kind '{kind}'; allowed: set "
                            f"algorithm.allreduce to {', '.join(PATTERNS[:-1])} or {PATTERNS[-1]} (on a topology "
                            "with its edges, e.g. [topology] kind = \"complete\")")
    return fits[0]


def check_pattern_edges(p, G, pattern: str, key: str = "algorithm.allreduce", what: str = "") -> None:
    """Refuse a pattern that needs links the topology lacks, naming the first one (`what`: whose collective it is;
    `key`: the scenario key that picks its pattern)."""
    need = {(min(s, d), max(s, d)) for _, s, d, _, _ in p.schedule()}
    missing = sorted(e for e in need if not G.has_edge(*e))
    if missing:
        a, b = missing[0]
        kind = G.graph.get("kind", "given")
        raise TopologyError(f"{what}the {pattern} all-reduce over {p.k} workers needs the link {a}-{b} (and "
                            f"{len(missing) - 1} more), which the {kind} topology lacks; allowed: a topology with "
                            f"those links (e.g. [topology] kind = \"complete\", a switched cluster), or "
                            f"{key} = a pattern the topology carries")


class WorkerLayout:
    """Where K all-reduce workers' data go: the topology, the pattern and each worker's training indices."""

    def __init__(self, G, pattern: str, parts: list[np.ndarray]):
        self.topology, self.pattern, self.parts = G, pattern, parts
        self.k = len(parts)
        self.node_names = [f"worker-{i}" for i in range(self.k)]

    def node_data(self, X, y) -> list[dict]:
        return [{"X": X[idx], "y": y[idx]} for idx in self.parts]

    def check(self, p: Plan) -> None:
        check_pattern_edges(p, self.topology, self.pattern)


def worker_layout(problem, workers: int, allreduce: str, width: int) -> WorkerLayout:
    """The topology (built from the scenario's kind when none is given), the all-reduce pattern (auto: the
    topology's own) and the partition of a run of `workers` workers whose all-reduce carries `width` scalars."""
    from ..data import partition

    ds = problem.dataset
    k = workers
    G = _topology(problem, k)
    if G.number_of_nodes() != k:
        raise TopologyError(f"the run has {k} workers; the topology has {G.number_of_nodes()} nodes; allowed: a "
                            f"topology of {k} nodes (algorithm.workers = its number of nodes)")
    pattern = _pattern(allreduce, problem, G)
    need = get_pattern(pattern).min_width(k)
    if k > 1 and width < need:
        raise InfeasibleParameterError(f"a {pattern} all-reduce of {width} scalars over {k} workers has chunks of "
                                       f"nothing (its rings have up to {need} members, a chunk each); allowed: "
                                       f"workers whose rings have at most {width} members, or allreduce = tree or "
                                       "star")
    parts = partition(ds.y, k, problem.partition_scheme, seed=problem.seed, **problem.partition_params)
    return WorkerLayout(G, pattern, parts)


def partial_steps(p: Plan) -> np.ndarray:
    """Scalars sent in each step of the plan (for the count of an all-reduce under way)."""
    sched = p.schedule()
    return np.bincount(np.array([m[0] for m in sched], np.int64), weights=np.array([m[4] for m in sched]),
                       minlength=1).astype(np.int64)


def declared_scalars(p: Plan, completed: int, obs_workers: list[dict], aux: Plan | None = None) -> int:
    """The scalars the ledger must hold: `completed` whole all-reduces, and the steps of the one under way (it
    starts in the round the previous one ends). Each worker's observation gives ``started`` (per node) and
    ``group["stepped"]`` (the last round its group was stepped in). With `aux` (a state's auxiliary collective,
    run between the main ones) the group also gives ``aux_done`` (auxiliary collectives completed), ``in_flight``
    ("main" or "aux": the one under way) and ``aux_started`` (the round it started)."""
    group = obs_workers[0]["group"]
    stepped = max(o["group"]["stepped"] for o in obs_workers)
    if aux is None or group["in_flight"] == "main":
        flight, started = p, int(obs_workers[0]["started"][0])
    else:
        flight, started = aux, int(group["aux_started"])
    out = completed * p.scalars() + int(partial_steps(flight)[:max(0, stepped - started + 1)].sum())
    return out + (int(group["aux_done"]) * aux.scalars() if aux is not None else 0)
