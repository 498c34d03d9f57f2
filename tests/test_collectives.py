"""Collectives over every registered pattern (star, ring, tree, binomial, torus): every node ends with the exact sum (in the documented order) or the
gathered vector, the ledger equals the plan's closed-form counts, the results do not depend on how the nodes are
grouped onto hosts or on the loop (Python or compiled), and bad configurations are refused clearly."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from svmsim.algorithms.collective import CollectiveProgram
from svmsim.comm import Meter
from svmsim.comm.collectives import OPS, PATTERNS, _simulate, collective_reset, plan
from svmsim.comm.patterns import get_pattern
from svmsim.comm.patterns.torus import torus_shape
from svmsim.engine import InProcessEngine
from svmsim.engine.base import split_roles
from svmsim.errors import ProtocolError
from svmsim.program import RoleSpec
from svmsim.schedule import SyncScheduler
from svmsim.schedule.sync import StopReason
from svmsim.topology import build_topology

D = 37


def _topology(pattern, k):
    if pattern == "torus":
        return build_topology("grid", k, periodic=True)
    if pattern == "ring":
        return build_topology("ring" if k >= 3 else "line", k)
    if pattern == "binomial":
        return build_topology("hypercube", k)
    return build_topology(pattern, k) if pattern == "star" else build_topology("tree", k, branching=2)


def _values(k, d=D, seed=0):
    return np.random.default_rng(seed + 100 * k).standard_normal((k, d))


def _run(p, values, topology, *, compiled, groups=1, up="up", down="down"):
    k = p.k
    nodes = p.nodes
    roles = [RoleSpec("peer", CollectiveProgram(p, up, down), nodes, [{"value": v} for v in values])]
    eng = InProcessEngine()
    plan_groups = eng.plan(roles) if groups == 1 else split_roles(roles, {"peer": groups})
    eng.deploy(plan_groups, 0)
    n = int(nodes.max()) + 1
    adjacency = nx.to_numpy_array(topology, nodelist=range(n)) > 0 if topology is not None else None
    meter = Meter(n, adjacency)
    reason = SyncScheduler(eng, plan_groups, meter, n, compiled=compiled).run()
    assert reason == StopReason.QUIESCENT
    out = np.full((k, p.width), np.nan)
    finished = np.zeros(k, bool)
    pos = {int(x): i for i, x in enumerate(nodes)}
    for obs in eng.observe().values():
        for j, node in enumerate(obs["ids"]):
            out[pos[int(node)]] = obs["value"][j]
            finished[pos[int(node)]] = obs["finished"][j]
    return out, finished, meter.ledger()


def _sequential(rows):
    acc = rows[0].copy()
    for r in rows[1:]:
        acc = acc + r
    return acc


#: every operation of every registered pattern
PATTERN_OPS = [(pattern, op) for pattern in PATTERNS for op in OPS if op in get_pattern(pattern).ops]


@pytest.mark.parametrize("k", [1, 2, 3, 16])
@pytest.mark.parametrize("pattern, op", PATTERN_OPS)
def test_collective_results_and_ledger(pattern, op, k):
    p = plan(op, pattern, np.arange(k), D)
    values = _values(k)
    topology = _topology(pattern, k) if k > 1 else None
    want = p.reference(values)
    runs = [(c, g) for c in (False, True) for g in ((1, 2, 3) if k > 1 else (1,))]
    results = {}
    for compiled, groups in runs:
        got, finished, ledger = _run(p, values, topology, compiled=compiled, groups=groups)
        results[compiled, groups] = got
        if op == "reduce":
            assert np.array_equal(got[p.root], want[p.root])
            assert finished[p.root]
        else:
            assert np.array_equal(got, want) and finished.all()
        # the ledger: closed-form totals, rounds that carry messages, per tag and per edge from the plan
        assert ledger.totals["messages"] == p.messages()
        assert ledger.totals["scalars"] == p.scalars()
        assert ledger.rounds.shape[0] == p.rounds()
        sched = p.schedule()
        by_tag = {}
        for _, _, _, tag, w in sched:
            m = by_tag.setdefault(tag, [0, 0, 0])
            m[0] += 1
            m[1] += w
            m[2] += 8 * w
        assert ledger.by_tag == dict(sorted(by_tag.items()))
        edges = {}
        for _, s, d, _, w in sched:
            e = edges.setdefault((s, d), [0, 0])
            e[0] += 1
            e[1] += w
        assert {(int(r[0]), int(r[1])): [int(r[2]), int(r[3])] for r in ledger.edges} == edges
        assert [int(r[0]) for r in ledger.rounds] == sorted({m[0] for m in sched})
    first = results[runs[0]]
    rows = slice(p.root, p.root + 1) if op == "reduce" else slice(None)
    for got in results.values():                  # the same bits for every grouping and either loop
        assert np.array_equal(got[rows], first[rows])


@pytest.mark.parametrize("k", [2, 3, 16])
def test_sums_follow_the_documented_order(k):
    v = _values(k)
    # star: the root's own value, then the leaves by node id; np.add.reduce over rows adds them in order
    star = plan("allreduce", "star", np.arange(k), D).reference(v)
    assert np.array_equal(star[0], np.add.reduce(v, axis=0)) and np.array_equal(star[0], _sequential(v))
    # ring all-reduce: chunk j is summed along the ring from position j
    p = plan("allreduce", "ring", np.arange(k), D)
    ring = p.reference(v)
    for j in range(k):
        a, b = p.lo[j], p.lo[j + 1]
        assert np.array_equal(ring[0, a:b], _sequential([v[(j + s) % k, a:b] for s in range(k)]))
    assert sorted(np.diff(p.lo).tolist()) == sorted([D // k + (1 if c < D % k else 0) for c in range(k)])
    # ring reduce: a chain from root + 1 to the root
    red = plan("reduce", "ring", np.arange(k), D, root=k - 1).reference(v)
    assert np.array_equal(red[k - 1], _sequential([v[s] for s in range(k)]))
    # tree: own value, then the children's partial sums by arrival (subtree height, then node id)
    tree = plan("allreduce", "tree", np.arange(k), D).reference(v)
    assert np.allclose(tree[0], v.sum(axis=0), rtol=1e-12, atol=1e-12)
    if k == 3:
        assert np.array_equal(tree[0], (v[0] + v[1]) + v[2])


def test_any_root_and_node_ids_and_caller_tags():
    """Participants are any node ids (here every other node of a star whose hub is the root); the caller names
    the tags."""
    k, n = 6, 12
    nodes = np.array([0, 2, 4, 6, 8, 10])
    p = plan("allreduce", "star", nodes, 5, root=0)
    v = _values(k, 5)
    assert p.tag_table("delta", "delta_sum") == [("delta", 5), ("delta_sum", 5)]
    got, _, ledger = _run(p, v, build_topology("star", n), compiled=True, up="delta", down="delta_sum")
    assert np.array_equal(got, p.reference(v))
    assert ledger.by_tag == {"delta": [5, 25, 200], "delta_sum": [5, 25, 200]}
    # a tree rooted elsewhere: heap layout over [root] + the others
    p = plan("allreduce", "tree", np.arange(7), 4, root=3, branching=3)
    assert p.parent.tolist() == [3, 3, 3, -1, 0, 0, 0]
    assert p.rounds() == 4 and p.messages() == 12 and p.scalars() == 48
    got, _, _ = _run(p, _values(7, 4), nx.Graph([(3, 0), (3, 1), (3, 2), (0, 4), (0, 5), (0, 6)]), compiled=False)
    assert np.array_equal(got, p.reference(_values(7, 4)))


def test_closed_form_counts():
    k, d = 16, 37
    assert [plan(op, "star", np.arange(k), d).scalars() for op in OPS] == [15 * d, 15 * d, 30 * d, 15 * d + 15 * 16 * d]
    assert [plan(op, "ring", np.arange(k), d).messages() for op in OPS] == [15, 15, 2 * 15 * 16, 15 * 16]
    assert [plan(op, "ring", np.arange(k), d).rounds() for op in OPS] == [15, 15, 30, 15]
    assert [plan(op, "tree", np.arange(k), d).rounds() for op in OPS] == [4, 4, 8, 8]
    # tree all-gather: a block goes up once per edge above it (depths 0, 1, 1, 2 x4, 3 x8, 4), then K*d down
    depths = 2 * 1 + 4 * 2 + 8 * 3 + 1 * 4
    assert plan("allgather", "tree", np.arange(k), d).scalars() == d * depths + 15 * 16 * d


@pytest.mark.parametrize("k", [2, 3, 5, 16, 17])
def test_the_binomial_tree(k):
    """Index h's parent is h with its lowest bit cleared (root elsewhere: indices over [root] + the others), so the
    tree's height is the most set bits of an index below K; a parent lists its tallest subtree first (the order
    it sends down in); every link is a hypercube link; counts are the tree's closed forms."""
    d = 2 * k + 1
    p = plan("allreduce", "binomial", np.arange(k), d)
    assert p.parent.tolist() == [-1] + [h & (h - 1) for h in range(1, k)]
    height = max(bin(h).count("1") for h in range(k))
    assert p.height() == height and p.rounds() == 2 * height
    assert p.messages() == 2 * (k - 1) and p.scalars() == 2 * (k - 1) * d
    tall = p.heights()
    assert list(p.children[0]) == sorted(p.children[0], key=lambda c: (-tall[c], -c))
    cube = build_topology("hypercube", k)
    assert all(cube.has_edge(s, t) for _, s, t, _, _ in p.schedule())
    assert p.schedule()[-1][0] == 2 * height - 1
    moved = plan("allreduce", "binomial", [4, 0, 1, 2, 3], 3, root=2)
    assert moved.parent.tolist() == [3, 3, 1, -1, 3]     # node 2 (position 3) is index 0; positions 0, 1, 2, 4: 1-4


@pytest.mark.parametrize("args, match", [
    (("allreduce", "star", [], 3), r"K = 0 participants; allowed: K >= 1"),
    (("allreduce", "star", [0, 1, 2], 0), r"d = 0 scalars per node; allowed: an integer d >= 1"),
    (("allreduce", "tree", [0, 1, 2], 3, 7), r"root 7 is not a participant; allowed: one of the nodes \[0, 1, 2\]"),
    (("allreduce", "ring", [0, 1, 2], 2), r"splits d = 2 scalars into K = 3 chunks; allowed: d >= K"),
    (("allreduce", "mesh", [0, 1], 3), r"pattern 'mesh' is unknown; allowed: star, ring, tree, binomial"),
    (("scan", "ring", [0, 1], 3), r"operation 'scan' is unknown; allowed: reduce, broadcast, allreduce"),
    (("reduce", "star", [0, 1, 1], 3), r"not distinct non-negative integer node ids"),
])
def test_bad_configurations_are_refused(args, match):
    with pytest.raises(ProtocolError, match=match):
        plan(*args)
    with pytest.raises(ProtocolError, match="branching = 0; allowed: an integer branching >= 1"):
        plan("reduce", "tree", [0, 1, 2], 3, branching=0)


def test_messages_travel_along_the_topology():
    p = plan("allreduce", "ring", np.arange(5), 7)
    with pytest.raises(ProtocolError, match="not neighbours in the topology"):
        _run(p, _values(5, 7), build_topology("star", 5), compiled=False)
    with pytest.raises(ProtocolError, match="not neighbours in the topology"):
        _run(p, _values(5, 7), build_topology("star", 5), compiled=True)


def test_a_collective_runs_again_after_a_reset():
    p = plan("allreduce", "tree", np.arange(6), 5)
    st = p.arrays(p.nodes, _values(6, 5), {t: i for i, (t, _) in enumerate(p.tag_table())})
    for scale in (1.0, 2.0):
        if scale != 1.0:
            collective_reset(st)
            st.value[:] = scale * _values(6, 5)
        assert len(_simulate(p, st)) == p.messages()
        assert np.array_equal(st.value, p.reference(scale * _values(6, 5))) and st.finished.all()


@pytest.mark.parametrize("k", [1, 2, 5, 16])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_columns_combine_by_sum_min_or_max(pattern, k):
    """One all-reduce carries sums, a minimum and a maximum (paper 001's d-vector, three sums and the step's
    box limit): each column ends as its operation over the nodes, on every node, for any grouping."""
    d = 20
    ops = ["sum"] * (d - 2) + ["min", "max"]
    p = plan("allreduce", pattern, np.arange(k), d, combine=ops)
    values = _values(k, d)
    want = p.reference(values)
    assert np.array_equal(want[:, -2], np.full(k, values[:, -2].min()))
    assert np.array_equal(want[:, -1], np.full(k, values[:, -1].max()))
    assert np.array_equal(want[:, :-2], plan("allreduce", pattern, np.arange(k), d).reference(values)[:, :-2])
    topology = _topology(pattern, k) if k > 1 else None
    for compiled, groups in [(False, 1), (True, 1)] + ([(True, 2)] if k > 1 else []):
        got, finished, ledger = _run(p, values, topology, compiled=compiled, groups=groups)
        assert np.array_equal(got, want) and finished.all()
        assert ledger.totals["scalars"] == p.scalars()
    if "reduce" in get_pattern(pattern).ops:
        rp = plan("reduce", pattern, np.arange(k), d, combine="min")
        assert np.array_equal(rp.reference(values)[rp.root], values.min(axis=0))


def test_bad_combines_are_refused():
    with pytest.raises(ProtocolError, match=r"combine 'prod' is unknown; allowed: sum, min, max"):
        plan("allreduce", "ring", np.arange(3), 4, combine="prod")
    with pytest.raises(ProtocolError, match=r"combine names 2 columns where d = 4"):
        plan("allreduce", "ring", np.arange(3), 4, combine=["sum", "min"])
    with pytest.raises(ProtocolError, match=r"combine 'min' for a broadcast; allowed: combine with reduce"):
        plan("broadcast", "ring", np.arange(3), 4, combine="min")


@pytest.mark.parametrize("pattern", ["star", "tree", "binomial"])
def test_a_plan_over_ten_thousand_workers_is_simulated_in_memory_linear_in_k(pattern):
    """The schedule of a 20 000-worker all-reduce (the declared counts of paper 001 and 004's runs) is simulated
    with step buffers of the plan's largest round, not K^2 rows (which at this K were 1.6e9 rows, 190 GiB)."""
    import tracemalloc

    k, d = 20_000, 8
    p = plan("allreduce", pattern, np.arange(k, dtype=np.int64), d)
    tracemalloc.start()
    try:
        messages = p.schedule()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(messages) == 2 * (k - 1)
    up = [src for _, src, _, tag, _ in messages if tag == "up"]
    assert sorted(up) == list(range(1, k))                  # every worker but the root sends up once
    assert peak < 200e6


# -- the 2D torus -------------------------------------------------------------------------------------------------

def _torus_by_hand(v, r, c):
    """The torus all-reduce's documented order, written out: row i's chunk j (of c) summed along the row from
    column j; then column chunk m (of r) of the row totals summed down the rows from row m."""
    k, d = v.shape
    grid = v.reshape(r, c, d)
    rows = np.empty((r, d))
    lo_c = np.concatenate([[0], np.cumsum([d // c + (1 if j < d % c else 0) for j in range(c)])])
    for i in range(r):
        for j in range(c):
            a, b = lo_c[j], lo_c[j + 1]
            rows[i, a:b] = _sequential([grid[i, (j + s) % c, a:b] for s in range(c)])
    lo_r = np.concatenate([[0], np.cumsum([d // r + (1 if m < d % r else 0) for m in range(r)])])
    total = np.empty(d)
    for m in range(r):
        a, b = lo_r[m], lo_r[m + 1]
        total[a:b] = _sequential([rows[(m + s) % r, a:b] for s in range(r)])
    return total


#: K and its grid r x c (the most square factorisation, r <= c): 1 x 1, r = 1 (K prime), square and not
TORUS_SHAPES = [(1, (1, 1)), (2, (1, 2)), (5, (1, 5)), (4, (2, 2)), (6, (2, 3)), (8, (2, 4)), (9, (3, 3)),
                (12, (3, 4)), (16, (4, 4))]


@pytest.mark.parametrize("k, shape", TORUS_SHAPES)
def test_the_torus_all_reduce_is_exact_and_meters_its_closed_form(k, shape):
    """Rows then columns: the result is the documented order bit for bit on every node, for every grouping of
    nodes onto hosts and either loop; the ledger holds 2d(2K - r - c) scalars in 2K(r + c - 2) messages over
    2(r + c - 2) rounds, every message on a link of the periodic grid."""
    r, c = shape
    assert torus_shape(k) == shape
    d = 11
    p = plan("allreduce", "torus", np.arange(k), d)
    assert p.scalars() == 2 * d * (2 * k - r - c)
    assert p.messages() == 2 * k * (r + c - 2)
    assert p.rounds() == 2 * (r + c - 2)
    sched = p.schedule()           # the executor's own counts agree with the closed forms
    assert len(sched) == p.messages() and sum(m[4] for m in sched) == p.scalars()
    assert (sched[-1][0] + 1 if sched else 0) == p.rounds()
    values = _values(k, d)
    want = p.reference(values)
    assert all(np.array_equal(row, _torus_by_hand(values, r, c)) for row in want)
    if k == 1:
        return
    grid = build_topology("grid", k, periodic=True)
    assert grid.graph["grid_shape"] == shape
    assert all(grid.has_edge(s, t) for _, s, t, _, _ in sched)
    first = None
    for compiled in (False, True):
        for groups in (1, 2, 3):
            got, finished, ledger = _run(p, values, grid, compiled=compiled, groups=groups)
            assert np.array_equal(got, want) and finished.all()
            assert ledger.totals["messages"] == p.messages() and ledger.totals["scalars"] == p.scalars()
            assert ledger.rounds.shape[0] == p.rounds()
            first = got if first is None else first
            assert np.array_equal(got, first)


def test_the_torus_with_other_node_ids_and_combines():
    """Participants are any node ids (positions by their order); sum, min and max columns in one all-reduce."""
    nodes = np.array([3, 7, 1, 9, 4, 0])                        # K = 6: 2 x 3
    d = 8
    ops = ["sum"] * 6 + ["min", "max"]
    p = plan("allreduce", "torus", nodes, d, combine=ops)
    values = _values(6, d)
    want = p.reference(values)
    assert np.array_equal(want[:, :6], np.tile(_torus_by_hand(values, 2, 3)[:6], (6, 1)))
    assert np.array_equal(want[:, 6], np.full(6, values[:, 6].min()))
    assert np.array_equal(want[:, 7], np.full(6, values[:, 7].max()))
    links = nx.Graph([(int(nodes[a]), int(nodes[b])) for a, b in build_topology("grid", 6, periodic=True).edges])
    links.add_nodes_from(range(10))
    for compiled in (False, True):
        got, finished, ledger = _run(p, values, links, compiled=compiled, groups=2)
        assert np.array_equal(got, want) and finished.all()
        assert ledger.totals["scalars"] == p.scalars()


def test_the_torus_refuses_what_it_cannot_lay_out():
    with pytest.raises(ProtocolError, match=r"the torus pattern has no reduce; allowed: allreduce over torus"):
        plan("reduce", "torus", np.arange(4), 3)
    with pytest.raises(ProtocolError, match=r"a torus all-reduce splits d = 3 scalars into chunks of rings of up "
                                            r"to 4 participants; allowed: d >= 4"):
        plan("allreduce", "torus", np.arange(8), 3)
    with pytest.raises(ProtocolError, match=r"pattern 'mesh' is unknown; allowed: star, ring, tree, binomial, torus"):
        plan("allreduce", "mesh", np.arange(4), 3)
    p = plan("allreduce", "torus", np.arange(6), 5)          # 2 x 3: the plain grid lacks the wrap-around 2-0
    with pytest.raises(ProtocolError, match="not neighbours in the topology"):
        _run(p, _values(6, 5), build_topology("grid", 6), compiled=True)
