"""Time the single-machine Saddle-SVC iteration kernel (`saddle.single.run_iterations`).

Cases (float64, `SaddleSVC(stop="iterations")`, seed 0): a9a nu-SVM (alpha = 0.85) and hard margin (a9a is not
separable, so the hard margin only runs iterations; the kernel's cost is what is measured), phishing nu-SVM
(alpha = 0.85), mushrooms hard margin.

Each case is one fit of (1 + reps) * iters iterations in blocks of `iters` (`check_every`): the first block is
the warm-up (JIT load or compile, caches, the transient of the first iterations); every later block is one
repetition. A block is timed around `run_iterations` itself, in thread CPU time (the primary figure: the machine
may be shared) and in wall time; the table reports medians over the repetitions in us per iteration and ns per
point per iteration, next to the fit's own `iteration_time_ / n_iter` (wall time, warm-up included).

It also compiles fresh copies of the hot loops and counts the vector registers in their machine code (zmm: 512-bit
SIMD, ymm: 256-bit), which shows whether each loop vectorised on this CPU.

    python benchmarks/bench_saddle_kernel.py [--iters 2000] [--reps 5]

Writes benchmarks/results/saddle_kernel.json.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import data_dir, save, table  # noqa: E402

import numba  # noqa: E402

from svmsim.algorithms.saddle import SaddleSVC, mirror, projection, simd, single  # noqa: E402
from svmsim.data import load_dataset  # noqa: E402

CASES = [("a9a", "nu", 0.85), ("a9a", "hard", None), ("phishing", "nu", 0.85), ("mushrooms", "hard", None)]

#: the same cases measured the same way on the implementation before this kernel's rework (us per iteration,
#: thread CPU time, median of 5 x 2000 iterations; same machine, shared with other jobs)
BASELINE_US = {"a9a nu": 96.9, "a9a hard": 73.0, "phishing nu": 30.7, "mushrooms hard": 14.8}


@contextmanager
def timed_blocks():
    """Record (thread CPU s, wall s, iterations) of every `run_iterations` call made by SaddleSVC.fit."""
    original = single.run_iterations
    blocks = []

    def wrapper(*args):
        c0, w0 = time.thread_time(), time.perf_counter()
        out = original(*args)
        blocks.append((time.thread_time() - c0, time.perf_counter() - w0, int(args[5])))   # n_iter
        return out

    single.run_iterations = wrapper
    try:
        yield blocks
    finally:
        single.run_iterations = original


def measure(name, mode, alpha, iters, reps):
    ds = load_dataset(name, data_dir=str(data_dir()))
    est = SaddleSVC(alpha=alpha, stop="iterations", max_iter=iters * (reps + 1), check_every=iters, seed=0)
    with timed_blocks() as blocks:
        est.fit(ds.X, ds.y)
    timed = blocks[1:]                                    # block 0 is the warm-up
    cpu = [c / k * 1e6 for c, _, k in timed]
    wall = [w / k * 1e6 for _, w, k in timed]
    us = statistics.median(cpu)
    return {"case": f"{name} {mode}", "n": int(ds.n), "d_pad": int(est.rotation_.d_pad),
            "us_per_iter": us, "ns_per_point": us * 1e3 / ds.n,
            "wall_us_per_iter": statistics.median(wall), "cpu_us_min": min(cpu), "cpu_us_max": max(cpu),
            "fit_iteration_time_us": est.iteration_time_ / est.n_iter_ * 1e6,
            "baseline_us": BASELINE_US.get(f"{name} {mode}"),
            "per_repetition_cpu_us": cpu}


def vector_registers():
    """zmm/ymm counts in freshly compiled copies of the hot loops (cached code cannot be inspected)."""
    n = 64
    a = np.linspace(0.1, 1.0, n)
    loops = {
        "_mirror_hard (hard-margin pass)": (mirror.mirror_hard, (a, a, a, a.copy(), -a, 0.1, 12.8, 0.99, 0.0, 0.01)),
        "segment_mirror_fused (nu pass)": (mirror.segment_mirror_fused, (a, a, a.copy(), -a, a.copy(), a, 0.1, 12.8,
                                                                     0.99, 0.0, 0.01, 0.0, 1.0, 0.5, 0.5)),
        "_threshold_sums (Newton pass)": (projection._threshold_sums, (a, a, 0.5)),
    }
    out = {}
    for label, (fn, args) in loops.items():
        fresh = numba.njit(fastmath=simd._FM, error_model="numpy", boundscheck=False)(fn.py_func)
        fresh(*args)
        asm = next(iter(fresh.inspect_asm().values()))
        out[label] = {"zmm": len(re.findall(r"\bzmm\d", asm)), "ymm": len(re.findall(r"\bymm\d", asm))}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=2000, help="iterations per repetition (block)")
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions after the warm-up block")
    args = ap.parse_args()
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    rows = [measure(name, mode, alpha, args.iters, args.reps) for name, mode, alpha in CASES]
    load_after = os.getloadavg()
    for r in rows:
        if r["baseline_us"]:
            r["speedup"] = r["baseline_us"] / r["us_per_iter"]
    print(table(rows, ["case", "n", "us_per_iter", "ns_per_point", "wall_us_per_iter", "fit_iteration_time_us",
                       "baseline_us", "speedup"]))
    regs = vector_registers()
    print("\nvector registers in the hot loops' machine code:")
    for label, c in regs.items():
        print(f"  {label:34s} zmm {c['zmm']:4d}  ymm {c['ymm']:4d}")
    try:
        import llvmlite.binding as llvm
        cpu = {"llvm_cpu": llvm.get_host_cpu_name(), "avx512f": "+avx512f" in llvm.get_host_cpu_features().flatten()}
    except Exception:                                          # pragma: no cover - informational only
        cpu = {}
    path = save("saddle_kernel", {
        "iters_per_repetition": args.iters, "repetitions": args.reps,
        "timing": "median over repetitions of thread CPU time per iteration, around run_iterations",
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "cpu": cpu, "numba": numba.__version__, "numpy": np.__version__,
        "results": rows, "vector_registers": regs,
        "targets_ns_per_point": {"a9a": 1.5},
        "runtime_s": time.perf_counter() - t_start,
    })
    print(f"\nwrote {path} in {time.perf_counter() - t_start:.1f} s "
          f"(load average {load_before[0]:.2f} -> {load_after[0]:.2f})")


if __name__ == "__main__":
    main()
