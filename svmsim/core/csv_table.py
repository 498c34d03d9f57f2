"""A small CSV table read for a scenario (a cluster trace, an availability trace): its header and rows, with one
clear error naming the file when it cannot be read. Foundations: imports nothing of svmsim above `errors`."""
from __future__ import annotations

import csv

from ..errors import ScenarioError

__all__ = ["read_csv_table"]


def read_csv_table(path: str, what: str, allowed: str = "a CSV file") -> tuple[list[str], list[tuple[int, list]]]:
    """(header with its cells stripped, [(line number, cells)] of the non-blank rows below it) of the CSV file
    `path`; `what` names it in errors (``"[network] trace"``), `allowed` says what the file must be."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(f"{what} {path!r} cannot be read: {err}; allowed: {allowed}") from None
    header = [h.strip() for h in rows[0]] if rows else []
    return header, [(line, cells) for line, cells in enumerate(rows[1:], start=2) if any(c.strip() for c in cells)]
