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
from svmsim.calibrate import fit_alpha_beta, measure_compute_rate


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


def test_an_output_path_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "svmsim.cli", "calibrate", "--out", str(tmp_path / "no" / "x.toml")],
                          capture_output=True, text=True, timeout=60)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "cannot be written" in said and "Traceback" not in said
    assert "Started a local Ray" not in proc.stderr
