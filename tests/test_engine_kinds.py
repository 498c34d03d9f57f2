"""Engines as registered pieces: an engine of one's own (registered from Python or provided by an installed
distribution through the entry-point group svmsim.engines) runs scenarios from files, the CLI and the Python API,
with keys of its own in [engine], and gives the ledger and iterates of the in-process engine it builds on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import svmsim
from svmsim.engine import ENGINE_KINDS, EngineKind, InProcessEngine, make_engine, register_engine
from svmsim.api import ParamSpec
from svmsim.errors import PluginError, ScenarioError
from svmsim.core.metrics import WALL_CLOCK_METRICS

SCENARIO = {"name": "eng", "seed": 2, "data": {"name": "iris"}, "algorithm": {"name": "bqo-e", "workers": 4},
            "stop": {"max_iterations": 15}, "output": {"plots": False, "progress": False},
            "schedule": {"compiled": False}}      # every round through Engine.step (no compiled round loop)


class TracingEngine(InProcessEngine):
    """The in-process engine that also records which groups it stepped in each round."""

    name = "tracing"
    made: list = []

    def __init__(self, label: str = "", every: int = 1):
        super().__init__()
        self.label, self.every = label, every
        self.trace: list[tuple[int, tuple]] = []
        TracingEngine.made.append(self)

    def step(self, round_, inboxes):
        if round_ % self.every == 0:
            self.trace.append((round_, tuple(sorted(inboxes))))
        return super().step(round_, inboxes)


def _tracing(**options):
    return TracingEngine(**options)


@pytest.fixture
def tracing():
    TracingEngine.made.clear()
    kind = register_engine(EngineKind(
        "tracing", _tracing, "the in-process engine, recording the groups stepped in each round",
        {"label": ParamSpec(str, "", "a name for the trace"),
         "every": ParamSpec(int, 1, "record every n-th round", "an integer >= 1", valid=lambda v: v >= 1)},
        no_gossip="records synchronous rounds only"))
    yield kind
    ENGINE_KINDS.pop("tracing")


def _facts(result) -> tuple[dict, list]:
    ledger = json.loads((Path(result.run_dir) / "ledger.json").read_text())
    return ledger, [{k: v for k, v in row.items() if k not in WALL_CLOCK_METRICS} for row in result.metrics]


def test_a_registered_engine_runs_a_scenario_with_keys_of_its_own(tracing, tmp_path):
    out = {"dir": str(tmp_path)}
    mine = svmsim.run({**SCENARIO, "name": "mine", "engine": {"name": "tracing", "label": "t1", "every": 2},
                       "output": {**SCENARIO["output"], **out}})
    plain = svmsim.run({**SCENARIO, "name": "plain", "output": {**SCENARIO["output"], **out}})
    engine, = TracingEngine.made
    assert (engine.label, engine.every) == ("t1", 2)
    assert engine.trace and all(r % 2 == 0 for r, _ in engine.trace)
    assert _facts(mine) == _facts(plain)
    assert mine.summary["engine"] == "tracing"
    resolved = (Path(mine.run_dir) / "scenario.resolved.toml").read_text()
    assert 'name = "tracing"' in resolved and 'label = "t1"' in resolved and "every = 2" in resolved
    # the Python API's engine= takes the name too
    again = svmsim.run(SCENARIO, engine="tracing", write=False)
    assert TracingEngine.made[-1].label == "" and again.metrics[-1]["iteration"] == mine.metrics[-1]["iteration"]


def test_an_engines_keys_are_checked(tracing):
    for engine, text in (({"name": "tracing", "lable": "x"}, "unknown key 'lable' for engine 'tracing'; allowed keys: "
                                                             "name, actors, address, dashboard, metrics, colocate, "
                                                             "gossip, checkpoint_every, recover, and the parameters of "
                                                             "'tracing': label: str = '', every: int = 1"),
                         ({"name": "tracing", "every": 0}, "parameter 'every' of engine 'tracing' = 0 is out of "
                                                           "range; allowed: an integer >= 1"),
                         ({"name": "inproc", "label": "x"}, "unknown key 'label' for engine 'inproc'; allowed "
                                                            "keys: name, actors"),
                         ({"name": "nowhere"}, "name = 'nowhere' is not an engine; allowed: inproc, ray, ray-cgraph, "
                                               "tracing")):
        with pytest.raises(ScenarioError) as exc:
            svmsim.load_scenario({**SCENARIO, "engine": engine})
        assert text in " ".join(str(exc.value).split()), str(exc.value)
    # the Ray keys stay keys of [engine]: an engine that is not Ray's ignores them, as inproc does
    assert svmsim.load_scenario({**SCENARIO, "engine": {"name": "tracing", "actors": 3}}).engine.actors == 3


def test_an_engine_that_cannot_gossip_says_so(tracing):
    with pytest.raises(ScenarioError) as exc:
        svmsim.load_scenario({"name": "g", "data": {"name": "iris"}, "topology": {"kind": "ring"},
                              "algorithm": {"name": "pushsum", "nodes": 6}, "stop": {"max_rounds": 5},
                              "engine": {"name": "tracing"}})
    assert "name = 'tracing' records synchronous rounds only; allowed with gossip: name = \"inproc\" or \"ray\"" \
        in str(exc.value)


def test_make_engine_and_registration_errors(tracing):
    assert isinstance(make_engine("tracing", label="x"), TracingEngine)
    assert make_engine("ray-cgraph").compiled and not make_engine("ray").compiled
    with pytest.raises(ScenarioError, match="engine.name = 'warp' is not an engine; allowed: inproc, ray"):
        make_engine("warp")
    with pytest.raises(PluginError, match="engine 'x': parameter 'actors' is a key of \\[engine\\] already"):
        register_engine(EngineKind("x", _tracing, "", {"actors": ParamSpec(int, 1, "")}))
    with pytest.raises(PluginError, match="engine 'ray' is registered twice"):
        register_engine(EngineKind("ray", _tracing, ""))
    with pytest.raises(PluginError, match="factory = 3 is not callable"):
        register_engine(EngineKind("three", 3, ""))


def test_an_installed_engine_is_listed_and_runs_from_the_cli(tmp_path):
    site = tmp_path / "site"
    dist = site / "engine_extras-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: engine-extras\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[svmsim.engines]\ncounting = counting_engine\n")
    (site / "counting_engine.py").write_text(textwrap.dedent('''
        import json
        from svmsim.api import EngineKind, InProcessEngine, ParamSpec, register_engine

        class Counting(InProcessEngine):
            name = "counting"

            def __init__(self, log):
                super().__init__()
                self.log, self.rounds = log, 0

            def step(self, round_, inboxes):
                self.rounds += 1
                return super().step(round_, inboxes)

            def close(self):
                with open(self.log, "w") as f:
                    json.dump({"rounds": self.rounds}, f)

        def make(log):
            return Counting(log)

        register_engine(EngineKind("counting", make, "counts the rounds it steps",
                                   {"log": ParamSpec(str, None, "where to write the count", required=True)}))
        '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "svmsim.cli", *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=600)

    ls = cli("list", "engines")
    assert ls.returncode == 0 and "counting     counts the rounds it steps" in ls.stdout, ls.stdout + ls.stderr
    assert "log: str (required): where to write the count" in ls.stdout
    scenario = tmp_path / "s.toml"
    log = tmp_path / "count.json"
    scenario.write_text('name = "c"\n[data]\nname = "iris"\n[algorithm]\nname = "bqo-e"\nworkers = 3\n'
                        f'[stop]\nmax_iterations = 7\n[engine]\nname = "counting"\nlog = "{log}"\n'
                        '[output]\nplots = false\n[schedule]\ncompiled = false\n')
    run = cli("run", scenario, "--out", tmp_path / "run", "--quiet", "--no-progress")
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["engine"] == "counting"
    assert json.loads(log.read_text())["rounds"] == summary["rounds"] > 0
    missing = cli("validate", scenario, "--set", 'engine.name="inproc"', "--set", 'engine.log="x"')
    assert missing.returncode == 2 and "unknown key 'log' for engine 'inproc'" in " ".join(missing.stderr.split())


class _Wrapped:
    """Not a GossipRun: what an engine's gossip must not return."""

    def __init__(self, run):
        self.groups, self.inner = run.groups, run


def test_an_engines_gossip_run_is_a_gossip_run():
    """Both built-in gossip runs implement `GossipRun` (the runner drives any engine's run through it); an engine whose
    `gossip` returns anything else is refused with one message naming the engine and the interface."""
    from svmsim.api import GossipRun
    from svmsim.engine.ray_gossip import RayGossipRun
    from svmsim.schedule.gossip import GossipScheduler

    assert issubclass(GossipScheduler, GossipRun) and issubclass(RayGossipRun, GossipRun)

    class Foreign(InProcessEngine):
        name = "foreign"

        def gossip(self, *args, **kw):
            return _Wrapped(super().gossip(*args, **kw))

    register_engine(EngineKind("foreign", Foreign, "the in-process engine, its gossip wrapped"))
    sc = {"name": "g", "seed": 1, "data": {"name": "iris"}, "topology": {"kind": "ring"},
          "algorithm": {"name": "pushsum", "nodes": 6}, "stop": {"max_rounds": 5},
          "output": {"plots": False, "progress": False}}
    try:
        with pytest.raises(PluginError, match=r"engine 'foreign': gossip\(\) returned _Wrapped; allowed: a "
                                              r"svmsim\.schedule\.gossip\.GossipRun"):
            svmsim.run({**sc, "engine": {"name": "foreign"}}, write=False)
        assert svmsim.run(sc, write=False).final["round"] == 5       # the same scenario on the in-process run
    finally:
        ENGINE_KINDS.pop("foreign")
