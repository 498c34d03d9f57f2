"""Directories that look finished only when they are: a run or a sweep writes into a hidden
``.<name>.incomplete`` sibling, which is renamed when everything is written and removed if anything fails (an
interrupted sweep keeps its own, with the runs it finished, for ``svmsim sweep --resume``)."""
from __future__ import annotations

import shutil
from pathlib import Path

from .errors import ScenarioError

__all__ = ["begin", "commit", "discard", "resume"]


def begin(final: Path, overwrite: bool, what: str, how_to_replace: str) -> Path:
    """Create and return the hidden working directory for `final` (ScenarioError if `final` exists and may not
    be replaced; `how_to_replace` tells the user how to allow it)."""
    final = Path(final)
    if final.exists() and not overwrite:
        raise ScenarioError(f"{what} '{final}' already exists; {how_to_replace}")
    tmp = final.parent / f".{final.name}.incomplete"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def resume(final: Path) -> Path:
    """The hidden working directory in which to continue `final`: the one an interrupted writer left, as it is; else
    `final` itself, moved there (what it holds is reused, and it is put back by `commit`); else a new one."""
    final = Path(final)
    tmp = final.parent / f".{final.name}.incomplete"
    if not tmp.exists():
        if final.exists():
            final.rename(tmp)
        else:
            tmp.mkdir(parents=True)
    return tmp


def commit(tmp: Path, final: Path) -> None:
    """Put the finished working directory in place (replacing an older `final`)."""
    final = Path(final)
    if final.exists():
        shutil.rmtree(final)
    Path(tmp).rename(final)


def discard(tmp: Path | None) -> None:
    """Remove a working directory after a failure (nothing half-written stays behind)."""
    if tmp is not None and Path(tmp).exists():
        shutil.rmtree(tmp, ignore_errors=True)
