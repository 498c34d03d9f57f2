"""Saddle-SVC at its defaults on data nobody tuned them for: the nu-SVM with alpha = 0.85 and every other
parameter at its default (beta = "auto", eps = tol = 1e-3, q = "data") on every binary training set in the data
directory and on two synthetic sets built to have a tiny OPT (sparse, imbalanced, rows of uneven norm up to 10 and
5 times the smallest), against NuSVC on the same data in the same run (same nu, mu = 2*alpha*min(n1,n2)/n).

Per set: whether the reduced hulls intersect (the LP of `saddle.certificate.common_point`), Saddle-SVC's
iterations, time, certified relative gap, stop reason, last beta and restarts; NuSVC's time and the relative
difference of the two reduced-hull distances; and, for comparison, beta = 1 (the paper's scale, svmsim's former
default) with the same iteration budget. Target: every set with disjoint reduced hulls certified to 1e-3, no run
stopped by its budget with a frozen certificate. Run: python benchmarks/bench_saddle_defaults.py [--quick]
(--quick leaves out the beta = 1 column, whose failing runs use the whole budget).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import data_dir, save, table

from svmsim.algorithms.saddle import SaddleSVC
from svmsim.algorithms.saddle.certificate import common_point
from svmsim.algorithms.saddle.preprocess import resolve_cap
from svmsim.data import load_dataset
from svmsim.data.registry import available_names
from svmsim.data.synthetic import make_tiny_margin
from svmsim.reference import nusvc_reduced_hull

BUDGET = 5_000_000
ALPHA = 0.85
SYNTHETIC = {
    "tiny_margin n=20000 d=300 (3 % +1, norms 1..10)": {"n": 20000, "d": 300, "density": 0.05,
                                                        "positive_fraction": 0.03, "max_norm": 10.0, "seed": 0},
    "tiny_margin n=10000 d=100 (10 % +1, norms 1..5)": {"n": 10000, "d": 100, "density": 0.1,
                                                        "positive_fraction": 0.1, "max_norm": 5.0, "seed": 1},
}


def sets():
    for name in available_names(data_dir()):
        if name.endswith(".t"):
            continue                                            # test halves
        ds = load_dataset(name, data_dir=data_dir(), test="none")
        yield name, ds.X, ds.y
    for label, kwargs in SYNTHETIC.items():
        yield (label, *make_tiny_margin(**kwargs))


def fit(X, y, beta):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SaddleSVC(alpha=ALPHA, beta=beta, max_iter=BUDGET).fit(X, y)
    return est, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="leave out the beta = 1 comparison")
    args = ap.parse_args()
    SaddleSVC(alpha=ALPHA, max_iter=1000).fit(*make_tiny_margin(200, 10))     # compile the kernels first
    rows = []
    for name, X, y in sets():
        ypm = np.where(y > 0, 1.0, -1.0)
        cap = resolve_cap(int((ypm > 0).sum()), int((ypm < 0).sum()), None, ALPHA)
        intersect = common_point(X, ypm, cap)
        est, seconds = fit(X, y, "auto")
        row = {"set": name, "n": X.shape[0], "d": X.shape[1], "hulls": "intersect" if intersect else "disjoint",
               "iterations": est.n_iter_, "seconds": seconds, "rel_gap": est.rel_gap_,
               "stop": est.stop_reason_.split(":")[0], "beta": est.beta_, "restarts": est.restarts_}
        if not intersect:
            ref = nusvc_reduced_hull(X, ypm, alpha=ALPHA)
            row.update(nusvc_s=ref.fit_time, distance_diff=abs(est.hull_distance_ - ref.distance) / ref.distance)
        if not args.quick:
            fixed, fixed_s = fit(X, y, 1.0)
            row.update(beta1_iterations=fixed.n_iter_, beta1_s=fixed_s, beta1_rel_gap=fixed.rel_gap_,
                       beta1_stop=fixed.stop_reason_.split(":")[0])
        rows.append(row)
        print(table([row], list(row)), flush=True)
    cols = ["set", "n", "d", "hulls", "iterations", "seconds", "rel_gap", "stop", "beta", "restarts", "nusvc_s",
            "distance_diff"] + ([] if args.quick else ["beta1_iterations", "beta1_s", "beta1_rel_gap", "beta1_stop"])
    print()
    print(table(rows, cols))
    disjoint = [r for r in rows if r["hulls"] == "disjoint"]
    ok = all(r["rel_gap"] <= 1e-3 for r in disjoint) and all(r["stop"] != "iteration budget" for r in rows)
    print(f"\nevery disjoint set certified to 1e-3 and no budget stop: {'yes' if ok else 'NO'}")
    save("saddle_defaults", {"alpha": ALPHA, "budget": BUDGET, "rows": rows, "target_met": ok})


if __name__ == "__main__":
    main()
