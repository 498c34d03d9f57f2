"""HOGWILD! for the C-SVM (paper 000's Figure 6 baseline): exact ledger, reproducibility, staleness, accuracy."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import svmsim
from svmsim.algorithms.hogwild import SampleStream, hogwild_scalars
from svmsim.algorithms.references import csvm_primal
from svmsim.deployment import Problem, server_client_layout


def _scenario(data: dict, iterations: int, eval_every: int | None = None, seed: int = 0, **algorithm) -> dict:
    return {"name": "hogwild-test", "seed": seed, "data": data, "algorithm": {"name": "hogwild", **algorithm},
            "stop": {"max_iterations": iterations},
            "output": {"eval_every": eval_every or iterations, "progress": False}}


PHISHING = {"name": "phishing", "holdout": 0.1}
A9A = {"name": "a9a", "test": "auto", "n_features": 123}


@pytest.fixture(scope="module")
def data_env_module(shared_data_dir):
    """SVMSIM_DATA_DIR for the scenario runs of this module."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SVMSIM_DATA_DIR", str(shared_data_dir))
    yield shared_data_dir
    mp.undo()


@pytest.fixture(scope="module")
def small_run(data_env_module):
    """k = 5 clients on phishing, m = 8, 40 cycles (the ledger and reproducibility tests share it)."""
    return svmsim.run(_scenario(PHISHING, 40, eval_every=10, clients=5, steps_per_message=8), write=False)


def test_ledger_equals_the_declared_count_and_the_pulls_are_the_batches_supports(small_run, load):
    res = small_run
    k, m, T = 5, 8, res.final["iteration"]
    assert T == 40
    assert res.summary["declared_scalars"] == res.ledger.totals["scalars"]
    assert res.summary["ledger_matches_declared"] is True
    tags = res.ledger.by_tag
    # one read and one pull per turn, k turns per cycle; one stats report per client
    assert tags["read"][0] == tags["pull"][0] == k * T
    assert tags["stats"][:2] == [k, 2 * k]
    assert tags["write"][1] % 2 == 0 and tags["write"][0] <= k * (T - 1)
    assert res.ledger.totals["scalars"] == hogwild_scalars(tags["read"][1], tags["write"][1] // 2, tags["pull"][1], k)

    # Independently of the programs: replay every client's sample stream on its shard; a pull is the union of
    # the batch's supports plus the bias key, and every pull but each client's last has been read.
    ds = load("phishing", holdout=0.1)
    layout = server_client_layout(Problem(ds, seed=0), k, "hogwild")
    pulled = unread = 0
    for node, idx in zip(layout.clients, layout.parts):
        X = sp.csr_matrix(ds.X[idx])
        stream = SampleStream(0, int(node), X.shape[0], m)
        for _ in range(T):
            size = np.unique(X[stream.take()].indices).size + 1
            pulled += size
        unread += size
    assert tags["pull"][1] == pulled
    assert tags["read"][1] == pulled - unread


def test_same_seed_same_iterates_and_ledger(small_run):
    again = svmsim.run(_scenario(PHISHING, 40, eval_every=10, clients=5, steps_per_message=8), write=False)
    assert np.array_equal(again.model["coef"], small_run.model["coef"])
    assert again.model["intercept"] == small_run.model["intercept"]
    assert again.ledger.equals(small_run.ledger)
    assert [r["objective"] for r in again.metrics] == [r["objective"] for r in small_run.metrics]
    other = svmsim.run(_scenario(PHISHING, 40, eval_every=40, seed=1, clients=5, steps_per_message=8), write=False)
    assert not np.array_equal(other.model["coef"], small_run.model["coef"])


def test_one_client_without_delay_is_plain_minibatch_sgd(data_env_module, load):
    """k = 1: every write is applied before the next read, so the server's iterate is sequential mini-batch SGD
    on P/(nC), w <- (1 - eta lam)^m w + eta sum_{violators} y x, b <- b + eta sum_{violators} y."""
    m, T, C = 4, 60, 32.0
    res = svmsim.run(_scenario({"name": "heart_scale"}, T, clients=1, steps_per_message=m), write=False)
    ds = load("heart_scale")
    X, y, n = sp.csr_matrix(ds.X), ds.y, ds.n
    lam = 1.0 / (n * C)
    eta0 = 0.1 / (float(np.asarray(X.multiply(X).sum(axis=1)).max()) + 1.0)
    stream = SampleStream(0, 1, n, m)
    w, b, t = np.zeros(ds.d), 0.0, 0
    for _ in range(T - 2):                 # cycle 0 pulls, cycle 1 reads; writes are applied from cycle 2 on
        rows = stream.take()
        viol = rows[y[rows] * (X[rows] @ w + b) < 1.0]
        eta = eta0 / (1.0 + t / n)
        w = (1.0 - eta * lam) ** m * w + eta * np.asarray(X[viol].T @ y[viol]).ravel()
        b += eta * float(y[viol].sum())
        t += m
    assert res.final["staleness_max"] == 0
    np.testing.assert_allclose(res.model["coef"], w, rtol=1e-10, atol=1e-12)
    assert res.model["intercept"] == pytest.approx(b, rel=1e-10, abs=1e-12)


def test_fixed_turns_give_the_designed_staleness(data_env_module):
    """Turns 0..k-1 in every cycle: a write read in cycle r is applied at its client's turn in cycle r + 1 + delay,
    after the (delay + 1) k - 1 writes of the turns in between (fewer while the pipeline fills: the first reads are
    in cycle 1, so no write is applied before cycle 2 + delay)."""
    k, m, delay, T = 4, 2, 2, 30
    res = svmsim.run(_scenario({"name": "heart_scale"}, T, clients=k, steps_per_message=m, delay=delay,
                               turn_order="fixed"), write=False)
    first = 2 + delay                       # the first cycle whose turns apply a write
    lags = [m * ((q - first) * k + c) if q - 1 - delay < first else m * ((delay + 1) * k - 1)
            for q in range(first, T) for c in range(k)]
    assert res.final["staleness_max"] == max(lags) == ((delay + 1) * k - 1) * m
    assert res.final["staleness_mean"] == pytest.approx(np.mean(lags), rel=1e-12)


@pytest.fixture(scope="module")
def a9a_reference(load):
    """LinearSVC(loss="hinge", C=32) (bias as a feature of scale 1, LIBLINEAR's convention) on a9a."""
    from sklearn.svm import LinearSVC

    ds = load("a9a", test="auto", n_features=123)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LinearSVC(loss="hinge", C=32.0, tol=1e-5, max_iter=20000, dual=True).fit(ds.X, ds.y)
    w, b = ref.coef_[0], float(ref.intercept_[0])
    return {"test_accuracy": ref.score(ds.X_test, ds.y_test), "objective": csvm_primal(ds.X, ds.y, w, b, 32.0)}


def test_reaches_linearsvc_accuracy_on_a9a(data_env_module, a9a_reference):
    """Paper 000's setting (k = 20, C = 32), 10 epochs: test accuracy within 1 point of LinearSVC and the primal
    objective within 2% of LinearSVC's (the optimum up to LIBLINEAR's regularised bias)."""
    cycles = 10 * 32561 // (20 * 16)
    res = svmsim.run(_scenario(A9A, cycles, eval_every=cycles // 2), write=False)
    assert res.final["epochs"] == pytest.approx(10.0, rel=0.01)
    assert res.final["test_accuracy"] >= a9a_reference["test_accuracy"] - 0.01
    assert res.final["objective"] <= 1.02 * a9a_reference["objective"]
    assert res.summary["ledger_matches_declared"] is True


def test_staleness_still_converges(data_env_module, a9a_reference):
    """Writes applied about 3k writes (~1000 SGD steps) after their read still reach the reference accuracy."""
    k, m, delay = 20, 16, 2
    cycles = 10 * 32561 // (k * m)
    res = svmsim.run(_scenario(A9A, cycles, eval_every=cycles // 2, delay=delay), write=False)
    assert res.final["staleness_mean"] > ((delay + 1) * k - 2) * m
    assert res.final["test_accuracy"] >= a9a_reference["test_accuracy"] - 0.015
    assert res.final["objective"] <= 1.05 * a9a_reference["objective"]
    assert res.metrics[-1]["objective"] < res.metrics[0]["objective"]


def test_runs_from_a_scenario_file_and_writes_its_directory(data_env_module, tmp_path):
    scenario = _scenario({"name": "breast-cancer_scale", "holdout": 0.2}, 50, eval_every=10, clients=4,
                         steps_per_message=8)
    scenario["output"].update(plots=False, dir=str(tmp_path))
    res = svmsim.run(scenario, engine="inproc")
    assert res.run_dir is not None and (res.run_dir / "metrics.csv").exists()
    assert (res.run_dir / "ledger.json").exists() and (res.run_dir / "model.npz").exists()
    assert res.summary["ledger_matches_declared"] is True
    assert res.summary["bound"] is None and res.summary["comm_unit"] == ("kd", 4.0 * 10)
    assert res.final["test_accuracy"] >= 0.9
    assert [r["iteration"] for r in res.metrics] == [10, 20, 30, 40, 50]


@pytest.mark.ray
def test_ray_engine_gives_the_same_ledger_and_iterates(data_env_module, ray_local):
    """The clients split over two Ray actors: per-node sample streams keep every number identical."""
    from svmsim.engine.ray_engine import RayEngine

    scenario = _scenario({"name": "heart_scale"}, 20, eval_every=10, clients=5, steps_per_message=4)
    local = svmsim.run(scenario, write=False)
    engine = RayEngine(actors=2)
    try:
        remote = svmsim.run(scenario, engine=engine, write=False)
    finally:
        engine.close()
    assert remote.ledger.equals(local.ledger)
    assert np.array_equal(remote.model["coef"], local.model["coef"])
    assert remote.model["intercept"] == local.model["intercept"]
    assert remote.summary["ledger_matches_declared"] is True
