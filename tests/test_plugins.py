"""Algorithms from outside svmsim's tree: a package installed with entry points in ``svmsim.algorithms``, and a
module a scenario names (``[algorithm] module``), through the command line (`run`, `validate`, `sweep`, `list`,
`check`) and the Python API, on the in-process engine and on Ray; and the clear errors of plugins that are broken.

The package is `examples/svmsim-extras` (a synchronous subgradient SVM and a gossip Pegasos written against
`svmsim.api` only), copied into a temporary directory and installed there with pip; nothing of it is on the test
process's path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import svmsim
from svmsim.algorithms import registry
from svmsim.api import AlgorithmInfo, Conformance, register
from svmsim.errors import PluginError, ScenarioError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "svmsim-extras"


def _cli(args, env_extra=None, cwd=None, timeout=600):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "svmsim.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The example package installed (pip, with its entry points) into a folder of its own: the environment
    variables that make it an installed distribution for a child process."""
    root = tmp_path_factory.mktemp("extras")
    shutil.copytree(EXAMPLE, root / "pkg", ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    site = root / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "--target", str(site), str(root / "pkg")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(site.glob("svmsim_extras-*.dist-info/entry_points.txt"))
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


@pytest.fixture
def module_tree(tmp_path):
    """A folder holding a scenario file and, beside it, a package `mypkg` with the example's subgradient SVM
    (not installed): the scenario names it with ``[algorithm] module``."""
    pkg = tmp_path / "study" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(EXAMPLE / "src" / "svmsim_extras" / "subgrad.py", pkg / "subgrad.py")
    scenario = tmp_path / "study" / "subgrad.toml"
    scenario.write_text(textwrap.dedent("""\
        name = "mine"
        seed = 1
        [data]
        name = "iris"
        [algorithm]
        name = "subgrad-svm"
        module = "mypkg.subgrad"
        clients = 3
        [stop]
        max_iterations = 40
        [output]
        eval_every = 10
        plots = false
        progress = false
        """))
    return scenario


def _run_dir_facts(run_dir: Path) -> tuple[dict, dict]:
    return json.loads((run_dir / "summary.json").read_text()), json.loads((run_dir / "ledger.json").read_text())


def test_a_module_named_by_the_scenario_runs_validates_and_sweeps_from_the_cli(module_tree, tmp_path):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    v = _cli(["validate", module_tree], cwd=elsewhere)
    assert v.returncode == 0, v.stderr
    assert 'module = "mypkg.subgrad"' in v.stdout
    r = _cli(["run", module_tree, "--out", tmp_path / "run", "--quiet"], cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    summary, ledger = _run_dir_facts(tmp_path / "run")
    d, k = 4, 3                                      # iris: 4 features; 3 clients
    assert summary["declared_scalars"] == ledger["totals"]["scalars"] and summary["ledger_matches_declared"]
    # 2 k d a completed iteration; the last broadcast and the answers of the settle round are in flight at the end
    assert ledger["totals"]["scalars"] == 40 * 2 * k * d + 2 * k * d
    s = _cli(["sweep", module_tree, "--param", "algorithm.clients=2,3", "--out", tmp_path / "sweep",
              "--no-progress"], cwd=elsewhere)
    assert s.returncode == 0, s.stderr
    rows = (tmp_path / "sweep" / "sweep.csv").read_text().splitlines()
    assert len(rows) == 3


def test_a_module_named_by_the_scenario_runs_from_python(module_tree):
    result = svmsim.run(str(module_tree), write=False)
    assert result.summary["ledger_matches_declared"] is True
    assert result.final["iteration"] == 40 and result.final["train_accuracy"] > 0.9


def test_an_installed_plugin_is_listed_checked_and_run(installed, tmp_path):
    ls = _cli(["list", "algorithms"], installed)
    assert ls.returncode == 0 and "subgrad-svm" in ls.stdout and "gossip-pegasos" in ls.stdout, ls.stderr
    one = _cli(["list", "algorithms", "gossip-pegasos"], installed)
    assert one.returncode == 0, one.stderr
    assert "distributed, gossip" in one.stdout and "steps" in one.stdout and "svmsim_extras.gossip_pegasos" in one.stdout
    check = _cli(["check", "subgrad-svm", "gossip-pegasos"], installed)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip().splitlines()[-1] == "12 passed, 0 failed, 4 skipped"
    scenario = EXAMPLE / "scenarios" / "gossip.toml"
    r = _cli(["run", scenario, "--out", tmp_path / "g", "--quiet", "--set", "algorithm.steps=30"], installed)
    assert r.returncode == 0, r.stderr
    summary, ledger = _run_dir_facts(tmp_path / "g")
    assert summary["ledger_matches_declared"] is True
    assert ledger["totals"]["scalars"] == 8 * 30 * 4            # every peer pushes d = 4 scalars at each of 30 ticks
    assert summary["stop_reason"] == "algorithm finished"


def test_an_installed_fault_kind_is_listed_and_restarts_the_nodes(installed, tmp_path):
    ls = _cli(["list", "faults"], installed)
    assert ls.returncode == 0, ls.stderr
    assert "rolling_restart" in ls.stdout and "interval: float = 1.0: time between two nodes going down" in ls.stdout
    scenario = tmp_path / "restart.toml"
    scenario.write_text((EXAMPLE / "scenarios" / "gossip.toml").read_text() + textwrap.dedent("""\
        [faults.rolling_restart]
        start = 2.0
        interval = 3.0
        downtime = 1.5
        shuffle = false
        keep_state = false
        """))
    r = _cli(["run", scenario, "--out", tmp_path / "r", "--quiet", "--set", "algorithm.steps=60"], installed)
    assert r.returncode == 0, r.stderr
    faults = _run_dir_facts(tmp_path / "r")[0]["faults"]
    assert faults["node_events"] == {"crash": 8, "recover": 8}
    assert faults["fault_kinds"][0]["down"] == [[[i], 2.0 + 3 * i, 3.5 + 3 * i] for i in range(8)]
    assert [e[1:] for e in faults["node_event_log"][:4]] == [[0, "crash"], [0, "recover"], [1, "crash"],
                                                             [1, "recover"]]
    bad = _cli(["validate", scenario, "--set", "faults.rolling_restart.interval=0.0"], installed)
    assert bad.returncode == 2
    assert "parameter 'interval' of fault kind 'rolling_restart' = 0.0 is out of range; allowed: a number > 0" in \
        " ".join(bad.stderr.split())


@pytest.mark.ray
def test_an_installed_plugin_gives_the_same_ledger_on_ray(installed, tmp_path):
    """In-process and Ray (synchronous), and Ray gossip in time windows: the same ledger (a Ray compiled graph's
    actors import a plugin as plain Ray's do; the built-in families hold that engine to the in-process ledger)."""
    sync = EXAMPLE / "scenarios" / "subgrad.toml"
    gossip = EXAMPLE / "scenarios" / "gossip.toml"
    short = ["--set", "stop.max_iterations=30", "--set", "output.plots=false"]
    windows = ["--set", "engine.gossip=deterministic", "--set", "schedule.latency=0.05", "--set",
               "algorithm.steps=20", "--set", "output.plots=false"]
    runs = {"inproc": (sync, short), "ray": (sync, short + ["--engine", "ray"]),
            "gossip-inproc": (gossip, windows), "gossip-ray": (gossip, windows + ["--engine", "ray"])}
    ledgers = {}
    for label, (scenario, extra) in runs.items():
        r = _cli(["run", scenario, "--out", tmp_path / label, "--quiet", "--no-progress", *extra], installed)
        assert r.returncode == 0, f"{label}: {r.stderr[-3000:]}"
        summary, ledgers[label] = _run_dir_facts(tmp_path / label)
        assert summary["ledger_matches_declared"] is True, label
    assert ledgers["ray"] == ledgers["inproc"]
    assert ledgers["gossip-ray"]["totals"] == ledgers["gossip-inproc"]["totals"]
    assert ledgers["gossip-ray"]["by_node"] == ledgers["gossip-inproc"]["by_node"]
    models = [np.load(tmp_path / label / "model.npz")["coef"] for label in ("inproc", "ray")]
    assert all(np.array_equal(models[0], m) for m in models[1:])


@pytest.mark.ray
def test_a_module_beside_the_scenario_reaches_the_ray_actors(module_tree, ray_local):
    """The module is on no path of Ray's workers: its folder travels to the host actors in their runtime env."""
    base = svmsim.run(str(module_tree), write=False)
    on_ray = svmsim.run(str(module_tree), write=False, overrides={"engine.name": "ray"})
    assert on_ray.ledger.totals == base.ledger.totals
    assert np.array_equal(on_ray.model["coef"], base.model["coef"])


# ----------------------------------------------------------------------------------------------------------------
# Broken plugins: one clear message naming the module and what it lacks


def _scenario_file(folder: Path, module: str, name: str = "subgrad-svm") -> Path:
    path = folder / "s.toml"
    path.write_text(f'name = "x"\n[data]\nname = "iris"\n[algorithm]\nname = "{name}"\nmodule = "{module}"\n'
                    '[stop]\nmax_iterations = 2\n')
    return path


@pytest.mark.parametrize("module, message", [
    ("no_such_module_here", "[algorithm] module = 'no_such_module_here': no such module in the folder"),
    ("not a module", "is not a module name; allowed: a dotted Python module name"),
    ("json", "module = 'json' registers no algorithm named 'subgrad-svm'; it registers none"),
])
def test_a_bad_module_is_one_clear_error(tmp_path, module, message):
    r = _cli(["validate", _scenario_file(tmp_path, module)])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert message in " ".join(r.stderr.split()), r.stderr


def test_a_module_whose_import_fails_says_so(tmp_path):
    (tmp_path / "brokenalgo.py").write_text("import numpy\nraise RuntimeError('half-written plugin')\n")
    r = _cli(["run", _scenario_file(tmp_path, "brokenalgo")])
    text = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "module = 'brokenalgo' was found but importing it failed: RuntimeError: half-written plugin" in text


def test_a_module_that_registers_another_name_lists_what_it_registers(module_tree):
    path = _scenario_file(module_tree.parent, "mypkg.subgrad", name="subgrad")
    with pytest.raises(ScenarioError, match="registers no algorithm named 'subgrad'; it registers subgrad-svm"):
        svmsim.load_scenario(path)


def test_a_broken_entry_point_is_named_with_its_distribution(tmp_path):
    site = tmp_path / "site"
    dist = site / "broken_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[svmsim.algorithms]\nbroken-algo = broken_plugin_mod\n"
                                           "empty-algo = empty_plugin_mod\n")
    (site / "broken_plugin_mod.py").write_text("raise ImportError('needs a library that is not installed')\n")
    (site / "empty_plugin_mod.py").write_text("X = 1\n")
    env = {"PYTHONPATH": str(site)}
    ls = _cli(["list", "algorithms"], env)
    assert ls.returncode == 0, ls.stderr
    assert "broken-algo" in ls.stdout and "(cannot be loaded)" in ls.stdout and "saddle-dsvc" in ls.stdout
    path = tmp_path / "b.toml"
    path.write_text('name = "x"\n[data]\nname = "iris"\n[algorithm]\nname = "broken-algo"\n[stop]\n'
                    'max_iterations = 2\n')
    r = _cli(["validate", path], env)
    text = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert ("entry point 'broken-algo' = 'broken_plugin_mod' of distribution 'broken-plugin' (group "
            "'svmsim.algorithms') cannot be loaded: ImportError: needs a library that is not installed") in text
    path.write_text(path.read_text().replace("broken-algo", "empty-algo"))
    r = _cli(["validate", path], env)
    assert r.returncode == 2
    assert "registers no algorithm named 'empty-algo'" in " ".join(r.stderr.split())


def _info(**changes):
    base = dict(name="plugin-test-algo", family="t", paper="-", distributed=True,
                Params=registry.get_algorithm("saddle-dsvc").Params, build=lambda p, q: None, description="t")
    return AlgorithmInfo(**{**base, **changes})


@pytest.mark.parametrize("changes, message", [
    ({"name": "has space"}, "is not an algorithm name"),
    ({"Params": dict}, "is not a pydantic model class"),
    ({"build": 3}, "is not callable"),
    ({"scheduler": "async"}, "is not a scheduler; allowed: 'sync', 'gossip'"),
    ({"scheduler": "gossip", "distributed": False}, "needs distributed = True"),
    ({"topologies": "star"}, "is not a tuple of topology kinds"),
    ({"finishes_by_itself": "yes"}, "allowed: True, False or f(params) -> bool"),
])
def test_a_malformed_registration_is_refused(changes, message):
    with pytest.raises(PluginError, match=message.replace("(", r"\(").replace(")", r"\)")):
        register(_info(**changes))
    assert "plugin-test-algo" not in registry.ALGORITHMS


def test_a_name_cannot_be_registered_twice_by_different_modules():
    builtin = registry.get_algorithm("pushsum")
    other = _info(name="pushsum")
    with pytest.raises(PluginError, match="'pushsum' is registered twice: by module svmsim.algorithms.pushsum"):
        register(other)
    assert registry.get_algorithm("pushsum") is builtin


def test_the_public_api_exports_what_an_author_needs_and_nothing_private():
    import svmsim.api as api

    for name in api.__all__:
        assert not name.startswith("_")
        assert getattr(api, name) is not None, name
    assert set(api.SIGNALS) == {"iteration", "wake", "done", "counts", "work"}
    assert isinstance(api.conformance.check_algorithm, type(_cli))
    assert Conformance({"a": 1}).variants == ()


# ----------------------------------------------------------------------------------------------------------------
# Guardrails: a program that forgets a piece is told which


def _toy_info(name, Server, Client=None, scheduler="sync"):
    """A two-role algorithm of the given programs (a server and clients over a star, or peers on a ring)."""
    from svmsim.api import Deployment, RoleSpec, build_topology

    from pydantic import BaseModel, ConfigDict

    class P(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def build(params, problem):
        if scheduler == "gossip":
            roles = [RoleSpec("peer", Server(), np.arange(4), [None] * 4)]
            return Deployment(roles=roles, topology=build_topology("ring", 4), node_names=[str(i) for i in range(4)],
                              evaluate=lambda obs: {})
        roles = [RoleSpec("server", Server(), np.array([0]), [np.arange(1, 4)]),
                 RoleSpec("client", Client(), np.arange(1, 4), [None] * 3)]
        return Deployment(roles=roles, topology=build_topology("star", 4), node_names=[str(i) for i in range(4)],
                          evaluate=lambda obs: {})

    return AlgorithmInfo(name=name, family="t", paper="-", distributed=True, Params=P, build=build, description="t",
                         topologies=("ring",) if scheduler == "gossip" else ("star",), scheduler=scheduler)


@pytest.fixture
def registered(monkeypatch):
    def add(info):
        monkeypatch.setitem(registry.ALGORITHMS, info.name, info)
        return info.name
    return add


def _sync_toy(initiator: bool, sends: bool, iterates: bool = True):
    from svmsim.api import MessageBatch, NodeProgram, Outbox, frozen_ids

    class Server(NodeProgram):
        role = "server"

        def init(self, node_ids, node_data, seed):
            return {"clients": frozen_ids(node_data[0]), "t": 0}

        def step(self, st, inbox, round_):
            out = Outbox()
            if "pong" in inbox:
                st["t"] += 1
                if iterates:
                    out.signals = {"iteration": st["t"]}
            if sends:
                out.send(MessageBatch.broadcast("ping", 0, st["clients"], [1.0]))
            return st, out

    Server.initiator = initiator

    class Client(NodeProgram):
        role = "client"

        def init(self, node_ids, node_data, seed):
            return {}

        def step(self, st, inbox, round_):
            out = Outbox()
            out.send(MessageBatch.gather("pong", inbox["ping"].dst, 0, np.ones(inbox["ping"].n_messages)))
            return st, out

    return Server, Client


def test_a_deployment_without_an_initiator_is_told_to_set_one(registered):
    name = registered(_toy_info("guard-no-initiator", *_sync_toy(initiator=False, sends=True)))
    with pytest.raises(svmsim.ProtocolError, match=r"none of the roles \(client, server\) has one; allowed: "
                                                   r"initiator = True"):
        svmsim.run({"name": "g", "data": {"name": "iris"}, "algorithm": {"name": name},
                    "stop": {"max_iterations": 3}}, write=False)


def test_initiators_that_send_nothing_are_told_what_to_do(registered):
    name = registered(_toy_info("guard-silent", *_sync_toy(initiator=True, sends=False)))
    result = svmsim.run({"name": "g", "data": {"name": "iris"}, "algorithm": {"name": name},
                         "stop": {"max_iterations": 3}}, write=False)
    assert result.stop_reason == "no messages in flight"
    assert result.summary["warnings"][0].startswith("round 0 stepped the initiators (server), but they sent no "
                                                    "message")


def test_a_run_without_progress_signals_says_so(registered):
    name = registered(_toy_info("guard-no-progress", *_sync_toy(initiator=True, sends=True, iterates=False)))
    result = svmsim.run({"name": "g", "data": {"name": "iris"}, "algorithm": {"name": name},
                         "stop": {"max_rounds": 6}}, write=False)
    assert result.stop_reason == "round budget"
    assert "no program reported an iteration" in result.summary["warnings"][0]
    # the round budget stopped it with a ping in flight: sent and metered, never delivered
    assert result.summary["in_flight_at_end"] == {"messages": 3, "scalars": 3}
    assert result.ledger.totals["scalars"] == 6 * 3          # a ping or the pongs in each of rounds 0..5


def test_a_gossip_program_that_never_sends_is_named(registered):
    from svmsim.api import GossipProgram, Outbox

    class Quiet(GossipProgram):
        def init(self, node_ids, node_data, seed):
            return {}

        def wake(self, st, nodes, times):
            return st, Outbox()

        def receive(self, st, batch, times):
            return st, Outbox()

    name = registered(_toy_info("guard-quiet", Quiet, scheduler="gossip"))
    result = svmsim.run({"name": "g", "data": {"name": "iris"}, "algorithm": {"name": name},
                         "topology": {"kind": "ring"}, "stop": {"max_rounds": 5}}, write=False)
    assert "no peer sent a message" in result.summary["warnings"][0]


# ----------------------------------------------------------------------------------------------------------------
# Topologies and partition schemes of one's own: the same mechanism (entry-point groups svmsim.topologies and
# svmsim.partitions)


def _distribution(site: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    dist = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(entry_points)
    for module, text in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(text))


def test_a_topology_and_a_partition_scheme_from_plugins(tmp_path):
    site = tmp_path / "site"
    _distribution(site, "graph-extras", "[svmsim.topologies]\nbarbell = barbell_topology\n"
                  "[svmsim.partitions]\nfront_loaded = front_partition:front_loaded\n", {
        "barbell_topology": '''
            import networkx as nx
            from svmsim.api import ParamSpec, TopologySpec, register_topology

            def build(n, seed, bridge):
                return nx.barbell_graph((n - bridge) // 2, bridge)

            register_topology(TopologySpec("barbell", build, "two cliques joined by a path of `bridge` nodes",
                                           {"bridge": ParamSpec(int, 0, "nodes on the path", "bridge >= 0")}))
            ''',
        "front_partition": '''
            import numpy as np

            def front_loaded(y, n_parts, rng, n=None, share=0.5):
                """Part 0 takes `share` of the points, in order; the rest are dealt evenly."""
                n = len(y) if n is None else n
                first = max(1, int(share * n))
                rest = np.array_split(np.arange(first, n), n_parts - 1)
                return [np.arange(first)] + [r.astype(np.int64) for r in rest]
            ''',
    })
    env = {"PYTHONPATH": str(site)}
    topo = _cli(["list", "topologies"], env)
    assert topo.returncode == 0 and "barbell(bridge: int = 0)" in topo.stdout, topo.stderr
    part = _cli(["list", "partitions"], env)
    assert "front_loaded   keys: share = 0.5; Part 0 takes `share` of the points" in part.stdout, part.stdout
    scenario = tmp_path / "p.toml"
    scenario.write_text('name = "plug"\n[data]\nname = "iris"\n[topology]\nkind = "barbell"\nbridge = 2\n'
                        '[partition]\nscheme = "front_loaded"\nshare = 0.6\n'
                        '[algorithm]\nname = "pushsum"\nnodes = 8\nvalues = "data_mean"\nweighted = true\n'
                        '[stop]\nmax_rounds = 30\n[output]\nplots = false\n')
    run = _cli(["run", scenario, "--out", tmp_path / "run", "--quiet", "--no-progress"], env)
    assert run.returncode == 0, run.stderr
    resolved = (tmp_path / "run" / "scenario.resolved.toml").read_text()
    assert 'kind = "barbell"' in resolved and "bridge = 2" in resolved and "share = 0.6" in resolved
    summary, ledger = _run_dir_facts(tmp_path / "run")
    assert summary["ledger_matches_declared"] is True
    # every message travels on an edge of the barbell: two 3-cliques and a 2-node path
    import csv
    import networkx as nx

    G = nx.barbell_graph(3, 2)
    with open(tmp_path / "run" / "ledger_edges.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(G.has_edge(int(r["src"]), int(r["dst"])) for r in rows)
    bad = scenario.read_text().replace("share = 0.6", "shares = 0.6")
    scenario.write_text(bad)
    err = _cli(["validate", scenario], env)
    assert err.returncode == 2
    assert "unknown key 'shares' for scheme 'front_loaded'; allowed: scheme, share" in " ".join(err.stderr.split())


def test_a_partition_scheme_that_returns_a_bad_split_is_named():
    from svmsim.data import PARTITION_SCHEMES, partition, register_partition

    def overlapping(y, n_parts, rng, n=None):
        return [np.arange(3)] * n_parts

    register_partition("overlapping", overlapping)
    try:
        with pytest.raises(ScenarioError, match="partition scheme 'overlapping' returned an invalid split: the parts "
                                                "do not cover the indices 0..9 exactly once"):
            partition(np.ones(10), 3, "overlapping")
    finally:
        PARTITION_SCHEMES.pop("overlapping")
