"""`svmsim calibrate`: the alpha-beta fit recovers a model it is given, and the command measures this machine through a
private Ray and writes a [network] table that a scenario reads."""
from __future__ import annotations

import math
import subprocess
import sys
import tomllib

import numpy as np
import pytest

import svmsim
from svmsim.calibrate import fit_alpha_beta, fit_steps, measure_compute_rate, measure_steps


def test_the_fit_recovers_latency_and_bandwidth_and_reports_its_residual():
    sizes = np.array([0, 1e3, 1e4, 1e5, 1e6])
    alpha, beta, residual = fit_alpha_beta(sizes, 2e-4 + sizes / 5e8)
    assert math.isclose(alpha, 2e-4, rel_tol=1e-9) and math.isclose(beta, 5e8, rel_tol=1e-9) and residual < 1e-9
    noisy = (2e-4 + sizes / 5e8) * np.array([1.1, 0.9, 1.05, 0.95, 1.0])
    assert fit_alpha_beta(sizes, noisy)[2] > 0.01                       # noise shows in the residual
    # a negative intercept is refitted through the origin; flat times: an infinite bandwidth
    alpha, beta, _ = fit_alpha_beta([1e3, 1e6], [1e-6, 2e-3])
    assert alpha == 0.0 and beta > 0
    assert fit_alpha_beta([0, 1e6], [1e-4, 1e-4])[1] == math.inf
    with pytest.raises(ValueError, match="two different sizes"):
        fit_alpha_beta([5, 5], [1.0, 2.0])


def test_the_step_fit_recovers_overhead_and_rate_and_weighs_each_work_by_its_steps():
    rng = np.random.default_rng(0)
    works = np.repeat([0.0, 2e5, 5e5], [300, 150, 150])
    seconds = (3e-5 + works / 6e8) * rng.uniform(0.98, 1.02, works.size)
    samples = list(zip(works, seconds)) + [(3e5, 0.05)]                 # one slow step of a work of its own
    overhead, rate, residual = fit_steps(samples)
    assert math.isclose(overhead, 3e-5, rel_tol=0.05) and math.isclose(rate, 6e8, rel_tol=0.02)
    assert residual < 0.25
    # no work declared (or none that the time follows): the median step is the overhead, and no rate
    assert fit_steps([(0.0, 1e-4), (0.0, 3e-4), (0.0, 2e-4)]) == (2e-4, None, 0.0)
    assert fit_steps([(1.0, 2e-4), (1e6, 1e-4), (1e6, 2e-4)])[1] is None
    with pytest.raises(ValueError, match="at least one timed step"):
        fit_steps([])


def test_a_scenarios_steps_are_timed_with_their_declared_work(data_env):
    """20 rounds of BQO-E's 2 workers (and the settle round), each worker's first step left out: about 2 * 20 timed
    steps, each with its declared work (a pass, the finish, none where it only passes values on) and a positive
    time, and the fit a rate and an overhead."""
    scenario = svmsim.load_scenario({"name": "steps", "seed": 0, "data": {"name": "iris"},
                                     "algorithm": {"name": "bqo-e", "workers": 2}, "stop": {"max_iterations": 1000}})
    samples = measure_steps(scenario, rounds=20)
    assert 2 * 18 <= len(samples) <= 2 * 21
    assert all(w >= 0 and t > 0 for w, t in samples) and sum(w > 0 for w, _ in samples) >= 2 * 10
    overhead, rate, _ = fit_steps(samples)
    assert overhead >= 0 and rate is not None and 1e6 < rate < 1e12


def test_an_engine_hop_is_timed_through_the_ray_engine(ray_local):
    from svmsim.calibrate import measure_engine_hops

    small, large = measure_engine_hops([8, 400_000], rounds=5)
    assert 0 < small < 1.0 and 0 < large < 5.0


def test_the_compute_rate_is_operations_per_second():
    rate = measure_compute_rate(seconds=0.05, rows=2000, cols=200)
    assert 1e6 < rate < 1e11


def test_calibrate_writes_a_network_table_a_scenario_reads(tmp_path):
    out = tmp_path / "cluster.toml"
    proc = subprocess.run([sys.executable, "-m", "svmsim.cli", "calibrate", "--quick", "--repeats", "3", "--out",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "fit residual (relative RMS over the sizes)" in text and "operations per second" in text
    network = tomllib.loads(text)["network"]
    assert set(network) == {"latency", "bandwidth", "compute_rate"}
    assert network["latency"] >= 0 and network["bandwidth"] > 0 and network["compute_rate"] > 0
    scenario = svmsim.load_scenario({"name": "c", "data": {"name": "iris"}, "algorithm": {"name": "bqo-e"},
                                     "stop": {"max_iterations": 2}, "network": network})
    assert scenario.network.settings()["latency"] == network["latency"]
    assert "wrote" in proc.stdout and "fit residual" in proc.stdout


def test_calibrate_a_scenario_gives_its_step_overhead_and_rate(tmp_path, data_env):
    path = tmp_path / "bqo.toml"
    path.write_text('name = "bqo"\n[data]\nname = "iris"\n[algorithm]\nname = "bqo-e"\nworkers = 2\n'
                    '[stop]\nmax_iterations = 400\n')
    out = tmp_path / "cluster.toml"
    proc = subprocess.run([sys.executable, "-m", "svmsim.cli", "calibrate", "--quick", "--repeats", "3", "--hop",
                           "engine", "--scenario", str(path), "--out", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "node steps of scenario 'bqo' timed where its engine runs them" in text
    assert "t = step_overhead + declared work" in text and "relayed by svmsim's Ray engine" in text
    network = tomllib.loads(text)["network"]
    assert set(network) == {"latency", "bandwidth", "compute_rate", "step_overhead"}
    assert network["step_overhead"] >= 0 and network["compute_rate"] > 0
    scenario = svmsim.load_scenario(path, overrides={f"network.{k}": v for k, v in network.items()})
    assert scenario.network.model().step_overhead == network["step_overhead"]
    assert "step overhead" in proc.stdout


@pytest.mark.parametrize("algorithm, kind, topology", [("gadget", "gossip", "ring"),
                                                       ("pegasos", "single-machine", "star")])
def test_calibrating_a_scenario_that_is_not_synchronous_rounds_is_refused_before_measuring(tmp_path, algorithm,
                                                                                            kind, topology):
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\n[data]\nname = "iris"\n[topology]\nkind = "{topology}"\n[algorithm]\n'
                    f'name = "{algorithm}"\n[stop]\nmax_seconds = 5\n')
    proc = subprocess.run([sys.executable, "-m", "svmsim.cli", "calibrate", "--scenario", str(path)],
                          capture_output=True, text=True, timeout=60)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and f"'{algorithm}' is a {kind} algorithm" in said and "Traceback" not in said
    assert "Started a local Ray" not in proc.stderr


def test_an_output_path_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "svmsim.cli", "calibrate", "--out", str(tmp_path / "no" / "x.toml")],
                          capture_output=True, text=True, timeout=60)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "cannot be written" in said and "Traceback" not in said
    assert "Started a local Ray" not in proc.stderr
