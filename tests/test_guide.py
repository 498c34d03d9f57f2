"""The guide "Write your own algorithm" (docs/howto/write-an-algorithm.md) runs as written.

Its code blocks are executed in order in a fresh folder laid out as the guide says (``study/mypkg/`` holding the
example package's two modules): a block whose first line is ``# file: PATH`` is written to PATH (TOML is parsed);
``bash`` blocks run as scripts (``bash -e``) with `svmsim` on the path; other ``python`` blocks run as one script;
``--8<--`` includes must name files that exist; a block after ``<!-- not run: reason -->`` is skipped, and the
reason is required. The number of blocks run and skipped is printed."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "howto" / "write-an-algorithm.md"
EXAMPLE = ROOT / "examples" / "svmsim-extras" / "src" / "svmsim_extras"

_BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]*?) -->\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)\n```", re.S)


def blocks(text: str) -> list[tuple[str, str, str | None]]:
    """(language, body, reason it is not run) of each fenced block, in order."""
    return [(m["lang"], m["body"], m["reason"]) for m in _BLOCK.finditer(text)]


def test_the_guide_runs_as_written(tmp_path):
    study = tmp_path / "study" / "mypkg"
    study.mkdir(parents=True)
    (study / "__init__.py").write_text("")
    for name in ("subgrad.py", "gossip_pegasos.py"):
        shutil.copy(EXAMPLE / name, study / name)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    ran = skipped = 0
    for lang, body, reason in blocks(GUIDE.read_text(encoding="utf-8")):
        if reason is not None:
            assert len(reason.strip()) > 20, f"a block not run needs its reason: {body[:60]!r}"
            skipped += 1
            continue
        first = body.splitlines()[0]
        include = re.fullmatch(r'--8<-- "([^"]+)"', first.strip())
        if include:
            assert (ROOT / include[1]).is_file(), f"the guide includes {include[1]}, which does not exist"
            ran += 1
            continue
        if first.startswith("# file: "):
            target = tmp_path / first.removeprefix("# file: ").strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body + "\n")
            if lang == "toml":
                tomllib.loads(body)
            if target.name.startswith("test_"):
                done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target.name],
                                      cwd=target.parent, env=env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
                assert " passed" in done.stdout and "failed" not in done.stdout
            ran += 1
        elif lang == "bash":
            done = subprocess.run(["bash", "-e", "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, f"{body}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            ran += 1
        elif lang == "python":
            done = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=600)
            assert done.returncode == 0, f"{body}\n{done.stderr[-3000:]}"
            ran += 1
        else:
            assert lang in ("text", ""), f"a {lang!r} block the guide test does not know how to run: {body[:60]!r}"
    print(f"guide: {ran} code blocks run, {skipped} not run (with their reasons)")
    assert ran >= 9
    assert (tmp_path / "runs" / "first" / "summary.json").is_file()
    assert (tmp_path / "runs" / "gossip" / "summary.json").is_file()


def test_the_topology_example_of_the_extension_guide_builds_its_graph():
    """docs/howto/extend.md: the module registering "double_star" runs as written and gives that graph."""
    from svmsim.topology import TOPOLOGIES, build_topology

    text = (ROOT / "docs" / "howto" / "extend.md").read_text(encoding="utf-8")
    files = {body.splitlines()[0].removeprefix("# file: "): body for lang, body, _ in blocks(text)
             if body.startswith("# file: ")}
    for name, body in files.items():
        if name.endswith(".toml"):
            tomllib.loads(body)
    try:
        exec(compile(files["graphs_extra/double_star.py"], "double_star.py", "exec"), {})
        G = build_topology("double_star", 7)
        assert sorted(G.edges()) == [(0, 1), (0, 2), (0, 4), (0, 6), (1, 3), (1, 5)]
    finally:
        TOPOLOGIES.pop("double_star", None)


def test_the_engine_example_of_the_extension_guide_registers_and_traces():
    """docs/howto/extend.md: the module registering the "tracing" engine runs as written; the engine it registers
    records every n-th round and refuses the gossip scheduler."""
    from svmsim.engine import ENGINE_KINDS, make_engine

    text = (ROOT / "docs" / "howto" / "extend.md").read_text(encoding="utf-8")
    files = {body.splitlines()[0].removeprefix("# file: "): body for lang, body, _ in blocks(text)
             if body.startswith("# file: ")}
    assert tomllib.loads(files["engines_extra/pyproject-engines.toml"])["project"]["entry-points"]["svmsim.engines"]
    try:
        exec(compile(files["engines_extra/tracing.py"], "tracing.py", "exec"), {"__name__": "engines_extra.tracing"})
        engine = make_engine("tracing", every=2)
        engine.deploy([], 0)
        for r in range(5):
            engine.step(r, {})
        assert engine.trace == [(0, []), (2, []), (4, [])]
        assert ENGINE_KINDS["tracing"].no_gossip == "records synchronous rounds only"
    finally:
        ENGINE_KINDS.pop("tracing", None)
