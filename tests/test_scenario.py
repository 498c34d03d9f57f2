"""Tests of svmsim.config: loading, defaults, overrides, error messages and the TOML writer."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from svmsim.algorithms import registry
from svmsim.algorithms.registry import ALGORITHMS, AlgorithmInfo, register
from svmsim.errors import ScenarioError
from svmsim.config import (
    Scenario,
    dump_toml,
    load_scenario,
    parse_override,
    parse_overrides,
    validate_file,
)

ALGO = "fake-dsvc"
RING_ALGO = "fake-gossip"


class FakeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    clients: int = Field(20, ge=1)
    eps: float = Field(1e-3, gt=0, lt=1)
    alpha: float = 0.5
    beta: float = Field(0.1, ge=0, le=1)
    steps: tuple[int, int] = (1, 2)
    variant: str | None = None


class GossipParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(8, ge=2)


@pytest.fixture(autouse=True)
def fake_algorithms(monkeypatch):
    """Register two small algorithms for the duration of a test, and remove them afterwards."""
    registry.load_all()
    register(AlgorithmInfo(ALGO, "fake", "none", True, FakeParams, lambda p, q: None, "a fake server-client algorithm"))
    register(AlgorithmInfo(RING_ALGO, "fake", "none", True, GossipParams, lambda p, q: None, "a fake peer algorithm",
                           topologies=("ring", "complete", "small_world")))
    yield
    ALGORITHMS.pop(ALGO, None)
    ALGORITHMS.pop(RING_ALGO, None)


def minimal() -> dict:
    return {"name": "quick", "data": {"name": "iris"}, "algorithm": {"name": ALGO}, "stop": {"max_iterations": 10}}


FULL = {
    "name": "full-run_1.0",
    "description": "every section given",
    "seed": 7,
    "data": {"name": "a9a", "data_dir": "/data", "test": "none", "holdout": 0.1, "positive_label": 1,
             "n_features": 123, "scale": "max_abs"},
    "partition": {"scheme": "label_skew", "skew": 0.8},
    "topology": {"kind": "star"},
    "engine": {"name": "ray", "actors": 4, "address": "auto", "dashboard": False, "metrics": False, "colocate": True,
               "gossip": "deterministic", "checkpoint_every": 50, "recover": False},
    "algorithm": {"name": ALGO, "clients": 10, "eps": 1e-4, "alpha": 2.0, "beta": 0.2, "steps": [3, 4],
                  "variant": "fast"},
    "stop": {"max_iterations": 1000, "max_rounds": 5000, "max_scalars": 10**9, "max_seconds": 60.0, "gap": 1e-3},
    "output": {"dir": "out", "run_dir": "out/exact", "eval_every": 50, "plots": False, "progress": False,
               "overwrite": True, "tracking": "mlflow", "tracking_uri": "sqlite:///runs.db", "experiment": "study"},
}


def error_of(source, overrides=None) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(source, overrides)
    return str(info.value)


# --------------------------------------------------------------------------------------------------------
# valid scenarios


def test_full_scenario_round_trips_through_dict():
    s = load_scenario(FULL)
    assert isinstance(s, Scenario)
    assert s.to_dict() == FULL
    assert load_scenario(s.to_dict()) == s
    assert s.algorithm.params.clients == 10
    assert s.algorithm.params.steps == (3, 4)
    assert isinstance(s.algorithm.params, FakeParams)
    assert s.algorithm.info.name == ALGO
    assert s.engine.is_ray
    assert s.stop.limits()["gap"] == 1e-3
    json.dumps(s.to_dict())  # plain data only


def test_full_scenario_round_trips_through_file(tmp_path):
    path = tmp_path / "full.toml"
    path.write_text(dump_toml(FULL))
    s = validate_file(path)
    assert s.to_dict() == FULL
    assert s.source == str(path)
    again = tmp_path / "resolved.toml"
    again.write_text(s.to_toml())
    assert load_scenario(again) == s
    assert load_scenario(str(again)).to_dict() == FULL


def test_defaults_are_filled():
    d = load_scenario(minimal()).to_dict()
    assert d == {
        "name": "quick",
        "description": "",
        "seed": 0,
        "data": {"name": "iris", "test": "auto", "scale": "none"},
        "partition": {"scheme": "iid"},
        "topology": {"kind": "star"},
        "engine": {"name": "inproc", "actors": 2, "address": "", "dashboard": False, "metrics": True, "colocate": True,
                   "gossip": "free", "checkpoint_every": 100, "recover": True},
        "algorithm": {"name": ALGO, "clients": 20, "eps": 1e-3, "alpha": 0.5, "beta": 0.1, "steps": [1, 2]},
        "stop": {"max_iterations": 10},
        "output": {"dir": "runs", "eval_every": 1000, "plots": True, "progress": True, "overwrite": False,
                   "tracking": "none"},
    }


def test_scheme_topology_and_synthetic_defaults_are_resolved():
    raw = minimal()
    raw["algorithm"] = {"name": RING_ALGO}
    raw["topology"] = {"kind": "small_world", "p": 0.2}
    raw["partition"] = {"scheme": "unequal"}
    raw["data"] = {"name": "synthetic", "kind": "nonseparable", "n": 200, "d": 5}
    s = load_scenario(raw)
    assert s.topology.kind == "small_world" and s.topology.params == {"k": 4, "p": 0.2}
    d = s.to_dict()
    assert d["topology"] == {"kind": "small_world", "k": 4, "p": 0.2}
    assert d["partition"] == {"scheme": "unequal", "alpha": 1.0}
    assert d["data"] == {"name": "synthetic", "test": "auto", "scale": "none", "kind": "nonseparable", "n": 200,
                         "d": 5, "beta": 0.0, "flip_band": 0.1}
    assert s.partition.params() == {"alpha": 1.0}
    kw = s.dataset_kwargs()
    assert kw["kind"] == "nonseparable" and kw["n"] == 200 and kw["seed"] == 0
    assert load_scenario(d) == s


def test_synthetic_kind_defaults_to_separable():
    raw = minimal()
    raw["data"] = {"name": "synthetic", "n": 50, "d": 2}
    assert load_scenario(raw).data.synthetic_params() == {"kind": "separable", "n": 50, "d": 2, "beta": 0.1}


def test_int_is_accepted_for_a_float_key():
    raw = minimal()
    raw["stop"] = {"max_seconds": 5}
    raw["algorithm"]["alpha"] = 2
    s = load_scenario(raw)
    assert s.stop.max_seconds == 5.0 and s.algorithm.params.alpha == 2.0


def test_run_directory():
    s = load_scenario(minimal(), {"seed": 3})
    assert s.run_directory("20240101-000000") == Path("runs") / "quick-3-20240101-000000"
    s = load_scenario(minimal(), {"output.run_dir": "here"})
    assert s.run_directory() == Path("here")


# --------------------------------------------------------------------------------------------------------
# overrides


def test_overrides_with_dotted_keys():
    s = load_scenario(minimal(), {"engine.name": "ray", "stop.max_iterations": 99, "algorithm.eps": 1e-4,
                                  "seed": 5, "topology.kind": "star", "output.plots": False})
    assert s.engine.name == "ray"
    assert s.stop.max_iterations == 99
    assert s.algorithm.params.eps == 1e-4
    assert s.seed == 5
    assert s.output.plots is False


def test_overrides_apply_to_files_and_do_not_change_the_source(tmp_path):
    raw = minimal()
    path = tmp_path / "quick.toml"
    path.write_text(dump_toml(raw))
    s = load_scenario(path, {"algorithm.clients": 3})
    assert s.algorithm.params.clients == 3
    assert raw["algorithm"] == {"name": ALGO}
    assert load_scenario(path).algorithm.params.clients == 20


def test_override_can_create_a_section():
    raw = minimal()
    raw["algorithm"] = {"name": RING_ALGO}
    s = load_scenario(raw, {"topology.kind": "ring"})
    assert s.topology.kind == "ring"


def test_bad_override_is_reported_with_its_origin():
    msg = error_of(minimal(), {"engine.name": "spark"})
    assert "[engine] name = 'spark'" in msg and "engine.name" in msg and "inproc, ray, ray-cgraph" in msg


def test_override_through_a_scalar_is_an_error():
    raw = minimal()
    raw["seed"] = 1
    msg = error_of(raw, {"seed.x": 1})
    assert "seed" in msg and "not a table" in msg


@pytest.mark.parametrize(
    "text, expected",
    [
        ("algorithm.eps=1e-4", ("algorithm.eps", 1e-4)),
        ("algorithm.clients=20", ("algorithm.clients", 20)),
        ("output.plots=false", ("output.plots", False)),
        ("engine.name=ray", ("engine.name", "ray")),
        ("engine.name=ray-cgraph", ("engine.name", "ray-cgraph")),
        ('name="my run"', ("name", "my run")),
        (" stop.gap = 0.01 ", ("stop.gap", 0.01)),
        ("algorithm.steps=[3, 4]", ("algorithm.steps", [3, 4])),
        ("data.name=../data/a9a", ("data.name", "../data/a9a")),
        ("data.test=2024-01-01", ("data.test", "2024-01-01")),
        ("engine.address=", ("engine.address", "")),
    ],
)
def test_parse_override(text, expected):
    assert parse_override(text) == expected


def test_parse_overrides_later_wins():
    assert parse_overrides(["seed=1", "engine.name=ray", "seed=2"]) == {"seed": 2, "engine.name": "ray"}


@pytest.mark.parametrize("text", ["algorithm.eps", "=3", "a..b=1", "a b=1"])
def test_parse_override_rejects_malformed(text):
    with pytest.raises(ScenarioError, match="override"):
        parse_override(text)


# --------------------------------------------------------------------------------------------------------
# error messages


def test_unknown_algorithm_key_lists_allowed_keys(tmp_path):
    raw = minimal()
    raw["algorithm"]["epss"] = 1e-4
    path = tmp_path / "quick.toml"
    path.write_text(dump_toml(raw))
    msg = error_of(path)
    assert msg == (f"{path}: [algorithm] unknown key 'epss'; allowed keys for {ALGO}: "
                   "alpha, beta, clients, eps, steps, variant")
    assert "\n" not in msg


def test_out_of_range_names_the_range():
    msg = error_of(minimal(), {"stop.gap": 2.0})
    assert msg.startswith("scenario: [stop] gap = 2.0 is out of range; allowed: a number in (0, 1)")


def test_unknown_engine():
    raw = minimal()
    raw["engine"] = {"name": "spark"}
    assert error_of(raw) == "scenario: [engine] name = 'spark' is not an engine; allowed: inproc, ray, ray-cgraph"


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("algorithm.clients", "20", '[algorithm] clients = "20" has the wrong type: expected an integer'),
        ("algorithm.clients", True, "[algorithm] clients = true has the wrong type: expected an integer"),
        ("algorithm.clients", 2.5, "[algorithm] clients = 2.5 has the wrong type: expected an integer"),
        ("algorithm.eps", "1e-4", '[algorithm] eps = "1e-4" has the wrong type: expected a number'),
        ("seed", "3", 'seed = "3" has the wrong type: expected an integer'),
        ("engine.actors", "4", '[engine] actors = "4" has the wrong type: expected an integer'),
        ("output.plots", 1, "[output] plots = 1 has the wrong type: expected true or false"),
        ("stop.max_iterations", "10", '[stop] max_iterations = "10" has the wrong type: expected an integer'),
        ("data.name", 3, "[data] name = 3 has the wrong type: expected a string"),
    ],
)
def test_wrong_type_is_detected(tmp_path, key, value, expected):
    raw = minimal()
    section, _, leaf = key.rpartition(".")
    (raw.setdefault(section, {}) if section else raw)[leaf] = value
    path = tmp_path / "quick.toml"
    path.write_text(dump_toml(raw))
    assert error_of(path) == f"{path}: {expected}"


def test_missing_stop_rule():
    raw = minimal()
    del raw["stop"]
    msg = error_of(raw)
    assert "[stop]" in msg and "never stop" in msg
    assert "max_iterations, max_rounds, max_scalars, max_seconds, gap" in msg
    raw["stop"] = {}
    assert "never stop" in error_of(raw)


def test_toml_syntax_error(tmp_path):
    path = tmp_path / "quick.toml"
    path.write_text('name = "quick"\n[data]\nname = = "iris"\n')
    msg = error_of(path)
    assert msg.startswith(f"{path} is not valid TOML: line 3, column 8: ")


def test_toml_error_at_end_of_file(tmp_path):
    path = tmp_path / "quick.toml"
    path.write_text('name = "quick"\n[data]\nname = [1,\n')
    assert error_of(path).startswith(f"{path} is not valid TOML: ")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    msg = error_of(path)
    assert str(path) in msg and "does not exist" in msg
    with pytest.raises(ScenarioError, match="nope.toml"):
        validate_file(path)


def test_source_of_the_wrong_type():
    with pytest.raises(ScenarioError, match="TOML file path or a dict"):
        load_scenario(42)


def test_feature_scaling_key():
    raw = minimal()
    raw["data"]["scale"] = "unit_box"
    s = load_scenario(raw)
    assert s.dataset_kwargs()["scale"] == "unit_box"
    raw["data"]["scale"] = "standard"
    msg = error_of(raw)
    assert "[data] scale = 'standard' is not a feature scaling; allowed: none, unit_box, max_abs" in msg


def test_synthetic_keys_on_a_real_data_set():
    raw = minimal()
    raw["data"].update(n=100, beta=0.2)
    msg = error_of(raw)
    assert "[data] n = 100 only applies to synthetic data" in msg
    assert "[data] beta = 0.2 only applies to synthetic data" in msg
    assert "'iris'" in msg


def test_synthetic_needs_its_required_keys_and_only_its_keys():
    raw = minimal()
    raw["data"] = {"name": "synthetic", "kind": "sparse_nonseparable", "n": 100, "d": 10, "beta": 0.1}
    msg = error_of(raw)
    assert "[data] synthetic kind 'sparse_nonseparable' needs key 'density'; allowed: a number in (0, 1]" in msg
    assert "[data] beta does not apply to synthetic kind 'sparse_nonseparable'" in msg
    raw["data"] = {"name": "synthetic", "kind": "wavy", "n": 100, "d": 10}
    msg = error_of(raw)
    assert "[data] kind = 'wavy' is not a synthetic data kind" in msg
    assert "separable, nonseparable, sparse_nonseparable" in msg


def test_synthetic_separable_beta_must_be_positive():
    raw = minimal()
    raw["data"] = {"name": "synthetic", "n": 10, "d": 2, "beta": 0.0}
    assert "(0, 1]" in error_of(raw)


def test_holdout_and_explicit_test_conflict():
    raw = minimal()
    raw["data"] = {"name": "a9a", "test": "a9a.t", "holdout": 0.1}
    msg = error_of(raw)
    assert "[data] holdout = 0.1" in msg and "not both" in msg
    raw["data"]["holdout"] = 1.5
    raw["data"]["test"] = "auto"
    assert "[data] holdout = 1.5 is out of range; allowed: a number in (0, 1)" in error_of(raw)


def test_unknown_top_level_section():
    raw = minimal()
    raw["solver"] = {"x": 1}
    msg = error_of(raw)
    assert "unknown top-level section 'solver'" in msg
    assert "[data], [partition], [topology], [engine], [algorithm], [stop], [output]" in msg


def test_unknown_key_in_a_section_lists_its_keys():
    msg = error_of(minimal(), {"output.plot": True})
    assert "[output] unknown key 'plot'; allowed keys: dir, run_dir, eval_every, plots, progress, overwrite" in msg


def test_missing_sections_and_keys():
    raw = minimal()
    del raw["data"]
    assert error_of(raw) == "scenario: required section [data] is missing"
    raw = minimal()
    del raw["algorithm"]["name"]
    msg = error_of(raw)
    assert "[algorithm] required key 'name' is missing" in msg and ALGO in msg
    raw = minimal()
    del raw["name"]
    assert "required key 'name' is missing" in error_of(raw)


def test_unknown_algorithm():
    msg = error_of(minimal(), {"algorithm.name": "svm-magic"})
    assert "[algorithm] name = 'svm-magic' is not a known algorithm" in msg
    assert ALGO in msg and RING_ALGO in msg


def test_topology_not_supported_by_the_algorithm():
    msg = error_of(minimal(), {"topology.kind": "ring"})
    assert f"[topology] kind = 'ring' is not supported by algorithm '{ALGO}'; allowed: star" in msg


def test_topology_errors():
    raw = minimal()
    raw["topology"] = {"kind": "mobius"}
    msg = error_of(raw)
    assert "[topology] kind = 'mobius' is not a topology kind" in msg and "small_world" in msg
    raw["algorithm"] = {"name": RING_ALGO}
    raw["topology"] = {"kind": "small_world", "degree": 3, "k": "4"}
    msg = error_of(raw)
    assert "[topology] unknown key 'degree' for topology kind 'small_world'" in msg and "k: int = 4" in msg
    assert '[topology] k = "4" has the wrong type: expected an integer' in msg


def test_engine_address_needs_ray():
    msg = error_of(minimal(), {"engine.address": "10.0.0.1:6379"})
    assert "[engine] address" in msg and "ray, ray-cgraph" in msg
    s = load_scenario(minimal(), {"engine.address": "10.0.0.1:6379", "engine.name": "ray-cgraph"})
    assert s.engine.address == "10.0.0.1:6379"


def test_partition_errors():
    msg = error_of(minimal(), {"partition.scheme": "dirichlet"})
    assert "[partition] scheme = 'dirichlet' is not a partition scheme" in msg and "label_skew" in msg
    msg = error_of(minimal(), {"partition.alpha": 0.5})
    assert "[partition] alpha = 0.5 does not apply to scheme 'iid'" in msg and "'unequal'" in msg


def test_bad_scenario_name():
    msg = error_of(minimal(), {"name": "my run"})
    assert 'name = "my run"' in msg and "letters, digits" in msg


def test_several_errors_are_listed_one_per_line(tmp_path):
    raw = minimal()
    raw["seed"] = -1
    raw["stop"] = {"gap": 0.0}
    raw["engine"] = {"name": "spark"}
    raw["algorithm"]["clients"] = "20"
    path = tmp_path / "quick.toml"
    path.write_text(dump_toml(raw))
    lines = error_of(path).splitlines()
    assert lines[0] == f"{path} has 4 errors:"
    body = [line.strip() for line in lines[1:]]
    assert "seed = -1 is out of range; allowed: an integer >= 0" in body
    assert "[stop] gap = 0.0 is out of range; allowed: a number in (0, 1)" in body
    assert "[engine] name = 'spark' is not an engine; allowed: inproc, ray, ray-cgraph" in body
    assert '[algorithm] clients = "20" has the wrong type: expected an integer' in body
    assert "Traceback" not in "\n".join(lines)


def test_union_type_errors_are_merged():
    msg = error_of(minimal(), {"data.positive_label": "yes"})
    assert msg == ('scenario: [data] positive_label = "yes" has the wrong type: expected an integer or a number '
                   '(set by the override data.positive_label="yes")')


# --------------------------------------------------------------------------------------------------------
# TOML writer


def test_dump_toml_reparses_to_the_same_dict():
    d = {
        "name": "x",
        "pi": 3.141592653589793,
        "tiny": 1e-300,
        "big": 10**18,
        "neg": -2,
        "flag": True,
        "inf": math.inf,
        "list": [1, 2.5, "a", False, [1, 2]],
        "empty_list": [],
        "odd key": "quote \" backslash \\ tab \t newline \n bell \x07 unicode é",
        "section": {"a": 1, "b": "two", "nested": {"c": [0.1, 0.2]}},
        "empty": {},
        "last": {"z": "z"},
    }
    text = dump_toml(d)
    assert tomllib.loads(text) == d


def test_dump_toml_drops_none_and_puts_scalars_before_tables():
    text = dump_toml({"t": {"a": 1}, "s": 1, "n": None})
    assert tomllib.loads(text) == {"s": 1, "t": {"a": 1}}
    assert text.index("s = 1") < text.index("[t]")


def test_resolved_scenario_dumps_and_reloads():
    s = load_scenario(FULL)
    assert tomllib.loads(dump_toml(s.to_dict())) == s.to_dict()


def test_relative_data_paths_are_read_beside_the_scenario_file(tmp_path, monkeypatch):
    (tmp_path / "exp" / "data").mkdir(parents=True)
    (tmp_path / "exp" / "data" / "tiny.svm").write_text("+1 1:1\n-1 1:-1\n")
    (tmp_path / "exp" / "s.toml").write_text('name = "rel"\n[data]\nname = "./data/tiny.svm"\ntest = "none"\n'
                                             '[algorithm]\nname = "fake-dsvc"\n[stop]\nmax_iterations = 1\n')
    monkeypatch.chdir(tmp_path)                        # the file lies in exp/, the working directory above it
    s = load_scenario(Path("exp") / "s.toml")
    assert Path(s.data.name) == Path("exp") / "data" / "tiny.svm"
    (tmp_path / "exp" / "s.toml").write_text('name = "rel"\n[data]\nname = "./elsewhere.svm"\n'
                                             '[algorithm]\nname = "fake-dsvc"\n[stop]\nmax_iterations = 1\n')
    assert load_scenario(Path("exp") / "s.toml").data.name == "./elsewhere.svm"     # nothing beside it: as given
