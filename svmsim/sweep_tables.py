"""The tables of a sweep: its Markdown table, the fixed-width summary, the per-tag communication table and the
trials' mean ± std table, from the sweep's rows (`svmsim.sweep` writes them into ``sweep.md`` and
``summary.txt``)."""
from __future__ import annotations

import math
from typing import Any

from .sweep_costs import (FINAL_COLUMNS, OPTIONAL_COST_COLUMNS, OPTIONAL_FINAL_COLUMNS, TARGET_COLUMNS,
                          parse_target_column)

__all__ = ["tag_table", "trials_markdown", "markdown_table", "summary_table", "table_columns", "format_cell"]


def tag_table(points: list, tags: list[tuple | None]) -> str:
    """Where the communication went: scalars per message tag of every distributed run (`tags`: per point, the total
    scalars and (tag, scalars) pairs in the ledger's order, or None)."""
    lines = []
    for p, t in zip(points, tags):
        if t is None:
            continue
        scalars, by_tag = t
        total = max(scalars, 1)
        parts = ", ".join(f"{tag} {v} ({100.0 * v / total:.1f}%)" for tag, v in sorted(by_tag, key=lambda kv: -kv[1]))
        lines.append(f"| {p.slug} | {scalars} | {parts} |")
    if not lines:
        return ""
    return "\n".join(["| run | scalars | by tag (scalars, share) |", "|---|---|---|"] + lines)


_TRIALS_DEFAULT = ("test_accuracy", "train_accuracy", "objective", "wall_time", "virtual_time", "messages",
                   "scalars", "cost_rounds", "cost_virtual_time", "cost_messages", "dropped_messages")


def trials_markdown(trials: list[dict], keys: list[str], trials_key: str, columns: list[str] | None) -> str:
    """The trials table: mean +- std per shown column (accuracies in percent), and the node/trial split."""
    others = [k for k in keys if k != trials_key]
    wanted = list(columns) if columns else [c for c in _TRIALS_DEFAULT if any(c + "_mean" in t for t in trials)]
    header = ["variant"] + others + ["trials"]
    cells = []
    for c in wanted:
        header.append(c + (" (%)" if "accuracy" in c else ""))
        if any(c + "_std_nodes" in t for t in trials):
            header.append(f"{c} std nodes / trials")
    for t in trials:
        line = [format_cell(t.get(k)) for k in ["variant"] + others] + [str(t["trials"])]
        for c in wanted:
            scale, digits = (100.0, 2) if "accuracy" in c else (1.0, None)
            mean, std = t.get(c + "_mean"), t.get(c + "_std")
            line.append("" if mean is None else _pm(mean * scale, std * scale if std is not None else None, digits))
            if any(c + "_std_nodes" in u for u in trials):
                a, b = t.get(c + "_std_nodes"), t.get(c + "_std_trials")
                line.append("" if a is None else f"{_short(a * scale, digits)} / {_short(b * scale, digits)}")
        cells.append(line)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines)


def _short(v: float, digits: int | None) -> str:
    return f"{v:.{digits}f}" if digits is not None else f"{v:.4g}"


def _pm(mean: float, std: float | None, digits: int | None) -> str:
    return _short(mean, digits) + ("" if std is None else f" ± {_short(std, digits)}")


def format_cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return str(v)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


#: what the terminal summary of a sweep shows after the variant and grid keys, most wanted first
_SUMMARY_COLUMNS = ("status", "reached", "cost_scalars", "cost_units", "scalars", "iterations", "rel_gap",
                    "objective", "test_accuracy", "wall_time", "stop_reason")


def summary_table(rows: list[dict], keys: list[str], width: int = 100, cell: int = 28) -> str:
    """The sweep in at most `width` columns for a terminal: the variant and grid keys, then as many of
    `_SUMMARY_COLUMNS` (those the rows have) as fit; cells cut to `cell` characters. sweep.md has every column."""
    def text(v: Any) -> str:
        t = format_cell(v)
        return t if len(t) <= cell else t[:cell - 1] + "~"

    present = {k for r in rows for k in r}
    wanted = ["variant"] + [k for k in keys if k != "variant"] + [c for c in _SUMMARY_COLUMNS if c in present]
    shown: list[str] = []
    for c in wanted:
        cols = shown + [c]
        widths = [max(len(h), *(len(text(r.get(h))) for r in rows)) for h in cols]
        if shown and sum(widths) + 2 * (len(cols) - 1) > width:
            break
        shown = cols
    widths = [max(len(h), *(len(text(r.get(h))) for r in rows)) for h in shown]
    lines = ["  ".join(h.ljust(w) for h, w in zip(shown, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(text(r.get(h)).ljust(w) for h, w in zip(shown, widths)).rstrip() for r in rows]
    return "\n".join(line[:width] for line in lines)


def table_columns(rows: list[dict], keys: list[str]) -> list[str]:
    first = ["variant"] + keys + (["status"] if "status" in {k for r in rows for k in r} else [])
    preferred = ["nodes", "spectral_gap", "inv_spectral_gap", "mixing_time", "iterations", "scalars", "bytes",
                 "comm_units",
                 "scalars_vs_first", "target", "reached", "cost_scalars", "cost_units", "cost_resolution",
                 "cost_messages", "cost_messages_per_node", "cost_rounds", "cost_virtual_time", "cost_wall_time",
                 "cost_iteration", "cost_modelled_time", *OPTIONAL_COST_COLUMNS, "bound_upper", "bound_lower",
                 "wall_time", "virtual_time", "dropped_messages", "crashed_nodes", *FINAL_COLUMNS,
                 *OPTIONAL_FINAL_COLUMNS, "stop_reason", "error"]
    present = {k for r in rows for k in r}
    if not any(isinstance(r.get("bytes"), (int, float)) and isinstance(r.get("scalars"), (int, float))
               and r["bytes"] != 8 * r["scalars"] for r in rows):
        present.discard("bytes")      # shown where it says more than the scalars do (compressed or narrow payloads)

    def order(name):
        column, metric, threshold = parse_target_column(name)
        return metric or "", -threshold, TARGET_COLUMNS.index(column)

    by_target = sorted({c for c in present if "@" in c}, key=order)
    return first + [c for c in preferred if c in present] + by_target
