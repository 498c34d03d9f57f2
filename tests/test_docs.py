"""The documentation: the site builds strictly (no broken link, no missing page, no warning) and the README keeps
its promises (short, the two set-up commands first)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

INSTALL_AND_QUICKSTART = "pip install -e . && svmsim run scenarios/quickstart.toml"
INSTALL_AND_TEST = ('pip install -e ".[test]" && SVMSIM_DATA_DIR="${SVMSIM_DATA_DIR:-../shared/data}" '
                    "python -m pytest -q")
README_MAX_LINES = 250
BUILD_SECONDS = 60


def fenced_code_blocks(text: str) -> list[str]:
    """The contents of the fenced code blocks of a Markdown text, in order (a fence of three or more backticks or
    tildes, closed by a fence of the same character at least as long)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", lines[i])
        if not m:
            i += 1
            continue
        fence, body, i = m[1], [], i + 1
        while i < len(lines) and not re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append("\n".join(body))
        i += 1
    return blocks


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; at most {README_MAX_LINES}"


def test_readme_opens_with_the_two_set_up_commands():
    blocks = fenced_code_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "README.md needs its two set-up commands as its first two code blocks"
    assert blocks[0].strip() == INSTALL_AND_QUICKSTART
    assert blocks[1].strip() == INSTALL_AND_TEST


def test_the_test_command_of_the_readme_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'SVMSIM_DATA_DIR="${SVMSIM_DATA_DIR:-../shared/data}" python -m pytest -q' in ci
    assert 'pip install' in ci and '-e ".[test]"' in ci


def test_fenced_code_blocks_are_read_in_order():
    text = "x\n```bash\na\n```\n\n````md\n```\nb\n```\n````\n~~~\nc\n~~~\n"
    assert fenced_code_blocks(text) == ["a", "```\nb\n```", "c"]


def test_the_site_builds_strictly_without_warnings(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}   # Material's end-of-life notice
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    warnings = [line for line in output.splitlines() if re.match(r"^\s*(WARNING|ERROR)\b", line)]
    assert not warnings, "\n".join(warnings)
    assert seconds < BUILD_SECONDS, f"the strict build took {seconds:.1f} s; at most {BUILD_SECONDS} s"
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "svmsim" in index
    # every page of the navigation was written, and the generated results the paper pages show are in the site
    for page in ("getting-started/quickstart", "concepts/meter-and-ledger", "howto/write-an-algorithm",
                 "papers/paper000", "performance", "development"):
        assert (site / f"{page}.html").exists() or (site / page / "index.html").exists(), page
    assert (site / "paper000" / "slope_eps_cost_vs_eps.png").exists()
    # the hook filled in the table of benchmark result files
    performance = (site / "performance" / "index.html").read_text(encoding="utf-8")  # performance/index.md
    assert "benchmark-results" not in performance and "gossip_scale.json" in performance
