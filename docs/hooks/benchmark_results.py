"""MkDocs hook: the table of benchmark result files (benchmarks/results/*.json) with the date and machine of each.

A page that holds the line ``<!-- benchmark-results -->`` gets the table in its place, read from the files at
build time, so the dates and machines shown are those of the committed results.
"""
from __future__ import annotations

import json
from pathlib import Path

MARKER = "<!-- benchmark-results -->"


def _machine(data: dict) -> str:
    m = data.get("machine")
    if not isinstance(m, dict):
        return "—"
    parts = []
    if "cpus" in m:
        parts.append(f"{m['cpus']} CPUs")
    if "processor" in m:
        parts.append(str(m["processor"]))
    if "python" in m:
        parts.append(f"Python {m['python']}")
    if "ray" in m:
        parts.append(f"Ray {m['ray']}")
    return (", ".join(parts) or "—").replace("|", "/")


def table(results_dir: Path) -> str:
    rows = ["| file | measured on | machine |", "|---|---|---|"]
    for path in sorted(results_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        when = str(data.get("when") or data.get("date") or "—")
        rows.append(f"| `{path.name}` | {when} | {_machine(data)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    root = Path(config["config_file_path"]).parent
    return markdown.replace(MARKER, table(root / "benchmarks" / "results"))
