"""Tests of svmsim.data: LIBSVM loading, labels, the data-set registry, synthetic generators, partitioning."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from svmsim.data import (
    PARTITION_SCHEMES,
    Dataset,
    list_datasets,
    load_dataset,
    load_libsvm,
    make_dataset,
    make_nonseparable,
    make_separable,
    make_sparse_nonseparable,
    partition,
    to_pm1,
    train_test_split_indices,
    verify_checksum,
)
from svmsim.errors import DataError, ScenarioError, SvmsimError

SHARED_DATA = (Path(os.environ["SVMSIM_DATA_DIR"]).resolve()
               if Path(os.environ.get("SVMSIM_DATA_DIR") or "/nonexistent").is_dir()
               else Path(__file__).resolve().parents[2] / "shared" / "data")
needs_shared = pytest.mark.skipif(not (SHARED_DATA / "a9a.xz").is_file(), reason=f"no shared data in {SHARED_DATA}")


# --------------------------------------------------------------------------------------------------------
# real LIBSVM data from the shared folder


@pytest.fixture(scope="module")
def a9a():
    return load_dataset("a9a", data_dir=SHARED_DATA, test="auto")


@needs_shared
def test_a9a_train_and_auto_test(a9a):
    assert isinstance(a9a, Dataset)
    assert sp.isspmatrix_csr(a9a.X)
    assert (a9a.n, a9a.d) == (32561, 123)
    assert set(np.unique(a9a.y)) == {-1.0, 1.0}
    assert (a9a.n_pos, a9a.n_neg) == (7841, 24720)
    assert a9a.X_test.shape == (16281, 123)  # a9a.t alone has max index 122
    assert int((a9a.y_test > 0).sum()) == 3846
    assert a9a.y.dtype == np.float64


@needs_shared
def test_a9a_t_alone_and_with_n_features(monkeypatch):
    monkeypatch.setenv("SVMSIM_DATA_DIR", str(SHARED_DATA))
    assert load_dataset("a9a.t").d == 122
    ds = load_dataset("a9a.t", n_features=123)
    assert ds.X.shape == (16281, 123) and ds.n_features == 123


@needs_shared
@pytest.mark.parametrize(
    "name, n, n_pos", [("mushrooms", 8124, 3916), ("phishing", 11055, 6157), ("svmguide1", 3089, 2000)]
)
def test_known_positive_labels(name, n, n_pos):
    ds = load_dataset(name, data_dir=SHARED_DATA)
    assert (ds.n, ds.n_pos, ds.n_neg) == (n, n_pos, n - n_pos)
    assert set(np.unique(ds.y)) == {-1.0, 1.0}


@needs_shared
def test_explicit_positive_label_and_test_by_name():
    ds = load_dataset("mushrooms", data_dir=SHARED_DATA, positive_label=2)
    assert ds.n_pos == 4208
    ds = load_dataset("svmguide1", data_dir=SHARED_DATA, test="svmguide1.t")
    assert ds.X_test.shape == (4000, 4) and int((ds.y_test > 0).sum()) == 2000


@needs_shared
def test_phishing_holdout():
    ds = load_dataset("phishing", data_dir=SHARED_DATA, holdout=0.1, holdout_seed=3)
    assert (ds.n, ds.X_test.shape[0]) == (9949, 1106)
    assert ds.n_pos + int((ds.y_test > 0).sum()) == 6157
    again = load_dataset("phishing", data_dir=SHARED_DATA, holdout=0.1, holdout_seed=3)
    assert np.array_equal(ds.y_test, again.y_test)


@needs_shared
def test_unit_box_scaling_fits_the_training_range_and_applies_it_to_the_test_set():
    raw = load_dataset("madelon", data_dir=SHARED_DATA, test="auto")
    ds = load_dataset("madelon", data_dir=SHARED_DATA, test="auto", scale="unit_box")
    dense = (lambda M: M.toarray() if sp.issparse(M) else np.asarray(M, dtype=float))
    X, R = ds.X, dense(raw.X)
    varying = R.max(axis=0) > R.min(axis=0)
    assert np.allclose(X[:, varying].min(axis=0), -1.0) and np.allclose(X[:, varying].max(axis=0), 1.0)
    lo, span = R.min(axis=0), R.max(axis=0) - R.min(axis=0)
    j = int(np.flatnonzero(varying)[0])
    expected = 2.0 * (dense(raw.X_test)[:, j] - lo[j]) / span[j] - 1.0
    assert np.allclose(ds.X_test[:, j], expected)              # the training range, not the test set's own
    assert np.array_equal(ds.y, raw.y) and "unit_box" in ds.meta["scaling"]


@needs_shared
def test_max_abs_scaling_keeps_sparse_data_sparse(a9a):
    ds = load_dataset("a9a", data_dir=SHARED_DATA, test="auto", scale="max_abs")
    assert sp.issparse(ds.X) and ds.X.nnz == a9a.X.nnz
    peak = np.asarray(abs(ds.X).max(axis=0).todense()).ravel()
    assert np.allclose(peak[peak > 0], 1.0)
    assert sp.issparse(ds.X_test) and ds.X_test.shape == a9a.X_test.shape


def test_scaling_errors(monkeypatch):
    with pytest.raises(ScenarioError, match=r"scale = 'minmax' is not a feature scaling; allowed: 'none'"):
        load_dataset("iris", scale="minmax")
    import svmsim.data.registry as registry

    monkeypatch.setattr(registry, "DENSE_SCALING_LIMIT", 10)
    sparse = Dataset("tiny", sp.csr_matrix(np.eye(4)), np.array([1.0, -1.0, 1.0, -1.0]))
    with pytest.raises(ScenarioError, match="would make data set 'tiny' dense.*'max_abs'"):
        registry.scale_dataset(sparse, "unit_box")
    assert registry.scale_dataset(sparse, "none") is sparse


@needs_shared
def test_manifest_listing_and_checksum():
    rows = {r.name: r for r in list_datasets(SHARED_DATA)}
    assert rows["a9a"].n == 32561 and rows["a9a"].d == 123 and rows["a9a"].labels == "-1:24720,1:7841"
    assert "a9a.t" in rows and "MANIFEST" not in rows
    assert verify_checksum("heart_scale", SHARED_DATA) is True


@needs_shared
def test_missing_name_lists_available():
    with pytest.raises(DataError) as err:
        load_dataset("ijcnn1", data_dir=SHARED_DATA)
    msg = str(err.value)
    assert "ijcnn1" in msg and "a9a" in msg and "mushrooms" in msg and ".xz" not in msg


def test_no_data_dir(monkeypatch):
    monkeypatch.delenv("SVMSIM_DATA_DIR", raising=False)
    with pytest.raises(DataError, match="needs a data directory: set SVMSIM_DATA_DIR"):
        load_dataset("a9a")


# --------------------------------------------------------------------------------------------------------
# LIBSVM files written here


def _write_small(tmp_path, y):
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    X = rng.random((30, 6)) * (rng.random((30, 6)) < 0.5)
    plain = tmp_path / "small"
    dump_svmlight_file(X, y, str(plain), zero_based=False)
    return X, plain


def test_compressed_versions_load_the_same(tmp_path):
    y = np.where(np.arange(30) % 3 == 0, 1.0, -1.0)
    X, plain = _write_small(tmp_path, y)
    raw = plain.read_bytes()
    for suffix, opener in [(".gz", gzip.open), (".bz2", bz2.open), (".xz", lzma.open)]:
        with opener(tmp_path / ("copy" + suffix), "wb") as fh:
            fh.write(raw)
    for name in ["small", "copy.gz", "copy.bz2", "copy.xz"]:
        Xl, yl = load_libsvm(tmp_path / name, n_features=6)
        assert sp.isspmatrix_csr(Xl)
        np.testing.assert_allclose(Xl.toarray(), X)
        np.testing.assert_array_equal(yl, y)
    ds = load_dataset("copy", data_dir=tmp_path)  # finds copy.xz
    assert ds.n == 30 and ds.n_pos == 10
    ds = load_dataset(str(tmp_path / "copy.bz2"))  # a path works too
    assert ds.n == 30


def test_listing_without_manifest(tmp_path):
    _write_small(tmp_path, np.where(np.arange(30) % 2 == 0, 1.0, -1.0))
    (tmp_path / "other.txt.gz").write_bytes(gzip.compress(b"1 1:1\n-1 2:1\n"))
    rows = list_datasets(tmp_path)
    assert [r.name for r in rows] == ["other", "small"]
    assert rows[0].n is None and rows[0].labels is None
    assert load_dataset("other", data_dir=tmp_path).n == 2


def test_malformed_file(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 1:0.5 3:1\n-1 2:oops\n")
    with pytest.raises(DataError) as err:
        load_libsvm(bad)
    msg = str(err.value)
    assert "bad.txt" in msg and "line 2" in msg and "not a number" in msg
    unsorted = tmp_path / "unsorted"
    unsorted.write_text("1 3:1 2:1\n")
    with pytest.raises(DataError, match="line 1.*increasing"):
        load_libsvm(unsorted)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(DataError, match="nothere.xz' does not exist"):
        load_libsvm(tmp_path / "nothere.xz")
    (tmp_path / "broken.xz").write_bytes(b"not xz at all")
    with pytest.raises(DataError, match="broken.xz"):
        load_libsvm(tmp_path / "broken.xz")


def test_non_binary_labels(tmp_path):
    _write_small(tmp_path, np.arange(30) % 3)
    with pytest.raises(DataError, match="not binary: found values 0, 1, 2"):
        load_dataset("small", data_dir=tmp_path)


def test_two_unknown_labels_need_positive_label(tmp_path):
    _write_small(tmp_path, np.where(np.arange(30) < 12, 3.0, 7.0))
    with pytest.raises(DataError, match="positive_label.*3, 7"):
        load_dataset("small", data_dir=tmp_path)
    ds = load_dataset("small", data_dir=tmp_path, positive_label=3)
    assert ds.n_pos == 12
    with pytest.raises(DataError, match="does not occur"):
        load_dataset("small", data_dir=tmp_path, positive_label=5)


def test_to_pm1():
    np.testing.assert_array_equal(to_pm1([1, -1, 1]), [1.0, -1.0, 1.0])
    np.testing.assert_array_equal(to_pm1([1, 2, 2], name="mushrooms"), [1.0, -1.0, -1.0])
    np.testing.assert_array_equal(to_pm1([0, 1, 1], name="phishing.xz"), [-1.0, 1.0, 1.0])
    np.testing.assert_array_equal(to_pm1([0, 1], positive_label=0), [1.0, -1.0])
    with pytest.raises(DataError, match="not binary"):
        to_pm1([1, 1, 1])
    with pytest.raises(DataError, match="positive_label"):
        to_pm1([0, 1])


# --------------------------------------------------------------------------------------------------------
# built-in and synthetic sets


def test_iris():
    ds = load_dataset("iris")
    assert (ds.n, ds.d, ds.n_neg, ds.n_pos) == (150, 4, 50, 100)
    assert ds.source == "sklearn" and ds.X_test is None
    np.testing.assert_allclose(ds.X.min(axis=0), -1.0)
    np.testing.assert_allclose(ds.X.max(axis=0), 1.0)
    assert np.all(ds.y[:50] == -1.0)  # setosa comes first in sklearn's iris


def test_breast_cancer_sklearn():
    ds = load_dataset("breast_cancer_sklearn")
    assert (ds.n, ds.d, ds.n_pos) == (569, 30, 357)
    assert ds.X.min() >= -1.0 and ds.X.max() <= 1.0


def test_separable_is_separable_with_margin():
    from sklearn.svm import SVC

    X, y, info = make_separable(200, 5, beta=0.1, seed=7, return_info=True)
    assert X.shape == (200, 5) and X.dtype == np.float64
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert np.linalg.norm(X, axis=1).max() <= 1.0 + 1e-12
    dist = np.abs(X @ info["normal"] - info["offset"])
    assert dist.min() / dist.max() == pytest.approx(0.1)
    assert np.array_equal(np.sign(X @ info["normal"] - info["offset"]), y)
    svc = SVC(kernel="linear", C=1e8).fit(X, y)
    assert svc.score(X, y) == 1.0
    margin = 2.0 / np.linalg.norm(svc.coef_)
    assert 2 * info["min_distance"] * (1 - 1e-6) <= margin <= 4 * info["min_distance"]


def test_synthetic_deterministic():
    a = make_separable(100, 4, seed=3)
    b = make_separable(100, 4, seed=3)
    c = make_separable(100, 4, seed=4)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    s1, s2 = make_sparse_nonseparable(50, 20, 0.2, seed=1), make_sparse_nonseparable(50, 20, 0.2, seed=1)
    assert (s1[0] != s2[0]).nnz == 0 and np.array_equal(s1[1], s2[1])


def test_nonseparable_band():
    X, y, info = make_nonseparable(2000, 6, flip_band=0.1, seed=0, return_info=True)
    side = np.sign(X @ info["normal"] - info["offset"])
    dist = np.abs(X @ info["normal"] - info["offset"])
    assert info["n_in_band"] > 50
    assert np.array_equal(y[dist >= 0.1], side[dist >= 0.1])
    assert 0 < np.count_nonzero(y[dist < 0.1] != side[dist < 0.1]) < info["n_in_band"]


def test_sparse_nonseparable():
    X, y = make_sparse_nonseparable(300, 40, density=0.25, seed=2)
    assert sp.isspmatrix_csr(X) and X.shape == (300, 40)
    assert np.all(np.diff(X.indptr) == 10)
    assert sp.linalg.norm(X, axis=1).max() <= 1.0 + 1e-12
    assert set(np.unique(y)) == {-1.0, 1.0}


def test_synthetic_through_registry():
    ds = load_dataset("synthetic", kind="nonseparable", n=100, d=3, seed=1)
    assert ds.source == "synthetic" and (ds.n, ds.d) == (100, 3) and ds.meta["kind"] == "nonseparable"
    ds2 = make_dataset({"name": "synthetic", "kind": "separable", "n": 80, "d": 4, "holdout": 0.25})
    assert (ds2.n, ds2.X_test.shape[0]) == (60, 20)
    with pytest.raises(ScenarioError, match="allowed kinds"):
        load_dataset("synthetic", kind="spiral", n=10, d=2)
    with pytest.raises(ScenarioError, match="no parameter"):
        load_dataset("synthetic", kind="separable", n=10, d=2, flip_band=0.1)
    with pytest.raises(ScenarioError, match="only apply to synthetic"):
        load_dataset("iris", n=10)


# --------------------------------------------------------------------------------------------------------
# partitioning


@pytest.fixture(scope="module")
def labels():
    rng = np.random.default_rng(0)
    return np.where(rng.random(1003) < 0.3, 1.0, -1.0)


@pytest.mark.parametrize("scheme", sorted(PARTITION_SCHEMES))
@pytest.mark.parametrize("k", [1, 7, 20])
def test_partition_invariants(labels, scheme, k):
    parts = partition(labels, k, scheme, seed=5)
    assert len(parts) == k
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(labels.size))  # disjoint and complete
    for p in parts:
        assert p.size > 0 and p.dtype == np.int64 and np.all(np.diff(p) > 0)
    again = partition(labels, k, scheme, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    if k > 1:
        other = partition(labels, k, scheme, seed=6)
        assert not all(np.array_equal(a, b) for a, b in zip(parts, other))
    if scheme != "unequal":
        sizes = [p.size for p in parts]
        assert max(sizes) - min(sizes) <= 1


def test_stratified_keeps_class_ratio(labels):
    parts = partition(labels, 10, "stratified", seed=0)
    pos = np.array([np.count_nonzero(labels[p] > 0) for p in parts])
    assert pos.max() - pos.min() <= 1


def test_label_skew(labels):
    balanced = np.repeat([1.0, -1.0], 500)
    parts = partition(balanced, 4, "label_skew", seed=0, skew=1.0)
    assert [len(np.unique(balanced[p])) for p in parts] == [1, 1, 1, 1]
    assert sorted(float(balanced[p][0]) for p in parts) == [-1.0, -1.0, 1.0, 1.0]
    parts = partition(labels, 6, "label_skew", seed=0, skew=0.8)
    fractions = [np.mean(labels[p] > 0) for p in parts]
    assert max(fractions) > 0.45 and min(fractions) < 0.05  # strongly skewed vs. the 30% overall
    with pytest.raises(ScenarioError, match=r"skew .* \[0, 1\]"):
        partition(labels, 3, "label_skew", skew=1.5)


def test_unequal_sizes(labels):
    parts = partition(labels, 10, "unequal", seed=1, alpha=0.3)
    sizes = np.array([p.size for p in parts])
    assert sizes.min() >= 1 and sizes.sum() == labels.size and sizes.max() > 2 * sizes.min()
    assert len(partition(20, 20, "unequal", seed=0)) == 20  # n given as an integer


def test_partition_errors(labels):
    for k in (0, labels.size + 1):
        with pytest.raises(ScenarioError, match=rf"n_parts = {k} .* from 1 to .* n = 1003"):
            partition(labels, k, "iid")
    with pytest.raises(ScenarioError, match="iid, label_skew, stratified, unequal"):
        partition(labels, 2, "round_robin")
    with pytest.raises(ScenarioError, match="no parameter skew"):
        partition(labels, 2, "iid", skew=0.5)
    with pytest.raises(ScenarioError, match="needs the labels"):
        partition(100, 2, "stratified")
    assert issubclass(ScenarioError, SvmsimError)


def test_train_test_split_indices():
    tr, te = train_test_split_indices(11055, 0.1, seed=0)
    assert (tr.size, te.size) == (9949, 1106)
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(11055))
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)
    tr2, te2 = train_test_split_indices(11055, 0.1, seed=0)
    assert np.array_equal(te, te2)
    with pytest.raises(ScenarioError, match=r"\(0, 1\)"):
        train_test_split_indices(10, 1.5, seed=0)


def test_tiny_margin_keeps_its_promises():
    """Separable by a plane (a positive margin between the classes' projections), the asked fraction of +1, rows
    of uneven norm within max_norm, density*d non-zeros a row; and reachable from a scenario."""
    from svmsim.config import load_scenario
    from svmsim.data.synthetic import make_tiny_margin

    X, y, info = make_tiny_margin(4000, 60, density=0.1, positive_fraction=0.05, max_norm=4.0, seed=2,
                                  return_info=True)
    proj = np.asarray(X @ info["normal"]).ravel()
    assert info["margin"] > 0 and proj[y > 0].min() - proj[y < 0].max() == pytest.approx(2 * info["margin"])
    assert (y > 0).sum() == 200 and np.all(np.diff(X.indptr) == 6)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    assert norms.max() <= 4.0 and norms.max() / norms.min() > 4.0       # 1..4 times unit-ball rows
    s = load_scenario({"name": "t", "data": {"name": "synthetic", "kind": "tiny_margin", "n": 500, "d": 20},
                       "algorithm": {"name": "saddle-svc"}, "stop": {"max_iterations": 1}})
    assert s.data.synthetic_params() == {"kind": "tiny_margin", "n": 500, "d": 20, "density": 0.05,
                                         "positive_fraction": 0.03, "max_norm": 10.0}
