"""Run plots show what the run reports, and nothing empty."""
from __future__ import annotations

import warnings

import matplotlib.image as mpimg
import numpy as np
import pytest

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


def _figures(monkeypatch):
    """The figures a plot function draws, kept when it closes them."""
    import matplotlib.pyplot as plt

    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig) or close(fig))
    return kept


def test_the_bounds_are_drawn_once_in_the_gap_panel_as_orders(tmp_path, monkeypatch):
    kept = _figures(monkeypatch)
    plot_run(_rows(gap=True), tmp_path / "b.png", eps=1e-3, bound={"upper": 300.0, "lower": 150.0})
    objective, gap, accuracy = kept[0].axes
    labels = {ax: [line.get_label() for line in ax.get_lines()] for ax in kept[0].axes}
    assert "k(d+sqrt(d/eps)), constants and logs left out" in labels[gap]
    assert not any("bound" in lab or "sqrt" in lab for lab in labels[objective] + labels[accuracy])


def test_the_cost_plot_fits_the_bounds_constant_and_says_it(tmp_path, monkeypatch):
    from svmsim.report import plot_cost_vs_eps

    kept = _figures(monkeypatch)
    rows = [{"variant": "v", "eps": e, "cost_scalars": 7.0 * (10 + (10 / e) ** 0.5), "bound_upper": 10 + (10 / e) ** 0.5,
             "bound_lower": min(10, 1 / e)} for e in (1e-1, 1e-2, 1e-3)]
    plot_cost_vs_eps(rows, [], tmp_path / "c.png", group_keys=[])
    labels = [line.get_label() for line in kept[0].axes[0].get_lines()]
    assert "bound shape x 7 (constant fitted; v)" in labels      # measured = 7 x bound: the constant is 7


def test_log_axes_are_labelled_in_plain_text(tmp_path, monkeypatch):
    """The log axes' tick labels are plain text with Unicode superscripts, not mathtext (whose parser's set-up
    takes a tenth of a second of a run's first figure), on the ticks matplotlib labels."""
    kept = _figures(monkeypatch)
    plot_run(_rows(gap=True), tmp_path / "b.png", eps=1e-3)
    gap = kept[0].axes[1]
    assert gap.get_yscale() == "log"
    labels = [t.get_text() for t in gap.get_yticklabels() if t.get_text()]
    assert "10\N{SUPERSCRIPT MINUS}\N{SUPERSCRIPT TWO}" in labels
    assert not any("$" in t for ax in kept[0].axes for t in
                   [x.get_text() for x in ax.get_xticklabels(which="both") + ax.get_yticklabels(which="both")])


@pytest.mark.parametrize("mathtext, plain", [
    (r"$\mathdefault{10^{-3}}$", "10⁻³"),
    (r"$\mathdefault{10^{12}}$", "10¹²"),
    (r"$\mathdefault{2\times10^{-3}}$", "2×10⁻³"),
    (r"$\mathdefault{-10^{2}}$", "\N{MINUS SIGN}10²"),
    (r"$\mathdefault{0}$", "0"),
    ("", ""),
    ("0.5", "0.5"),
    (r"$\mathdefault{10^{2.50}}$", r"$\mathdefault{10^{2.50}}$"),     # no superscript for a point: kept as it is
])
def test_plain_log_labels(mathtext, plain):
    from svmsim.report import plain_log_label

    assert plain_log_label(mathtext) == plain
