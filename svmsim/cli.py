"""The `svmsim` command line: run, sweep, validate, check, warmup and list.

Errors in what the user gave (scenario, data, parameters) print one paragraph and exit with status 2; no
traceback. Status 1 is reserved for failures inside svmsim, 130 for an interrupted run, 3 for a sweep some of
whose points failed (the others' results are written).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap

from .errors import ScenarioError, SvmsimError

EPILOG = """\
examples:
  svmsim run scenarios/quickstart.toml
  svmsim run scenarios/saddle_dsvc_mushrooms.toml --engine ray --set stop.max_iterations=2000
  svmsim sweep scenarios/quickstart.toml --param eps=1e-1,1e-2,1e-3
  svmsim validate scenarios/quickstart.toml
  svmsim list algorithms
  svmsim check pushsum
  svmsim warmup saddle-dsvc

data: LIBSVM data sets are read from the directory named by the scenario key data.data_dir or by the
environment variable SVMSIM_DATA_DIR (plain, .xz, .bz2 or .gz files; 'a9a' finds a9a.xz and its test
set a9a.t.xz). iris and breast_cancer_sklearn ship with scikit-learn; 'synthetic' generates data.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `svmsim` command (docs/reference/cli.md is generated from it)."""
    p = argparse.ArgumentParser(
        prog="svmsim", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Simulate distributed SVM training and meter its communication exactly. A scenario file "
                    "(TOML) names the data, partition, topology, engine, algorithm, stopping rule and seed; a "
                    "run writes a directory with the resolved scenario, metrics per evaluation point, the "
                    "communication ledger, the model and plots.")
    p.add_argument("--version", action="version", version=f"svmsim {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("run", help="run a scenario file", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run a scenario and write its run directory (atomically: an interrupted or "
                                   "failed run leaves nothing that looks finished).")
    r.add_argument("scenario", help="path to a scenario TOML file")
    r.add_argument("--engine", metavar="ENGINE",
                   help="override engine.name (inproc: one process, deterministic; ray: Ray actors; ray-cgraph: "
                        "Ray actors driven by a compiled graph; or a plugin's: svmsim list engines)")
    r.add_argument("--address", help="join an existing Ray cluster at this address (implies a Ray engine)")
    r.add_argument("--actors", type=int, help="host actors per multi-node role on Ray (engine.actors)")
    r.add_argument("--dashboard", action="store_true", help="start the Ray dashboard with the local Ray")
    r.add_argument("--seed", type=int, help="override the scenario seed")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override any scenario key, e.g. --set algorithm.eps=1e-4 (repeatable; values are TOML)")
    r.add_argument("--out", help="exact run directory (default: <output.dir>/<name>-<seed>-<timestamp>)")
    r.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--quiet", "-q", action="store_true", help="print only the run directory")

    sw = sub.add_parser(
        "sweep", help="run a scenario over a grid of parameters (and algorithm variants) into one table",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a scenario for every combination of --param values (and every [[sweep.variants]] entry "
                    "of the file), then write sweep.csv, sweep.md, the per-run directories and figures. With an "
                    "eps grid, each point's cost is the ledger's scalars up to the first evaluated iterate with "
                    "certified relative gap <= eps; the log-log slope of cost against 1/eps is fitted per "
                    "variant and drawn with the bound k(d+sqrt(d/eps)) and the lower bound k*min(d,1/eps).",
        epilog="examples:\n"
               "  svmsim sweep scenarios/quickstart.toml --param eps=1e-1,1e-2,1e-3\n"
               "  svmsim sweep scenarios/paper000_fig3_synthetic.toml\n"
               "  svmsim sweep FILE --param d=8,32 --param k=5,20 --set stop.max_iterations=10000\n"
               "  svmsim sweep FILE --jobs 2 --out runs/sw        (Ctrl-C, then the same with --resume)\n\n"
               "short names: eps (algorithm.eps and stop.gap), d (data.d), n (data.n), k or clients "
               "(algorithm.clients), seed; any dotted scenario key also works.\n\n"
               "A point that fails is a row with status = failed and its error; the others go on, and the exit "
               "status is 3. An interrupt (Ctrl-C) keeps the finished points in the hidden .DIR.incomplete "
               "directory, exit status 130; --resume --out DIR continues from them.")
    sw.add_argument("scenario", help="path to a scenario TOML file (optionally with a [sweep] table)")
    sw.add_argument("--param", dest="params", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="a grid axis (repeatable; replaces the file's sweep.grid entry of the same name)")
    sw.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a scenario key in every run")
    sw.add_argument("--engine", metavar="ENGINE", help="override engine.name (svmsim list engines)")
    sw.add_argument("--out", help="exact sweep directory (default: <output.dir>/sweep-<name>-<timestamp>)")
    sw.add_argument("--overwrite", action="store_true", help="replace an existing sweep directory")
    sw.add_argument("--no-runs", action="store_true", help="do not keep each run's own directory")
    sw.add_argument("--dry-run", action="store_true", help="validate every point and list them; run nothing")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                    help="run N points at once in worker processes (default 1: one after the other); the files "
                         "are the same, in grid order")
    sw.add_argument("--ray", action="store_true",
                    help="run each point as a Ray task on a private local Ray (or the cluster of --address); the "
                         "run directories are written here")
    sw.add_argument("--address", help="with --ray: the Ray cluster to join (HOST:PORT, or 'auto')")
    sw.add_argument("--resume", action="store_true",
                    help="continue the sweep directory --out DIR (an interrupted or finished sweep): points whose "
                         "run directories are finished are read back, not run again")

    v = sub.add_parser("validate", help="check a scenario file and print it resolved")
    v.add_argument("scenario", help="path to a scenario TOML file")
    v.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key before validating")
    v.add_argument("--data", action="store_true",
                   help="also load the data set whole (every line, the labels, the feature values); without it, "
                        "validate finds the data files and reads only their first 64 KiB")

    ck = sub.add_parser(
        "check", help="run the conformance checks on algorithms (built in or your own)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the conformance suite (svmsim.conformance) on the named algorithms, as scikit-learn's "
                    "check_estimator runs its checks on an estimator: the declared count equals the ledger; any "
                    "grouping of nodes onto hosts gives the same run; the same seed replays the run bit for bit and "
                    "another seed changes it; the compiled step equals the Python step; a state handed to a fresh "
                    "program continues the run; bad parameters are refused clearly. Each algorithm declares the "
                    "small parameters the checks run with, its variants and the checks that do not apply "
                    "(AlgorithmInfo(conformance=Conformance(...))). Prints one row per check; exit status 1 if "
                    "any check failed.",
        epilog="examples:\n"
               "  svmsim check pushsum\n"
               "  svmsim check my-subgrad --module mypkg.subgrad\n"
               "  svmsim check bqo-e --only ledger,replay --no-variants")
    ck.add_argument("names", nargs="+", metavar="NAME", help="registered algorithm names (see svmsim list algorithms)")
    ck.add_argument("--module", action="append", default=[], metavar="MODULE",
                    help="import this module first (an algorithm of your own that is not installed; looked for in "
                         "the working directory, then on sys.path; repeatable)")
    ck.add_argument("--only", metavar="CHECKS", help="comma-separated check names to run (default: all)")
    ck.add_argument("--no-variants", action="store_true", help="skip the algorithms' declared variants")

    wu = sub.add_parser(
        "warmup", help="compile ahead of time what runs of the named algorithms compile (default: all)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A first run compiles its numba functions (seconds to minutes); numba keeps them on disk "
                    "(beside svmsim's sources, or under $NUMBA_CACHE_DIR) and svmsim its compiled loops (under "
                    "$SVMSIM_CACHE_DIR/loops, default ~/.cache/svmsim/loops), so later runs load them in a fraction "
                    "of a second. warmup fills both caches ahead: for each algorithm it runs the small scenario of "
                    "its conformance declarations (and of each declared variant) as `svmsim run` would, and for "
                    "synchronous rounds once more on the compiled rounds. Prints a line per algorithm with the "
                    "seconds it took and how many of them were compilation, then the total. Data of another kind "
                    "or parameters that take other code paths may still compile on a first run; a run's "
                    "compile_time column and summary.json's timing say how much, and its wall_time leaves it out.",
        epilog="examples:\n"
               "  svmsim warmup                      (every registered algorithm)\n"
               "  svmsim warmup saddle-dsvc bqo-e\n"
               "  svmsim warmup my-subgrad --module mypkg.subgrad")
    wu.add_argument("names", nargs="*", metavar="ALGORITHM",
                    help="registered algorithm names (see svmsim list algorithms; default: all of them)")
    wu.add_argument("--module", action="append", default=[], metavar="MODULE",
                    help="import this module first (an algorithm of your own that is not installed; repeatable)")
    wu.add_argument("--no-variants", action="store_true", help="skip the algorithms' declared variants")

    cal = sub.add_parser(
        "calibrate", help="measure this machine or a Ray cluster and write the [network] table that models it",
        description="Measures the alpha-beta model of svmsim's modelled cluster time: one Ray actor calls another "
                    "with payloads of several sizes (on two different Ray nodes when the cluster has them) and the "
                    "median one-way time is fitted by least squares to t = latency + bytes / bandwidth (the fit's "
                    "relative RMS residual is printed); each Ray node's compute rate is timed on a sparse pass (2 "
                    "operations per nonzero, as the programs count their work), or with --scenario each node's "
                    "steps of that scenario (fitted to t = step_overhead + work / compute_rate). Prints the "
                    "[network] table with the "
                    "measurements as comments, or writes it with --out. Under a minute on one machine.")
    cal.add_argument("--address", help="the Ray cluster to join (HOST:PORT, or 'auto'; default: a private local Ray)")
    cal.add_argument("--out", metavar="FILE", help="write the table to FILE (default: print it)")
    cal.add_argument("--repeats", type=int, default=30, help="calls per payload size (default 30)")
    cal.add_argument("--quick", action="store_true", help="3 payload sizes and 0.2 s of compute per node (a rough "
                                                          "table in a few seconds)")
    cal.add_argument("--hop", choices=("direct", "engine"), default="direct",
                     help="how a message hop is timed: 'direct' (default; one Ray actor calls another: the network "
                          "between hosts) or 'engine' (a message relayed by svmsim's Ray engine through its driver: "
                          "a table that models runs on that engine)")
    cal.add_argument("--scenario", metavar="FILE",
                     help="time this scenario's own steps instead of the sparse pass (400 of its synchronous rounds "
                          "on its own engine, each step timed where it runs; --quick: 100) and fit t = step_overhead "
                          "+ work / compute_rate: the table then gives both")

    ls = sub.add_parser("list", help="list algorithms, topologies, data sets, partitions, fault kinds, engines, "
                                     "codecs, metrics or cluster profiles")
    ls.add_argument("what", nargs="?", default="all",
                    choices=("all", "algorithms", "topologies", "datasets", "partitions", "faults", "engines",
                             "codecs", "metrics", "profiles"))
    ls.add_argument("name", nargs="?", help="with 'algorithms': one algorithm, each of its keys with its "
                                            "description, default and allowed values")
    ls.add_argument("--data-dir", help="data directory to list (default: $SVMSIM_DATA_DIR); only 'list' takes it: "
                                       "a scenario names its directory with data.data_dir")
    return p


def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _version() -> str:
    from . import __version__

    return __version__


def _overrides(args) -> dict:
    from .config import parse_overrides

    ov = parse_overrides(args.sets)
    for key, attr in (("engine.name", "engine"), ("seed", "seed"), ("engine.actors", "actors")):
        val = getattr(args, attr, None)
        if val is not None:
            ov[key] = val
    if getattr(args, "address", None):
        ov["engine.address"] = args.address
        ov.setdefault("engine.name", "ray")
    if getattr(args, "dashboard", False):
        ov["engine.dashboard"] = True
    if getattr(args, "overwrite", False):
        ov["output.overwrite"] = True
    return ov


def _cmd_run(args) -> int:
    from .runner import run
    from .config import load_scenario

    scenario = load_scenario(args.scenario, overrides=_overrides(args))
    warning = _unbounded_gossip_warning(scenario)
    if warning:
        print(textwrap.fill(f"svmsim: warning: {warning}", width=110, subsequent_indent="  ",
                            break_on_hyphens=False), file=sys.stderr)
    # the flags switch the bar off; otherwise the scenario's [output] progress decides
    result = run(scenario, out_dir=args.out, progress=False if (args.no_progress or args.quiet) else None)
    if args.quiet:
        print(result.run_dir)
        return 0
    print("\n".join(summary_lines(scenario, result)))
    return 0


def summary_lines(scenario, result) -> list[str]:
    """What `svmsim run` prints about a finished run: why it stopped, the ledger (flagged when it differs from
    the algorithm's declared count), what the faults did, the final metrics and the run directory."""
    f = result.final
    lines = [f"scenario   {scenario.name} ({scenario.algorithm.name}, engine {scenario.engine.name}, seed "
             f"{scenario.seed})",
             f"stopped    {result.stop_reason} after {f.get('iteration', 0)} iterations"]
    if result.ledger is not None:
        t = result.ledger.totals
        lines.append(f"ledger     {t['messages']} messages, {t['scalars']} scalars, {t['bytes']} bytes"
                     + ("" if result.summary.get("ledger_matches_declared") in (None, True)
                        else "  (differs from the algorithm's declared count!)"))
    lines += _fault_lines(result.summary.get("faults"), f)
    comp = result.summary.get("compression")
    if comp and comp.get("ratio"):
        lines.append(f"compressed {comp['raw_bytes']} raw bytes to {comp['encoded_bytes']} ({comp['ratio']:.3g}x "
                     "smaller)" + ("" if result.summary.get("certified", True) else "; certificates do not hold: "
                                   "computed from compressed messages"))
    for key, label in (("objective", "objective"), ("hull_distance", "hull dist"), ("rel_gap", "rel. gap"),
                       ("gap_per_cn", "gap/(C n)"), ("consensus_error", "consensus"),
                       ("model_disagreement", "disagreement"), ("rel_dual", "rel. dual"),
                       ("train_accuracy", "train acc"), ("test_accuracy", "test acc")):
        if f.get(key) is not None:
            lines.append(f"{label:<10} {f[key]:.6g}")
    if f.get("modelled_time") is not None:
        lines.append(f"modelled   {f['modelled_time']:.6g} s of cluster time ([network])")
    live = result.summary.get("live_metrics")
    if live and live.get("endpoint"):
        shown = "final counters exported" if live["final_exported"] else "final counters not seen in time"
        where = "this run's private Ray, gone with it" if live.get("private_ray") else "the cluster's"
        lines.append(f"metrics    {live['endpoint']} ({shown}; {where})")
    for warning in result.summary.get("warnings", ()):
        lines.append(textwrap.fill(f"warning    {warning}", width=110, subsequent_indent=" " * 11,
                                   break_on_hyphens=False))
    lines.append(f"run dir    {result.run_dir}")
    return lines


_CAUSE_WORDS = {"lost": "lost in the network", "dead_receiver": "sent to a node that was down",
                "dead_sender": "sent by a node that was down"}


def _fault_lines(faults: dict | None, final: dict) -> list[str]:
    """What the [faults] did, for `svmsim run`'s result (nothing when no fault was configured)."""
    if not faults or not faults.get("model"):
        return []
    model = ", ".join(f"{k} = {v}" for k, v in faults["model"].items())
    total = faults["dropped_total"]
    parts = [f"{rec['messages']} {tag} {_CAUSE_WORDS.get(cause, cause)}"
             for cause, per_tag in faults.get("dropped", {}).items() for tag, rec in per_tag.items()]
    lines = [f"faults     {model}",
             f"lost       {total['messages']} messages, {total['scalars']} scalars"
             + (f" ({'; '.join(parts)})" if parts else "")]
    dup = sum(rec["messages"] for rec in faults.get("duplicated", {}).values())
    if dup:
        lines.append(f"duplicated {dup} messages (each copy metered)")
    if faults.get("delayed_messages"):
        lines.append(f"delayed    {faults['delayed_messages']} message copies")
    nodes = []
    if faults.get("crashed_nodes"):
        crashed = faults["crashed_nodes"]
        nodes.append(f"{len(crashed)} crashed {_ids(crashed)}")
    if faults.get("stragglers"):
        nodes.append(f"{len(faults['stragglers'])} straggling")
    events = faults.get("node_events") or {}
    if events:
        nodes.append("events: " + ", ".join(f"{k} {v}" for k, v in events.items()))
    if faults.get("down_at_end"):
        down = faults["down_at_end"]
        up = f"; metrics over the {final['nodes_up']} up" if final.get("nodes_up") is not None else ""
        nodes.append(f"{len(down)} down at the end {_ids(down)}{up}")
    if nodes:
        lines.append("nodes      " + "; ".join(nodes))
    flight = sum(rec["messages"] for rec in faults.get("in_flight_at_end", {}).values())
    if flight:
        lines.append(f"in flight  {flight} messages at the end (metered as delivered)")
    return lines


def _ids(nodes: list[int], shown: int = 8) -> str:
    return "[" + ", ".join(map(str, nodes[:shown])) + (", ..." if len(nodes) > shown else "") + "]"


def _unbounded_gossip_warning(scenario) -> str | None:
    """A gossip run with no budget stops only by a metric rule (stop.below, gap, objective_change) or when every
    node has finished,
    which faults (lost mass, crashed nodes) or a program that never finishes can prevent: say so before running."""
    if scenario.schedule.kind != "gossip" or (scenario.faults.is_empty
                                              and scenario.algorithm.info.finishes(scenario.algorithm.params)):
        return None
    stop, sched = scenario.stop, scenario.schedule
    budgets = (stop.max_iterations, stop.max_rounds, stop.max_scalars, stop.max_seconds, sched.max_time,
               sched.max_messages)
    if any(b is not None for b in budgets):
        return None
    why = " (with faults, Push-Sum's consensus error may never reach its threshold: lost messages take their mass " \
          "with them and crashed nodes keep stale values)" if not scenario.faults.is_empty else ""
    return ("this gossip run has no budget ([stop] max_rounds, max_iterations, max_scalars, max_seconds or "
            "[schedule] max_time, max_messages), so it stops only when its stopping rule is met or every node has "
            f"finished{why}; interrupt it with Ctrl-C, or set a budget")


def _cmd_sweep(args) -> int:
    from .config import parse_overrides
    from .sweep import SweepInterrupted, parse_param, plan_sweep, run_sweep

    params = [parse_param(t) for t in args.params]
    ov = parse_overrides(args.sets)
    if args.engine:
        ov["engine.name"] = args.engine
    if args.dry_run:
        spec, points = plan_sweep(args.scenario, params, ov)
        print(f"# {len(points)} runs, all valid:")
        for p in points:
            print(f"  {p.slug}")
        return 0
    try:
        res = run_sweep(args.scenario, params, ov, out=args.out, overwrite=args.overwrite,
                        progress=not args.no_progress, keep_runs=not args.no_runs, jobs=args.jobs,
                        resume=args.resume, ray=args.ray, address=args.address)
    except SweepInterrupted as e:
        if e.directory is None:
            print(f"svmsim: interrupted after {e.done} of {e.total} points; nothing was kept", file=sys.stderr)
        else:
            print(f"svmsim: interrupted after {e.done} of {e.total} points; they are kept in {e.directory}; "
                  f"continue with the same command and --resume --out {e.final}", file=sys.stderr)
        return 130
    print((res.directory / "summary.txt").read_text(), end="")
    print(f"every column, slopes and fits: {res.directory / 'sweep.md'}")
    print(f"sweep dir  {res.directory}")
    if res.failed:
        print(f"svmsim: {len(res.failed)} of {len(res.rows)} points failed:", file=sys.stderr)
        for r in res.failed:
            at = ", ".join(f"{k}={r[k]}" for k in r if k not in ("variant", "algorithm", "status", "error"))
            print(f"  [{r['variant']}{': ' + at if at else ''}] {r['error']}", file=sys.stderr)
        return 3
    return 0


def _cmd_validate(args) -> int:
    from .config import load_scenario

    scenario = load_scenario(args.scenario, overrides=_overrides(args))
    if args.data:
        from .data import make_dataset

        ds = make_dataset(scenario.dataset_kwargs())
        print(f"# data: {ds!r}")
    else:                               # cheap: the files exist and their first lines read (all of them: --data)
        from .data import check_files
        from .data.libsvm import HEAD_BYTES

        files = check_files(scenario.dataset_kwargs())
        if files:
            print(f"# data: {', '.join(map(str, files))} found; the first {HEAD_BYTES // 1024} KiB of each read "
                  "(--data reads them whole)")
    print(f"# {args.scenario} is valid; resolved:")
    print(scenario.to_toml())
    return 0


def _cmd_check(args) -> int:
    from .algorithms.registry import get_algorithm, load_module
    from .conformance import check_algorithm, check_names

    for module in args.module:
        load_module(module, os.getcwd(), what="--module")
    only = tuple(c.strip() for c in args.only.split(",") if c.strip()) if args.only else None
    for name in args.names:
        info = get_algorithm(name)
        if only is not None and set(only) - set(check_names(info)):
            raise ScenarioError(f"--only {args.only}: algorithm {name!r} has no check "
                                f"{', '.join(sorted(set(only) - set(check_names(info))))}; allowed: "
                                f"{', '.join(check_names(info))}")
    width = max(len(n) for n in args.names) + 2
    print(f"{'algorithm / variant':<{max(width, 30)}} {'check':<10} {'result':<8} {'seconds':>8}")

    def row(r) -> None:
        print(f"{r.case.label:<{max(width, 30)}} {r.case.check:<10} {r.status:<8} {r.seconds:8.2f}", flush=True)
        if r.message:
            print(textwrap.fill(r.message, width=110, initial_indent="    ", subsequent_indent="    ",
                                break_on_hyphens=False), flush=True)

    results = check_algorithm(*args.names, with_variants=not args.no_variants, checks=only, on_result=row)
    counts = {status: sum(r.status == status for r in results) for status in ("passed", "failed", "skipped")}
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


def _cmd_calibrate(args) -> int:
    from .calibrate import QUICK_SIZES, SIZES, calibrate, check_out_path, check_scenario

    if args.repeats < 1:
        raise ScenarioError(f"--repeats {args.repeats} is out of range; allowed: an integer >= 1")
    if args.out is not None:
        check_out_path(args.out)                 # refused before anything is measured
    scenario = None
    if args.scenario is not None:
        from .config import load_scenario

        scenario = load_scenario(args.scenario)
        check_scenario(scenario)
    result = calibrate(args.address, sizes=QUICK_SIZES if args.quick else SIZES, repeats=args.repeats,
                       compute_seconds=0.2 if args.quick else 0.5, step_rounds=100 if args.quick else 400,
                       scenario=scenario, hop=args.hop)
    text = result.table()
    if args.out is None:
        print(text, end="")
    else:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}: latency {result.latency:.3g} s, bandwidth {result.bandwidth:.3g} bytes/s (fit "
              f"residual {100 * result.residual:.1f} %), compute rate {result.compute_rate:.3g} operations/s"
              f"{f', step overhead {result.step_overhead:.3g} s' if scenario is not None else ''}; "
              f"{result.wall_seconds:.1f} s")
    return 0


def _cmd_warmup(args) -> int:
    from .algorithms.registry import load_module
    from .warmup import check_names, warm_up

    for module in args.module:
        load_module(module, os.getcwd(), what="--module")
    names = check_names(args.names)          # an unknown name: exit 2 before anything is compiled
    width = max(len(n) for n in names)

    def start(i: int, n: int, name: str) -> None:
        print(f"[{i}/{n}] {name:<{width}} ...", end="", flush=True)

    def done(i: int, n: int, r) -> None:
        what = (f"compiling {r.compile_seconds:.1f} s ({r.compile_new_seconds:.1f} s afresh); {r.runs} small "
                f"run{'s' if r.runs != 1 else ''}")
        print(f" {r.seconds:7.1f} s  " + (f"FAILED (after {r.runs} small runs): {r.error}" if r.error else what),
              flush=True)

    results = warm_up(names, with_variants=not args.no_variants, on_start=start, on_result=done)
    failed = [r.algorithm for r in results if r.error]
    print(f"total {sum(r.seconds for r in results):.1f} s for {len(results)} algorithm"
          f"{'s' if len(results) != 1 else ''} (compiling {sum(r.compile_seconds for r in results):.1f} s)"
          + (f"; failed: {', '.join(failed)} (svmsim check NAME says more)" if failed else ""))
    return 1 if failed else 0


def _paper(citation: str) -> str:
    """``000_ff8f....txt, Algorithm 1`` -> ``paper 000, Algorithm 1`` (the papers are not part of svmsim)."""
    return "paper " + re.sub(r"(\d{3})_[0-9a-f]+\.txt", r"\1", citation)


def _describe_algorithm(name: str) -> list[str]:
    from .algorithms.registry import get_algorithm
    from .config.messages import describe_field

    info = get_algorithm(name)
    runs = ("one machine" if not info.distributed else
            "distributed, synchronous rounds" if info.scheduler == "sync" else "distributed, gossip")
    out = [f"{info.name}: {info.description}", f"  {_paper(info.paper)}; {runs}"
           + ("; topologies: any connected graph" if "any" in info.topologies
              else f"; topologies: {', '.join(info.topologies)}" if info.topologies else ""),
           f"  module {info.module}" + ("; finishes by itself" if info.finishes_by_itself is True else
                                        "; may finish by itself (depends on its keys)"
                                        if callable(info.finishes_by_itself) else ""),
           *([f"  exact tags (no lossy [compression] codec): {', '.join(info.exact_tags)}"] if info.exact_tags
             else []),
           "  [algorithm] keys (name = \"" + info.name + "\" and):"]
    for key, field in info.Params.model_fields.items():
        default = "required" if field.is_required() else f"default {_show(field.get_default(call_default_factory=True))}"
        out.append(f"    {key:<20} {default}; allowed: {describe_field(field)}")
        if field.description:
            out.append(f"    {'':<20} {field.description}")
    return out


def _named_pieces(names, get, width: int, note=lambda piece: "") -> list[str]:
    """`svmsim list` lines of named pieces with typed parameters (fault kinds, engines, codecs): per name its
    description (and `note`), then one line per parameter; a plugin that cannot be loaded says why."""
    lines = []
    for name in names:
        try:
            piece = get(name)
        except SvmsimError as exc:
            lines.append(f"  {name:<{width}} (cannot be loaded) {exc}")
            continue
        lines.append(f"  {name:<{width}} {piece.description}" + note(piece))
        for key, p in piece.params.items():
            lines.append(f"  {'':<{width}}   {p.describe(key)}: {p.description}" + (f" ({p.allowed})" if p.allowed
                                                                                    else ""))
    return lines


def _show(value) -> str:
    from .config.values import show

    return "none" if value is None else show(value)


def _metric_lines() -> list[str]:
    """The registry of metric names (`svmsim.core.metrics`): name, unit, certificate or not, description."""
    from .core.metrics import METRICS

    out = ["metrics (columns of metrics.csv; one meaning in every family):"]
    for m in METRICS:
        kind = "certificate" if m.certificate else "measure"
        out.append(f"  {m.name:<16} {m.unit:<11} {kind:<12} {m.description}")
        out.append(f"  {'':<16} {'':<11} {'':<12} = {m.definition}; families: {', '.join(m.families)}")
    return out


def _cmd_list(args) -> int:
    what = args.what
    if args.name is not None:
        if what != "algorithms":
            raise ScenarioError(f"list {what} {args.name}: a name is only taken by 'svmsim list algorithms NAME'")
        print("\n".join(_describe_algorithm(args.name)))
        return 0
    out = []
    if what in ("all", "algorithms"):
        from .algorithms.registry import load_all, plugin_errors

        out.append("algorithms:")
        for name, info in sorted(load_all(strict=False).items()):
            keys = ", ".join(info.Params.model_fields)
            out.append(f"  {name:<18} {info.description}")
            out.append(f"  {'':<18} {_paper(info.paper)}; keys: {keys}")
        for name, error in sorted(plugin_errors().items()):
            out.append(f"  {name:<18} (cannot be loaded) {error}")
    if what in ("all", "topologies"):
        from .topology_specs import topology_kinds, topology_spec

        out.append("topologies:")
        for name in topology_kinds():
            try:
                spec = topology_spec(name)
            except SvmsimError as exc:
                out.append(f"  {name:<58} (cannot be loaded) {exc}")
                continue
            out.append(f"  {spec.signature():<58} {spec.description}")
    if what in ("all", "partitions"):
        import inspect

        from .data import partition_scheme, partition_schemes, scheme_params

        out.append("partitions ([partition] scheme = NAME, and the scheme's keys):")
        for name in partition_schemes():
            try:
                fn = partition_scheme(name)
            except SvmsimError as exc:
                out.append(f"  {name:<14} (cannot be loaded) {exc}")
                continue
            keys = ", ".join(k if d is inspect.Parameter.empty else f"{k} = {d!r}" for k, d in scheme_params(fn).items())
            paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(fn.__doc__ or "").split("\n\n") if p.strip()]
            out.append(f"  {name:<14} {('keys: ' + keys + '; ') if keys else ''}{paragraphs[0] if paragraphs else ''}")
            if keys:                    # what each key means and allows (the rest of the scheme's description)
                out += [textwrap.fill(p.replace("``", ""), width=110, initial_indent=" " * 17,
                                      subsequent_indent=" " * 17, break_on_hyphens=False) for p in paragraphs[1:]]
    if what in ("all", "faults"):
        from .config import FaultsSection
        from .core.fault_kinds import fault_kind, fault_kinds

        out.append("faults ([faults] keys; nothing goes wrong by default):")
        for key, field in FaultsSection.model_fields.items():
            out.append(f"    {key:<16} (default {_show(field.get_default(call_default_factory=True))}) "
                       f"{field.description}")
        out.append("fault kinds ([faults.NAME] tables, [[faults.NAME]] for several):")
        out += _named_pieces(fault_kinds(), fault_kind, 14)
    if what in ("all", "engines"):
        from .config.sections import EngineSection
        from .engine.kinds import RAY_KEYS, engine_kind, engine_names

        out.append("engines ([engine] name = NAME, and the engine's keys):")
        out += _named_pieces(engine_names(), engine_kind, 12, lambda kind: "; Ray keys" if kind.ray else "")
        out.append("  Ray keys of [engine]:")
        for key in RAY_KEYS:
            field = EngineSection.model_fields[key]
            out.append(f"    {key:<16} (default {_show(field.default)}) {field.description}")
    if what in ("all", "codecs"):
        from .comm.codecs import codec_names, get_codec

        out.append("codecs ([compression] codec = NAME and its keys; [compression.tags.TAG] for one tag):")
        out += _named_pieces(codec_names(), get_codec, 8)
    if what in ("all", "metrics"):
        out += _metric_lines()
    if what in ("all", "profiles"):
        from .schedule.cluster_profiles import PROFILES

        out.append("cluster profiles ([network] profile = NAME: the table's defaults; keys given in it win):")
        for name, (values, source) in PROFILES.items():
            out.append(f"  {name:<15} " + ", ".join(f"{k} = {v:g}" for k, v in values.items()))
            out.append(textwrap.fill(source, width=110, initial_indent=" " * 18, subsequent_indent=" " * 18))
    if what in ("all", "datasets"):
        from .data import BUILTIN_DATASETS

        out.append("datasets (built in): " + ", ".join(sorted(BUILTIN_DATASETS)) + ", synthetic")
        data_dir = args.data_dir or os.environ.get("SVMSIM_DATA_DIR")
        if data_dir:
            from .data import list_datasets

            try:
                rows = list_datasets(data_dir)
                out.append(f"datasets in {data_dir}:")
                for r in rows:
                    extra = f"n={r.n} d={r.d} labels={r.labels}" if r.n is not None else ""
                    out.append(f"  {r.name:<22} {extra}")
            except SvmsimError as e:
                out.append(f"datasets: {e}")
        else:
            out.append("datasets in a data directory: set SVMSIM_DATA_DIR, or list one with 'svmsim list datasets "
                       "--data-dir DIR' (a scenario names its directory with data.data_dir)")
    print("\n".join(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return {"run": _cmd_run, "sweep": _cmd_sweep, "validate": _cmd_validate, "check": _cmd_check,
                "warmup": _cmd_warmup, "calibrate": _cmd_calibrate, "list": _cmd_list}[args.command](args)
    except SvmsimError as e:
        msg = str(e)
        first, _, rest = msg.partition("\n")
        print(textwrap.fill(f"svmsim: error: {first}", width=110, subsequent_indent="  ", break_on_hyphens=False),
              file=sys.stderr)
        if rest:
            print(rest, file=sys.stderr)
        return 2
    except MemoryError as e:
        # the run directory is removed as for any failure; the sizes that do not fit are the user's to change
        detail = f" ({e})" if str(e) else ""
        print(textwrap.fill(f"svmsim: error: out of memory{detail}: this scenario needs more memory than the "
                            "machine has; allowed: smaller data (n, d), fewer nodes or hosts", width=110,
                            subsequent_indent="  ", break_on_hyphens=False), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("svmsim: interrupted; the run directory was not written", file=sys.stderr)
        return 130
    except BrokenPipeError:                 # output piped into a reader that stopped (svmsim list | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
