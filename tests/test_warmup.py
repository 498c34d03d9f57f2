"""`svmsim warmup [ALGORITHM ...]`: compile ahead of time what runs of an algorithm compile, so that the next run,
in another process, compiles nothing afresh (it loads from numba's disk cache and svmsim's loop cache)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from svmsim import warmup
from svmsim.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
#: a cheap algorithm to warm up from empty caches (about 2 s of compilation)
CHEAP = "pegasos"


def test_an_unknown_algorithm_exits_2_and_names_the_allowed_ones(capsys):
    assert main(["warmup", "no-such-algorithm"]) == 2
    err = capsys.readouterr().err
    assert "warmup: 'no-such-algorithm' is not a registered algorithm; allowed:" in " ".join(err.split())
    assert "pegasos" in err and "saddle-dsvc" in err


def test_one_unknown_name_among_known_ones_warms_nothing(capsys, monkeypatch):
    monkeypatch.setattr(warmup, "warm_up_algorithm", lambda *a, **k: pytest.fail("warmed before the names were "
                                                                                 "checked"))
    assert main(["warmup", CHEAP, "nope", "neither"]) == 2
    assert "'nope', 'neither' are not registered algorithms" in " ".join(capsys.readouterr().err.split())


def test_every_algorithm_by_default_one_line_each_and_a_total(capsys, monkeypatch):
    seen = []

    def fake(name, with_variants=True):
        seen.append((name, with_variants))
        return warmup.WarmupResult(name, 1.5, 1.0, 0.5, 2, "ValueError: broken" if name == "tron" else None)

    monkeypatch.setattr(warmup, "warm_up_algorithm", fake)
    assert main(["warmup", "--no-variants"]) == 1                      # one failed: exit 1, the others warmed
    out = capsys.readouterr().out.splitlines()
    names = warmup.check_names([])
    assert [n for n, _ in seen] == names and not any(v for _, v in seen)
    assert len(out) == len(names) + 1
    assert out[0].startswith(f"[1/{len(names)}] {names[0]}") and "1.5 s" in out[0] and "compiling 1.0 s" in out[0]
    assert "FAILED" in next(line for line in out if " tron " in line)
    assert out[-1].startswith(f"total {1.5 * len(names):.1f} s for {len(names)} algorithms") and "tron" in out[-1]


def test_the_command_is_in_the_help():
    parser = build_parser()
    assert "warmup" in parser.format_help()
    sub = next(a for a in parser._actions if a.dest == "command").choices["warmup"]
    assert "ALGORITHM" in sub.format_help() and "--no-variants" in sub.format_help()


def _env(tmp_path: Path) -> dict:
    """Empty caches of their own: numba's (NUMBA_CACHE_DIR) and svmsim's loops (SVMSIM_CACHE_DIR)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), SVMSIM_CACHE_DIR=str(tmp_path / "svmsim"),
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("NUMBA_DISABLE_JIT", None)
    return env


#: a run of the warmed algorithm with other parameters and seed than warmup's small run; prints summary.json's timing
RUN = """
import json, sys, svmsim
res = svmsim.run({"name": "after-warmup", "seed": 11, "data": {"name": "iris"},
                  "algorithm": {"name": sys.argv[1], "lam": 0.05}, "stop": {"max_iterations": 400},
                  "output": {"eval_every": 100, "progress": False, "plots": False}}, write=False)
print(json.dumps({"timing": res.summary["timing"], "compile_time": res.final["compile_time"]}))
"""


def test_after_warmup_a_run_in_a_new_process_compiles_nothing(tmp_path):
    env = _env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "svmsim.cli", "warmup", CHEAP], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"[1/1] {CHEAP} ...") and lines[-1].startswith("total ")
    afresh = float(re.search(r"\(([\d.]+) s afresh\)", lines[0])[1])
    assert afresh > 0                           # the caches were empty: it compiled
    assert any((tmp_path / "numba").rglob("*.nbi"))
    ran = subprocess.run([sys.executable, "-c", RUN, CHEAP], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    # nothing compiled afresh: every numba function the run called came from the disk cache
    assert out["timing"]["compile_new_seconds"] == 0.0, out
    assert out["timing"]["compile_seconds"] < afresh
