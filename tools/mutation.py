"""Mutation testing of svmsim's core (docs/development/mutation-testing.md): figures per module, and a quick
re-check.

    mutmut run                                   # all mutants of [tool.mutmut] only_mutate (over an hour on 2 cores)
    python tools/mutation.py summary             # per module: mutants, killed, survived, no test, marked equivalent
    python tools/mutation.py summary --json benchmarks/results/mutation.json
    python tools/mutation.py survivors svmsim.faults                        # its open survivors, with their diffs
    python tools/mutation.py recheck svmsim.faults tests/test_faults.py     # the module's survivors against tests

`recheck` runs the named tests once per surviving (or untested) mutant of a module, inside mutmut's copy with
``MUTANT_UNDER_TEST`` set (as mutmut does), lists those that still live and records its verdicts in
``mutants/recheck.json``: the loop for writing the test that kills a survivor without re-running all of mutmut.

`summary` reads mutmut's results (`mutmut results --all true`), counts a mutant that a recheck killed as killed,
and a mutant still alive whose line (or function) the source now marks ``# pragma: no mutate`` as *marked*: an
equivalent mutant (its reason is written on the line) or code that runs only inside Ray actors, which import the
installed package rather than mutmut's copy (held by the Ray tests). The next `mutmut run` no longer generates
marked mutants. Killed % = (killed + timed out) / (mutants - marked - not checked): mutmut counts a mutant whose
tests overrun 15 times their normal duration as caught (an endless loop); on a loaded machine re-run those
(`mutmut run <names>`) before trusting them.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\s*(?P<name>[\w.]+)\.x[_ǁ](?P<func>\S*?)__mutmut_\d+: (?P<status>.+)$")
STATUS = {"killed": "killed", "timeout": "timeout", "survived": "survived", "no tests": "no_tests",
          "suspicious": "survived", "skipped": "skipped", "not checked": "not_checked",
          "segfault": "killed", "caught by type check": "killed"}


def _results(all_: bool = True) -> list[tuple[str, str, str]]:
    """(module, mutant, status) for every mutant mutmut knows."""
    if not (ROOT / "mutants").is_dir():
        sys.exit("no mutants/ folder: run `mutmut run` first (docs/development/mutation-testing.md)")
    r = subprocess.run(["mutmut", "results", "--all", "true" if all_ else "false"], cwd=ROOT, capture_output=True,
                       text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"`mutmut results` failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    out = r.stdout
    rows = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            rows.append((m["name"], line.strip().split(":")[0], m["status"].strip()))
    return rows


def _module_path(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


RECHECK = ROOT / "mutants" / "recheck.json"
PRAGMA = "# pragma: no mutate"


def _rechecked() -> dict[str, str]:
    return json.loads(RECHECK.read_text()) if RECHECK.exists() else {}


def _diff(name: str) -> str:
    from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for attempt in range(5):           # a running `mutmut run` may be rewriting the file's results
            try:
                return get_diff_for_mutant(name, path=find_mutant(name).path)
            except json.JSONDecodeError:
                if attempt == 4:
                    raise
                time.sleep(1.0)
        return ""
    finally:
        os.chdir(cwd)


def _marked_lines(source_lines: list[str]) -> tuple[list[str], list[str]]:
    """The code of the lines marked ``# pragma: no mutate`` (trailing, or between ``start`` and ``end``), and the
    ``def`` lines marked ``block`` (whole functions)."""
    marked, blocks, inside = [], [], False
    for line in source_lines:
        text = line.strip()
        if text.startswith(PRAGMA + " start"):
            inside = True
        elif text.startswith(PRAGMA + " end"):
            inside = False
        elif inside:
            marked.append(text)
        elif PRAGMA in line:
            code = line.split(PRAGMA)[0].strip()
            (blocks if PRAGMA + " block" in line else marked).append(code)
    return marked, blocks


def _is_marked(name: str, source_lines: list[str]) -> bool:
    """Whether the line a mutant changes, or its function, is now marked ``# pragma: no mutate``."""
    diff = _diff(name).splitlines()
    changed = [d[1:].strip() for d in diff if d.startswith("-") and not d.startswith("---")]
    changed = [c for c in changed if c.strip(")]}, ") and not c.startswith(PRAGMA)]  # layout the mutant moved
    function = name.rsplit("__mutmut_", 1)[0].rsplit("ǁ", 1)[-1]      # mutmut's x_func or xǁClassǁmethod
    function = function if "ǁ" in name else function.rsplit(".", 1)[-1][2:]
    marked, blocks = _marked_lines(source_lines)
    if any(b.split("(")[0].split()[-1] == function for b in blocks):
        return True
    return bool(changed) and all(any(c == m or (m and c.startswith(m)) for m in marked) for c in changed)


def summary(json_path: str | None) -> int:
    counts: dict[str, Counter] = defaultdict(Counter)
    rechecked = _rechecked()
    sources: dict[str, list[str]] = {}
    for module, name, status in _results():
        kind = STATUS.get(status, status)
        if kind in ("survived", "no_tests"):
            if rechecked.get(name) == "killed":
                kind = "killed"
                counts[module]["by_recheck"] += 1
            else:
                lines = sources.setdefault(module, _module_path(module).read_text().splitlines())
                if _is_marked(name, lines):
                    kind = "marked"
        counts[module][kind] += 1
    table = []
    for module in sorted(counts):
        c = counts[module]
        total = sum(v for k, v in c.items() if k != "by_recheck")
        judged = total - c["skipped"] - c["not_checked"] - c["marked"]
        table.append({"module": module, "mutants": total, "killed": c["killed"], "timeout": c["timeout"],
                      "survived": c["survived"],
                      "no_tests": c["no_tests"], "marked": c["marked"], "not_checked": c["not_checked"],
                      "killed_by_recheck": c["by_recheck"],
                      "killed_pct": round(100.0 * (c["killed"] + c["timeout"]) / judged, 1) if judged else None})
    keys = ("mutants", "killed", "timeout", "survived", "no_tests", "marked", "not_checked", "killed_by_recheck")
    tot = {k: sum(r[k] for r in table) for k in keys}
    judged = tot["mutants"] - tot["not_checked"] - tot["marked"]
    tot.update(module="all", killed_pct=round(100.0 * (tot["killed"] + tot["timeout"]) / judged, 1) if judged
               else None)
    print("| module | mutants | killed | timed out | survived | no test | marked (equivalent / Ray only) | killed % |")
    print("|---|---|---|---|---|---|---|---|")
    for r in [*table, tot]:
        print(f"| `{r['module']}` | {r['mutants']} | {r['killed']} | {r['timeout']} | {r['survived']} | "
              f"{r['no_tests']} | {r['marked']} | {r['killed_pct']} |")
    if tot["killed_by_recheck"]:
        print(f"\n{tot['killed_by_recheck']} of the killed were killed by a recheck against newer tests")
    if tot["not_checked"]:
        print(f"\n{tot['not_checked']} mutants not checked yet (mutmut run unfinished)")
    if json_path:
        Path(json_path).write_text(json.dumps({"modules": table, "total": tot}, indent=1) + "\n")
    return 0


def _open_survivors(module: str) -> list[str]:
    """The module's mutants that survived (or had no test, or that mutmut found suspicious: a run it could not judge,
    such as a forked worker that died), were not killed by a recheck and are not marked."""
    done = _rechecked()
    lines = _module_path(module).read_text().splitlines()
    return [name for mod, name, status in _results() if mod == module and status in ("survived", "no tests",
                                                                                        "suspicious")
            and done.get(name) != "killed" and not _is_marked(name, lines)]


def survivors(module: str) -> int:
    """Print the diff of each open survivor of `module` (nothing is run)."""
    names = _open_survivors(module)
    for name in names:
        print(name, _diff(name), sep="\n")
    print(f"{module}: {len(names)} open survivors (survived, untested or suspicious, not killed by a recheck, "
          "not marked)")
    return 0


def recheck(module: str, tests: list[str], show: bool, timeout: float = 300.0, select: str | None = None,
            only: str | None = None) -> int:
    """Run `tests` against each surviving, untested or suspicious mutant of `module`; print those that still live."""
    mutants = [m for m in _open_survivors(module) if only is None or only in m]
    copy = ROOT / "mutants"
    if not copy.is_dir():
        print("no mutants/ folder: run `mutmut run` first", file=sys.stderr)
        return 2
    for t in tests:                                   # the tests as they are now, into mutmut's copy
        dst = copy / t
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes((ROOT / t).read_bytes())
    alive = []
    for name in mutants:
        env = dict(os.environ, MUTANT_UNDER_TEST=name)
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-m",
                                "not slow and not ray", *(["-k", select] if select else []), *tests], cwd=copy,
                               env=env, capture_output=True, text=True, check=False, timeout=timeout)
            passed = r.returncode == 0
        except subprocess.TimeoutExpired:          # an endless loop: caught, as mutmut counts a timeout
            passed = False
        if passed:
            alive.append(name)
            if show:
                print(name, _diff(name), sep="\n")
    with open(RECHECK.with_suffix(".lock"), "w") as lock:      # several rechecks may run at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        verdicts = _rechecked()
        verdicts.update({name: ("alive" if name in alive else "killed") for name in mutants})
        RECHECK.write_text(json.dumps(verdicts, indent=0, sort_keys=True) + "\n")
    print(f"{module}: {len(mutants)} surviving, untested or suspicious mutants, {len(mutants) - len(alive)} killed by "
          f"{' '.join(tests)}, {len(alive)} still alive")
    for name in alive:
        print("  alive:", name)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="per-module figures")
    s.add_argument("--json", default=None, help="also write them to this file")
    r = sub.add_parser("recheck", help="a module's survivors against some tests")
    r.add_argument("module", help="e.g. svmsim.faults")
    r.add_argument("tests", nargs="+", help="test files, relative to the repository root")
    r.add_argument("--show", action="store_true", help="print the diff of each mutant still alive")
    r.add_argument("--timeout", type=float, default=300.0, help="seconds before a mutant's tests count as hung")
    r.add_argument("-k", dest="select", default=None, help="only the tests pytest's -k expression selects")
    r.add_argument("--only", default=None, help="only the mutants whose name contains this (e.g. a function's)")
    v = sub.add_parser("survivors", help="a module's open survivors, with their diffs")
    v.add_argument("module", help="e.g. svmsim.schedule.gossip")
    args = ap.parse_args()
    if args.cmd == "summary":
        return summary(args.json)
    if args.cmd == "survivors":
        return survivors(args.module)
    return recheck(args.module, args.tests, args.show, args.timeout, args.select, args.only)


if __name__ == "__main__":
    sys.exit(main())
