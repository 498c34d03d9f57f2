"""The documentation: the site builds strictly (no broken link, no missing page, no warning), the README keeps
its promises (short, the two set-up commands first), and the reference pages are what the code generates
(tools/gen_reference.py), with a description for every scenario key and algorithm parameter."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
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


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The site built strictly once: (site folder, build process, seconds)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}   # Material's end-of-life notice
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return site, proc, time.perf_counter() - start


def test_the_site_builds_strictly_without_warnings(built_site):
    site, proc, seconds = built_site
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    warnings = [line for line in output.splitlines() if re.match(r"^\s*(WARNING|ERROR)\b", line)]
    assert not warnings, "\n".join(warnings)
    assert seconds < BUILD_SECONDS, f"the strict build took {seconds:.1f} s; at most {BUILD_SECONDS} s"
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "svmsim" in index
    # every page of the navigation was written, and the generated results the paper pages show are in the site
    for page in ("getting-started/quickstart", "concepts/meter-and-ledger", "howto/write-an-algorithm",
                 "papers/paper000", "performance", "development", "reference/scenario", "reference/algorithms",
                 "reference/cli", "reference/metrics", "reference/api"):
        assert (site / f"{page}.html").exists() or (site / page / "index.html").exists(), page
    assert (site / "paper000" / "slope_eps_cost_vs_eps.png").exists()
    # the hook filled in the table of benchmark result files
    performance = (site / "performance" / "index.html").read_text(encoding="utf-8")  # performance/index.md
    assert "benchmark-results" not in performance and "gossip_scale.json" in performance
    # the Python API page was rendered from the docstrings (mkdocstrings), not left as ::: directives
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert ":::" not in api and 'id="svmsim.api.NodeProgram"' in api and 'id="svmsim.conformance.yield_checks"' in api


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def test_the_site_opens_in_a_headless_browser(built_site, tmp_path):
    """The home page and the scenario reference, opened from the built files by a headless browser: the rendered
    page has its title, navigation and tables, and its screenshot is a page, not a blank."""
    import shutil

    import matplotlib.image

    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no headless browser (chromium or chrome) on this machine")
    site, proc, _ = built_site
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1000"]
    for page, title, needle in (("index.html", "svmsim", "Getting started"),
                                ("reference/scenario.html", "Scenario keys", "compute_spread")):
        url = (site / page).as_uri()
        dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        assert f"<title>{title}" in dom and needle in dom and 'class="md-nav' in dom, page
        shot = tmp_path / (page.replace("/", "_") + ".png")
        subprocess.run([browser, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=120)
        pixels = matplotlib.image.imread(str(shot))[..., :3].reshape(-1, 3)
        assert np.unique((pixels * 255).astype(np.uint8), axis=0).shape[0] > 50, page    # text, links, a header


# -- the reference pages generated from the code (tools/gen_reference.py) ---------------------------------------

REFERENCE = ROOT / "docs" / "reference"


@pytest.fixture(scope="module")
def gen_reference():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(gen_reference) -> dict[str, str]:
    return gen_reference.pages()


def test_the_committed_reference_pages_are_what_the_code_generates(gen_reference, generated, tmp_path):
    written = gen_reference.write(tmp_path)
    assert sorted(p.name for p in written) == sorted(gen_reference.PAGES)
    stale = [name for name, text in generated.items()
             if not (REFERENCE / name).exists() or (REFERENCE / name).read_text(encoding="utf-8") != text]
    assert not stale, (f"docs/reference/{', '.join(stale)} differ from what the code generates; "
                       "run: python tools/gen_reference.py")
    for path in written:                                       # deterministic: a second generation is the same
        assert path.read_text(encoding="utf-8") == generated[path.name]


def test_the_check_names_a_stale_page_and_exits_1(gen_reference, tmp_path, capsys):
    gen_reference.write(tmp_path)
    assert gen_reference.main(["--check", "--out", str(tmp_path)]) == 0
    page = tmp_path / "scenario.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| `\"star\"` |", "| `\"ring\"` |"), encoding="utf-8")
    (tmp_path / "cli.md").unlink()
    assert gen_reference.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert str(page) in err and str(tmp_path / "cli.md") in err and "algorithms.md" not in err


def _rows_by_anchor(text: str) -> dict[str, dict[str, list[str]]]:
    """anchor of the heading above -> key -> the cells of its table row."""
    out: dict[str, dict[str, list[str]]] = {}
    anchor = ""
    for line in text.splitlines():
        m = re.match(r"^#+ .*\{#([A-Za-z0-9_.+-]+)\}\s*$", line)
        if m:
            anchor = m[1]
            continue
        m = re.match(r"^\| <code[^>]*>([^<]+)</code>", line)
        if m:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out.setdefault(anchor, {})[m[1]] = cells
    return out


def test_every_scenario_key_and_algorithm_parameter_is_on_the_pages_with_a_description(gen_reference, generated):
    from svmsim.algorithms.registry import load_all

    scenario = _rows_by_anchor(generated["scenario.md"])
    keys = gen_reference.scenario_keys()
    assert {"", "data", "partition", "topology", "engine", "algorithm", "stop", "output", "schedule", "faults",
            "network", "network.links", "topology.grid", "partition.label_skew", "data.separable"} <= set(keys)
    missing = []
    for group, names in keys.items():
        anchor = "top-level" if not group else group.replace(".", "-").replace("_", "-")
        rows = scenario.get(anchor, {})
        for name in names:
            if name not in rows or not rows[name][-1]:
                missing.append(f"[{group or 'top level'}] {name}")
    algorithms = _rows_by_anchor(generated["algorithms.md"])
    for name, info in load_all().items():
        if not info.module.startswith("svmsim."):
            continue
        for key, field in info.Params.model_fields.items():
            row = algorithms.get(name, {}).get(field.alias or key)
            if row is None or not row[-1]:
                missing.append(f"[algorithm] {name}: {key}")
    assert not missing, "keys without a description on the reference pages:\n" + "\n".join(missing)


def test_every_command_is_on_the_cli_page(generated):
    from svmsim.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    page = generated["cli.md"]
    for name in commands:
        assert f"## `svmsim {name}` {{#{name}}}" in page and f"usage: svmsim {name}" in page, name


# -- the performance figures generated from the benchmarks' results (tools/gen_performance.py) -----------------

def test_the_performance_figures_page_is_what_the_results_generate():
    spec = importlib.util.spec_from_file_location("gen_performance", ROOT / "tools" / "gen_performance.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.page()
    assert (ROOT / "docs" / "performance" / "figures.md").read_text() == text, \
        "docs/performance/figures.md is stale: run python tools/gen_performance.py"
    for result in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        anchor = result.stem.replace("_", "-")
        assert f"## {result.stem} {{#{anchor}}}" in text and "Measured: " in text.split(f"{{#{anchor}}}")[1][:300]
