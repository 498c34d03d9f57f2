"""Fault kinds: named fault schedules given as [faults.<kind>] tables, built in (outage, rack_failure) or registered
by a plugin. A kind's effects go through the same outage and slow-down pieces as the flat [faults] keys, so an
outage given as a kind must give the same run, bit for bit, as the same outage given by crash keys."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import svmsim
from svmsim.cli import main
from svmsim.core.fault_kinds import FAULT_KINDS, kind_rng
from svmsim.errors import PluginError, ScenarioError
from svmsim.faults import FaultModel
from svmsim.api import FaultEffects, FaultKind, Outage, ParamSpec, register_fault
from svmsim.core.metrics import WALL_CLOCK_METRICS


def _run(tmp_path: Path, name: str, faults: dict, **tables):
    d = {"name": name, "seed": 3, "data": {"name": "iris"}, "algorithm": {"name": "bqo-e", "workers": 6},
         "stop": {"max_iterations": 20}, "output": {"plots": False, "progress": False, "dir": str(tmp_path)},
         "faults": faults}
    d.update(tables)
    return svmsim.run(d)


def _facts(result) -> tuple[dict, list]:
    """The run's ledger file and its metrics without the wall-clock columns."""
    ledger = json.loads((Path(result.run_dir) / "ledger.json").read_text())
    metrics = [{k: v for k, v in row.items() if k not in WALL_CLOCK_METRICS and "seconds" not in k}
               for row in result.metrics]
    return ledger, metrics


def test_an_outage_kind_runs_bit_for_bit_like_the_same_crash_keys(tmp_path):
    keys = _run(tmp_path, "keys", {"crash_nodes": [1, 2], "crash_time": 3.0, "recover_time": 8.0})
    kind = _run(tmp_path, "kind", {"outage": {"nodes": [1, 2], "start": 3.0, "duration": 5.0}})
    assert _facts(keys) == _facts(kind)
    assert keys.summary["faults"]["dropped_total"]["messages"] > 0
    for k in ("dropped", "dropped_total", "crashed_nodes", "node_events", "node_event_log"):
        assert keys.summary["faults"][k] == kind.summary["faults"][k], k
    entry, = kind.summary["faults"]["fault_kinds"]
    assert entry["kind"] == "outage" and entry["down"] == [[[1, 2], 3.0, 8.0]]
    assert kind.summary["faults"]["model"] == {"outage": {"nodes": [1, 2], "start": 3.0, "duration": 5.0,
                                                          "keep_state": True}}


def test_several_outage_tables_on_the_gossip_scheduler_match_explicit_outages():
    from svmsim.engine import InProcessEngine  # noqa: F401 - the gossip run below is the scheduler's own test rig
    from tests.test_faults import recorded_run

    tables = FaultModel.from_config({"outage": [{"nodes": [1, 3], "start": 10.0, "duration": 20.0},
                                                {"nodes": [4], "start": 50.0}]})
    explicit = FaultModel(outages=[Outage((1, 3), 10.0, 30.0), Outage((4,), 50.0)])
    st_a, sched_a, meter_a = recorded_run(tables, max_time=100.0)
    st_b, sched_b, meter_b = recorded_run(explicit, max_time=100.0)
    keep = ("wakes", "sent", "received", "crashes", "recovers")
    assert {k: st_a[k] for k in keep} == {k: st_b[k] for k in keep} and st_a["crashes"]
    assert meter_a.ledger().by_tag == meter_b.ledger().by_tag
    a, b = sched_a.fault_summary(), sched_b.fault_summary()
    assert a["node_events"] == b["node_events"] == {"crash": 3, "recover": 2}
    assert a["permanent_crashes"] == b["permanent_crashes"] == [4]
    assert a["crashed_nodes"] == [1, 3, 4]


def test_a_rack_failure_takes_whole_racks_down_chosen_by_the_seed():
    model = FaultModel.from_config({"rack_failure": {"racks": 4, "fail": 2, "start": 5.0, "duration": 3.0}})
    racks = [set(r.tolist()) for r in np.array_split(np.arange(12), 4)]
    chosen = []
    for seed in range(8):
        plan = model.bind(12, seed)
        down = {o[0] for o in plan.outages}
        assert all(o[1:] == (5.0, 8.0, True) for o in plan.outages)
        hit = [r for r in racks if r & down]
        assert len(hit) == 2 and set().union(*hit) == down          # whole racks, two of them
        assert model.bind(12, seed).outages == plan.outages         # replays
        chosen.append(tuple(sorted(down)))
    assert len(set(chosen)) > 1                                       # the seed chooses
    with pytest.raises(ScenarioError, match="racks = 4, fail = 5 on 12 nodes"):
        FaultModel.from_config({"rack_failure": {"fail": 5}}).bind(12, 0)


def test_kinds_draw_from_streams_of_their_own():
    a, b = kind_rng(7, "rack_failure", 0), kind_rng(7, "rack_failure", 1)
    assert a.random() != b.random()
    assert kind_rng(7, "outage", 0).random() != kind_rng(7, "rack_failure", 0).random()


def test_fault_kind_tables_are_checked_when_the_scenario_is_read(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('name = "bad"\n[data]\nname = "iris"\n[algorithm]\nname = "bqo-e"\n[stop]\nmax_iterations = 5\n'
                 '[faults.outage]\nnodes = [1, -2]\n[[faults.rack_failure]]\nrack = 3\n[faults.bogus]\nx = 1\n')
    assert main(["validate", str(f)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "parameter 'nodes' of fault kind 'outage' = [1, -2] is out of range; allowed: a non-empty list of node " \
           "ids >= 0" in err
    assert "unknown parameter 'rack' for fault kind 'rack_failure'; allowed parameters: racks: int = 4" in err
    assert "unknown key 'bogus'; allowed keys: drop, duplicate" in err and "fault kind's table: outage, " \
                                                                             "rack_failure" in err
    for bad, text in ((
            {"outage": {"start": 1.0}}, "fault kind 'outage' needs parameter(s) 'nodes'"), (
            {"outage": {"nodes": [1], "duration": 0.0}}, "parameter 'duration' of fault kind 'outage' = 0.0 is out "
                                                         "of range; allowed: a number > 0"), (
            {"outage": {"nodes": "1"}}, "parameter 'nodes' of fault kind 'outage' must be of type list[int]"), (
            {"outage": 3}, "faults.outage = 3 is not a table")):
        with pytest.raises(ScenarioError) as exc:
            svmsim.load_scenario({"name": "x", "data": {"name": "iris"}, "algorithm": {"name": "bqo-e"},
                                  "stop": {"max_iterations": 5}, "faults": bad})
        assert text in str(exc.value), str(exc.value)


def test_a_kind_that_needs_the_gossip_scheduler_is_refused_in_rounds():
    with pytest.raises(ScenarioError, match=r"\[faults.outage\] as given \(it slows nodes down or restarts them "
                                            r"without state\) need the gossip scheduler"):
        svmsim.load_scenario({"name": "x", "data": {"name": "iris"}, "algorithm": {"name": "bqo-e"},
                              "stop": {"max_iterations": 5},
                              "faults": {"outage": {"nodes": [1], "duration": 2.0, "keep_state": False}}})
    # a permanent outage keeps no state to restart: rounds take it
    s = svmsim.load_scenario({"name": "x", "data": {"name": "iris"}, "algorithm": {"name": "bqo-e"},
                              "stop": {"max_iterations": 5}, "faults": {"outage": {"nodes": [1], "keep_state": False}}})
    assert s.faults.model().kinds == (("outage", {"nodes": [1], "start": 0.0, "duration": None,
                                                  "keep_state": False}),)


@pytest.fixture
def slow_half():
    """A kind registered from Python: the first half of the nodes run `factor` times slower."""
    def schedule(n_nodes, rng, factor):
        return FaultEffects(slowdown={node: factor for node in range(n_nodes // 2)})

    kind = register_fault(FaultKind("slow_half", schedule, "the first half of the nodes run slower",
                                    {"factor": ParamSpec(float, 2.0, "slow-down", "a number >= 1",
                                                         valid=lambda v: v >= 1)},
                                    takes_nodes_down=False, gossip_only=True))
    yield kind
    FAULT_KINDS.pop("slow_half")


def test_a_registered_slowdown_kind_slows_those_clocks_on_the_gossip_scheduler(slow_half):
    from tests.test_faults import recorded_run

    model = FaultModel.from_config({"slow_half": {"factor": 4.0}})
    plan = model.bind(10, 0)
    assert plan.straggler_factors.tolist() == [4.0] * 5 + [1.0] * 5
    st, _, _ = recorded_run(model, max_time=100.0)
    ticks = np.bincount([node for node, _ in st["wakes"]], minlength=10)
    assert ticks[:5].sum() * 3 < ticks[5:].sum()                      # a quarter of the rate, with noise
    both = FaultModel.from_config({"slow_half": {"factor": 2.0}, "straggler_nodes": [0, 9],
                                   "straggler_factor": 3.0}).bind(10, 0)
    assert both.straggler_factors.tolist() == [6.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 3.0]
    with pytest.raises(ScenarioError, match="need the gossip scheduler"):
        model.check_sync()


def test_a_kind_whose_schedule_returns_nonsense_is_named():
    def nowhere(n_nodes, rng):
        return FaultEffects(outages=[Outage((n_nodes,), 1.0)])

    def backwards(n_nodes, rng):
        return FaultEffects(outages=[Outage((0,), 5.0, 2.0)])

    def faster(n_nodes, rng):
        return FaultEffects(slowdown={0: 0.5})

    try:
        for fn, text in ((nowhere, "faults.nowhere names node 6, but the topology has 6 nodes"),
                         (backwards, "faults.backwards: outage Outage(nodes=(0,), start=5.0, end=2.0"),
                         (faster, "faults.faster: slow-down factor 0.5 is invalid; allowed: a number >= 1")):
            register_fault(FaultKind(fn.__name__, fn, "broken"))
            with pytest.raises(ScenarioError, match=text.replace("(", r"\(").replace(")", r"\)")):
                FaultModel.from_config({fn.__name__: {}}).bind(6, 0)
    finally:
        for name in ("nowhere", "backwards", "faster"):
            FAULT_KINDS.pop(name, None)


def test_a_malformed_or_duplicate_registration_is_refused():
    with pytest.raises(PluginError, match="register_fault takes a FaultKind whose name is an identifier"):
        register_fault(FaultKind("not a name", lambda n, rng: FaultEffects(), ""))
    with pytest.raises(PluginError, match="schedule = 3 is not callable"):
        register_fault(FaultKind("three", 3, ""))
    with pytest.raises(PluginError, match="fault kind 'outage' is registered twice"):
        register_fault(FaultKind("outage", lambda n, rng: FaultEffects(), ""))


def test_list_faults_shows_keys_and_kinds(capsys):
    assert main(["list", "faults"]) == 0
    out = capsys.readouterr().out
    assert "crash_nodes" in out and "churn_rate" in out
    assert "outage         the listed nodes go down at start for duration" in out
    assert "duration: float = for good: how long the nodes stay down (a number > 0)" in out
    assert "rack_failure   correlated failure" in out


def test_a_permanent_rack_failure_ends_in_the_summary_and_the_model_round_trips(tmp_path):
    res = _run(tmp_path, "rack", {"rack_failure": {"racks": 3, "fail": 1, "start": 4.0}})
    faults = res.summary["faults"]
    assert len(faults["crashed_nodes"]) == 2 and faults["permanent_crashes"] == faults["crashed_nodes"]
    assert faults["fault_kinds"][0]["down"] == [[faults["crashed_nodes"], 4.0, None]]
    again = svmsim.load_scenario(res.scenario.to_dict())
    assert again.faults.model() == res.scenario.faults.model()
    assert math.isinf(res.scenario.faults.model().bind(6, 3).outages[0][2])


def _gossip(tmp_path: Path, name: str, faults: dict):
    return svmsim.run({"name": name, "seed": 2, "data": {"name": "iris"}, "topology": {"kind": "ring"},
                       "algorithm": {"name": "pushsum", "nodes": 8}, "stop": {"max_rounds": 40},
                       "output": {"plots": False, "progress": False, "dir": str(tmp_path)}, "faults": faults})


def test_an_availability_trace_gives_the_run_of_the_same_outage_tables(tmp_path):
    """Windows read from a CSV file (gossip: virtual time) are the outages they list: the same run, bit for bit, as
    the same windows given as [[faults.outage]] tables."""
    trace = tmp_path / "avail.csv"
    trace.write_text("node,start,end\n1,3.5,9\n5,2,4\n1,12,20\n6,30,\n")
    by_trace = _gossip(tmp_path, "trace", {"availability_trace": {"file": str(trace)}})
    by_tables = _gossip(tmp_path, "tables", {"outage": [{"nodes": [1], "start": 3.5, "duration": 5.5},
                                                        {"nodes": [5], "start": 2.0, "duration": 2.0},
                                                        {"nodes": [1], "start": 12.0, "duration": 8.0},
                                                        {"nodes": [6], "start": 30.0}]})
    assert _facts(by_trace) == _facts(by_tables)
    faults = by_trace.summary["faults"]
    assert faults["node_events"] == by_tables.summary["faults"]["node_events"] and faults["node_events"]["crash"] == 4
    entry, = faults["fault_kinds"]
    assert entry["kind"] == "availability_trace" and len(entry["down"]) == 4


@pytest.mark.parametrize("text,message", [
    ("node,begin,end\n1,0,1\n", r"line 1: the columns are \['node', 'begin', 'end'\]; allowed: node, start, end"),
    ("node,start,end\n9,0,1\n", r"line 2: node = '9' is not a node of the run; allowed: an integer in 0..7"),
    ("node,start,end\n1,5,2\n", r"line 2: start = 5, end = 2 is not a window; allowed: 0 <= start < end"),
    ("node,start,end\n1,0,5\n1,4,6\n", r"line 3: node 1's window 4..6 overlaps its window 0..5"),
    ("node,start,end\n1,soon,5\n", r"line 2: start = 'soon', end = '5': not numbers"),
])
def test_a_bad_availability_trace_gets_one_clear_error(tmp_path, text, message):
    trace = tmp_path / "avail.csv"
    trace.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        _gossip(tmp_path, "bad", {"availability_trace": {"file": str(trace)}})
    with pytest.raises(ScenarioError, match="cannot be read"):
        _gossip(tmp_path, "missing", {"availability_trace": {"file": str(tmp_path / "none.csv")}})
