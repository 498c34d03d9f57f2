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


def test_distributed_gilbert_certifies_and_its_ledger_equals_the_declared_count():
    from svmsim.algorithms.gilbert import dgilbert_scalars_per_iteration

    k = 5
    res = svmsim.run({"name": "dgilbert-iris", "data": {"name": "iris"},
                      "algorithm": {"name": "dgilbert", "clients": k},
                      "stop": {"gap": 1e-3, "max_iterations": 100000},
                      "output": {"eval_every": 10, "progress": False}}, write=False)
    T = res.final["iteration"]
    assert res.final["rel_gap"] <= 1e-3
    assert res.final["hull_distance"] == pytest.approx(0.8300, rel=1e-3)
    assert res.ledger.totals["scalars"] == T * dgilbert_scalars_per_iteration(k, 4) == res.summary["declared_scalars"]
    tags = {t: v[1] for t, v in res.ledger.by_tag.items()}
    assert tags["point"] == T * k * 4 and tags["extremes"] == 2 * k * T
    assert tags["vertex_p"] == tags["vertex_q"] == 4 * T and tags["request_p"] == T
