"""Gilbert's algorithm (paper 000's hard-margin baseline) against the exact hull distance."""
from __future__ import annotations

import pytest

import svmsim
from svmsim.algorithms.gilbert import GilbertSVC
from svmsim.reference import exact_hull_distance


@pytest.mark.parametrize("name", ["iris", "mushrooms"])
def test_gilbert_matches_exact_hull_distance(load, name):
    ds = load(name)
    exact = exact_hull_distance(ds.X, ds.y).distance
    m = GilbertSVC(tol=1e-3, max_iter=500_000).fit(ds.X, ds.y)
    assert m.rel_gap_ <= 1e-3
    assert m.hull_lower_ <= exact * (1 + 1e-9) <= m.hull_distance_ * (1 + 1e-9)   # the certificate brackets it
    assert abs(m.hull_distance_ - exact) <= 1e-3 * exact
    assert m.score(ds.X, ds.y) == 1.0


def test_gilbert_runs_from_a_scenario():
    res = svmsim.run({"name": "gilbert-iris", "data": {"name": "iris"}, "algorithm": {"name": "gilbert"},
                      "stop": {"gap": 1e-3, "max_iterations": 100000},
                      "output": {"eval_every": 10, "progress": False}}, write=False)
    assert res.final["rel_gap"] <= 1e-3
    assert res.final["hull_distance"] == pytest.approx(0.8300, rel=1e-3)
