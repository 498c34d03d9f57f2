"""Exact checks of svmsim.data.libsvm: LIBSVM files plain and compressed, a malformed file's message (file, line,
problem and the loader's own reason, word for word), and labels mapped to ±1 with the right positive class."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from svmsim.data.libsvm import (
    dataset_key,
    load_libsvm,
    open_maybe_compressed,
    strip_compression,
    to_pm1,
)
from svmsim.errors import DataError

GOOD = b"1 1:0.5 3:2\n-1 2:1.5\n"
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def write(path: Path, data: bytes) -> Path:
    opener = OPENERS.get(path.suffix)
    if opener is None:
        path.write_bytes(data)
    else:
        with opener(path, "wb") as fh:
            fh.write(data)
    return path


def load_error(path: Path, **kw) -> str:
    with pytest.raises(DataError) as exc:
        load_libsvm(path, **kw)
    return str(exc.value)


# -- names -----------------------------------------------------------------------------------------------------

def test_strip_compression_and_dataset_key():
    assert [strip_compression(n) for n in ("a.xz", "a.bz2", "a.gz", "a.zip", "a")] == ["a", "a", "a", "a.zip", "a"]
    assert dataset_key("/x/a9a.t.xz") == "a9a"
    assert dataset_key(Path("d/phishing.txt")) == "phishing"
    assert dataset_key("mushrooms.bz2") == "mushrooms"
    assert dataset_key("w.t.txt") == "w"              # .txt, then .t
    assert dataset_key("w.txt.t") == "w.txt"          # only in that order
    assert dataset_key("t.t") == "t"
    assert dataset_key(".t") == ".t" and dataset_key(".txt") == ".txt"    # a suffix alone is a name


# -- reading ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2", ".xz"])
def test_plain_and_compressed_files_read_the_same(tmp_path, suffix):
    path = write(tmp_path / f"set{suffix}", GOOD)
    with open_maybe_compressed(path) as fh:
        assert fh.read() == GOOD
    X, y = load_libsvm(path)
    assert sp.isspmatrix_csr(X) or isinstance(X, sp.csr_array)
    assert X.shape == (2, 3) and X.dtype == np.float64
    np.testing.assert_array_equal(X.toarray(), [[0.5, 0, 2], [0, 1.5, 0]])
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, [1, -1])


def test_n_features_dtype_and_zero_based_indices(tmp_path):
    path = write(tmp_path / "one.txt", GOOD)
    X, y = load_libsvm(path, n_features=5, dtype=np.float32)
    assert X.shape == (2, 5) and X.dtype == np.float32 and y.dtype == np.float64
    assert load_libsvm(path, n_features=3.0)[0].shape == (2, 3)
    assert load_libsvm(path, n_features=3)[0].shape == (2, 3)
    one = write(tmp_path / "one-feature.txt", b"1 1:1\n-1 1:2\n")
    assert load_libsvm(one, n_features=1)[0].shape == (2, 1)        # the smallest allowed
    zero = write(tmp_path / "zero.txt", b"1 0:1 2:4\n-1 1:2\n")
    np.testing.assert_array_equal(load_libsvm(zero)[0].toarray(), [[1, 0, 4], [0, 2, 0]])


def test_invalid_n_features(tmp_path):
    path = write(tmp_path / "one.txt", GOOD)
    for bad in (0, -2, 2.5):
        assert load_error(path, n_features=bad) == \
            f"n_features = {bad!r} for '{path}' is invalid: it must be a positive integer"
    assert load_error(path, n_features=2) == \
        f"LIBSVM file '{path}' is malformed: n_features was set to 2, but input file contains 3 features"


def test_missing_empty_or_unreadable_files(tmp_path):
    assert load_error(tmp_path / "nothere.xz") == f"LIBSVM file '{tmp_path / 'nothere.xz'}' does not exist"
    assert load_error(tmp_path) == f"LIBSVM path '{tmp_path}' is not a file"
    for name, data in (("empty.txt", b""), ("comments.gz", b"# nothing here\n\n")):
        path = write(tmp_path / name, data)
        assert load_error(path) == f"LIBSVM file '{path}' contains no data rows"


@pytest.mark.parametrize("suffix, reason", [
    (".gz", "Compressed file ended before the end-of-stream marker was reached"),
    (".bz2", "Compressed file ended before the end-of-stream marker was reached"),
    (".xz", "Compressed file ended before the end-of-stream marker was reached"),
])
def test_truncated_compressed_file(tmp_path, suffix, reason):
    whole = write(tmp_path / f"whole{suffix}", GOOD * 50).read_bytes()
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(whole[: len(whole) // 2])
    assert load_error(path) == \
        f"cannot read LIBSVM file '{path}': {reason} (is the file truncated or wrongly compressed?)"


@pytest.mark.parametrize("suffix, reason", [
    (".gz", "Not a gzipped file (b'no')"), (".bz2", "Invalid data stream"),
    (".xz", "Input format not supported by decoder"),
])
def test_wrongly_compressed_file(tmp_path, suffix, reason):
    path = tmp_path / f"junk{suffix}"
    path.write_bytes(b"not compressed at all")
    assert load_error(path) == \
        f"cannot read LIBSVM file '{path}': {reason} (is the file truncated or wrongly compressed?)"


# -- malformed files: the file, the first bad line, the problem, the loader's reason -----------------------------

@pytest.mark.parametrize("text, line, shown, problem, reason", [
    (b"1 1:0.5\nabc 1:2\n", 2, "abc 1:2", "the label 'abc' is not a number",
     "could not convert string to float: b'abc'"),
    (b"1 1:0.5\n-1 2 3:1\n", 2, "-1 2 3:1", "the token '2' is not of the form index:value",
     "need more than 1 value to unpack"),
    (b"1 x:1\n", 1, "1 x:1", "the feature index in 'x:1' is not an integer",
     "invalid literal for int() with base 10: b'x'"),
    (b"1 1:zz\n", 1, "1 1:zz", "the feature value in '1:zz' is not a number",
     "could not convert string to float: b'zz'"),
    (b"1 -1:2\n", 1, "1 -1:2", "the feature index in '-1:2' is negative",
     "Invalid index -1 in SVMlight/LibSVM data file"),
    (b"# header\n\n1 1:1 3:2 2:1  # note\n", 3, "1 1:1 3:2 2:1", "feature indices are not strictly increasing",
     "Feature indices in SVMlight/LibSVM data file should be sorted and unique"),
    (b"1 2:1 2:1\n", 1, "1 2:1 2:1", "feature indices are not strictly increasing",
     "Feature indices in SVMlight/LibSVM data file should be sorted and unique"),
    # qid tokens are skipped (both by the loader and by the explanation): the next token is the bad one
    (b"1 qid:3 1:1 x\n", 1, "1 qid:3 1:1 x", "the token 'x' is not of the form index:value",
     "need more than 1 value to unpack"),
    # index 0 (zero-based files) and a '#' after the features are fine: the second line is the bad one
    (b"1 0:1 1:1 # a:b c\n-1 0:1 1:1 1:1\n", 2, "-1 0:1 1:1 1:1", "feature indices are not strictly increasing",
     "Feature indices in SVMlight/LibSVM data file should be sorted and unique"),
    # everything from the first '#' on is a comment; a value holding ':' is not a number
    (b"1 1:1 # a # b\n-1 1:2:3\n", 2, "-1 1:2:3", "the feature value in '1:2:3' is not a number",
     "could not convert string to float: b'2:3'"),
    (b"1 1:1\n\xff\xfe 2:1\n", 2, "\ufffd\ufffd 2:1", "the label '\ufffd\ufffd' is not a number",
     "could not convert string to float: b'\\xff\\xfe'"),
])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_malformed_file_names_file_line_and_problem(tmp_path, text, line, shown, problem, reason, suffix):
    path = write(tmp_path / f"bad.txt{suffix}", text)
    assert load_error(path) == \
        f"LIBSVM file '{path}' is malformed at line {line} ({shown!r}): {problem} [loader: {reason}]"


def test_long_bad_lines_are_shortened_to_60_characters(tmp_path):
    def message(n_chars: int) -> tuple[str, str]:
        head = "1 1:1 "
        line = head + "x" * (n_chars - len(head))
        assert len(line) == n_chars
        path = write(tmp_path / f"long{n_chars}.txt", line.encode() + b"\n")
        return line, load_error(path)

    line, msg = message(60)
    assert f"at line 1 ({line!r}):" in msg
    line, msg = message(61)
    assert f"at line 1 ({line[:57] + '...'!r}):" in msg
    assert len(line[:57] + "...") == 60


def test_the_loaders_trailing_full_stop_is_dropped(tmp_path, monkeypatch):
    import sklearn.datasets

    def fails(*args, **kwargs):
        raise ValueError("bad SVMLIGHT_INDEX.")

    monkeypatch.setattr(sklearn.datasets, "load_svmlight_file", fails)
    path = write(tmp_path / "fine.txt", GOOD)
    assert load_error(path) == f"LIBSVM file '{path}' is malformed: bad SVMLIGHT_INDEX"


def test_a_file_that_cannot_be_read_again_still_gets_the_loaders_reason(tmp_path, monkeypatch):
    import sklearn.datasets

    path = write(tmp_path / "vanishing.txt", b"1 1:1\nabc 1:2\n")

    def fails_and_removes(*args, **kwargs):
        path.unlink()
        raise ValueError("could not convert string to float: b'abc'")

    monkeypatch.setattr(sklearn.datasets, "load_svmlight_file", fails_and_removes)
    assert load_error(path) == \
        f"LIBSVM file '{path}' is malformed: could not convert string to float: b'abc'"


# -- labels to ±1 ----------------------------------------------------------------------------------------------

def test_pm1_labels_are_kept_as_a_copy():
    y = np.array([1.0, -1.0, 1.0])
    out = to_pm1(y)
    np.testing.assert_array_equal(out, [1, -1, 1])
    out[0] = 7
    assert y[0] == 1.0
    assert to_pm1([[1], [-1]]).shape == (2,) and to_pm1([1, -1]).dtype == np.float64


def test_positive_label_picks_the_class():
    np.testing.assert_array_equal(to_pm1([-1, 1, 1], positive_label=-1), [1, -1, -1])
    np.testing.assert_array_equal(to_pm1([0, 1, 1], positive_label=0), [1, -1, -1])
    np.testing.assert_array_equal(to_pm1([2, 4, 2], positive_label="4"), [-1, 1, -1])
    np.testing.assert_array_equal(to_pm1([0.5, 1.5], positive_label=1.5), [-1, 1])
    assert to_pm1([3, 7], positive_label=7).dtype == np.float64


@pytest.mark.parametrize("name, labels, expected", [
    ("mushrooms", [1, 2, 2], [1, -1, -1]),
    ("/data/phishing.xz", [0, 1, 1], [-1, 1, 1]),
    ("svmguide1.t", [1, 0], [1, -1]),
    ("skin_nonskin.txt.bz2", [2, 1], [-1, 1]),
    ("breast-cancer", [2, 4, 4], [-1, 1, 1]),
])
def test_known_data_sets_have_their_positive_class(name, labels, expected):
    np.testing.assert_array_equal(to_pm1(labels, name=name), expected)


def test_labels_that_are_not_binary():
    with pytest.raises(DataError) as exc:
        to_pm1([0, 1, 2, 1])
    assert str(exc.value) == ("labels of the data are not binary: found values 0, 1, 2 (3 distinct); svmsim trains "
                              "binary classifiers; map the labels to two classes before loading")
    with pytest.raises(DataError) as exc:
        to_pm1([1, 1], name="iris")
    assert str(exc.value).startswith("labels of data set 'iris' are not binary: found values 1 (1 distinct); ")
    with pytest.raises(DataError) as exc:
        to_pm1(np.arange(11))
    assert "found values 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (11 distinct)" in str(exc.value)
    with pytest.raises(DataError) as exc:
        to_pm1(np.arange(10) * 0.5)
    assert "found values 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5 (10 distinct)" in str(exc.value)


def test_labels_without_a_known_positive_class():
    with pytest.raises(DataError) as exc:
        to_pm1([0, 1], name="/x/unknown.txt")
    assert str(exc.value) == (
        "labels of data set '/x/unknown.txt' are 0, 1, not -1/+1, and svmsim knows no positive class for it: set "
        "positive_label (the scenario key data.positive_label) to one of 0, 1")
    with pytest.raises(DataError) as exc:
        to_pm1([0.25, -3])
    assert str(exc.value).startswith("labels of the data are -3, 0.25, not -1/+1, ")


def test_positive_label_that_is_not_a_label():
    with pytest.raises(DataError) as exc:
        to_pm1([3, 7], positive_label="seven", name="s")
    assert str(exc.value) == "positive_label = 'seven' is not a number; the labels of data set 's' are 3, 7"
    with pytest.raises(DataError) as exc:
        to_pm1([3, 7], positive_label=[7])
    assert str(exc.value) == "positive_label = [7] is not a number; the labels of the data are 3, 7"
    with pytest.raises(DataError) as exc:
        to_pm1([3, 7], positive_label=4)
    assert str(exc.value) == "positive_label = 4 does not occur in the data: its labels are 3, 7"
    with pytest.raises(DataError) as exc:
        to_pm1([-1, 1], positive_label=0.5, name="d")
    assert str(exc.value) == "positive_label = 0.5 does not occur in data set 'd': its labels are -1, 1"
