"""Plots a researcher can trust, checked on what they draw (`svmsim.plotspec`'s specs), not on pixels: log axes where
values span decades, x in the paper's unit, certified lower bounds that never decrease, the paper's bounds only
inside the plotted range (or reported), rate references for the bundle methods, a consensus panel for gossip, and
sweep panels in one absolute unit on shared axes, none empty, single-dot or duplicated."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib.image as mpimg
import numpy as np
import pytest

import svmsim
from svmsim.algorithms.registry import get_algorithm
from svmsim.plotspec import (
    CONSENSUS_PANEL,
    FigureSpec,
    log_spaced,
    run_figure,
    running_max,
    spans_decades,
    sweep_figure,
)
from svmsim.report import plot_cost_vs_eps, plot_run, plot_sweep_curves


def check_spec(spec: FigureSpec) -> None:
    """What every figure must satisfy: no empty panel, log axes wherever a drawn positive series spans two decades,
    every bound drawn inside the plotted range (the others reported), certified lower bounds non-decreasing."""
    assert spec.panels
    for p in spec.panels:
        assert p.points() > 0, f"panel {p.key!r} is empty"
        xs = np.concatenate([s.x for s in p.series])
        if spans_decades(xs):
            assert p.xscale == "log", f"panel {p.key!r}: x spans decades on a linear axis"
        for s in p.series:
            if s.role != "measured":
                continue
            finite = s.y[np.isfinite(s.y)]
            if finite.size and (finite > 0).all() and spans_decades(finite):
                assert p.yscale == "log", f"panel {p.key!r}: {s.label} spans decades on a linear axis"
            if p.yscale == "log":
                assert not (finite <= 0).any()
        for s in p.series:
            if s.role == "certified_lower":
                y = s.y[np.isfinite(s.y)]
                assert np.all(np.diff(y) >= 0), "a certified lower bound is drawn going down"
        lo, hi = p.xrange()
        for line in p.lines:
            if line.axis == "x":
                assert lo <= line.value <= hi, f"{line.label} drawn outside the plotted range"
        assert len(p.notes) >= len(p.off_range)


def _png_ok(path) -> None:
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and np.ptp(image[..., :3]) > 0


# ---------------------------------------------------------------------------------------------------------------
# the small pure decisions
# ---------------------------------------------------------------------------------------------------------------


def test_decades_log_spacing_and_running_max():
    assert spans_decades([1.0, 100.0]) and not spans_decades([1.0, 99.0]) and not spans_decades([5.0])
    assert spans_decades([-3.0, 0.0, 1e-4, 1e-1])              # the positive values decide
    assert log_spaced(np.geomspace(2, 50, 6)) and not log_spaced(np.linspace(2, 50, 6))
    assert not log_spaced([1.0, 2.0, 4.0])                       # too few points
    np.testing.assert_array_equal(running_max([np.nan, 1.0, 0.5, 2.0, np.nan, 1.5]),
                                  [np.nan, 1.0, 1.0, 2.0, 2.0, 2.0])


# ---------------------------------------------------------------------------------------------------------------
# run plots, family by family
# ---------------------------------------------------------------------------------------------------------------


def _sbp_rows():
    """The rows of a paper-003 run: log-spaced evaluation points, kernel evaluations, an objective over 4 decades."""
    its = np.unique(np.geomspace(2, 2400, 8).astype(int))
    rows = []
    for i, it in enumerate(its):
        obj = 254.0 * (0.0085 / 254.0) ** (i / (len(its) - 1))
        rows.append({"iteration": int(it), "round": 0, "messages": 0, "scalars": 0, "bytes": 0, "comm_units": 0.0,
                     "wall_time": 0.01 * i, "kernel_evaluations": int(it) * 300, "objective": obj,
                     "primal_error": obj - 0.008, "rel_primal": (obj - 0.008) / 0.008, "train_accuracy": 0.9,
                     "test_accuracy": 0.88, "test_error": 0.12})
    return rows


def test_sbp_is_drawn_against_kernel_evaluations_on_log_axes_with_its_primal_error(tmp_path):
    spec = run_figure(_sbp_rows())
    check_spec(spec)
    panels = {p.key: p for p in spec.panels}
    assert all(p.xlabel == "kernel evaluations" and p.xscale == "log" for p in spec.panels)
    assert panels["objective"].yscale == "log"                   # 254 to 0.0085 is not a flat line
    assert [s.metric for s in panels["gap"].series] == ["rel_primal"]
    assert panels["accuracy"].yscale == "linear"
    plot_run(_sbp_rows(), tmp_path / "sbp.png")
    _png_ok(tmp_path / "sbp.png")


def test_a_real_sbp_run_reads_back_the_same_way():
    sc = {"name": "t", "seed": 0, "data": {"name": "synthetic", "kind": "mnist_shaped", "n": 200, "d": 16,
                                           "holdout": 0.25},
          "algorithm": {"name": "sbp", "epochs": 4, "eval_points": 6}, "stop": {"max_seconds": 60}}
    r = svmsim.run(sc, write=False, progress=False)
    spec = run_figure(r.metrics)
    check_spec(spec)
    x = spec.panels[0].series[0].x
    np.testing.assert_array_equal(x, [m["kernel_evaluations"] for m in r.metrics])
    assert spec.panels[0].xscale == "log"                       # log-spaced evaluation points
    assert any(s.metric == "rel_primal" for p in spec.panels for s in p.series)


def test_an_objective_within_a_decade_stays_linear():
    rows = [{"iteration": i, "scalars": 10 * i, "objective": 1.0 + 1.0 / i} for i in range(1, 20)]
    (objective,) = run_figure(rows).panels
    assert objective.yscale == "linear" and objective.xscale == "linear"


def _saddle_rows():
    """Quickstart-like rows: x from 564 to 3939 kd, a certified lower bound (hull_lower) that dips."""
    lower = [0.824, 0.807, 0.826, 0.829, 0.828, 0.8296]
    upper = [0.90, 0.838, 0.87, 0.831, 0.8305, 0.8304]
    rows = []
    for i, (lo, up) in enumerate(zip(lower, upper)):
        s = 11290 * (i + 1)
        rows.append({"iteration": 250 * (i + 1), "scalars": s, "comm_units": s / 20, "objective": up,
                     "hull_distance": up, "hull_lower": lo, "gap_upper": up, "gap_lower": lo,
                     "rel_gap": (up - lo) / up, "train_accuracy": 1.0})
    return rows


def test_the_certified_lower_bound_is_the_best_so_far_and_stays_below_the_objective():
    rows = _saddle_rows()
    spec = run_figure(rows, comm_unit=("kd", 20.0))
    check_spec(spec)
    (lower,) = [s for p in spec.panels for s in p.series if s.role == "certified_lower"]
    assert np.all(np.diff(lower.y) >= 0)
    assert lower.y[1] == 0.824                                   # the dip to 0.807 is not drawn
    objective = spec.panels[0].series[0].y
    assert np.all(lower.y <= objective)                          # a certified bound never above what it bounds


def test_bounds_outside_the_plotted_range_are_reported_not_drawn(tmp_path):
    rows = _saddle_rows()
    bound = {"upper": 336.2, "lower": 20.0}                      # k(d+sqrt(d/eps)) in scalars: 16.8 kd
    spec = run_figure(rows, bound=bound, comm_unit=("kd", 20.0), eps=1e-3)
    check_spec(spec)
    gap = next(p for p in spec.panels if p.key == "gap")
    assert not [ln for ln in gap.lines if ln.axis == "x"]
    assert [ln.value for ln in gap.off_range] == pytest.approx([16.81, 1.0])
    assert "left of the plotted range" in gap.notes[0] and "kd" in gap.notes[0]
    assert "x it" in gap.notes[0]                                # how far the measured cost is from the order
    inside = run_figure(rows, bound={"upper": 40000.0, "lower": 20000.0}, comm_unit=("kd", 20.0), eps=1e-3)
    gap = next(p for p in inside.panels if p.key == "gap")
    assert [ln.value for ln in gap.lines if ln.axis == "x"] == [2000.0, 1000.0] and not gap.off_range
    check_spec(inside)
    plot_run(rows, tmp_path / "c.png", bound=bound, comm_unit=("kd", 20.0), eps=1e-3)
    _png_ok(tmp_path / "c.png")


def test_communication_over_decades_gets_a_log_axis():
    rows = [{"iteration": i, "scalars": 10.0 * 2 ** i, "objective": 1.0, "rel_gap": 0.5 ** i} for i in range(14)]
    spec = run_figure(rows)
    check_spec(spec)
    assert all(p.xscale == "log" for p in spec.panels)
    assert next(p for p in spec.panels if p.key == "gap").yscale == "log"


def _bundle_run(name: str, tmp_path=None):
    sc = {"name": name, "seed": 0, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
          "algorithm": {"name": name, "workers": 4, "lam": 0.01}, "stop": {"max_iterations": 60},
          "output": {"progress": False, "eval_every": 1}}
    if tmp_path is None:
        return svmsim.run(sc, write=False, progress=False)
    return svmsim.run(sc, out_dir=tmp_path / name, progress=False)


@pytest.mark.parametrize("name,p,order", [("pragam", 2.0, "O(1/k²)"), ("ls-bmrm", 1.0, "O(1/k)"),
                                          ("qp-bmrm", 1.0, "O(1/k)")])
def test_bundle_runs_draw_their_rate_as_an_order_through_the_first_point(name, p, order):
    rate = get_algorithm(name).rate
    assert rate == ("rel_gap", p)
    r = _bundle_run(name)
    spec = run_figure(r.metrics, comm_unit=r.summary["comm_unit"], rate=rate)
    check_spec(spec)
    gap = next(q for q in spec.panels if q.key == "gap")
    (ref,) = [s for s in gap.series if s.role == "rate"]
    assert ref.label.startswith(order) and "not a bound" in ref.label
    k = np.array([m["iteration"] for m in r.metrics], dtype=float)
    first = np.array([m["rel_gap"] for m in r.metrics])[0]
    assert ref.y[0] == pytest.approx(first)                      # anchored at the first point
    np.testing.assert_allclose(ref.y * k ** p, first * k[0] ** p)  # C / k^p


def test_the_runner_writes_the_rate_into_a_pragam_convergence_png(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig) or close(fig))
    r = _bundle_run("pragam", tmp_path)
    _png_ok(r.run_dir / "convergence.png")
    labels = [line.get_label() for ax in kept[0].axes for line in ax.get_lines()]
    assert any(lab.startswith("O(1/k²) reference") for lab in labels)


def _gadget_rows():
    """Rows with the columns GADGET declares: the objective's spread over nodes, consensus errors, accuracy std."""
    rows = []
    for i in range(1, 40):
        obj = 0.1 + 0.5 / i
        rows.append({"iteration": i, "round": i, "scalars": 45 * i, "comm_units": 11.25 * i, "objective": obj,
                     "objective_min": obj * 0.7, "objective_max": obj * 1.5, "objective_std": obj * 0.2,
                     "average_model_objective": obj * 0.9, "model_disagreement": 3.0 / i ** 1.5,
                     "model_disagreement_max": 5.0 / i ** 1.5, "train_accuracy": 0.9, "train_accuracy_std": 0.05,
                     "test_accuracy": 0.88, "test_accuracy_std": 0.04})
    return rows


def test_gossip_runs_get_a_consensus_panel_and_the_spread_over_nodes(tmp_path):
    rows = _gadget_rows()
    declared = get_algorithm("gadget").reported_metrics()
    assert set(rows[0]) <= declared                              # the columns a GADGET run reports
    spec = run_figure(rows, comm_unit=("d", 4.0))
    check_spec(spec)
    panels = {p.key: p for p in spec.panels}
    assert list(panels) == ["objective", "consensus", "accuracy"]
    consensus = panels["consensus"]
    assert {s.metric for s in consensus.series} == {"model_disagreement", "model_disagreement_max"} <= set(CONSENSUS_PANEL)
    assert consensus.yscale == "log"
    mean = panels["objective"].series[0]
    assert mean.band is not None and "over nodes" in mean.band_label
    assert np.all(mean.band[0] <= mean.y) and np.all(mean.y <= mean.band[1])
    assert all(s.band is not None for s in panels["accuracy"].series)
    plot_run(rows, tmp_path / "g.png", comm_unit=("d", 4.0))
    _png_ok(tmp_path / "g.png")


def test_pushsum_stop_target_is_drawn_in_the_consensus_panel():
    rows = [{"iteration": i, "scalars": 100 * i, "consensus_error": 0.5 ** i, "consensus_rms": 0.3 ** i}
            for i in range(1, 12)]
    spec = run_figure(rows, targets={"consensus_error": 1e-3})
    check_spec(spec)
    (consensus,) = spec.panels
    assert consensus.key == "consensus"
    assert [(ln.axis, ln.value) for ln in consensus.lines] == [("y", 1e-3)]


# ---------------------------------------------------------------------------------------------------------------
# sweep curves
# ---------------------------------------------------------------------------------------------------------------


def _run(k: int, variant: str = "saddle-dsvc", n: int = 12, d: int = 4):
    """A run of k clients: 9k scalars an iteration, x in k d units identical for every k (the trap); evaluation
    points over three decades of iterations."""
    its = 10 * 2 ** np.arange(n)
    rows = [{"iteration": int(t), "scalars": 9.0 * k * t, "comm_units": 9.0 * t / d,
             "rel_gap": 2.0 / t ** (1.0 + 0.1 * k), "objective": 1.0 + 1.0 / t} for t in its]
    return SimpleNamespace(values={"k": k}, variant=variant), rows, ("kd", float(k * d))


def test_sweep_panels_comparing_k_share_one_absolute_unit_and_log_axes(tmp_path):
    runs = [_run(3), _run(5)]
    spec = sweep_figure(runs, y="rel_gap", x="comm_units")
    check_spec(spec)
    assert [p.title for p in spec.panels] == ["k=3", "k=5"]
    assert {p.xlabel for p in spec.panels} == {"communication (scalars)"}
    assert spec.sharex and spec.sharey
    assert {p.xscale for p in spec.panels} == {"log"} and {p.yscale for p in spec.panels} == {"log"}
    a, b = (p.series[0] for p in spec.panels)
    assert not np.array_equal(a.x, b.x)                          # k = 5 sends 5/3 as much per iteration
    assert any("units differ" in n for n in spec.notes)
    plot_sweep_curves(runs, tmp_path / "curves.png", y="rel_gap")
    _png_ok(tmp_path / "curves.png")


def test_a_sweep_of_runs_whose_certificates_do_not_hold_says_certified_nowhere(tmp_path, monkeypatch):
    """Compressed messages void the certificates: the sweep's axis and legend texts drop "certified" (and keep it
    otherwise)."""
    runs = [_run(3), _run(5)]
    plain = sweep_figure(runs, y="rel_gap", x="comm_units")
    voided = sweep_figure(runs, y="rel_gap", x="comm_units", certified=False)
    assert all("certified" in p.ylabel for p in plain.panels)
    texts = [p.ylabel for p in voided.panels] + [s.label for p in voided.panels for s in p.series]
    assert texts and not any("certified" in t for t in texts)
    assert [p.ylabel for p in voided.panels] == [p.ylabel.replace("certified ", "") for p in plain.panels]
    from svmsim import report

    ylabels = []
    save = report._save
    monkeypatch.setattr(report, "_save", lambda plt, fig, path: ylabels.append(fig.axes[0].get_ylabel())
                        or save(plt, fig, path))
    rows = [{"variant": "a", "eps": e, "cost_scalars": 1e3 / e, "k": 3} for e in (1e-1, 1e-2, 1e-3)]
    for certified in (True, False):
        _png_ok(plot_cost_vs_eps(rows, [], tmp_path / f"eps_{certified}.png", certified=certified))
    assert ylabels == ["scalars to certified relative gap <= eps", "scalars to relative gap <= eps"]


def test_a_variant_whose_run_failed_before_its_first_row_is_named_in_the_legend_as_having_no_points(tmp_path):
    """A compressed Saddle-DSVC run that fails in round 6 has no metrics row: its legend entry says so instead of
    naming a colour that no line in the panel has."""
    point, rows, unit = _run(3)
    ran = (point, [{**r, "bytes": 8 * r["scalars"]} for r in rows], unit)
    failed = (SimpleNamespace(values={"k": 3}, variant="top-1 %"), [], ("kd", 12.0))
    spec = sweep_figure([ran, failed], y="rel_gap", x="bytes")
    check_spec(spec)
    (panel,) = spec.panels
    assert [(s.label, s.points()) for s in panel.series] == [("saddle-dsvc", 12), ("top-1 % (no points)", 0)]
    plot_sweep_curves([ran, failed], tmp_path / "curves.png", y="rel_gap", x="bytes")
    _png_ok(tmp_path / "curves.png")


def test_a_variant_keeps_its_colour_in_every_panel():
    """Panels hold different subsets of the variants (a run failed, a point was excluded): the colour still names the
    variant, the same in every panel."""
    spec = sweep_figure([_run(3), _run(3, variant="gilbert"), _run(5, variant="gilbert")], y="rel_gap")
    colours = {}
    for panel in spec.panels:
        for s in panel.series:
            assert colours.setdefault(s.label, s.color) == s.color
    assert len(spec.panels) == 2 and colours["saddle-dsvc"] != colours["gilbert"]


def test_sweep_with_one_unit_keeps_the_papers_unit():
    spec = sweep_figure([_run(3), _run(3, variant="gilbert")], y="objective")
    check_spec(spec)
    (panel,) = spec.panels
    assert panel.xlabel == "communication (kd)" and len(panel.series) == 2


def test_sweep_leaves_single_dot_panels_out_and_says_so():
    one = (SimpleNamespace(values={"k": 7}, variant="libsvm"), [{"iteration": 1, "scalars": 500.0,
                                                                 "rel_gap": 1e-3}], ("kd", 28.0))
    spec = sweep_figure([_run(3), _run(5), one], y="rel_gap")
    check_spec(spec)
    assert [p.title for p in spec.panels] == ["k=3", "k=5"]
    assert all(s.points() > 1 for p in spec.panels for s in p.series)
    assert any("one point" in n and "k=7" in n for n in spec.notes)


def test_sweep_of_single_points_draws_them_together_as_markers():
    runs = [(SimpleNamespace(values={"C": c}, variant="libsvm"), [{"iteration": 1, "scalars": 0, "wall_time": w,
                                                                  "test_accuracy": a}], None)
            for c, w, a in ((1, 0.5, 0.8), (10, 2.0, 0.85))]
    spec = sweep_figure(runs, y="test_accuracy")
    check_spec(spec)
    (panel,) = spec.panels
    assert panel.points() == 2 and all(s.markers_only for s in panel.series)


def test_identical_sweep_panels_are_merged():
    a, rows, unit = _run(3)
    twin = (SimpleNamespace(values={"k": 3, "seed": 1}, variant=a.variant), rows, unit)
    spec = sweep_figure([(SimpleNamespace(values={"k": 3, "seed": 0}, variant=a.variant), rows, unit), twin],
                        y="rel_gap")
    (panel,) = spec.panels
    assert "identical" in panel.title


def test_single_machine_runs_beside_distributed_ones_are_a_line_at_their_final_value():
    point, rows, unit = _run(3)
    alone = [{"iteration": i, "scalars": 0, "comm_units": 0.0, "wall_time": 0.01 * i, "objective": 1.0 + 0.5 / i}
             for i in range(1, 6)]
    runs = [(point, rows, unit)] + [(SimpleNamespace(values={"k": 3, "seed": s}, variant="pegasos"), alone, None)
                                    for s in (0, 1)]
    spec = sweep_figure([(SimpleNamespace(values={"k": 3, "seed": 0}, variant=point.variant), rows, unit)] + runs[1:],
                        y="objective", trials="seed")
    check_spec(spec)
    (panel,) = spec.panels
    assert [s.label for s in panel.series] == ["saddle-dsvc"]     # nothing drawn at x = wall time on this axis
    (line,) = panel.lines
    assert line.axis == "y" and line.value == pytest.approx(1.1) and "sends nothing, mean of 2 runs" in line.label
    alone_only = sweep_figure(runs[1:], y="objective", trials="seed")
    assert alone_only.panels[0].xlabel == "wall time (s)"
