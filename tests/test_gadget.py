"""GADGET SVM (paper 002, Algorithm 2): gossip node programs, their message counts, consensus and accuracy."""
from __future__ import annotations

import math

import numpy as np
import pytest

from svmsim.algorithms.gadget import (AVERAGE, AVERAGE_REPLY, PUSH, GadgetParams, GadgetPeer, build_gadget,
                                      gadget_scalars_per_message, gather_nodes)
from svmsim.algorithms.pegasos import PegasosSVC
from svmsim.comm.message import MessageBatch
from svmsim.comm.meter import Meter
from svmsim.deployment import Problem
from svmsim.engine.base import split_roles
from svmsim.engine.inproc import InProcessEngine
from svmsim.core.timing import Distribution, LatencyModel
from svmsim.schedule.gossip import GossipScheduler, GossipStopReason

LAM_A9A = 3.07e-5          # paper 002, Table 2 (Adult)


def run_gossip(deployment, seed: int, groups: int = 1, compiled: bool | None = None, max_time: float | None = None,
               latency: float = 0.0):
    """Run a deployment on the gossip scheduler (rate-1 Poisson clocks, constant latency) until every node has
    finished or `max_time`. Returns (observations, meter, stop reason, scheduler)."""
    engine = InProcessEngine()
    groups_ = split_roles(deployment.roles, {"peer": groups})
    engine.deploy(groups_, seed)
    meter = Meter(deployment.n_nodes, deployment.adjacency(), deployment.node_names)
    scheduler = GossipScheduler(engine, groups_, meter, deployment.topology, seed=seed, compiled=compiled,
                                latency=LatencyModel(Distribution.constant(latency)))
    reason = scheduler.run(max_time=max_time)
    scheduler.left_in_flight = scheduler.in_flight()
    scheduler.finish()
    observations = {"peer": [o for _, o in sorted(engine.observe().items())]}
    return observations, meter, reason, scheduler


@pytest.fixture(scope="module")
def a9a(load):
    return load("a9a", test="auto")


@pytest.fixture(scope="module")
def mushrooms(load):
    return load("mushrooms")


def _deploy(ds, seed=0, topology="random_k_out", topology_params=None, **params):
    kind_params = {"k": 2} if topology_params is None else topology_params
    problem = Problem(ds, seed=seed, topology_kind=topology, topology_params=kind_params)
    return build_gadget(GadgetParams(**params), problem)


@pytest.mark.parametrize("gossip", ["push-sum", "pairwise"])
def test_ledger_equals_declared_count(mushrooms, gossip):
    dep = _deploy(mushrooms, nodes=8, lam=1e-3, gossip=gossip, eps=0.0, iterations=300)
    obs, meter, reason, scheduler = run_gossip(dep, seed=1, latency=0.05)
    per_message = gadget_scalars_per_message(mushrooms.d, gossip)
    assert per_message == (mushrooms.d + 1 if gossip == "push-sum" else mushrooms.d)
    assert set(dep.info["scalars_per_message"].values()) == {per_message}
    assert reason == GossipStopReason.DONE
    messages = meter.messages
    assert meter.scalars == messages * per_message == dep.declared_scalars(obs)
    assert sorted(meter.by_tag) == (["push"] if gossip == "push-sum" else ["average", "average_reply"])
    g = gather_nodes(obs["peer"])
    assert (g["steps"] == 300).all()
    sends = g["sent_push"].sum() + g["sent_average"].sum()
    assert sends == 8 * 300                      # uniform B: one exchange per tick, one tick per step
    if gossip == "pairwise":
        # every request is answered, except those still in flight when the last node finished
        unanswered = sum(tag == "average" for _, _, tag, _ in scheduler.left_in_flight)
        assert g["sent_average"].sum() - g["sent_reply"].sum() == unanswered
        assert messages == sends + g["sent_reply"].sum()


@pytest.mark.parametrize("size_weighted", [True, False])
def test_push_sum_conserves_total_weight(load, size_weighted):
    ds = load("heart_scale")
    dep = _deploy(ds, nodes=7, lam=1e-2, eps=0.0, iterations=200, size_weighted=size_weighted, rounds=3)
    obs, _, _, scheduler = run_gossip(dep, seed=2, groups=2, latency=0.3)
    g = gather_nodes(obs["peer"])
    in_flight = sum(payload[-1] for _, _, _, payload in scheduler.left_in_flight)      # shares not yet added
    assert g["omega"].sum() + in_flight == pytest.approx(7.0, rel=1e-12)
    sizes = g["shard_sizes"]
    start = sizes / sizes.mean() if size_weighted else np.ones(7)
    assert not np.allclose(g["omega"], start)          # weight did move between nodes


def test_receive_is_push_sum_and_pairwise_averaging(mushrooms):
    d = mushrooms.d
    rng = np.random.default_rng(0)
    node_data = [{"X": mushrooms.X[:5], "y": mushrooms.y[:5], "neighbours": [1 - i], "probs": [1.0], "omega": 1.0}
                 for i in range(2)]
    # Push-Sum: the receiver's model becomes the ratio (omega w + s)/(omega + omega_in); (h) keeps it in the ball
    program = GadgetPeer(d, lam=1e-4, gossip="push-sum")
    st = program.init(np.array([0, 1]), node_data, 0)
    st.W[:] = rng.normal(size=(2, d))
    w0, w1 = st.W[0].copy(), st.W[1].copy()
    share = np.concatenate([0.5 * w0, [0.5]])[None, :]
    st, out = program.receive(st, MessageBatch(PUSH, np.array([0]), np.array([1]), share), np.zeros(1))
    assert not out.batches
    np.testing.assert_allclose(st.W[1], (w1 + 0.5 * w0) / 1.5)
    assert st.node_floats[1]["omega"] == 1.5
    # pairwise: the peer moves to the mean and answers minus its change, which the initiator adds
    program = GadgetPeer(d, lam=1e-4, gossip="pairwise")
    st = program.init(np.array([0, 1]), node_data, 0)
    st.W[:] = rng.normal(size=(2, d))
    w0, w1 = st.W[0].copy(), st.W[1].copy()
    st, out = program.receive(st, MessageBatch(AVERAGE, np.array([0]), np.array([1]), w0[None, :]), np.zeros(1))
    (reply,) = out.batches
    assert reply.tag == AVERAGE_REPLY and reply.src.tolist() == [1] and reply.dst.tolist() == [0]
    np.testing.assert_allclose(reply.payload[0], (w1 - w0) / 2)
    st, _ = program.receive(st, reply, np.zeros(1))
    np.testing.assert_allclose(st.W, np.vstack([(w0 + w1) / 2] * 2))
    # an exchange that overlaps a local step keeps that step and the sum of the models
    st.W[:] = [w0, w1]
    step = rng.normal(size=d)
    st, out = program.receive(st, MessageBatch(AVERAGE, np.array([0]), np.array([1]), w0[None, :]), np.zeros(1))
    st.W[0] += step
    st, _ = program.receive(st, out.batches[0], np.zeros(1))
    np.testing.assert_allclose(st.W.sum(axis=0), w0 + w1 + step)
    np.testing.assert_allclose(st.W[0], (w0 + w1) / 2 + step)


def test_local_step_is_algorithm_2_steps_a_to_f(mushrooms):
    """One tick of a node: Pegasos step (a)-(f) on one local sample, then a Push-Sum share to its neighbour."""
    lam = 1e-2
    program = GadgetPeer(mushrooms.d, lam=lam, gossip="push-sum", eps=0.0)
    X, y = mushrooms.X[:40].toarray(), mushrooms.y[:40]
    node_data = [{"X": X[:20], "y": y[:20], "neighbours": [1], "probs": [1.0]},
                 {"X": X[20:], "y": y[20:], "neighbours": [0], "probs": [1.0]}]
    st = program.init(np.array([0, 1]), node_data, 7)
    w = np.zeros(mushrooms.d)
    for t in range(1, 30):
        before = st.W[0].copy()
        st, out = program.wake(st, np.array([0]), np.zeros(1))
        # which sample was drawn: the one whose step reproduces the new model
        candidates = []
        for i in range(20):
            v = (1 - 1 / t) * before + (y[i] * X[i] / (lam * t) if y[i] * (X[i] @ before) < 1 else 0)
            v *= min(1.0, (1 / math.sqrt(lam)) / max(np.linalg.norm(v), 1e-300))
            candidates.append(v)
        assert min(np.abs(c - st.W[0]).max() for c in candidates) <= 1e-9 * (1 + np.abs(st.W[0]).max())
        (batch,) = out.batches
        assert batch.src.tolist() == [0] and batch.dst.tolist() == [1]
        omega = st.node_floats[0]["omega"]
        np.testing.assert_allclose(batch.payload[0], np.concatenate([omega * st.W[0], [omega]]))
        w = st.W[0]
    assert st.counters[0]["steps"] == 29 and np.linalg.norm(w) <= 1 / math.sqrt(lam) * (1 + 1e-12)


@pytest.mark.parametrize("gossip", ["push-sum", "pairwise"])
def test_compiled_loop_python_loop_and_grouping_give_the_same_run(mushrooms, gossip):
    dep = _deploy(mushrooms, nodes=9, lam=1e-3, gossip=gossip, eps=0.0, iterations=150)
    runs = [run_gossip(dep, seed=4, compiled=True, latency=0.2), run_gossip(dep, seed=4, compiled=False, latency=0.2),
            run_gossip(dep, seed=4, groups=3, latency=0.2)]
    assert runs[0][3].compiled and not runs[1][3].compiled
    first = gather_nodes(runs[0][0]["peer"])
    for obs, meter, reason, _ in runs[1:]:
        other = gather_nodes(obs["peer"])
        np.testing.assert_array_equal(first["w"], other["w"])
        np.testing.assert_array_equal(first["steps"], other["steps"])
        assert meter.ledger().equals(runs[0][1].ledger())


def test_more_gossip_rounds_per_step_tighten_consensus(a9a):
    """R gossip ticks per local step ('Push-Sum to termination' approximated): at the same number of local steps,
    the nodes' models are closer to their average."""
    errors = {}
    for rounds in (1, 8):
        dep = _deploy(a9a, nodes=10, lam=LAM_A9A, eps=0.0, rounds=rounds)
        obs, *_ = run_gossip(dep, seed=0, max_time=800.0 * rounds)      # about 800 local steps per node
        metrics = dep.evaluate(obs)
        errors[rounds] = metrics["model_disagreement"]
        assert metrics["model_disagreement_max"] >= metrics["model_disagreement"] > 0
        assert 700 <= metrics["steps_mean"] <= 900
    assert errors[8] < 0.5 * errors[1]


@pytest.mark.parametrize("gossip", ["push-sum", "pairwise"])
def test_paper_stopping_rule_finishes_every_node_and_finished_nodes_stay_quiet(a9a, gossip):
    dep = _deploy(a9a, nodes=10, lam=LAM_A9A, gossip=gossip)          # eps = 0.001, patience 10 (the paper's)
    obs, meter, reason, _ = run_gossip(dep, seed=0)
    g = gather_nodes(obs["peer"])
    assert reason == GossipStopReason.DONE and g["done"].all()
    assert (g["steps"] >= 10).all() and (g["last_dF"] <= 1e-3).all()
    metrics = dep.evaluate(obs)
    assert metrics["finished_nodes"] == 10 and metrics["test_accuracy"] >= 0.75
    # a finished node neither steps nor initiates gossip, but a pairwise peer still answers
    role = dep.roles[0]
    program = role.program
    state = program.init(role.node_ids, role.data_for(role.node_ids), 0)
    state.counters["done"] = 1                 # every node finished
    state.progress[0]["finished"] = 10
    state, out = program.wake(state, np.arange(10), np.zeros(10))
    assert not out.batches and out.signals == {"done": True}
    if gossip == "pairwise":
        request = MessageBatch(AVERAGE, np.array([1]), np.array([0]), np.ones((1, a9a.d)))
        state, out = program.receive(state, request, np.zeros(1))
        assert out.batches[0].tag == AVERAGE_REPLY


def test_metrics_summarise_nodes(a9a):
    dep = _deploy(a9a, nodes=10, lam=LAM_A9A, eps=0.0, iterations=500)
    obs, *_ = run_gossip(dep, seed=0)
    m = dep.evaluate(obs)
    for key in ("objective", "objective_std", "test_accuracy", "test_accuracy_std", "train_accuracy",
                "train_accuracy_std", "model_disagreement", "model_disagreement_max", "test_accuracy_shard",
                "average_model_test_accuracy", "average_model_objective"):
        assert np.isfinite(m[key]), key
    g = gather_nodes(obs["peer"])
    per_node = [0.5 * LAM_A9A * w @ w + np.maximum(0, 1 - a9a.y * (a9a.X @ w)).mean() for w in g["w"]]
    assert m["objective"] == pytest.approx(np.mean(per_node))
    assert m["objective_std"] == pytest.approx(np.std(per_node))
    assert m["steps_mean"] == 500 and m["local_steps"] == 5000


@pytest.mark.parametrize("average", [False, True])
def test_peeks_and_the_state_handed_over_show_the_models_without_copies_and_evaluate_alike(mushrooms, average):
    """`peek` shows W as a read-only view (w_out too, unless averaged iterates are kept: then a copy), `hand_over`
    the state's own W, `observe` copies; the evaluation and the final model give the same bits from each."""
    dep = _deploy(mushrooms, nodes=12, lam=1e-3, eps=0.0, iterations=40, average=average)
    engine = InProcessEngine()
    groups = split_roles(dep.roles, {"peer": 1})
    engine.deploy(groups, 0)
    GossipScheduler(engine, groups, Meter(dep.n_nodes, dep.adjacency()), dep.topology, seed=0).run(max_time=30.0)
    program, state = groups[0].program, engine.states[0]
    seen = {"observe": program.observe(state), "peek": program.peek(state), "hand_over": program.hand_over(state)}
    assert seen["peek"]["w"].base is state.W and not seen["peek"]["w"].flags.writeable
    assert seen["hand_over"]["w"] is state.W
    assert not np.shares_memory(seen["observe"]["w"], state.W)
    assert (seen["peek"]["w_out"].base is state.W) is not average
    assert (seen["hand_over"]["w_out"] is state.W) is not average
    metrics = {k: dep.evaluate({"peer": [o]}) for k, o in seen.items()}
    models = {k: dep.model({"peer": [o]}) for k, o in seen.items()}
    for k in ("peek", "hand_over"):
        assert metrics[k] == metrics["observe"]
        assert np.array_equal(models[k]["coef"], models["observe"]["coef"])
        assert np.array_equal(models[k]["node_coef"], models["observe"]["node_coef"])
    assert np.array_equal(seen["observe"]["w"], state.W) and not np.array_equal(state.W, 0 * state.W)


@pytest.mark.parametrize("gossip", ["push-sum", "pairwise"])
def test_gadget_accuracy_matches_centralized_pegasos_on_a9a(a9a, gossip):
    """Paper Table 3's comparison with 10 nodes (lambda = 3.07e-5): every node's averaged model against
    centralized Pegasos that sees as many samples (10 T), averaged likewise; within 1 point."""
    T = 3000
    dep = _deploy(a9a, nodes=10, lam=LAM_A9A, gossip=gossip, eps=0.0, iterations=T, average=True)
    obs, *_ = run_gossip(dep, seed=0)
    gadget = dep.evaluate(obs)
    pegasos = PegasosSVC(lam=LAM_A9A, max_iter=10 * T, average=True, random_state=0).fit(a9a.X, a9a.y)
    central = pegasos.score(a9a.X_test, a9a.y_test)
    assert central >= 0.84
    assert abs(gadget["test_accuracy"] - central) <= 0.01
    assert gadget["test_accuracy_std"] <= 0.01


def test_scenario_rejects_a_star_and_lists_peer_topologies():
    from svmsim.algorithms.registry import get_algorithm
    from svmsim.errors import ScenarioError
    from svmsim.config import load_scenario

    info = get_algorithm("gadget")
    assert info.distributed and "random_k_out" in info.topologies and "star" not in info.topologies
    with pytest.raises(ScenarioError, match="not supported by algorithm 'gadget'"):
        load_scenario({"name": "g", "data": {"name": "iris"}, "algorithm": {"name": "gadget"},
                       "stop": {"max_iterations": 10}})
    with pytest.raises(ScenarioError, match="iterations"):
        load_scenario({"name": "g", "data": {"name": "iris"}, "topology": {"kind": "ring"},
                       "algorithm": {"name": "gadget", "average": True}, "stop": {"max_iterations": 10}})


def test_lazy_mixing_rows_skip_exchanges_and_recovery_restarts_a_node(mushrooms):
    import networkx as nx

    from svmsim.topology import mixing_rows

    star = nx.star_graph(2)                                   # node 0 joined to 1 and 2
    for mixing, row0, row1 in (("neighbour", [0.5, 0.5], [1.0]), ("uniform", [1 / 3, 1 / 3], [0.5]),
                               ("metropolis", [1 / 3, 1 / 3], [1 / 3])):
        ptr, nbr, prob = mixing_rows(star, mixing)
        assert ptr.tolist() == [0, 2, 3, 4] and nbr.tolist() == [1, 2, 0, 0]
        np.testing.assert_allclose(prob[:2], row0)
        np.testing.assert_allclose(prob[2:3], row1)
    dep = _deploy(mushrooms, nodes=6, topology="ring", topology_params={}, lam=1e-3, eps=0.0, iterations=400,
                  mixing="uniform")
    obs, meter, reason, _ = run_gossip(dep, seed=3)
    g = gather_nodes(obs["peer"])
    # on a ring b_ii = 1/3: about a third of the ticks send nothing
    assert 0.6 * 6 * 400 <= meter.messages == g["sent_push"].sum() <= 0.73 * 6 * 400
    role = dep.roles[0]
    program = role.program
    state = program.init(role.node_ids, role.data_for(role.node_ids), 0)
    for _ in range(5):
        state, _ = program.wake(state, np.arange(6), np.zeros(6))
    program.recover(state, np.array([2]), keep_state=True)
    assert state.counters[2]["steps"] == 5
    program.recover(state, np.array([2]), keep_state=False)
    assert state.counters[2]["steps"] == 0 and not state.W[2].any() and state.counters[3]["steps"] == 5


@pytest.mark.slow
@pytest.mark.parametrize("gossip", ["push-sum", "pairwise"])
def test_gadget_matches_converged_centralized_pegasos_on_a9a(a9a, gossip):
    """Paper Table 3 at scale: 10 nodes, lambda = 3.07e-5, 30000 local steps per node (about 9 passes over each
    node's shard). Every node's averaged model is within 1 point of centralized Pegasos run to convergence
    (100 epochs), and of averaged Pegasos on as many samples."""
    T = 30_000
    pegasos = PegasosSVC(lam=LAM_A9A, max_iter=100 * a9a.n, random_state=0).fit(a9a.X, a9a.y)
    converged = pegasos.score(a9a.X_test, a9a.y_test)
    same_samples = PegasosSVC(lam=LAM_A9A, max_iter=10 * T, average=True, random_state=0).fit(a9a.X, a9a.y)
    assert 0.84 <= converged <= 0.855
    for average in (True, False):
        dep = _deploy(a9a, nodes=10, lam=LAM_A9A, gossip=gossip, eps=0.0, iterations=T, average=average)
        obs, meter, reason, scheduler = run_gossip(dep, seed=0)
        assert scheduler.compiled and reason == GossipStopReason.DONE
        m = dep.evaluate(obs)
        if average:
            assert abs(m["test_accuracy"] - converged) <= 0.01
            assert abs(m["test_accuracy"] - same_samples.score(a9a.X_test, a9a.y_test)) <= 0.01
            assert m["test_accuracy_std"] <= 0.005
        else:                      # the last iterates carry each node's latest step of size 1/(lam t): noisier
            assert m["test_accuracy"] >= 0.78
        assert meter.scalars == dep.declared_scalars(obs)


@pytest.mark.slow
def test_compiled_gossip_of_1000_nodes_sends_over_1e5_messages_per_second(a9a):
    import time

    dep = _deploy(a9a, nodes=1000, lam=LAM_A9A, eps=0.0, iterations=10)
    run_gossip(dep, seed=0)                                          # compile
    dep = _deploy(a9a, nodes=1000, lam=LAM_A9A, eps=0.0, iterations=500)
    started = time.perf_counter()
    obs, meter, reason, scheduler = run_gossip(dep, seed=0)
    elapsed = time.perf_counter() - started
    assert reason == GossipStopReason.DONE and meter.messages == 1000 * 500
    assert meter.messages / elapsed >= 1e5


def test_dense_and_sparse_shards_give_the_same_run(load):
    import dataclasses

    ds = load("heart_scale")
    dense = dataclasses.replace(ds, X=ds.X.toarray())
    runs = []
    for data in (ds, dense):
        dep = _deploy(data, nodes=5, topology="complete", topology_params={}, lam=1e-2, eps=0.0, iterations=100)
        obs, *_ = run_gossip(dep, seed=6, compiled=False)
        runs.append(gather_nodes(obs["peer"])["w"])
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-12, atol=1e-12)


def test_sampled_node_scores_are_the_full_scores_of_the_sampled_nodes():
    """Above eval_nodes the per-node means come from a fixed sample: each sampled node's score is the one the full
    evaluation gives it (test shards included), the average model's and the consensus are over every node."""
    from svmsim.algorithms.gadget import ConsensusEvaluator
    from svmsim.data import partition

    rng = np.random.default_rng(3)
    m, d = 40, 6
    X, y = rng.standard_normal((300, d)), np.where(rng.random(300) < 0.5, -1.0, 1.0)
    Xt, yt = rng.standard_normal((200, d)), np.where(rng.random(200) < 0.5, -1.0, 1.0)
    shards = partition(200, m, "iid", seed=1)
    W, weights = rng.standard_normal((m, d)), rng.random(m) + 0.5
    sample = np.sort(rng.choice(m, 11, replace=False))
    full = ConsensusEvaluator(X, y, 1e-2, Xt, yt, shards)
    part = ConsensusEvaluator(X, y, 1e-2, Xt, yt, shards, sample)
    for up in (None, rng.random(m) < 0.7):
        a, b = full(W, weights, up=up), part(W, weights, up=up)
        live = sample if up is None else sample[up[sample]]
        f = ConsensusEvaluator(X, y, 1e-2, Xt, yt, shards)     # the full scores of the live sampled nodes only
        mask = np.zeros(m, dtype=bool)
        mask[live] = True
        c = f(W, weights, up=mask)
        for key in ("objective", "objective_std", "train_accuracy", "test_accuracy", "test_accuracy_shard"):
            assert b[key] == pytest.approx(c[key], rel=1e-12), key
        for key in ("average_model_objective", "average_model_test_accuracy", "model_disagreement",
                    "model_disagreement_max"):
            assert b[key] == a[key], key
        assert b["nodes_scored"] == live.size and "nodes_scored" not in a


def test_a_large_gadget_run_scores_a_sample_of_its_nodes(a9a):
    dep = _deploy(a9a, nodes=1500, eval_nodes=200, lam=LAM_A9A)
    obs, _, _, _ = run_gossip(dep, seed=0, max_time=2.0)
    out = dep.evaluate(obs)
    assert out["nodes_scored"] == 200 and out["nodes"] == 1500
    assert 0.0 < out["objective_min"] <= out["objective"] <= out["objective_max"]


@pytest.mark.parametrize("gossip", ["push-sum", "pairwise"])
def test_one_group_reads_the_data_set_in_place_and_runs_as_gathered_shards_do(mushrooms, gossip):
    """In process the shards pick rows of the data set (no copy of it: 12 bytes a stored value); gathered into
    compact shards (as for hosts that hold part of the nodes) the run is the same, bit for bit."""
    import dataclasses

    m = 7
    dep = _deploy(mushrooms, nodes=m, lam=1e-3, gossip=gossip, eps=0.0, iterations=120)
    spec = dep.roles[0]
    shared = spec.program.init(spec.node_ids, spec.node_data, 3)
    assert np.shares_memory(shared.rows[0], mushrooms.X.data) and np.shares_memory(shared.rows[1], mushrooms.X.indices)
    assert np.shares_memory(shared.y, mushrooms.y) or mushrooms.y.dtype != np.float64
    points = spec.node_data.columns["X"].items
    assert sorted(points.tolist()) == list(range(mushrooms.n)) and np.array_equal(shared.points, points)
    gathered = dataclasses.replace(dep, roles=[dataclasses.replace(spec, node_data=spec.node_data.take(np.arange(m)))])
    compact = spec.program.init(spec.node_ids, gathered.roles[0].node_data, 3)
    assert compact.points.size == 0 and compact.y.shape[0] == mushrooms.n
    assert not np.shares_memory(compact.rows[0], mushrooms.X.data)
    for compiled in (True, False):
        a, b = run_gossip(dep, seed=4, compiled=compiled), run_gossip(gathered, seed=4, compiled=compiled)
        ga, gb = gather_nodes(a[0]["peer"]), gather_nodes(b[0]["peer"])
        np.testing.assert_array_equal(ga["w"], gb["w"])
        np.testing.assert_array_equal(ga["steps"], gb["steps"])
        assert a[1].ledger().equals(b[1].ledger()) and ga["steps"].sum() > 0


def test_data_the_kernels_cannot_read_in_place_is_gathered_per_shard(load):
    """Rows with unsorted indices or a dense float32 set: the build gathers the shards (as_rows sorts and converts
    the copies; the data set is left as it was) and the run is the sorted float64 set's, bit for bit."""
    import dataclasses

    from svmsim.algorithms.gadget import _kernel_ready

    ds = load("heart_scale")
    X = ds.X.copy()
    for i in range(X.shape[0]):                              # every row's entries in reverse order
        lo, hi = X.indptr[i], X.indptr[i + 1]
        X.indices[lo:hi], X.data[lo:hi] = X.indices[lo:hi][::-1].copy(), X.data[lo:hi][::-1].copy()
    X.has_sorted_indices = False
    unsorted_indices = X.indices.copy()
    variants = {"sorted": ds, "unsorted": dataclasses.replace(ds, X=X),
                "float32": dataclasses.replace(ds, X=ds.X.toarray().astype(np.float32)),
                "fortran": dataclasses.replace(ds, X=np.asfortranarray(ds.X.toarray()))}
    assert [_kernel_ready(v.X) for v in variants.values()] == [True, False, False, False]
    assert _kernel_ready(ds.X.toarray()) and not _kernel_ready(ds.X.tocsc())
    runs = {}
    for name, data in variants.items():
        dep = _deploy(data, nodes=5, topology="complete", topology_params={}, lam=1e-2, eps=0.0, iterations=100)
        assert (dep.roles[0].node_data.columns["X"].items is None) == (name != "sorted")
        obs, *_ = run_gossip(dep, seed=6)
        runs[name] = gather_nodes(obs["peer"])["w"]
    np.testing.assert_array_equal(runs["sorted"], runs["unsorted"])
    np.testing.assert_array_equal(X.indices, unsorted_indices)           # the data set is not sorted in place
    np.testing.assert_allclose(runs["sorted"], runs["fortran"], rtol=1e-12, atol=1e-12)
