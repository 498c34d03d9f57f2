"""Every code block of the documentation and the README is executed here, or checked in a stated reduced form, or
named with the reason it is not run; the counts are reported at the end of the test run.

* ``python`` blocks run, page by page in one namespace, in a fresh folder that holds the shipped scenarios (a block
  whose first line is ``# file: PATH`` or ``--8<-- "PATH"`` is a module: it is executed too);
* ``toml`` blocks are parsed; a whole scenario is validated; an excerpt is validated merged into the scenario named
  by ``<!-- scenario: PATH -->`` before it (default: the quickstart);
* ``bash`` blocks: each command is run when it is cheap (the quickstart's run and sweep, ``svmsim validate`` and
  ``list``); a paper-scale ``svmsim sweep`` runs as ``--dry-run`` (every point planned and validated), a paper-scale
  ``svmsim run`` as ``svmsim validate`` with the same overrides; set-up and development commands (pip, mkdocs,
  pytest, benchmarks, Ray start) are not run, for the reason `NOT_RUN` states, and the files they name must exist;
* ``text`` blocks and blocks without a language show output or a layout: nothing to run.

``docs/howto/write-an-algorithm.md`` is run block by block by ``tests/test_guide.py``; the generated reference pages
are held to the code by ``tests/test_docs.py``. A block after ``<!-- not run: reason -->`` is skipped (the reason is
required and counted)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
#: pages whose blocks other tests run or hold to the code
ELSEWHERE = {"docs/howto/write-an-algorithm.md": "tests/test_guide.py runs it block by block",
             "docs/reference/cli.md": "generated from the parser; tests/test_docs.py holds it to the code",
             "docs/reference/scenario.md": "generated from the schema; tests/test_docs.py holds it to the code",
             "docs/reference/algorithms.md": "generated from the registry; tests/test_docs.py holds it to the code"}
#: commands that are not run, by their first words, and why
NOT_RUN = {
    "pip install": "installs packages: the suite runs in the installed environment, and tests/test_docs.py checks "
                   "the README's set-up commands",
    "mkdocs": "builds the site: tests/test_docs.py runs mkdocs build --strict",
    "python -m pytest": "the test suite itself",
    "mutmut": "mutation testing: 88 minutes",
    "python tools/mutation.py": "reads mutation-testing results",
    "python benchmarks/": "a benchmark: minutes on a quiet machine, run by hand",
    "ray start": "starts a Ray cluster on machines of one's own",
    "export": "sets the shell's environment for the commands after it",
}
#: scenarios cheap enough to run for real
CHEAP = {"scenarios/quickstart.toml"}

_BLOCK = re.compile(r"(?:<!-- (?P<note>not run|scenario): (?P<arg>[^>]*?) -->\n)?```(?P<lang>[a-z]*)[^\n]*\n"
                    r"(?P<body>.*?)\n```", re.S)


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[dict]:
    return [m.groupdict() for m in _BLOCK.finditer(page.read_text(encoding="utf-8"))]


def _commands(body: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments and blank lines dropped."""
    joined = body.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A fresh folder holding the shipped scenarios, where examples write their run directories. The examples run
    there, so a relative ``SVMSIM_DATA_DIR`` (CI's ``../shared/data``) is made absolute for them first."""
    d = tmp_path_factory.mktemp("docs-examples")
    (d / "scenarios").symlink_to(ROOT / "scenarios")
    named = os.environ.get("SVMSIM_DATA_DIR")
    if named and not Path(named).is_absolute():
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SVMSIM_DATA_DIR", str(Path(named).resolve()))
            yield d
        return
    yield d


def _env() -> dict:
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _svmsim(args: list[str], cwd: Path, capsys) -> tuple[int, str]:
    """Run the command line in this process (in `cwd`): (exit code, what it printed)."""
    from svmsim.cli import main

    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(list(args))
    finally:
        os.chdir(old)
    out = capsys.readouterr()
    return code, out.out[-2000:] + "\n" + out.err[-3000:]


def _reduced(args: list[str]) -> tuple[list[str], str]:
    """The command to run for `svmsim ARGS` as written in the docs, and how it is run (run / dry-run / validate)."""
    command, rest = args[0], args[1:]
    scenario = next((a for a in rest if a.endswith(".toml")), None)
    heavy = scenario not in CHEAP or any(a in rest for a in ("--engine", "--address", "--dashboard"))
    if command == "sweep" and heavy:
        return ["sweep", *rest, "--dry-run"], "dry-run"
    if command == "run" and heavy:
        keep, skip = [], False
        for a in rest:                          # validate takes the scenario and its --set overrides
            if skip:
                skip = False
                continue
            if a in ("--engine", "--address", "--actors", "--out", "--seed"):
                skip = True
                continue
            if a in ("--dashboard", "--overwrite", "--no-progress", "--quiet"):
                continue
            keep.append(a)
        return ["validate", *keep], "validate"
    return args, "run"


def _check_files_named(command: str) -> None:
    for word in shlex.split(command):
        if re.fullmatch(r"(benchmarks|tools|scenarios|tests)/[\w./-]+\.(py|toml)", word):
            assert (ROOT / word).is_file(), f"the docs name {word}, which does not exist"


def _python_script(blocks: list[dict], page: str) -> str:
    parts = []
    for b in blocks:
        body = b["body"]
        include = re.fullmatch(r'--8<-- "([^"]+)"', body.splitlines()[0].strip())
        if include:
            path = ROOT / include[1]
            assert path.is_file(), f"{page} includes {include[1]}, which does not exist"
            body = path.read_text(encoding="utf-8")
        parts.append(body)
    return "\n\n".join(parts)


def _merge(base: dict, excerpt: dict) -> dict:
    out = dict(base)
    for key, value in excerpt.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) \
            else value
    return out


@pytest.mark.parametrize("page", [p for p in PAGES if _rel(p) not in ELSEWHERE and _blocks(p)], ids=_rel)
def test_every_code_block_of_the_page_runs(page, workdir, record_property, capsys):
    import svmsim

    rel = _rel(page)
    counts = {"run": 0, "dry-run": 0, "validate": 0, "parsed": 0, "output": 0, "not run": 0}
    python = []
    for b in _blocks(page):
        lang, body = b["lang"], b["body"]
        if b["note"] == "not run":
            assert len(b["arg"].strip()) > 20, f"{rel}: a block not run needs its reason: {body[:60]!r}"
            counts["not run"] += 1
        elif lang in ("text", ""):
            counts["output"] += 1
        elif lang == "python":
            python.append(b)
        elif lang == "toml":
            data = tomllib.loads(body)
            if body.startswith("# file: "):
                counts["parsed"] += 1
                continue
            base = tomllib.loads((ROOT / (b["arg"] if b["note"] == "scenario" else "scenarios/quickstart.toml"))
                                 .read_text())
            whole = {"name", "data", "algorithm"} <= set(data)
            svmsim.load_scenario(data if whole else _merge(base, data), base=ROOT / "scenarios")
            counts["validate"] += 1
        elif lang == "bash":
            for command in _commands(body):
                _check_files_named(command)
                bare = re.sub(r"^(\w+=(\$\([^)]*\)|\S+)\s+)+", "", command)         # leading VAR=value assignments
                reason = next((r for start, r in NOT_RUN.items() if bare.startswith(start)), None)
                words = shlex.split(command)
                if "svmsim" in words:    # alone, or after set-up (`pip install -e . && svmsim run ...`): it runs
                    todo, how = _reduced(words[words.index("svmsim") + 1:])
                    code, printed = _svmsim(todo, workdir, capsys)
                    assert code == 0, f"{rel}: `{command}` (as `svmsim {' '.join(todo)}`):\n{printed}"
                    counts[how] += 1
                elif reason is not None:
                    counts["not run"] += 1
                else:
                    pytest.fail(f"{rel}: no rule says how to run `{command}`; add one to this test (or mark the "
                                "block <!-- not run: reason -->)")
        else:
            pytest.fail(f"{rel}: a {lang!r} block this test does not know how to run: {body[:60]!r}")
    if python:
        script = _python_script(python, rel)
        done = subprocess.run([sys.executable, "-c", script], cwd=workdir, env=_env(), capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"{rel}: its python blocks fail:\n{done.stderr[-4000:]}"
        counts["run"] += len(python)
    for key, value in counts.items():
        record_property(f"docs-blocks:{key}", value)


def pytest_terminal_summary_lines(reports) -> list[str]:
    """The totals over the pages, for `conftest.pytest_terminal_summary`."""
    totals: dict[str, int] = {}
    for report in reports:
        for name, value in getattr(report, "user_properties", []):
            if name.startswith("docs-blocks:"):
                key = name.removeprefix("docs-blocks:")
                totals[key] = totals.get(key, 0) + int(value)
    if not totals:
        return []
    return ["docs code blocks: " + ", ".join(f"{v} {k}" for k, v in totals.items())
            + " (run: executed; dry-run/validate: paper-scale commands reduced; parsed: files; output: shown "
              "output; not run: with a stated reason)"]
