"""Run plots show what the run reports, and nothing empty."""
from __future__ import annotations

import warnings

import matplotlib.image as mpimg
import numpy as np

from svmsim.report import plot_run


def _rows(gap: bool) -> list[dict]:
    rows = []
    for i, s in enumerate((100, 200, 400), start=1):
        r = {"iteration": i, "scalars": s, "objective": 1.0 / i, "train_accuracy": 0.8, "test_accuracy": 0.79}
        if gap:
            r["rel_gap"] = 10.0 ** -i
        rows.append(r)
    return rows


def test_a_run_without_a_certificate_gets_no_gap_panel(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # e.g. matplotlib's singular limits of an empty log axis
        plot_run(_rows(gap=False), tmp_path / "a.png", eps=1e-3)
        plot_run(_rows(gap=True), tmp_path / "b.png", eps=1e-3)
    two, three = mpimg.imread(tmp_path / "a.png"), mpimg.imread(tmp_path / "b.png")
    assert two.shape[1] == 1100 and three.shape[1] == 1650       # 5 inches a panel at 110 dpi
    assert np.ptp(two[..., :3]) > 0
