"""Exact checks of the scenario schema (svmsim.config.schema, .sections, .values): each wrong key, value or type
gives one readable message naming what is wrong and what is allowed (asserted word for word), bounds hold at their
edges, and a resolved scenario has exactly the right values and defaults."""

from __future__ import annotations

import datetime as dt
import enum
import re
from pathlib import Path

import numpy as np
import pytest
import tomllib
from pydantic import BaseModel, ConfigDict, Field

import svmsim
from svmsim.algorithms import registry
from svmsim.algorithms.registry import ALGORITHMS, AlgorithmInfo, register
from svmsim.config.schema import ScheduleSection
from svmsim.config.sections import DataSection, NetworkSection, TopologySection
from svmsim.config.values import (
    as_plain_str,
    dump_toml,
    is_int,
    is_number,
    normalise,
    plain,
    show,
)
from svmsim.core.timing import Distribution
from svmsim.errors import ScenarioError
from svmsim.faults import FaultModel
from svmsim.schedule.cluster_time import NetworkModel
from svmsim.topology import TOPOLOGIES

SYNC = "exact-sync"
SINGLE = "exact-single"
GOSSIP = "exact-gossip"
GOSSIP_NO_END = "exact-gossip-noend"
ANY_TOPOLOGY = "exact-any"


class SyncParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    clients: int = Field(20, ge=1)
    flag: bool = False
    pair: tuple[int, int] = (1, 2)
    rate: float = Field(0.5, alias="learning_rate")
    where: Path = Path("here")


class GossipParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(8, ge=2)
    done: bool = False


class GossipNoEndParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(8, ge=2)


@pytest.fixture(autouse=True)
def fake_algorithms():
    registry.load_all()
    infos = [
        AlgorithmInfo(SYNC, "fake", "none", True, SyncParams, lambda p, q: None, "server-client"),
        AlgorithmInfo(SINGLE, "fake", "none", False, SyncParams, lambda p, q: None, "single machine"),
        AlgorithmInfo(GOSSIP, "fake", "none", True, GossipParams, lambda p, q: None, "peers",
                      topologies=("ring", "complete"), scheduler="gossip", finishes_by_itself=lambda p: p.done),
        AlgorithmInfo(GOSSIP_NO_END, "fake", "none", True, GossipNoEndParams, lambda p, q: None, "peers",
                      topologies=("ring",), scheduler="gossip"),
        AlgorithmInfo(ANY_TOPOLOGY, "fake", "none", True, SyncParams, lambda p, q: None, "anywhere",
                      topologies=tuple(TOPOLOGIES)),
    ]
    for info in infos:
        register(info)
    yield
    for info in infos:
        ALGORITHMS.pop(info.name, None)


def scenario(algo: str = SYNC, **tables) -> dict:
    d = {"name": "exact", "data": {"name": "iris"}, "algorithm": {"name": algo},
         "stop": {"max_iterations": 10}}
    if algo in (GOSSIP, GOSSIP_NO_END):
        d["topology"] = {"kind": "ring"}
    d.update(tables)
    return d


def error(d: dict) -> str:
    with pytest.raises(ScenarioError) as exc:
        svmsim.load_scenario(d)
    return str(exc.value)


# -- values: show (one TOML line for error messages), plain, normalise, dump_toml ------------------------------------

def test_show_writes_tables_and_lists_inline_without_none():
    assert show({"a": 1, "b c": "x", "skip": None, "d": {"e": [1, None, 2.5]}}) == \
        '{a = 1, "b c" = "x", d = {e = [1, 2.5]}}'
    assert show({"long_key_name": True}) == "{long_key_name = true}"
    assert show({}) == "{}"
    assert show([]) == "[]"
    assert show([None]) == "[]"
    assert show((True, "s", None, 3)) == '[true, "s", 3]'
    assert show([[1, 2], {"k": "v"}]) == '[[1, 2], {k = "v"}]'


def test_show_scalars_as_toml_writes_them():
    assert show("a\tb") == '"a\\tb"'          # a tab stays visible
    assert "\t" not in show(["x\ty"])
    assert show(dt.datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05"
    assert show(dt.date(2024, 1, 2)) == "2024-01-02"
    assert show(np.int64(3)) == "3"
    assert show(np.float32(0.5)) == "0.5"
    assert show(Path("a/b")) == '"a/b"'
    assert show(False) == "false"


def test_show_falls_back_to_repr_for_values_toml_cannot_hold():
    obj = object()
    assert show(obj) == repr(obj)
    assert show({"k": obj}) == repr({"k": obj})


def test_number_predicates():
    assert is_number(3) and is_number(np.int64(3)) and is_number(2.5) and is_number(np.float32(1))
    assert not is_number(True) and not is_number("1") and not is_number(None)
    assert is_int(3) and is_int(np.int32(3))
    assert not is_int(True) and not is_int(np.bool_(True)) and not is_int(3.0)


def test_plain_turns_models_enums_arrays_and_sets_into_data():
    class Colour(enum.Enum):
        RED = "red"

    class M(BaseModel):
        a: int = 1
        b: str | None = None

    value = {"m": M(), "e": Colour.RED, "p": Path("x/y"), "arr": np.array([1, 2]), "g": np.float64(0.25),
             "s": {3, 1, 2}, "t": (1, None), 5: "five", "none": None}
    out = plain(value)
    assert out == {"m": {"a": 1}, "e": "red", "p": "x/y", "arr": [1, 2], "g": 0.25, "s": [1, 2, 3],
                   "t": [1, None], "5": "five"}
    assert type(out["g"]) is float and type(out["arr"][0]) is int
    assert plain(value, toml=True)["t"] == [1]
    assert plain([None, 1], toml=True) == [1]
    # TOML has no null: with toml, None items go at every depth (in models, nested lists, enums and arrays)

    class L(BaseModel):
        items: list = [1, None]

    class Pair(enum.Enum):
        P = (1, None)

    assert plain({"m": L()}, toml=True) == {"m": {"items": [1]}}
    assert plain([[1, None]], toml=True) == [[1]]
    assert plain(Pair.P, toml=True) == [1]
    assert plain(np.array([1, None], dtype=object), toml=True) == [1]
    assert plain([[1, None]]) == [[1, None]]
    assert plain(frozenset({"b", "a"})) == ["a", "b"]
    assert list(frozenset({40, 3, 17})) == [40, 17, 3]          # (ints hash to themselves: a set not in order)
    assert plain(frozenset({40, 3, 17})) == [3, 17, 40] and plain({40, 3, 17}) == [3, 17, 40]


def test_paths_become_plain_strings():
    assert as_plain_str(Path("a/b")) == "a/b" and type(as_plain_str(Path("a/b"))) is str
    assert as_plain_str(3) == 3
    data = DataSection.model_validate({"name": Path("sets/x.txt"), "test": Path("sets/x.t")})
    assert (data.name, data.test) == ("sets/x.txt", "sets/x.t")


def test_normalise_numpy_paths_and_tuples():
    out = normalise({"a": (np.int64(1), Path("p")), "b": [np.float32(0.5)], "c": "s"})
    assert out == {"a": [1, "p"], "b": [0.5], "c": "s"}
    assert type(out["a"][0]) is int and type(out["b"][0]) is float


def test_dump_toml_round_trips_and_refuses_a_non_dict():
    d = {"name": "x", "n": np.int64(3), "t": (1, 2, None), "p": Path("a"), "skip": None,
         "sec": {"k": 1.5, "deep": {"flag": True}}}
    text = dump_toml(d)
    assert tomllib.loads(text) == {"name": "x", "n": 3, "t": [1, 2], "p": "a",
                                   "sec": {"k": 1.5, "deep": {"flag": True}}}
    assert "[sec]" in text and "[sec.deep]" in text
    with pytest.raises(TypeError, match="dump_toml expects a dict, got list"):
        dump_toml([1])  # type: ignore[arg-type]


# -- sections: allowed texts, topology types, algorithm parameters, partition, network --------------------------------

@pytest.mark.parametrize("tables, message", [
    ({"data": {"name": "iris", "data_dir": ""}}, '[data] data_dir = "" is too short; allowed: a directory path'),
    ({"output": {"dir": ""}}, '[output] dir = "" is too short; allowed: a directory path'),
    ({"output": {"run_dir": ""}}, '[output] run_dir = "" is too short; allowed: a directory path'),
])
def test_allowed_text_of_a_field_is_what_the_message_offers(tables, message):
    assert error(scenario(**tables)) == "scenario: " + message


def test_omitted_tables_are_validated_like_given_ones():
    d = scenario()
    del d["stop"]
    assert error(d) == ("scenario: [stop] no stopping rule is set, so the run would never stop; allowed: set at "
                        "least one of max_iterations, max_rounds, max_scalars, max_seconds, gap, objective_change, "
                        "below (algorithm 'exact-sync' does not finish by itself)")
    s = svmsim.load_scenario(scenario())
    assert s.partition.scheme == "iid" and s.topology.kind == "star" and s.topology.params == {}
    assert s.engine.name == "inproc" and s.engine.actors == 2
    assert s.output.dir == "runs" and s.output.eval_every == 1000
    assert s.schedule.kind == "sync" and s.faults.is_empty and s.network is None


def topo_error(top: dict) -> str:
    return error(scenario(ANY_TOPOLOGY, topology=top))


def topo_params(top: dict) -> dict:
    return svmsim.load_scenario(scenario(ANY_TOPOLOGY, topology=top)).topology.params


def test_topology_parameter_types_are_strict(tmp_path):
    assert topo_error({"kind": "grid", "periodic": 1}) == \
        "scenario: [topology] periodic = 1 has the wrong type: expected true or false (true or false)"
    assert topo_error({"kind": "grid", "rows": True}) == \
        "scenario: [topology] rows = true has the wrong type: expected an integer (divisor of n_nodes)"
    assert topo_error({"kind": "grid", "rows": 2.0}) == \
        "scenario: [topology] rows = 2.0 has the wrong type: expected an integer (divisor of n_nodes)"
    assert topo_error({"kind": "small_world", "p": True}) == \
        "scenario: [topology] p = true has the wrong type: expected a number (0 <= p <= 1)"
    assert topo_error({"kind": "small_world", "p": float("nan")}) == \
        "scenario: [topology] p = nan has the wrong type: expected a number (0 <= p <= 1)"
    assert topo_error({"kind": "edge_list", "path": 5}) == \
        "scenario: [topology] path = 5 has the wrong type: expected a string (an existing text file)"


def test_topology_parameters_of_the_right_kind_are_accepted(tmp_path):
    assert topo_params({"kind": "grid", "periodic": np.bool_(True)})["periodic"] is True
    assert topo_params({"kind": "grid", "rows": np.int64(2)})["rows"] == 2
    assert topo_params({"kind": "small_world", "p": 1}) == {"k": 4, "p": 1.0}
    assert topo_params({"kind": "small_world", "p": np.int64(0)})["p"] == 0
    assert topo_params({"kind": "small_world", "p": np.float32(0.5)})["p"] == 0.5
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    assert topo_params({"kind": "edge_list", "path": edges}) == {"path": str(edges)}
    # a path object given to the model itself (not through a normalised dict) is a string parameter too
    assert TopologySection.model_validate({"kind": "edge_list", "path": edges}).params == {"path": str(edges)}
    assert topo_params({"kind": "grid", "params": {"rows": 2}, "cols": 3}) == \
        {"rows": 2, "cols": 3, "periodic": False}


def test_algorithm_parameters_strict_scalars_and_unknown_keys():
    assert error(scenario(algorithm={"name": SYNC, "clients": "3", "flag": 1, "zzz": 1})) == (
        "scenario has 3 errors:\n"
        f"  [algorithm] unknown key 'zzz'; allowed keys for {SYNC}: clients, flag, pair, rate, where\n"
        '  [algorithm] clients = "3" has the wrong type: expected an integer\n'
        "  [algorithm] flag = 1 has the wrong type: expected true or false")
    assert error(scenario(algorithm={"name": SYNC, "clients": True})) == \
        "scenario: [algorithm] clients = true has the wrong type: expected an integer"
    assert error(scenario(algorithm={"name": SYNC, "clients": 1.0})) == \
        "scenario: [algorithm] clients = 1.0 has the wrong type: expected an integer"
    assert error(scenario(algorithm={"name": SYNC, "learning_rate": True})) == \
        "scenario: [algorithm] learning_rate = true has the wrong type: expected a number"


def test_algorithm_parameter_bounds_and_lax_conversions():
    assert error(scenario(algorithm={"name": SYNC, "clients": 0})) == \
        "scenario: [algorithm] clients = 0 is out of range; allowed: an integer >= 1"
    assert svmsim.load_scenario(scenario(algorithm={"name": SYNC, "clients": 1})).algorithm.params.clients == 1
    assert error(scenario(algorithm={"name": SYNC, "pair": [1, "a"]})) == \
        'scenario: [algorithm] pair[1] = "a" has the wrong type: expected an integer'
    assert error(scenario(algorithm={"name": SYNC, "pair": [1, 2, 3]})) == \
        "scenario: [algorithm] pair = [1, 2, 3] has 3 items; allowed: at most 2 items"
    assert error(scenario(algorithm={"name": SYNC, "pair": [1.5, 2], "clients": "a"})) == (
        "scenario has 2 errors:\n"
        '  [algorithm] clients = "a" has the wrong type: expected an integer\n'
        "  [algorithm] pair[0] = 1.5 has the wrong type: expected an integer")
    # a TOML list for a tuple, a string for a path and an aliased key stay allowed
    p = svmsim.load_scenario(scenario(algorithm={"name": SYNC, "pair": [3, 4], "where": "there",
                                                 "learning_rate": 2})).algorithm.params
    assert p.pair == (3, 4) and p.where == Path("there") and p.rate == 2.0


def test_algorithm_params_nested_or_as_a_model():
    s = svmsim.load_scenario(scenario(algorithm={"name": SYNC, "params": {"clients": 3}, "flag": True}))
    assert s.algorithm.params.clients == 3 and s.algorithm.params.flag is True
    s = svmsim.load_scenario(scenario(algorithm={"name": SYNC, "params": SyncParams(clients=4)}))
    assert s.algorithm.params.clients == 4
    assert error(scenario(algorithm={"name": "no-such-thing"})).startswith(
        "scenario: [algorithm] name = 'no-such-thing' is not a known algorithm; allowed: ")
    assert error(scenario(algorithm={"name": 3})) == \
        "scenario: [algorithm] name = 3 has the wrong type: expected a string"


def test_partition_parameters_and_their_defaults():
    def part(p):
        s = svmsim.load_scenario(scenario(partition=p))
        return s.partition.params(), s.to_dict()["partition"]

    assert part({"scheme": "iid"}) == ({}, {"scheme": "iid"})
    assert part({"scheme": "label_skew"}) == ({"skew": 0.5}, {"scheme": "label_skew", "skew": 0.5})
    assert part({"scheme": "label_skew", "skew": 0.3})[0] == {"skew": 0.3}
    assert part({"scheme": "unequal"}) == ({"alpha": 1.0}, {"scheme": "unequal", "alpha": 1.0})
    assert error(scenario(partition={"scheme": "iid", "skew": 0.3})) == (
        "scenario: [partition] skew = 0.3 does not apply to scheme 'iid'; allowed: skew only with scheme "
        "'label_skew'; scheme 'iid' takes no parameters")
    assert error(scenario(partition={"scheme": "label_skew", "alpha": 2.0})) == (
        "scenario: [partition] alpha = 2.0 does not apply to scheme 'label_skew'; allowed: alpha only with scheme "
        "'unequal'; scheme 'label_skew' takes skew")


def test_network_model_carries_every_setting_and_link_override():
    net = NetworkSection(latency=1e-3, bandwidth=2e9, compute_rate=5e8, compute="measured",
                         links=[{"a": 0, "b": 1}, {"a": 1, "b": 2, "latency": 0.5},
                                {"a": 2, "b": 3, "bandwidth": 7.0}])
    assert net.model() == NetworkModel(latency=1e-3, bandwidth=2e9, compute_rate=5e8, compute="measured",
                                       links={(0, 1): (None, None), (1, 2): (0.5, None), (2, 3): (None, 7.0)})
    assert NetworkSection().model() == NetworkModel()


# -- schema: the scheduler's cross-checks ---------------------------------------------------------------------------

def test_schedule_kind_auto_resolves_to_the_algorithms_scheduler():
    assert svmsim.load_scenario(scenario()).schedule.kind == "sync"
    assert svmsim.load_scenario(scenario(GOSSIP)).schedule.kind == "gossip"
    assert svmsim.load_scenario(scenario(GOSSIP, schedule={"kind": "gossip"})).schedule.kind == "gossip"
    assert svmsim.load_scenario(scenario(schedule={"kind": "sync", "compiled": False})).schedule.kind == "sync"


def test_schedule_kind_that_does_not_fit_the_algorithm():
    assert error(scenario(schedule={"kind": "gossip"})) == (
        f"scenario: [schedule] kind = 'gossip' is not supported by algorithm '{SYNC}' (it runs in synchronous "
        "rounds); allowed: 'sync' or 'auto'")
    assert error(scenario(GOSSIP, schedule={"kind": "sync"})) == (
        f"scenario: [schedule] kind = 'sync' is not supported by algorithm '{GOSSIP}' (it runs on the gossip "
        "scheduler); allowed: 'gossip' or 'auto'")


def test_topology_the_algorithm_does_not_support():
    assert error(scenario(topology={"kind": "ring"})) == \
        f"scenario: [topology] kind = 'ring' is not supported by algorithm '{SYNC}'; allowed: star"


def test_gossip_engines():
    assert error(scenario(GOSSIP, engine={"name": "ray-cgraph"})) == (
        "scenario: [engine] name = 'ray-cgraph' drives actors in lockstep through a compiled graph (synchronous "
        "rounds), but the gossip scheduler runs free actors that send to each other directly; allowed with gossip: "
        'name = "inproc" or "ray"')
    assert error(scenario(GOSSIP, engine={"name": "ray"}, schedule={"eval_messages": 5})) == (
        "scenario: [schedule] eval_messages = 5 counts messages in one process; Ray hosts evaluate on their own "
        "virtual clocks: allowed on engine ray: eval_time")
    assert svmsim.load_scenario(scenario(GOSSIP, engine={"name": "ray"}, schedule={"eval_time": 5.0}))
    s = svmsim.load_scenario(scenario(GOSSIP, schedule={"eval_messages": 5}))
    assert s.schedule.eval_messages == 5
    # ray-cgraph is fine for synchronous rounds
    assert svmsim.load_scenario(scenario(engine={"name": "ray-cgraph"})).engine.name == "ray-cgraph"


@pytest.mark.parametrize("algo, overrides, message", [
    (SYNC, {"schedule.kind": "gossip"}, "[schedule] kind = 'gossip' is not supported by algorithm"),
    (GOSSIP, {"engine.name": "ray-cgraph"}, "[engine] name = 'ray-cgraph' drives actors in lockstep"),
    (GOSSIP, {"engine.name": "ray", "schedule.eval_messages": 5}, "[schedule] eval_messages = 5 counts messages"),
])
def test_a_cross_check_error_names_the_override_that_caused_it(algo, overrides, message):
    with pytest.raises(ScenarioError) as exc:
        svmsim.load_scenario(scenario(algo), overrides=overrides)
    text = str(exc.value)
    assert text.startswith("scenario: " + message)
    key = message[1:].split("]")[0] + "." + message.split("] ")[1].split(" =")[0]
    assert text.endswith(f" (set by the override {key}={show(overrides[key])})")


GOSSIP_BUDGET = ("scenario: [stop] a gossip run with faults needs a budget: lost messages can keep a consensus error "
                 "from ever reaching [stop] gap or objective_change, so the run might never end; allowed: set [stop] "
                 "max_rounds, max_iterations, max_scalars or max_seconds, or [schedule] max_time or max_messages")


def test_gossip_with_faults_needs_a_budget():
    assert error(scenario(GOSSIP, faults={"drop": 0.1}, stop={"gap": 0.1})) == GOSSIP_BUDGET
    assert error(scenario(GOSSIP_NO_END, faults={"drop": 0.1}, stop={"gap": 0.1})) == GOSSIP_BUDGET
    # an algorithm that finishes by itself needs none
    s = svmsim.load_scenario(scenario(GOSSIP, faults={"drop": 0.1}, stop={"gap": 0.1},
                                      algorithm={"name": GOSSIP, "done": True}))
    assert s.faults.model().drop == 0.1
    # without faults, no budget is needed
    assert svmsim.load_scenario(scenario(GOSSIP, stop={"gap": 0.1})).stop.gap == 0.1


@pytest.mark.parametrize("stop, schedule", [
    ({"max_iterations": 5}, {}), ({"max_rounds": 5}, {}), ({"max_scalars": 5}, {}), ({"max_seconds": 5.0}, {}),
    ({"gap": 0.1}, {"max_time": 5.0}), ({"gap": 0.1}, {"max_messages": 5}),
])
def test_each_budget_alone_bounds_a_gossip_run_with_faults(stop, schedule):
    s = svmsim.load_scenario(scenario(GOSSIP_NO_END, faults={"drop": 0.1}, stop=stop, schedule=schedule))
    assert s.schedule.kind == "gossip" and not s.faults.is_empty


def test_gossip_keys_in_synchronous_rounds():
    assert error(scenario(schedule={"max_messages": 2, "rate": 2.0})) == (
        f"scenario: [schedule] rate applies to the gossip scheduler, but algorithm '{SYNC}' runs in synchronous "
        'rounds; allowed keys with kind = "sync": kind, compiled')
    assert error(scenario(schedule={"eval_messages": 2})).startswith("scenario: [schedule] eval_messages applies")
    assert error(scenario(schedule={"latency": 0.5})).startswith("scenario: [schedule] latency applies")
    s = svmsim.load_scenario(scenario(GOSSIP, schedule={"max_messages": 2, "rate": 2.0, "compiled": False}))
    assert s.schedule.gossip_keys_given() == ["rate", "max_messages"]


def test_faults_in_synchronous_rounds():
    assert error(scenario(SINGLE, faults={"drop": 0.1})) == (
        f"scenario: [faults] algorithm '{SINGLE}' runs on a single machine, so there are no messages or nodes to "
        "fail; allowed: no [faults] section")
    assert error(scenario(faults={"delay": 0.1, "delay_time": 1.0})) == (
        "scenario: [faults] delay (synchronous rounds deliver every message in the next round) need the gossip "
        "scheduler; allowed with synchronous rounds: drop, duplicate, crash/crash_nodes with recover_state = true, "
        "churn with churn_state = true")
    s = svmsim.load_scenario(scenario(faults={"drop": 0.25, "crash_nodes": [1]}))
    assert s.faults.model() == FaultModel.from_config({"drop": 0.25, "crash_nodes": [1]})
    assert svmsim.load_scenario(scenario(SINGLE)).faults.is_empty


def test_latency_distribution_of_the_schedule():
    s = svmsim.load_scenario(scenario(GOSSIP, schedule={"latency": {"kind": "uniform", "low": 0.1, "high": 0.3}}))
    assert s.schedule.latency_distribution() == Distribution.uniform(0.1, 0.3)
    assert ScheduleSection().latency_distribution() == Distribution.constant(0.01)
    bad = ScheduleSection.model_construct(latency={"kind": "uniform", "low": 0.1})
    with pytest.raises(ScenarioError) as exc:
        bad.latency_distribution()
    assert str(exc.value).startswith("latency.high is missing; ")


# -- schema: the resolved scenario -------------------------------------------------------------------------------

def test_to_dict_holds_every_resolved_value_and_loads_back_equal():
    d = scenario(GOSSIP, description="all tables", seed=7,
                 data={"name": "iris", "holdout": 0.25, "scale": "max_abs"},
                 partition={"scheme": "label_skew"},
                 topology={"kind": "complete"},
                 engine={"name": "ray", "actors": 3},
                 algorithm={"name": GOSSIP, "nodes": 4},
                 stop={"max_rounds": 9, "below": {"rel_dual": 1e-3}},
                 output={"dir": "out", "eval_every": 3, "plots": False},
                 schedule={"rate": 2.0, "max_time": 10.0},
                 faults={"drop": 0.1, "crash_nodes": [2]},
                 network={"latency": 1e-4})
    s = svmsim.load_scenario(d)
    out = s.to_dict()
    assert out == {
        "name": "exact", "description": "all tables", "seed": 7,
        "data": {"name": "iris", "test": "auto", "holdout": 0.25, "scale": "max_abs"},
        "partition": {"scheme": "label_skew", "skew": 0.5},
        "topology": {"kind": "complete"},
        "engine": {"name": "ray", "actors": 3, "address": "", "dashboard": False, "metrics": True, "colocate": True,
                   "gossip": "free", "checkpoint_every": 100, "recover": True},
        "algorithm": {"name": GOSSIP, "nodes": 4, "done": False},
        "stop": {"max_rounds": 9, "below": {"rel_dual": 1e-3}},
        "output": {"dir": "out", "eval_every": 3, "plots": False, "progress": True, "overwrite": False,
                   "tracking": "none"},
        "schedule": {"kind": "gossip", "clock": "poisson", "rate": 2.0, "jitter": 0.0,
                     "latency": {"kind": "constant", "value": 0.01}, "edge_spread": 0.0, "max_time": 10.0,
                     "compiled": True},
        "faults": s.faults.model_dump(exclude_none=True),
        "network": {"latency": 1e-4, "bandwidth": 1.25e9, "compute_rate": 1e9, "links": [], "compute": "count"},
    }
    assert out["faults"]["drop"] == 0.1 and out["faults"]["crash_nodes"] == [2]
    assert svmsim.load_scenario(out) == s
    assert tomllib.loads(s.to_toml()) == out


def test_to_dict_leaves_out_default_schedule_faults_and_network():
    s = svmsim.load_scenario(scenario(topology={"kind": "star"}))
    out = s.to_dict()
    assert list(out) == ["name", "description", "seed", "data", "partition", "topology", "engine", "algorithm",
                         "stop", "output"]
    assert out["algorithm"] == {"name": SYNC, "clients": 20, "flag": False, "pair": [1, 2], "rate": 0.5,
                                "where": "here"}
    s = svmsim.load_scenario(scenario(faults={"drop": 0.1}))
    assert s.to_dict()["faults"]["drop"] == 0.1 and "schedule" not in s.to_dict()


def test_dataset_kwargs():
    s = svmsim.load_scenario(scenario(seed=3, data={"name": "iris", "positive_label": 2, "scale": "unit_box"}))
    assert s.dataset_kwargs() == {"name": "iris", "data_dir": None, "test": "auto", "positive_label": 2,
                                  "n_features": None, "scale": "unit_box"}
    s = svmsim.load_scenario(scenario(seed=3, data={"name": "a9a", "data_dir": "/d", "test": "none",
                                                    "n_features": 5, "holdout": 0.2}))
    assert s.dataset_kwargs() == {"name": "a9a", "data_dir": "/d", "test": "none", "positive_label": None,
                                  "n_features": 5, "scale": "none", "holdout": 0.2, "holdout_seed": 3}
    s = svmsim.load_scenario(scenario(seed=4, data={"name": "synthetic", "n": 30, "d": 2}))
    kw = s.dataset_kwargs()
    assert kw == {"name": "synthetic", "data_dir": None, "test": "auto", "positive_label": None,
                  "n_features": None, "scale": "none", **s.data.synthetic_params(), "seed": 4}
    assert kw["kind"] == "separable" and kw["n"] == 30 and kw["d"] == 2


def test_run_directory():
    s = svmsim.load_scenario(scenario(seed=5, output={"dir": "out"}))
    assert s.run_directory("T") == Path("out") / "exact-5-T"
    before = dt.datetime.now().replace(microsecond=0)
    path = s.run_directory()
    after = dt.datetime.now()
    assert path.parent == Path("out")
    m = re.fullmatch(r"exact-5-(\d{8}-\d{6})", path.name)
    assert m, path.name
    assert before <= dt.datetime.strptime(m[1], "%Y%m%d-%H%M%S") <= after
    s = svmsim.load_scenario(scenario(output={"dir": "out", "run_dir": "elsewhere/run"}))
    assert s.run_directory("T") == Path("elsewhere/run")


def test_an_algorithm_that_finishes_by_itself_needs_no_stopping_rule():
    d = scenario(GOSSIP, algorithm={"name": GOSSIP, "done": True})
    del d["stop"]
    assert svmsim.load_scenario(d).stop.limits() == {}
    d["algorithm"]["done"] = False               # finishes_by_itself is asked with the parameters
    assert error(d).startswith("scenario: [stop] no stopping rule is set")
