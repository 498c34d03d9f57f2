"""Named data sets: LIBSVM files in a data directory, built-in sklearn sets, and synthetic generators.

Entry points: :func:`load_dataset` (by name), :func:`make_dataset` (from a scenario's ``data`` mapping),
:func:`list_datasets` and :func:`verify_checksum`.

The data directory is the ``data_dir`` argument, else the environment variable ``SVMSIM_DATA_DIR``. A name
``a9a`` matches the first existing file among ``a9a``, ``a9a.xz``, ``a9a.bz2``, ``a9a.gz``, ``a9a.txt`` (and
compressed ``a9a.txt``) there. The directory may hold a ``MANIFEST.tsv`` (tab-separated, header with at least
``file``; svmsim reads ``n``, ``d``, ``labels`` and ``sha256_of_uncompressed`` when present).
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

import numpy as np

from svmsim.data.libsvm import (
    COMPRESSION_SUFFIXES,
    dataset_key,
    format_label,
    check_head,
    load_libsvm,
    load_libsvm_files,
    open_maybe_compressed,
    strip_compression,
    to_pm1,
)
from svmsim.data.partition import train_test_split_indices
from svmsim.data.catalog import BUILTIN_DATASETS, SCALINGS
from svmsim.data.synthetic import SYNTHETIC_KINDS
from svmsim.errors import DataError, ScenarioError
from svmsim.numerics.sparse import issparse

if TYPE_CHECKING:                                  # pragma: no cover
    import scipy.sparse as sp

DATA_DIR_ENV = "SVMSIM_DATA_DIR"
MANIFEST_NAME = "MANIFEST.tsv"

_NOT_DATA_SUFFIXES = (".tsv", ".md", ".json", ".csv", ".sha256", ".py", ".toml", ".yaml", ".yml")


@dataclass(repr=False)
class Dataset:
    """A binary classification data set with labels in {-1, +1} and an optional test set."""

    name: str
    X: Any  # scipy.sparse.csr_matrix or dense np.ndarray, shape (n, n_features)
    y: np.ndarray  # float64 in {-1, +1}
    X_test: Any = None
    y_test: np.ndarray | None = None
    n_features: int = 0
    source: str = ""  # file path, "sklearn" or "synthetic"
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.n_features:
            self.n_features = int(self.X.shape[1])

    @property
    def n(self) -> int:
        """Number of training points."""
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.n_features)

    @property
    def n_pos(self) -> int:
        """Number of training points labelled +1."""
        return int(np.count_nonzero(self.y > 0))

    @property
    def n_neg(self) -> int:
        """Number of training points labelled -1."""
        return int(np.count_nonzero(self.y < 0))

    @property
    def is_sparse(self) -> bool:
        """True when ``X`` is a scipy sparse matrix."""
        return issparse(self.X)

    def __repr__(self) -> str:
        test = f", n_test={self.X_test.shape[0]}" if self.X_test is not None else ""
        return (
            f"Dataset(name={self.name!r}, n={self.n}, d={self.d}, n_pos={self.n_pos}, n_neg={self.n_neg}"
            f"{test}, source={self.source!r})"
        )


class DatasetInfo(NamedTuple):
    """One row of :func:`list_datasets`; ``n``, ``d``, ``labels`` are None when no manifest describes the file."""

    name: str
    n: int | None
    d: int | None
    labels: str | None


# ----------------------------------------------------------------------------------------------------------
# data directory and files


def resolve_data_dir(data_dir=None, name: str | None = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$SVMSIM_DATA_DIR``; :class:`DataError` if neither exists."""
    origin = "data_dir"
    if data_dir is None or data_dir == "":
        data_dir = os.environ.get(DATA_DIR_ENV) or None
        origin = DATA_DIR_ENV
    if data_dir is None:
        what = f"data set '{name}'" if name else "listing data sets"
        raise DataError(f"{what} needs a data directory: set {DATA_DIR_ENV} or the scenario key data.data_dir")
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise DataError(f"data directory '{path}' (from {origin}) does not exist or is not a directory")
    return path


def _is_data_file(path: Path) -> bool:
    base = strip_compression(path.name)
    return path.is_file() and not path.name.startswith(".") and path.name != MANIFEST_NAME and not base.endswith(
        _NOT_DATA_SUFFIXES
    )


def _display_name(path: Path) -> str:
    base = strip_compression(path.name)
    return base[:-4] if base.endswith(".txt") else base


def available_names(data_dir) -> list[str]:
    """Names of the data files in ``data_dir`` (compression and ``.txt`` suffixes stripped), sorted."""
    return sorted({_display_name(p) for p in Path(data_dir).iterdir() if _is_data_file(p)})


def find_file(name: str, data_dir) -> Path | None:
    """The file for data-set ``name`` in ``data_dir`` (plain, compressed or ``.txt``), or None."""
    directory = Path(data_dir)
    for stem in (name, name + ".txt"):
        for suffix in ("", *COMPRESSION_SUFFIXES):
            candidate = directory / (stem + suffix)
            if candidate.is_file():
                return candidate
    return None


def _locate(name: str, data_dir) -> Path:
    """Resolve a name (or a file path) to an existing file, or raise a :class:`DataError` listing what exists."""
    as_path = Path(name).expanduser()
    if as_path.is_file():
        return as_path
    if os.sep in name or (os.altsep and os.altsep in name):
        raise DataError(f"data file '{name}' does not exist; allowed: the path of an existing LIBSVM file, a "
                        "data-set name (looked up in data.data_dir or $SVMSIM_DATA_DIR), or a built-in set: "
                        f"{', '.join(BUILTIN_DATASETS)}, synthetic")
    directory = resolve_data_dir(data_dir, name)
    found = find_file(name, directory)
    if found is None:
        names = available_names(directory)
        listing = ", ".join(names) if names else "none"
        raise DataError(
            f"data set '{name}' is not in the data directory '{directory}'; the data sets there are: {listing}; "
            f"built-in sets: {', '.join(BUILTIN_DATASETS)}, and 'synthetic'"
        )
    return found


def read_manifest(data_dir) -> dict[str, dict[str, str]]:
    """Rows of ``MANIFEST.tsv`` in ``data_dir`` keyed by file name; empty when there is no manifest."""
    path = Path(data_dir) / MANIFEST_NAME
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        if not reader.fieldnames or "file" not in reader.fieldnames:
            raise DataError(f"manifest '{path}' has no 'file' column in its header line")
        return {row["file"]: row for row in reader if row.get("file")}


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def list_datasets(data_dir=None) -> list[DatasetInfo]:
    """The data sets in the data directory as ``(name, n, d, labels)`` rows, sorted by name.

    ``n``, ``d`` and ``labels`` (e.g. ``"-1:24720,1:7841"``) come from ``MANIFEST.tsv`` when it describes
    the file, else they are None. Built-in sets are in :data:`BUILTIN_DATASETS`.
    """
    directory = resolve_data_dir(data_dir)
    manifest = read_manifest(directory)
    rows = []
    for path in directory.iterdir():
        if not _is_data_file(path):
            continue
        rec = manifest.get(path.name, {})
        rows.append(DatasetInfo(_display_name(path), _int_or_none(rec.get("n")), _int_or_none(rec.get("d")),
                                rec.get("labels") or None))
    return sorted(rows, key=lambda r: r.name)


def verify_checksum(name: str, data_dir=None) -> bool:
    """Whether the SHA-256 of the uncompressed file for ``name`` matches ``MANIFEST.tsv``.

    Raises :class:`DataError` when the file or its manifest record (with ``sha256_of_uncompressed``) is missing.
    """
    path = _locate(name, data_dir)
    record = read_manifest(path.parent).get(path.name)
    expected = (record or {}).get("sha256_of_uncompressed")
    if not expected:
        raise DataError(f"cannot verify '{path}': {path.parent / MANIFEST_NAME} has no sha256_of_uncompressed for it")
    digest = hashlib.sha256()
    with open_maybe_compressed(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == expected.strip().lower()


# ----------------------------------------------------------------------------------------------------------
# loaders


def scale_to_unit_box(X: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """Scale each column linearly to [-1, 1] (min -> -1, max -> +1; constant columns -> 0), like LIBSVM's svm-scale.

    The range is the columns' range in `reference` (default X itself): a test set is scaled with its training
    set's range, so its values may fall outside [-1, 1]."""
    X = np.asarray(X, dtype=np.float64)
    R = X if reference is None else np.asarray(reference, dtype=np.float64)
    lo, hi = R.min(axis=0), R.max(axis=0)
    with np.errstate(over="ignore", invalid="ignore"):     # a span beyond float64 is refused by check_values
        span = np.where(hi > lo, hi - lo, 1.0)
        return np.where(hi > lo, 2.0 * (X - lo) / span - 1.0, 0.0)


#: `unit_box` makes sparse input dense; above this many entries it asks for `max_abs` instead
DENSE_SCALING_LIMIT = 200_000_000


def scale_dataset(ds: "Dataset", scaling: str) -> "Dataset":
    """`ds` with its features scaled by `scaling` (a key of :data:`SCALINGS`), fitted on the training set."""
    if scaling not in SCALINGS:
        raise ScenarioError(f"scale = {scaling!r} is not a feature scaling; allowed: "
                            + ", ".join(f"{k!r} ({v})" for k, v in SCALINGS.items()))
    if scaling == "none":
        return ds
    X, X_test = ds.X, ds.X_test
    if scaling == "unit_box":
        if issparse(X) and X.shape[0] * X.shape[1] > DENSE_SCALING_LIMIT:
            raise ScenarioError(
                f"scale = 'unit_box' would make data set '{ds.name}' dense ({X.shape[0]} x {X.shape[1]} = "
                f"{X.shape[0] * X.shape[1]:,} entries, more than {DENSE_SCALING_LIMIT:,}); allowed for it: "
                "'max_abs' (keeps it sparse) or 'none'")
        dense = X.toarray() if issparse(X) else X
        X_new = scale_to_unit_box(dense)
        if X_test is not None:
            X_test = scale_to_unit_box(X_test.toarray() if issparse(X_test) else X_test, reference=dense)
    else:
        from sklearn.preprocessing import MaxAbsScaler

        scaler = MaxAbsScaler().fit(X)
        X_new = scaler.transform(X)
        if X_test is not None:
            X_test = scaler.transform(X_test)
    return Dataset(ds.name, X_new, ds.y, X_test, ds.y_test, n_features=ds.n_features, source=ds.source,
                   meta=dict(ds.meta, scaling=f"{scaling}: {SCALINGS[scaling]}"))


def _sklearn_table(stem: str) -> tuple[np.ndarray, np.ndarray]:
    """(data, target) of a set that ships with scikit-learn, read from its CSV (a header line, then rows of features
    and an integer class) without importing scikit-learn, which takes longer than the quickstart's simulation; the
    loader `sklearn.datasets.load_<stem>` where the file is not where scikit-learn keeps it."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / f"{stem}.csv" if spec else None
    if path is not None and path.is_file():
        table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
        return np.ascontiguousarray(table[:, :-1]), table[:, -1].astype(np.int64)
    from sklearn import datasets as skd

    bunch = getattr(skd, f"load_{stem}")()
    return bunch.data, bunch.target


def _load_builtin(name: str) -> Dataset:
    if name == "iris":
        data, target = _sklearn_table("iris")
        y = np.where(target == 0, -1.0, 1.0)  # setosa (0) -> -1, versicolor/virginica -> +1
        label_map = {"setosa": -1, "versicolor": 1, "virginica": 1}
    else:
        data, target = _sklearn_table("breast_cancer")
        y = np.where(target == 1, 1.0, -1.0)  # benign (1) -> +1, malignant (0) -> -1
        label_map = {"malignant": -1, "benign": 1}
    X = scale_to_unit_box(data)
    return Dataset(name, X, y, n_features=X.shape[1], source="sklearn",
                   meta={"label_map": label_map, "scaling": "per feature to [-1, 1]"})


def _map_test_labels(y_raw, positive: float, train_values, name: str, test_name: str) -> np.ndarray:
    """Map test labels with the train set's positive label; they must use the train set's label values."""
    extra = np.setdiff1d(np.unique(y_raw), train_values)
    if extra.size:
        raise DataError(
            f"test set '{test_name}' has labels {', '.join(format_label(v) for v in extra)} that the train set "
            f"'{name}' does not have ({', '.join(format_label(v) for v in train_values)})"
        )
    return np.where(np.asarray(y_raw) == positive, 1.0, -1.0)


def _with_columns(X: sp.csr_matrix, d: int) -> sp.csr_matrix:
    """X with d columns and 32-bit indices (what scikit-learn's LIBSVM wrappers accept)."""
    import scipy.sparse as sp

    X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=(X.shape[0], d))
    X.has_sorted_indices = True
    return X


def _test_path(path: Path, test, data_dir) -> Path | None:
    """The test file of training file `path` (None for none); `test` as `load_dataset` takes it."""
    if isinstance(test, str) and test.lower() == "auto":
        stem = strip_compression(path.name)
        stem = stem[:-4] if stem.endswith(".txt") else stem
        return None if stem.endswith(".t") else find_file(stem + ".t", path.parent)
    if test is not None and not (isinstance(test, str) and test.lower() in ("", "none")):
        return find_file(str(test), path.parent) or _locate(str(test), data_dir)
    return None


def _load_file_dataset(name, data_dir, test, positive_label, n_features) -> Dataset:
    path = _locate(name, data_dir)
    test_path = _test_path(path, test, data_dir)
    if test_path is None:
        X, y_raw = load_libsvm(path, n_features=n_features)
        X_test = yt_raw = None
    else:                               # one index convention for both files
        (X, X_test), (y_raw, yt_raw), base = load_libsvm_files([path, test_path], n_features=n_features)
    key = dataset_key(path)
    y = to_pm1(y_raw, positive_label, name=key)
    train_values = np.unique(y_raw)
    positive = float(y_raw[np.argmax(y > 0)])
    meta = {
        "file": str(path),
        "label_map": {format_label(v): (1 if v == positive else -1) for v in train_values},
        "positive_label": positive,
    }
    y_test = None
    if test_path is not None:
        y_test = _map_test_labels(yt_raw, positive, train_values, key, str(test_path))
        meta["test_file"] = str(test_path)
        meta["index_base"] = base
    d = int(n_features) if n_features is not None else max(X.shape[1], 0 if X_test is None else X_test.shape[1])
    X = _with_columns(X, d)
    if X_test is not None:
        X_test = _with_columns(X_test, d)
    return Dataset(_display_name(path), X, y, X_test, y_test, n_features=d, source=str(path), meta=meta)


def check_files(spec: Mapping[str, Any]) -> list[Path]:
    """The LIBSVM files a scenario's ``data`` mapping reads (training file, then its test file), each found and its
    first :data:`~svmsim.data.libsvm.HEAD_BYTES` checked (:func:`~svmsim.data.libsvm.check_head`), without loading
    the data: what ``svmsim validate`` checks without ``--data``. Built-in and synthetic sets have no files."""
    name = str(spec.get("name", ""))
    if name == "synthetic" or name in BUILTIN_DATASETS:
        return []
    path = _locate(name, spec.get("data_dir"))
    files = [path]
    if spec.get("holdout") is None:
        test = _test_path(path, spec.get("test"), spec.get("data_dir"))
        if test is not None:
            files.append(test)
    for f in files:
        check_head(f)
    return files


def _load_synthetic(params: dict) -> Dataset:
    params = dict(params)
    kind = params.pop("kind", "separable")
    if kind not in SYNTHETIC_KINDS:
        raise ScenarioError(f"unknown synthetic kind {kind!r}: the allowed kinds are {', '.join(SYNTHETIC_KINDS)}")
    gen = SYNTHETIC_KINDS[kind]
    for required, par in inspect.signature(gen).parameters.items():
        if par.default is inspect.Parameter.empty and required not in params:
            raise ScenarioError(f"synthetic data of kind '{kind}' needs the parameter '{required}'")
    allowed = set(inspect.signature(gen).parameters) - {"return_info"}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ScenarioError(
            f"synthetic kind '{kind}' has no parameter {', '.join(unknown)}: "
            f"its parameters are {', '.join(sorted(allowed))}"
        )
    X, y, info = gen(**params, return_info=True)
    meta = {"kind": kind, **params, **info}
    return Dataset(f"synthetic-{kind}", X, y, n_features=X.shape[1], source="synthetic", meta=meta)


def load_dataset(
    name: str,
    data_dir=None,
    test=None,
    positive_label=None,
    n_features: int | None = None,
    holdout: float | None = None,
    holdout_seed: int = 0,
    scale: str = "none",
    **synthetic,
) -> Dataset:
    """Load a data set by name and return a :class:`Dataset` with labels in {-1, +1}.

    ``name`` is one of:

    - a LIBSVM data set in the data directory (``data_dir``, else ``$SVMSIM_DATA_DIR``), e.g. ``"a9a"``, or a
      path to a LIBSVM file; known sets get their built-in positive label (e.g. mushrooms: 1 -> +1), other
      non-±1 labels need ``positive_label``;
    - a built-in set (:data:`BUILTIN_DATASETS`): ``"iris"``, ``"breast_cancer_sklearn"``;
    - ``"synthetic"`` with the generator's keyword arguments, e.g.
      ``load_dataset("synthetic", kind="separable", n=1000, d=8, beta=0.1, seed=0)``; kinds are
      ``separable``, ``nonseparable`` (``flip_band``) and ``sparse_nonseparable`` (``density``).

    ``test``: None or ``"none"`` for no test set; ``"auto"`` loads ``<name>.t`` next to the train file when
    present; otherwise a name or path. Train and test get the same number of features (``n_features`` when
    given, else the larger of the two files). ``holdout`` (a fraction in (0, 1)) instead splits a random test
    set off the training data with ``holdout_seed`` (the paper holds out 10% of phishing).

    ``scale``: a feature scaling of :data:`SCALINGS` (``"none"``, ``"unit_box"``, ``"max_abs"``), fitted on the
    training set (after a holdout split) and applied to the test set as well.
    """
    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise DataError(f"data set name {name!r} is invalid: give a data-set name or a file path")
    name = str(name)
    if synthetic and name != "synthetic":
        raise ScenarioError(
            f"parameters {', '.join(sorted(synthetic))} only apply to synthetic data, not to data set '{name}'"
        )
    if name == "synthetic":
        ds = _load_synthetic(synthetic)
    elif name in BUILTIN_DATASETS:
        ds = _load_builtin(name)
    else:
        explicit_test = test is not None and not (isinstance(test, str) and test.lower() in ("", "none", "auto"))
        if holdout is not None and explicit_test:
            raise ScenarioError(f"data set '{name}': give either a test set ({test!r}) or a holdout fraction, not both")
        ds = _load_file_dataset(name, data_dir, None if holdout is not None else test, positive_label, n_features)
    if holdout is not None:
        ds = _split_holdout(ds, holdout, holdout_seed)
    return check_values(scale_dataset(ds, scale), scale)


#: the largest feature magnitude svmsim trains on: squared norms, inner products and kernels of larger values
#: overflow float64 (1.8e308) or lose every digit, and the solvers return nonsense
FEATURE_LIMIT = 1e100
#: the smallest largest-magnitude a training set may have (unless it is all zero): squares of smaller values
#: underflow to zero or to subnormal numbers, and certificates divide by them
FEATURE_FLOOR = 1e-100


def _values(X) -> np.ndarray:
    return X.data if issparse(X) else np.asarray(X, dtype=np.float64).ravel()


def check_values(ds: Dataset, scale: str = "none") -> Dataset:
    """`ds` if svmsim can train on it, else a :class:`DataError` naming what is wrong and what is allowed: a
    training set without features (a LIBSVM file of labels only) or whose every value is zero; a value that is not
    finite (a scaling of huge values can make one); a largest magnitude above :data:`FEATURE_LIMIT` or below
    :data:`FEATURE_FLOOR`, in the training or the test set."""
    where = f"data set '{ds.name}'" + (f" (after scale = '{scale}')" if scale != "none" else "")
    fix = "scale the data (data.scale = 'max_abs' divides each feature by its largest |value|)"
    if ds.X.shape[1] == 0 or (issparse(ds.X) and ds.X.nnz == 0 and ds.source not in ("sklearn", "synthetic")):
        raise DataError(f"{where} has no feature values: every line of '{ds.source}' holds only a label; allowed: "
                        "LIBSVM lines 'label index:value ...' with at least one nonzero feature value")
    for part, X in (("training", ds.X), ("test", ds.X_test)):
        if X is None:
            continue
        v = _values(X)
        if v.size and not np.isfinite(v).all():
            raise DataError(f"{where} has feature values in its {part} set that are not finite numbers; allowed: "
                            f"finite values of magnitude at most {FEATURE_LIMIT:g}; " + fix)
        top = float(np.abs(v).max()) if v.size else 0.0
        if top > FEATURE_LIMIT:
            raise DataError(f"{where} has feature values of magnitude up to {top:.3g} in its {part} set; allowed: "
                            f"magnitudes up to {FEATURE_LIMIT:g} (squared norms and kernels of larger values "
                            "overflow float64); " + fix)
        if part == "training" and top == 0.0:
            raise DataError(f"every feature value of the training set of {where} is zero; there is nothing to "
                            "separate; allowed: a training set with a nonzero feature value")
        if part == "training" and top < FEATURE_FLOOR:
            raise DataError(f"the largest feature magnitude of {where} is {top:.3g}; allowed: a largest magnitude of at "
                            f"least {FEATURE_FLOOR:g} (squares of smaller values underflow to zero or to subnormal "
                            "numbers); " + fix)
    return ds


def _split_holdout(ds: Dataset, fraction, seed) -> Dataset:
    train_idx, test_idx = train_test_split_indices(ds.n, fraction, seed)
    meta = dict(ds.meta, holdout=float(fraction), holdout_seed=seed)
    return Dataset(ds.name, ds.X[train_idx], ds.y[train_idx], ds.X[test_idx], ds.y[test_idx],
                   n_features=ds.n_features, source=ds.source, meta=meta)


#: Keys accepted by :func:`make_dataset` besides the synthetic generators' parameters.
DATASET_SPEC_KEYS = ("name", "data_dir", "test", "positive_label", "n_features", "holdout", "holdout_seed",
                     "scale")


def make_dataset(spec: Mapping[str, Any]) -> Dataset:
    """Load a data set from a mapping such as a scenario's ``data`` section, e.g.
    ``{"name": "a9a", "test": "auto"}`` or ``{"name": "synthetic", "kind": "separable", "n": 1000, "d": 8}``.

    Keys are :func:`load_dataset`'s arguments; ``name`` is required.
    """
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise ScenarioError(f"data specification {spec!r} is invalid: it must be a mapping with a 'name' key")
    return load_dataset(**dict(spec))
