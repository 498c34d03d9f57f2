"""Reading LIBSVM (svmlight) files and mapping their labels to {-1, +1}.

Parsing is done by :func:`sklearn.datasets.load_svmlight_file`; this module adds transparent decompression
(``.xz``, ``.bz2``, ``.gz``), readable :class:`~svmsim.errors.DataError` messages, and the label conventions
of the LIBSVM data sets svmsim knows about.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from pathlib import Path
from typing import TYPE_CHECKING, IO, Iterable

import numpy as np

from svmsim.errors import DataError

if TYPE_CHECKING:                                  # pragma: no cover
    import scipy.sparse as sp

#: Compression suffixes recognised by :func:`open_maybe_compressed`, with their openers.
COMPRESSION_SUFFIXES = {".xz": lzma.open, ".bz2": bz2.open, ".gz": gzip.open}

#: Raw label that becomes +1 for LIBSVM sets whose labels are not already {-1, +1}.
#: mushrooms: 1 -> +1 (3916 points, edible); phishing: 1 -> +1 (6157 points); svmguide1: 1 -> +1;
#: skin_nonskin: 1 -> +1 (50859 points); breast-cancer (original 2/4 coding): 4 (malignant) -> +1.
KNOWN_POSITIVE_LABELS: dict[str, float] = {
    "mushrooms": 1.0,
    "phishing": 1.0,
    "svmguide1": 1.0,
    "skin_nonskin": 1.0,
    "breast-cancer": 4.0,
}


def strip_compression(name: str) -> str:
    """Return ``name`` without a trailing ``.xz``/``.bz2``/``.gz`` suffix."""
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def dataset_key(name: str | os.PathLike) -> str:
    """Canonical data-set name of a file or name: ``/x/a9a.t.xz`` -> ``a9a``, ``phishing.txt`` -> ``phishing``."""
    base = strip_compression(Path(name).name)
    for suffix in (".txt", ".t"):
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
    return base


def open_maybe_compressed(path: str | os.PathLike) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing according to its suffix."""
    p = Path(path)
    opener = COMPRESSION_SUFFIXES.get(p.suffix, open)
    return opener(p, "rb")


def load_libsvm(
    path: str | os.PathLike, n_features: int | None = None, dtype=np.float64, zero_based: bool | str = "auto"
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Load a LIBSVM file (plain, ``.xz``, ``.bz2`` or ``.gz``) as ``(X, y_raw)``.

    ``X`` is a CSR matrix with ``n_features`` columns (inferred from the largest feature index when None);
    ``y_raw`` holds the labels as written in the file (float64). ``zero_based``: whether index 0 is the first
    column (True), index 1 is (False), or 1 unless the file holds an index 0 ("auto"); a training file and its
    test file are read with one convention by :func:`load_libsvm_files`. Raises :class:`DataError` when the file
    is missing, cannot be decompressed, or is not valid LIBSVM text.
    """
    import scipy.sparse as sp

    p = Path(path)
    if not p.exists():
        raise DataError(f"LIBSVM file '{p}' does not exist")
    if not p.is_file():
        raise DataError(f"LIBSVM path '{p}' is not a file")
    if n_features is not None and (int(n_features) != n_features or n_features < 1):
        raise DataError(f"n_features = {n_features!r} for '{p}' is invalid: it must be a positive integer")
    from sklearn.datasets import load_svmlight_file

    try:
        with open_maybe_compressed(p) as fh:
            X, y = load_svmlight_file(
                # pragma: no mutate start (equivalent: "auto" is also sklearn's default)
                fh, n_features=None if n_features is None else int(n_features), dtype=dtype, zero_based=zero_based
                # pragma: no mutate end
            )
    except (ValueError, OverflowError) as exc:     # OverflowError: an index beyond what the reader takes
        raise DataError(_malformed_message(p, exc)) from None
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise DataError(
            f"cannot read LIBSVM file '{p}': {exc} (is the file truncated or wrongly compressed?)"
        ) from None
    if X.shape[0] == 0:
        raise DataError(f"LIBSVM file '{p}' contains no data rows")
    if not (np.isfinite(X.data).all() and np.isfinite(y).all()):     # the reader takes nan and inf
        raise DataError(_malformed_message(p, None))
    # pragma: no mutate start (equivalent: sklearn's loader already returns float64 labels for any dtype)
    return sp.csr_matrix(X), np.asarray(y, dtype=np.float64)
    # pragma: no mutate end


def load_libsvm_files(paths, n_features: int | None = None) -> tuple[list[sp.csr_matrix], list[np.ndarray], int]:
    """Load several LIBSVM files (a training file and its test file) with one index convention, as scikit-learn's
    ``load_svmlight_files`` does: 0-based when any of the files holds an index 0, else 1-based. Returns the
    matrices (all with the same number of columns: ``n_features``, else the widest file's), the raw labels and
    the index base (0 or 1). Each file read on its own would pick its own convention, and a 1-based test file
    beside a 0-based training file would have every column shifted by one."""
    import scipy.sparse as sp

    loaded = [(Path(p), *load_libsvm(p, zero_based=True)) for p in paths]
    base = 0 if any(X.nnz and int(X.indices.min()) == 0 for _, X, _ in loaded) else 1
    width = max(X.shape[1] - base for _, X, _ in loaded)
    if n_features is not None:
        for p, X, _ in loaded:
            if X.shape[1] - base > n_features:
                raise DataError(f"LIBSVM file '{p}' has feature index {X.shape[1] - 1} (read {base}-based: column "
                                f"{X.shape[1] - base}), more than n_features = {n_features}; allowed: n_features "
                                f">= {width}, or no n_features")
        width = int(n_features)
    out = []
    for _, X, _ in loaded:
        X = sp.csr_matrix((X.data, X.indices - base, X.indptr), shape=(X.shape[0], width))
        out.append(X)
    return out, [y for _, _, y in loaded], base


#: how much of a LIBSVM file `check_head` reads (svmsim validate without --data)
HEAD_BYTES = 1 << 16


def check_head(path: str | os.PathLike, limit: int = HEAD_BYTES) -> None:
    """A quick look at a LIBSVM file without reading it all (what ``svmsim validate`` does without ``--data``):
    :class:`DataError` if it is missing, not a file, cannot be decompressed, or its first `limit` bytes hold a
    line that is not valid LIBSVM text (a value that is not a finite number, say). Lines past `limit` are read
    only when the data are loaded."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"LIBSVM file '{p}' does not exist")
    if not p.is_file():
        raise DataError(f"LIBSVM path '{p}' is not a file")
    try:
        with open_maybe_compressed(p) as fh:
            head = fh.read(limit + 1)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise DataError(f"cannot read LIBSVM file '{p}': {exc} (is the file truncated or wrongly compressed?)") from None
    lines = head.splitlines(keepends=True)
    if len(head) > limit and lines:              # the last line may go on past what was read
        lines = lines[:-1]
    if not any(line.split(b"#", 1)[0].strip() for line in lines) and len(head) <= limit:
        raise DataError(f"LIBSVM file '{p}' contains no data rows")
    found = _first_bad_line(lines)
    if found is not None:
        lineno, text, problem = found
        if len(text) > 60:
            text = text[:57] + "..."
        raise DataError(f"LIBSVM file '{p}' is malformed at line {lineno} ({text!r}): {problem}")


def _malformed_message(path: Path, exc: Exception | None) -> str:
    """One-sentence description of why ``path`` is not valid LIBSVM text, naming the first bad line if found;
    ``exc`` is the reader's error (None when the reader took the file and svmsim refuses what it read)."""
    # pragma: no mutate start (equivalent: without the reader's error the line scan always finds the non-finite
    # value, so this fallback reason is never printed)
    reason = str(exc).rstrip(".") if exc is not None else "a value is not finite"
    # pragma: no mutate end
    try:
        with open_maybe_compressed(path) as fh:
            found = _first_bad_line(fh)
    except (OSError, EOFError, lzma.LZMAError):
        found = None
    if found is None:
        return f"LIBSVM file '{path}' is malformed: {reason}"
    lineno, text, problem = found
    if len(text) > 60:
        text = text[:57] + "..."
    loader = f" [loader: {reason}]" if exc is not None else ""
    return f"LIBSVM file '{path}' is malformed at line {lineno} ({text!r}): {problem}{loader}"


#: the largest feature index the loader takes (scikit-learn's svmlight reader keeps 32-bit indices)
_INDEX_LIMIT = 2**31 - 1


def _first_bad_line(lines: Iterable[bytes]) -> tuple[int, str, str] | None:
    """Locate the first line that breaks the LIBSVM syntax ``label idx:val idx:val ...``.

    Only used to explain an error raised by the real loader; returns ``(line number, line, problem)``.
    """
    for lineno, raw in enumerate(lines, start=1):
        # pragma: no mutate start (equivalent: utf-8 is the default, any case; [0] same for maxsplit >= 1)
        text = raw.decode("utf-8", errors="replace").split("#", 1)[0].strip()
        # pragma: no mutate end
        if not text:
            continue
        tokens = text.split()
        try:
            float(tokens[0])
        except ValueError:
            return lineno, text, f"the label {tokens[0]!r} is not a number"
        if not np.isfinite(float(tokens[0])):
            return lineno, text, f"the label {tokens[0]!r} is not a finite number"
        # pragma: no mutate start (equivalent: negative indices are refused first)
        last = -1
        # pragma: no mutate end
        for tok in tokens[1:]:
            idx_text, sep, val_text = tok.partition(":")
            if not sep:
                return lineno, text, f"the token {tok!r} is not of the form index:value"
            if idx_text == "qid":
                continue
            try:
                idx = int(idx_text)
            except ValueError:
                return lineno, text, f"the feature index in {tok!r} is not an integer"
            try:
                value = float(val_text)
            except ValueError:
                return lineno, text, f"the feature value in {tok!r} is not a number"
            if not np.isfinite(value):
                return lineno, text, f"the feature value in {tok!r} is not a finite number"
            if idx < 0:
                return lineno, text, f"the feature index in {tok!r} is negative"
            if idx > _INDEX_LIMIT:
                return lineno, text, f"the feature index in {tok!r} is too large; allowed: indices up to 2^31 - 1"
            if idx <= last:
                return lineno, text, "feature indices are not strictly increasing"
            last = idx
    return None


def to_pm1(y_raw, positive_label=None, name: str | None = None) -> np.ndarray:
    """Map binary raw labels to a float64 array in {-1, +1}.

    The raw value ``positive_label`` becomes +1 and the other value -1. When ``positive_label`` is None:
    labels that are already {-1, +1} are kept, and a known data set ``name`` (see
    :data:`KNOWN_POSITIVE_LABELS`, e.g. ``mushrooms``: 1 -> +1) uses its built-in positive label.
    Raises :class:`DataError` when the labels are not binary or the positive class cannot be determined.
    """
    y = np.asarray(y_raw, dtype=np.float64).ravel()
    what = f"data set '{name}'" if name else "the data"
    values = np.unique(y)
    shown = ", ".join(format_label(v) for v in values[:10]) + (", ..." if values.size > 10 else "")
    if values.size != 2:
        raise DataError(
            f"labels of {what} are not binary: found values {shown} ({values.size} distinct); "
            "svmsim trains binary classifiers; map the labels to two classes before loading"
        )
    if positive_label is None:
        if values[0] == -1.0 and values[1] == 1.0:
            return y.copy()
        key = dataset_key(name) if name else None
        if key in KNOWN_POSITIVE_LABELS:
            positive_label = KNOWN_POSITIVE_LABELS[key]
        else:
            raise DataError(
                f"labels of {what} are {shown}, not -1/+1, and svmsim knows no positive class for it: "
                f"set positive_label (the scenario key data.positive_label) to one of {shown}"
            )
    try:
        pos = float(positive_label)
    except (TypeError, ValueError):
        raise DataError(
            f"positive_label = {positive_label!r} is not a number; the labels of {what} are {shown}"
        ) from None
    if pos not in values:
        raise DataError(f"positive_label = {format_label(pos)} does not occur in {what}: its labels are {shown}")
    return np.where(y == pos, 1.0, -1.0)


def format_label(v: float) -> str:
    """Format a label value compactly (1.0 -> '1')."""
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)
