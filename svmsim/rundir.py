"""Directories that look finished only when they are: a run or a sweep writes into a hidden
``.<name>.incomplete`` sibling, which is renamed when everything is written and removed if anything fails (an
interrupted sweep keeps its own, with the runs it finished, for ``svmsim sweep --resume``).

`begin` checks the path first and turns every operating-system refusal into a `ScenarioError` that names the path,
what is wrong with it and what is allowed: a path with a NUL, a name longer than the file system takes, an existing
file (never replaced, even with overwrite), a path below a file, a pseudo file system (``/proc``, ``/sys``,
``/dev``) or a directory that cannot be written.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import ScenarioError

__all__ = ["begin", "check_path", "commit", "discard", "resume"]

#: what `begin` appends to the hidden working directory's name (its name is ``.<name>.incomplete``)
_HIDDEN_EXTRA = len(".") + len(".incomplete")
#: file systems that hold no files of a user's (kernel interfaces and device nodes)
PSEUDO_FILE_SYSTEMS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                                 "securityfs", "mqueue", "bpf", "configfs", "fusectl", "pstore", "efivarfs",
                                 "binfmt_misc", "autofs", "hugetlbfs"})


def _refuse(what: str, final, problem: str, allowed: str) -> ScenarioError:
    shown = repr(os.fspath(final)) if "\0" in os.fspath(final) else f"'{final}'"
    return ScenarioError(f"{what} {shown} {problem}; allowed: {allowed}")


def _kind(path: Path) -> str:
    if path.is_symlink():
        return "symbolic link"
    if path.is_file():
        return "regular file"
    if path.is_char_device():
        return "character device"
    if path.is_block_device():
        return "block device"
    if path.is_fifo():
        return "named pipe"
    if path.is_socket():
        return "socket"
    return "special file"


def _file_system(path: Path) -> str | None:
    """The type of the file system `path` is on (from /proc/self/mounts; None where that cannot be read)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split()[1:3] for line in fh if len(line.split()) >= 3]
    except OSError:
        return None
    real = os.path.realpath(path)
    best, fs = "", None
    for point, kind in mounts:
        point = point.replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fs = point, kind
    return fs


def check_path(final, overwrite: bool, what: str, how_to_replace: str) -> Path:
    """`final` as a Path if a directory can be written there (replacing an existing one only with `overwrite`);
    else a ScenarioError naming the path, the problem and what is allowed. Creates nothing."""
    text = os.fspath(final)
    if "\0" in text:
        raise _refuse(what, text, "contains a NUL character", "a path without NUL characters")
    final = Path(text)
    if final.name in ("", ".", ".."):
        raise _refuse(what, final, "does not name a directory of its own", "a path that ends in a directory name")
    anchor = final.absolute().parent
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    try:
        name_max = os.pathconf(anchor if anchor.is_dir() else anchor.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    long = [p for p in final.parts if len(os.fsencode(p)) > name_max]
    if long or len(os.fsencode(final.name)) + _HIDDEN_EXTRA > name_max:
        part = long[0] if long else final.name
        raise _refuse(what, final if len(text) <= 120 else text[:100] + "...",
                      f"has a name of {len(os.fsencode(part))} bytes, too long here",
                      f"names of up to {name_max - _HIDDEN_EXTRA} bytes (this file system takes {name_max}, and "
                      "the directory is first written as .<name>.incomplete)")
    if final.is_symlink() or final.exists():
        if final.is_symlink() or not final.is_dir():
            raise _refuse(what, final, f"exists and is a {_kind(final)}, not a directory",
                          "a path that does not exist, or an existing directory (svmsim never replaces a file, "
                          "not even with --overwrite)")
        if not overwrite:
            raise _refuse(what, final, "already exists", how_to_replace.removeprefix("allowed: "))
    if not anchor.is_dir():
        raise _refuse(what, final, f"lies below '{anchor}', which is a {_kind(anchor)}, not a directory",
                      "a path whose existing part is a directory")
    fs = _file_system(anchor)
    if fs in PSEUDO_FILE_SYSTEMS:
        raise _refuse(what, final, f"is on a {fs} file system (at '{anchor}'), which holds no files of a user's",
                      "a directory on an ordinary file system")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise _refuse(what, final, f"cannot be created: '{anchor}' is not writable by this user",
                      "a path in a directory you may write")
    return final


def begin(final: Path, overwrite: bool, what: str, how_to_replace: str) -> Path:
    """Create and return the hidden working directory for `final` (ScenarioError if `final` cannot be written, or
    exists and may not be replaced; `how_to_replace` tells the user how to allow it)."""
    final = check_path(final, overwrite, what, how_to_replace)
    tmp = final.parent / f".{final.name}.incomplete"
    try:
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
        elif tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        (tmp / ".probe").write_bytes(b"")       # a directory that takes a file (not only the mkdir)
        (tmp / ".probe").unlink()
    except OSError as exc:
        discard(tmp)
        raise _refuse(what, final, f"cannot be written: {exc.strerror or exc} ('{exc.filename or tmp}')",
                      "a path in a writable directory on an ordinary file system") from None
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
