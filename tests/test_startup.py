"""Time to an answer: `svmsim validate`, `svmsim list` and `svmsim --help` import declarations only.

A property, not a timing: each command runs in a fresh interpreter that then lists the modules it imported, and
none of the heavy stacks may be among them (no compiler, so nothing is compiled either; no Ray, no plotting, no
scipy, no graph library, no scikit-learn). What the declarations name (an algorithm's build, a topology kind's
builder) is `deferred`: the tests below also hold every such name to a function that exists.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml"))

#: top-level modules that none of the commands below may import
HEAVY = ("numba", "llvmlite", "ray", "matplotlib", "scipy", "networkx", "sklearn")

_PROBE = """
import contextlib, io, json, sys
from svmsim.cli import main

with contextlib.redirect_stdout(io.StringIO()):
    try:
        status = main(json.loads(sys.argv[1]))
    except SystemExit as exc:              # --help
        status = exc.code
print(json.dumps({"status": status, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _imported(*argv: str) -> tuple[int, list[str]]:
    """(exit status, top-level modules imported) of `svmsim ARGV` run in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "SVMSIM_DATA_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(list(argv))], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["status"], result["modules"]


@pytest.mark.parametrize("argv", [
    ("validate", "scenarios/quickstart.toml"),
    ("list", "algorithms"),
    ("list",),
    ("list", "topologies"),
    ("list", "partitions"),
    ("list", "engines"),
    ("list", "datasets"),
    ("list", "algorithms", "saddle-dsvc"),
    ("--help",),
], ids=lambda argv: " ".join(argv))
def test_the_quick_commands_import_nothing_heavy(argv):
    status, modules = _imported(*argv)
    assert status == 0
    assert [m for m in HEAVY if m in modules] == []


def test_validating_every_scenario_file_imports_nothing_heavy():
    """Every shipped scenario (every family, topology, fault model and data kind they use) validates on the
    declarations alone; reading the data (`svmsim validate --data`) is what needs the loaders."""
    probe = ("import json, sys; from svmsim.config import validate_file\n"
             "for path in sys.argv[1:]:\n    validate_file(path)\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", probe, *map(str, SCENARIOS)], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    assert len(SCENARIOS) > 10
    assert [m for m in HEAVY if m in modules] == []


def test_every_deferred_build_and_builder_names_a_function():
    """A deferred name is a promise: every registered algorithm's build (and memory model) and every topology kind's
    builder resolves to a callable of the module it names."""
    from svmsim.algorithms.registry import load_all
    from svmsim.core.plugins import Deferred
    from svmsim.topology_specs import TOPOLOGIES

    deferred = []
    for info in load_all().values():
        deferred += [f for f in (info.build, info.memory) if isinstance(f, Deferred)]
    deferred += [spec.builder for spec in TOPOLOGIES.values() if isinstance(spec.builder, Deferred)]
    assert len(deferred) > 20
    for f in deferred:
        target = f.resolve()
        assert callable(target) and target.__module__ == f.__module__ and target.__name__ == f.__name__, f


def test_a_deferred_function_is_imported_at_its_first_call():
    from svmsim.core.plugins import deferred

    f = deferred("colorsys:rgb_to_hsv")
    assert (f.__module__, f.__name__, repr(f)) == ("colorsys", "rgb_to_hsv", "deferred('colorsys:rgb_to_hsv')")
    assert f(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert pickle.loads(pickle.dumps(f)) == f and hash(f) == hash(deferred("colorsys:rgb_to_hsv"))
    for bad in ("colorsys", "colorsys:", ":rgb_to_hsv", "color sys:f", 3):
        with pytest.raises(ValueError, match="package.module:function"):
            deferred(bad)


def _modules_after(probe: str, *argv: str) -> set[str]:
    """Every module (full dotted names) imported by the Python code `probe` run in a fresh interpreter."""
    code = probe + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_importing_the_runner_imports_no_plotting_and_no_gossip_scheduler():
    """The runner imports what a run needs: matplotlib only when a run writes its plot (`svmsim.report`), the
    gossip scheduler and its compiled event loop only for a gossip run (`svmsim.schedule` imports its schedulers
    on first use), scipy's sparse matrices only where data or an algorithm has them."""
    modules = _modules_after("import svmsim.runner")
    assert {m.split(".")[0] for m in modules} & {"matplotlib", "sklearn", "ray"} == set()
    assert {"scipy.sparse", "scipy.linalg", "svmsim.report", "svmsim.schedule.gossip"} & modules == set()


def test_the_quickstart_run_imports_neither_scikit_learn_nor_scipy_sparse(tmp_path):
    """The quickstart's set (iris) is read from the CSV that scikit-learn ships, without importing scikit-learn
    (about a second and a half, longer than the run's simulation); its dense data, its five-node star and its plot
    need no scipy.sparse (a quarter of a second: `svmsim.numerics.sparse.issparse` answers without it), and its
    synchronous rounds no gossip scheduler."""
    modules = _modules_after("import sys, svmsim\nsvmsim.run(sys.argv[1], out_dir=sys.argv[2], progress=False)",
                             str(ROOT / "scenarios" / "quickstart.toml"), str(tmp_path / "run"))
    assert (tmp_path / "run" / "convergence.png").is_file()
    assert "sklearn" not in {m.split(".")[0] for m in modules}
    assert {"scipy.sparse", "scipy.sparse.csgraph", "svmsim.schedule.gossip"} & modules == set()


@pytest.mark.parametrize("name, loader, positive", [("iris", "load_iris", (1, 2)),
                                                    ("breast_cancer_sklearn", "load_breast_cancer", (1,))])
def test_the_built_in_sets_are_scikit_learns(name, loader, positive):
    """Read without scikit-learn, the built-in sets are what its loaders give, bit for bit."""
    import numpy as np
    from sklearn import datasets

    from svmsim.data.registry import load_dataset, scale_to_unit_box

    bunch = getattr(datasets, loader)()
    ds = load_dataset(name)
    assert np.array_equal(ds.X, scale_to_unit_box(bunch.data))
    assert np.array_equal(ds.y, np.where(np.isin(bunch.target, positive), 1.0, -1.0))
