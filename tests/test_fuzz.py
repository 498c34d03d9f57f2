"""Seeded fuzzing of what users hand to svmsim: scenario files, LIBSVM data files and the command line (output
paths, extreme values, budgets; `test_the_command_line_fuzzer`), with a test for each bad input a user's fuzzer once
got through.

Every mutation must end in one of two ways: the input is accepted, or svmsim refuses it with its own error
(`ScenarioError`, `DataError`) -- never another exception. Mutations of a kind that no input may pass (an unknown
key, nan or inf, an integer outside TOML's 64-bit range, text where a number belongs; a malformed LIBSVM line) must
be refused. The seeds are fixed, so a failure names a case that reproduces.
"""
from __future__ import annotations

import copy
import math
import os
import random
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import tomllib

from svmsim.config import load_scenario
from svmsim.data.libsvm import load_libsvm
from svmsim.errors import DataError, ScenarioError

ROOT = Path(__file__).resolve().parents[1]
SCENARIO_FILES = ("quickstart.toml", "gadget_a9a_faults.toml", "paper001_a9a.toml", "paper004_a9a.toml",
                  "paper003_a9a.toml", "paper000_fig3_synthetic.toml", "compression_quickstart.toml")
CASES_PER_FILE = 100


def _leaves(tree, path=()):
    """(path, value) of every scalar in a scenario dict (lists count as one leaf)."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, path + (key,))
        else:
            yield path + (key,), value


def _tables(tree, path=()):
    yield path
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _tables(value, path + (key,))


def _set(tree, path, value):
    node = tree
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_DELETE = object()
_NUMBER = (int, float)


def _is_number(value) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)


def _mutate(raw: dict, rng: random.Random) -> tuple[dict, str, bool]:
    """One mutation of a scenario: (mutated copy, description, whether it must be refused)."""
    out = copy.deepcopy(raw)
    leaves = list(_leaves(out))
    numbers = [(p, v) for p, v in leaves if _is_number(v)]
    kind = rng.choice(["unknown key", "non-finite", "huge integer", "text for a number", "table for a number",
                       "drop", "sign", "scalar", "scalar"])
    if kind == "unknown key":
        table = rng.choice(list(_tables(out)))
        key = rng.choice(["epz", "Clients", "max_iteration", "colour", "x"])
        _set(out, table + (key,), rng.choice([1, 0.5, "a", True]))
        # in [stop] below an unknown name is a metric the algorithm never reports (AlgorithmInfo.metrics): refused too
        return out, f"{kind} {'.'.join(table + (key,))}", True
    if kind in ("non-finite", "huge integer", "text for a number", "table for a number") and numbers:
        path, old = rng.choice(numbers)
        new = {"non-finite": rng.choice([math.nan, math.inf, -math.inf]),
               "huge integer": rng.choice([1, -1]) * (2**64 + rng.randrange(1000)),
               "text for a number": rng.choice(["abc", "1e-3x", "", "  "]),
               "table for a number": {"value": old}}[kind]
        _set(out, path, new)
        return out, f"{kind} {'.'.join(path)} = {new!r}", True
    path, old = rng.choice(leaves)
    if kind == "drop":
        _set(out, path, _DELETE)
        return out, f"drop {'.'.join(path)}", False
    if kind == "sign" and _is_number(old):
        new = rng.choice([-old, 0, -1, 2**63 - 1, 1e308, 5e-324])
    else:
        new = rng.choice([True, False, -1, 0, 1, 1.5, 1e308, "", "x" * 300, [], [1, 2], ["a"], {}, {"a": 1}])
    _set(out, path, new)
    return out, f"{kind} {'.'.join(path)} = {new!r}"[:200], False


@pytest.mark.parametrize("name", SCENARIO_FILES)
def test_scenario_mutations_are_accepted_or_refused_clearly(name):
    raw = tomllib.loads((ROOT / "scenarios" / name).read_text())
    load_scenario(raw)                                  # the file itself is valid
    rng = random.Random(f"scenario fuzz {name}")
    accepted_bad = []
    for case in range(CASES_PER_FILE):
        mutated, what, must_refuse = _mutate(raw, rng)
        try:
            load_scenario(mutated)
        except ScenarioError as exc:
            message = str(exc)
            assert message and "Traceback" not in message, (case, what)
            assert any(word in message for word in ("allowed", "expected", "missing")), (case, what, message)
            continue
        except Exception as exc:                        # noqa: BLE001 - what the test is about
            pytest.fail(f"case {case} ({what}): {type(exc).__name__}: {exc}")
        if must_refuse:
            accepted_bad.append(f"case {case}: {what}")
    assert not accepted_bad, "bad inputs accepted:\n" + "\n".join(accepted_bad)


# -- LIBSVM files ------------------------------------------------------------------------------------------------

def _valid_lines(rng: random.Random, n: int = 12) -> list[str]:
    lines = []
    for i in range(n):
        idx = sorted(rng.sample(range(1, 30), rng.randrange(1, 6)))
        lines.append(" ".join([rng.choice(["+1", "-1"])] + [f"{j}:{rng.uniform(-3, 3):.4g}" for j in idx]))
    return lines


_MUST_REFUSE = {
    "nan value": lambda tok, rng: tok.split(":")[0] + ":" + rng.choice(["nan", "NaN", "inf", "-inf", "Infinity"]),
    "text value": lambda tok, rng: tok.split(":")[0] + ":" + rng.choice(["abc", "1..2", "0x1", ""]),
    "text index": lambda tok, rng: rng.choice(["a", "1.5", "x1", ""]) + ":" + tok.split(":")[1],
    "negative index": lambda tok, rng: "-" + tok.split(":")[0] + ":" + tok.split(":")[1],
    "huge index": lambda tok, rng: str(10**19 + rng.randrange(10**6)) + ":" + tok.split(":")[1],
    "no colon": lambda tok, rng: tok.replace(":", rng.choice(["", "=", " "])) if rng.random() < 0.5
    else tok.replace(":", ""),
}


def _mutate_file(rng: random.Random) -> tuple[str, str, bool]:
    lines = _valid_lines(rng)
    row = rng.randrange(len(lines))
    label, *tokens = lines[row].split()
    kind = rng.choice(list(_MUST_REFUSE) + ["bad label", "repeated index", "blank lines", "comment", "label only",
                                            "spaces", "big index"])
    if kind in _MUST_REFUSE:
        i = rng.randrange(len(tokens))
        tokens[i] = _MUST_REFUSE[kind](tokens[i], rng)
        if kind == "no colon" and " " in tokens[i]:
            kind = "text value"                         # '3 0.5' reads as a token without a colon
        lines[row] = " ".join([label] + tokens)
        must = kind != "no colon" or ":" not in tokens[i]
        return "\n".join(lines) + "\n", f"{kind}: line {row + 1} = {lines[row]!r}", must
    if kind == "bad label":
        lines[row] = " ".join([rng.choice(["nan", "inf", "abc", "+"])] + tokens)
        return "\n".join(lines) + "\n", f"{kind}: line {row + 1} = {lines[row]!r}", True
    if kind == "repeated index":
        if len(tokens) < 2:
            tokens = tokens * 2
        tokens[1] = tokens[0]
        lines[row] = " ".join([label] + tokens)
        return "\n".join(lines) + "\n", f"{kind}: line {row + 1} = {lines[row]!r}", True
    if kind == "blank lines":
        lines.insert(row, "")
    elif kind == "comment":
        lines[row] += " # a comment"
    elif kind == "label only":
        lines[row] = label
    elif kind == "spaces":
        lines[row] = "  " + "   ".join([label] + tokens) + "\t"
    elif kind == "big index":
        lines[row] = " ".join([label] + tokens + [f"{10**6}:1"])
    return "\n".join(lines) + "\n", f"{kind}: line {row + 1}", False


def test_libsvm_mutations_are_loaded_or_refused_with_the_line(tmp_path):
    rng = random.Random("libsvm fuzz")
    accepted_bad = []
    for case in range(400):
        text, what, must_refuse = _mutate_file(rng)
        path = tmp_path / f"case{case}.svm"
        path.write_text(text)
        try:
            X, y = load_libsvm(path)
        except DataError as exc:
            assert str(path) in str(exc), (case, what, str(exc))
            assert "line" in str(exc), (case, what, str(exc))
            continue
        except Exception as exc:                        # noqa: BLE001 - what the test is about
            pytest.fail(f"case {case} ({what}): {type(exc).__name__}: {exc}")
        assert np.isfinite(X.data).all() and np.isfinite(y).all(), (case, what)
        if must_refuse:
            accepted_bad.append(f"case {case}: {what}")
    assert not accepted_bad, "bad files accepted:\n" + "\n".join(accepted_bad)


# -- the cases that were once accepted, word for word ----------------------------------------------------------

def _quickstart() -> dict:
    return tomllib.loads((ROOT / "scenarios" / "quickstart.toml").read_text())


@pytest.mark.parametrize("key, value, message", [
    ("algorithm.beta", math.inf, ("scenario: [algorithm] beta = inf is not a finite number; allowed: finite "
                                  "numbers (nan and inf are refused everywhere in a scenario) (set by the override "
                                  "algorithm.beta=inf)")),
    ("algorithm.clients", 2**64, ("scenario: [algorithm] clients = 18446744073709551616 is outside TOML's 64-bit "
                                  "integer range; allowed: integers from -2^63 to 2^63 - 1 (set by the override "
                                  "algorithm.clients=18446744073709551616)")),
    ("data.positive_label", -2**63 - 1, ("scenario: [data] positive_label = -9223372036854775809 is outside "
                                         "TOML's 64-bit integer range; allowed: integers from -2^63 to 2^63 - 1 "
                                         "(set by the override data.positive_label=-9223372036854775809)")),
])
def test_values_outside_the_machine_range_are_refused(key, value, message):
    with pytest.raises(ScenarioError) as err:
        load_scenario(_quickstart(), {key: value})
    assert str(err.value) == message


def test_a_range_error_and_a_schema_error_are_reported_together():
    raw = _quickstart()
    raw["algorithm"]["beta"] = math.nan                 # refused by the schema ('auto' or nan > 0, which is false)
    raw["algorithm"]["clients"] = 2**64
    raw["stop"]["gap"] = math.inf                       # the schema's own message (with its range) is kept
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw)
    lines = str(err.value).splitlines()
    assert lines[0] == "scenario has 3 errors:"
    assert "  [algorithm] beta = nan is not allowed; allowed: 'auto' or a number > 0" in lines
    assert any(line.startswith("  [algorithm] clients = 18446744073709551616 is outside TOML's 64-bit integer range")
               for line in lines)
    assert any(line.startswith("  [stop] gap = inf is not a finite number; allowed: a number") and "everywhere"
               not in line for line in lines)


def test_data_dir_is_refused_where_nothing_is_read():
    raw = {"name": "x", "data": {"name": "synthetic", "n": 50, "d": 3, "data_dir": "/somewhere"},
           "algorithm": {"name": "saddle-svc"}, "stop": {"max_iterations": 10}}
    with pytest.raises(ScenarioError, match=r"\[data\] data_dir = \"/somewhere\" does not apply: synthetic data is "
                                            r"generated, not read from a data directory; allowed: no data_dir"):
        load_scenario(raw)
    raw["data"] = {"name": "iris", "data_dir": "/somewhere"}
    with pytest.raises(ScenarioError, match="'iris' ships with svmsim"):
        load_scenario(raw)


def test_a_sweep_table_error_names_its_key_and_what_is_allowed():
    raw = _quickstart()
    raw["sweep"] = {"title": 1.5, "colour": "red"}
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw)
    assert str(err.value) == ("scenario has 2 errors:\n  sweep.title = 1.5 has the wrong type: expected a string\n"
                              "  unknown key 'sweep.colour'; allowed keys: grid, variants, plot, x, figures, title, "
                              "target, target_metric, targets, table_metrics, against, against_y, against_by, "
                              "against_fit, exclude, trials, trials_columns, warmup")


@pytest.mark.parametrize("line, problem", [
    # read by the reader, refused by svmsim: no "[loader: ...]" part
    ("+1 1:0.5 2:nan", "line 2 ('+1 1:0.5 2:nan'): the feature value in '2:nan' is not a finite number"),
    ("+1 1:-inf", "line 2 ('+1 1:-inf'): the feature value in '1:-inf' is not a finite number"),
    ("inf 1:1", "line 2 ('inf 1:1'): the label 'inf' is not a finite number"),
    # refused by the reader, explained by svmsim
    ("+1 1:1 12345678901234567890:1", ("line 2 ('+1 1:1 12345678901234567890:1'): the feature index in "
                                       "'12345678901234567890:1' is too large; allowed: indices up to 2^31 - 1 "
                                       "[loader: Python int too large to convert to C long]")),
    ("+1 1:1 2147483648:1", ("line 2 ('+1 1:1 2147483648:1'): the feature index in '2147483648:1' is too large; "
                             "allowed: indices up to 2^31 - 1 [loader: value too large to convert to int]")),
])
def test_libsvm_values_that_no_solver_can_use_are_refused_with_the_line(tmp_path, line, problem):
    path = tmp_path / "bad.svm"
    path.write_text(f"-1 1:0.25\n{line}\n-1 2:1\n")
    with pytest.raises(DataError) as err:
        load_libsvm(path)
    assert str(err.value) == f"LIBSVM file '{path}' is malformed at {problem}"


def test_the_largest_index_the_reader_takes_is_taken(tmp_path):
    path = tmp_path / "wide.svm"
    path.write_text("-1 1:0.25\n+1 2147483647:1\n")
    X, _ = load_libsvm(path)
    assert X.shape == (2, 2**31 - 1) and X[1, 2**31 - 2] == 1.0
    path.write_text("-1 1:0.25\n+1 2147483647:1\n-1 1:abc\n")          # the error is on line 3, not line 2
    with pytest.raises(DataError, match=r"malformed at line 3 \('-1 1:abc'\): the feature value in '1:abc' is not"):
        load_libsvm(path)


@pytest.mark.parametrize("value, refused", [(2**63 - 1, False), (-2**63, False), (2**63, True), (-2**63 - 1, True)])
def test_the_64_bit_range_is_inclusive(value, refused):
    raw = _quickstart()
    raw["data"]["positive_label"] = value
    raw["sweep"] = {"targets": [0.5, math.nan], "exclude": [{"seed": value}]}      # inside lists and tables too
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw)
    lines = [line.strip().removeprefix("scenario: ") for line in str(err.value).splitlines()
             if not line.startswith("scenario has ")]
    assert ("[sweep] targets = nan is not a finite number; allowed: finite numbers (nan and inf are refused "
            "everywhere in a scenario)") in lines
    outside = [line for line in lines if "outside TOML's 64-bit integer range" in line]
    assert [line.split(" = ")[0] for line in outside] == (["[data] positive_label", "[sweep] exclude.seed"]
                                                          if refused else [])


def test_synthetic_data_larger_than_the_machine_is_refused_before_it_is_generated():
    from svmsim.data.synthetic import make_separable, make_sparse_nonseparable

    with pytest.raises(ScenarioError, match=r"synthetic data: n = 100 and d = 4,611,686,018,427,387,904 make .* "
                                            r"GiB to generate; this machine has .* GiB; allowed: n \* density \* d"):
        make_separable(100, 2**62)
    X, _ = make_sparse_nonseparable(20, 10**7, density=1e-6)   # sparse: only the stored values count
    assert X.shape == (20, 10**7) and X.nnz == 20 * 10


def test_the_cli_turns_running_out_of_memory_into_exit_code_2(monkeypatch, capsys):
    from svmsim import cli

    def too_big(args):
        raise MemoryError("Unable to allocate 74.5 GiB for an array with shape (100, 100000000)")

    monkeypatch.setattr(cli, "_cmd_validate", too_big)
    assert cli.main(["validate", str(ROOT / "scenarios" / "quickstart.toml")]) == 2
    said = capsys.readouterr().err
    assert said.startswith("svmsim: error: out of memory (Unable to allocate 74.5 GiB")
    assert "allowed: smaller data (n, d), fewer nodes or hosts" in " ".join(said.split())


# -- what a user's fuzzer found (issue "Honest numbers", bad inputs that still got through) ------------------------

def _cli(*argv) -> tuple[int, str, str]:
    """`svmsim ARGV` in this process: (exit status, stdout, stderr); any exception escapes (a traceback)."""
    import contextlib
    import io

    from svmsim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _scenario_file(directory: Path, data: dict, algorithm: dict | None = None, stop: dict | None = None,
                   **extra) -> Path:
    from svmsim.config import dump_toml

    raw = {"name": "fuzz", "seed": 0, "data": data, "algorithm": algorithm or {"name": "saddle-svc"},
           "stop": stop or {"max_iterations": 20}, "output": {"dir": str(directory / "runs"), "eval_every": 10,
                                                               "plots": False, "progress": False}, **extra}
    path = directory / f"scenario-{abs(hash(repr(raw))) % 10**8}.toml"
    path.write_text(dump_toml(raw))
    return path


def _refused(rc: int, err: str, *words: str) -> str:
    said = " ".join(err.split())
    assert rc == 2 and said.startswith("svmsim: error: ") and "Traceback" not in err, (rc, err)
    for word in words:
        assert word in said, (word, said)
    return said


def test_train_and_test_files_are_read_with_one_index_convention(tmp_path):
    train, test = tmp_path / "train.svm", tmp_path / "test.svm"
    train.write_text("-1 0:1 1:2\n+1 0:3 2:1\n-1 1:1\n+1 2:2\n")      # 0-based: index 0 is here only
    test.write_text("-1 1:1 2:2\n+1 1:3 3:1\n")
    from svmsim.data import load_dataset

    ds = load_dataset(str(train), test=str(test))
    assert ds.meta["index_base"] == 0 and ds.d == 4
    assert ds.X_test.toarray().tolist() == [[0, 1, 2, 0], [0, 3, 0, 1]]    # index i is column i in both files
    assert ds.X.toarray().tolist() == [[1, 2, 0, 0], [3, 0, 1, 0], [0, 1, 0, 0], [0, 0, 2, 0]]
    train.write_text("-1 1:1 2:2\n+1 1:3 3:1\n-1 2:1\n+1 3:2\n")       # both 1-based: index 1 is column 0
    ds = load_dataset(str(train), test=str(test))
    assert ds.meta["index_base"] == 1 and ds.d == 3 and ds.X_test.toarray().tolist() == [[1, 2, 0], [3, 0, 1]]
    with pytest.raises(DataError, match=r"has feature index 3 \(read 1-based: column 3\), more than n_features = 2; "
                                        r"allowed: n_features >= 3"):
        load_dataset(str(train), test=str(test), n_features=2)


@pytest.mark.parametrize("out, overwrite, problem", [
    ("/proc/svmsim-fuzz", False, "is on a proc file system"),
    ("/dev/null", True, "exists and is a character device, not a directory"),
    ("/dev/null", False, "exists and is a character device, not a directory"),
    ("FILE", False, "exists and is a regular file, not a directory"),
    ("FILE", True, "exists and is a regular file, not a directory"),
    ("FILE/below", False, "lies below"),
    ("a" * 300, False, "has a name of 300 bytes, too long here"),
    ("a\0b", False, "contains a NUL character"),
])
def test_output_paths_the_os_refuses_are_svmsim_errors_before_any_work(tmp_path, monkeypatch, out, overwrite,
                                                                       problem):
    from svmsim import runner

    regular = tmp_path / "file"
    regular.write_text("keep me")
    out = out.replace("FILE", str(regular)) if out.startswith("FILE") else out
    out = str(tmp_path / out) if not out.startswith("/") else out
    monkeypatch.setattr(runner, "make_dataset", lambda spec: pytest.fail("the data were loaded"))
    scenario = _scenario_file(tmp_path, {"name": "iris"})
    said = _refused(*_cli("run", scenario, "--out", out, *(["--overwrite"] if overwrite else []))[::2],
                    problem, "allowed:")
    assert said.count("svmsim: error:") == 1
    assert regular.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == [
        "file", scenario.name]


def test_an_existing_run_directory_is_refused_before_the_reference_solve(tmp_path, monkeypatch):
    import svmsim.algorithms.bqo.build as bqo_build

    (tmp_path / "done").mkdir()
    monkeypatch.setattr(bqo_build, "reference_optimum", lambda *a, **k: pytest.fail("the reference was solved"))
    scenario = _scenario_file(tmp_path, {"name": "iris"}, {"name": "bqo-e", "workers": 2})
    _refused(*_cli("run", scenario, "--out", tmp_path / "done")[::2], "already exists", "--overwrite")


def test_output_dir_with_a_nul_is_refused_at_validation(tmp_path):
    scenario = _scenario_file(tmp_path, {"name": "iris"})
    _refused(*_cli("validate", scenario, "--set", 'output.dir="a\\u0000b"')[::2], "[output] dir",
             "contains a NUL character; allowed: a directory path without NUL characters")


@pytest.mark.parametrize("key, value", [("data.n_features", 2**62), ("stop.max_iterations", 2**63 - 1),
                                        ("output.eval_every", 2**63 - 1), ("stop.max_rounds", 10**12 + 1),
                                        ("stop.max_scalars", 2**62)])
def test_budgets_and_sizes_past_what_is_sane_are_refused(tmp_path, key, value):
    scenario = _scenario_file(tmp_path, {"name": "iris"})
    _refused(*_cli("validate", scenario, "--set", f"{key}={value}")[::2], "is out of range; allowed: an integer in")


def _libsvm(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("value", ["1.7e308", "-1.7e308", "1e160", "1e101"])
@pytest.mark.parametrize("algorithm", ["sklearn-svc", "pragam", "gadget", "saddle-svc", "bqo-e", "tron"])
def test_feature_values_too_large_to_train_on_are_refused(tmp_path, value, algorithm):
    data = _libsvm(tmp_path / "big.svm", [f"-1 1:{value} 2:1", "+1 1:-1 2:2", "-1 1:0.5", f"+1 2:{value}"])
    extra = {"topology": {"kind": "ring"}} if algorithm == "gadget" else {}
    rc, _, err = _cli("run", _scenario_file(tmp_path, {"name": str(data)}, {"name": algorithm}, **extra), "-q",
                      "--out", tmp_path / "run")
    _refused(rc, err, "feature values of magnitude up to", "allowed: magnitudes up to 1e+100", "max_abs")
    assert not (tmp_path / "run").exists() and not (tmp_path / ".run.incomplete").exists()


def test_huge_values_can_be_scaled_and_subnormal_or_zero_data_are_refused(tmp_path):
    from svmsim.data import load_dataset

    big = _libsvm(tmp_path / "big.svm", ["-1 1:1.7e308 2:1", "+1 1:-1.7e308 2:2"])
    assert abs(abs(load_dataset(str(big), scale="max_abs").X).max() - 1.0) < 1e-12
    with pytest.raises(DataError, match=r"after scale = 'unit_box'\) has feature values in its training set that "
                                        r"are not finite"):
        load_dataset(str(big), scale="unit_box")
    tiny = _libsvm(tmp_path / "tiny.svm", ["-1 1:1e-320 2:-2e-320", "+1 1:-3e-320 2:4e-320"])
    with pytest.raises(DataError, match=r"largest feature magnitude .* is 4e-320; allowed: a largest magnitude of "
                                        r"at least 1e-100"):
        load_dataset(str(tiny))
    zero = _libsvm(tmp_path / "zero.svm", ["-1 1:0", "+1 2:0"])
    with pytest.raises(DataError, match="is zero; there is nothing to separate"):
        load_dataset(str(zero), n_features=2)


def test_pragam_refuses_all_zero_data_instead_of_dividing_by_zero():
    from svmsim.algorithms.registry import get_algorithm
    from svmsim.data.registry import Dataset
    from svmsim.deployment import Problem

    info = get_algorithm("pragam")
    y = np.array([-1.0, 1.0, -1.0, 1.0])
    ds = Dataset("zeros", np.zeros((4, 3)), y)
    with pytest.raises(DataError, match="every training point of data set 'zeros' is zero"):
        info.build(info.Params(workers=1), Problem(ds, seed=0))


def test_a_labels_only_file_is_refused(tmp_path):
    data = _libsvm(tmp_path / "labels.svm", ["-1", "+1", "-1", "+1"])
    rc, _, err = _cli("run", _scenario_file(tmp_path, {"name": str(data)}, {"name": "bqo-e", "workers": 2}),
                      "-q", "--out", tmp_path / "run")
    _refused(rc, err, "has no feature values: every line of", "holds only a label; allowed:")


def test_stop_below_a_metric_the_algorithm_never_reports_is_refused_at_validation(tmp_path):
    scenario = _scenario_file(tmp_path, {"name": "iris"}, {"name": "bqo-e", "workers": 2},
                              {"max_iterations": 20, "below": {"hull_distance": 0.1}})
    said = _refused(*_cli("validate", scenario)[::2], "below names metric 'hull_distance', which algorithm 'bqo-e' "
                                                      "never reports (")
    assert "rel_dual" in said and "scalars" in said
    fine = _scenario_file(tmp_path, {"name": "iris"}, {"name": "bqo-e", "workers": 2},
                          {"max_iterations": 20, "below": {"rel_dual": 0.1}})
    assert _cli("validate", fine)[0] == 0


def test_an_algorithm_that_declares_no_metrics_has_below_checked_when_it_reports(tmp_path, monkeypatch):
    import dataclasses

    from svmsim.algorithms import registry

    info = registry.get_algorithm("bqo-e")
    monkeypatch.setitem(registry.ALGORITHMS, "bqo-e", dataclasses.replace(info, metrics=None))
    scenario = _scenario_file(tmp_path, {"name": "iris"}, {"name": "bqo-e", "workers": 2},
                              {"max_iterations": 20, "below": {"rel_dul": 0.1}})
    assert _cli("validate", scenario)[0] == 0
    _refused(*_cli("run", scenario, "-q", "--out", tmp_path / "r")[::2],
             "below names metric 'rel_dul', which algorithm 'bqo-e' does not report; allowed:", "rel_dual")
    assert not (tmp_path / "r").exists() and not (tmp_path / ".r.incomplete").exists()


def test_every_built_in_algorithm_declares_its_metrics():
    from svmsim.algorithms.registry import load_all

    built_in = {name: info for name, info in load_all().items() if info.module.startswith("svmsim.")}
    assert len(built_in) >= 31                  # other tests' and installed plugins' algorithms are left out
    assert [name for name, info in sorted(built_in.items()) if info.metrics is None] == []


def test_sklearn_svc_honours_the_iteration_budget_and_refuses_a_time_budget(tmp_path):
    from svmsim.runner import run

    res = run(str(_scenario_file(tmp_path, {"name": "iris"}, {"name": "sklearn-svc"}, {"max_iterations": 3})),
              write=False, progress=False)
    assert res.final["iteration"] <= 3 and res.stop_reason == "iteration budget"
    scenario = _scenario_file(tmp_path, {"name": "iris"}, {"name": "sklearn-svc"}, {"max_seconds": 5.0})
    _refused(*_cli("run", scenario, "-q", "--out", tmp_path / "r")[::2], "[stop] max_seconds = 5.0",
             "cannot stop on max_seconds; allowed: max_iterations")
    assert not (tmp_path / "r").exists() and not (tmp_path / ".r.incomplete").exists()


def test_validate_finds_the_data_files_without_data(tmp_path):
    missing = _scenario_file(tmp_path, {"name": str(tmp_path / "missing.svm")})
    _refused(*_cli("validate", missing)[::2], "missing.svm' does not exist; allowed:")
    nan = _libsvm(tmp_path / "nan.svm", ["-1 1:1", "+1 1:nan"])
    _refused(*_cli("validate", _scenario_file(tmp_path, {"name": str(nan)}))[::2],
             "malformed at line 2 ('+1 1:nan'): the feature value in '1:nan' is not a finite number")
    good = _libsvm(tmp_path / "good.svm", ["-1 1:1", "+1 1:2"])
    rc, out, _ = _cli("validate", _scenario_file(tmp_path, {"name": str(good)}))
    assert rc == 0 and f"# data: {good} found; the first 64 KiB of each read (--data reads them whole)" in out


def test_every_json_file_of_a_run_is_strict(tmp_path):
    import json

    rc, _, err = _cli("run", _scenario_file(tmp_path, {"name": "iris"}, {"name": "saddle-dsvc", "clients": 2}),
                      "-q", "--out", tmp_path / "run")
    assert rc == 0, err

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    summary = json.loads((tmp_path / "run" / "summary.json").read_text(), parse_constant=refuse)
    assert summary["algorithm_info"]["cap"] == "inf"                   # the hard margin's cap, written strictly
    json.loads((tmp_path / "run" / "ledger.json").read_text(), parse_constant=refuse)


def test_list_names_its_own_data_dir_option_and_explains_partition_keys():
    rc, out, _ = _cli("list", "partitions")
    said = " ".join(out.split())
    assert rc == 0 and "Key: skew, the fraction of every part reserved" in said and "allowed: a number in [0, 1]" in said
    assert "Key: alpha, the Dirichlet concentration" in said and "allowed: a number > 0" in said


# -- the seeded fuzzer of the command line -------------------------------------------------------------------------
#
# Each case is one `svmsim` command run in this process (cli.main): it must exit 0 or 2, never raise (a traceback),
# and a case that no input may pass (`must_refuse`) must exit 2 with one readable "svmsim: error:" paragraph; a
# refused run leaves no directory behind. Most cases stop at validation or at loading a small file (milliseconds);
# only `TINY_RUNS` of them run. Each case's budget is CASE_SECONDS.

FUZZ_CASES = 1200
TINY_RUNS = 4
CASE_SECONDS = 60.0
_SPECIAL_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/proc/self/status", "/proc/version")
_PSEUDO_DIRS = ("/proc", "/proc/self", "/sys", "/sys/kernel", "/dev")


class _Case(NamedTuple):
    kind: str
    argv: list
    must_refuse: bool
    out: Path | None = None                 # a run directory that must not exist after a refusal
    check: Any = None                       # f() -> None: more to check after an accepted case


def _fuzz_output_path(rng: random.Random, root: Path, scenario: Path) -> _Case:
    regular = root / "a-file"
    if not regular.exists():
        regular.write_text("not a directory")
    pick = rng.randrange(6)
    if pick == 0:
        out = Path(rng.choice(_SPECIAL_FILES))
    elif pick == 1:
        out = Path(rng.choice(_PSEUDO_DIRS)) / f"svmsim-fuzz-{rng.randrange(10**6)}"
    elif pick == 2:
        out = regular
    elif pick == 3:
        out = regular / "below" / f"x{rng.randrange(100)}"
    elif pick == 4:
        out = root / ("n" * rng.randrange(244, 400))
    else:
        name = "".join(rng.choice("ab\0") for _ in range(rng.randrange(2, 12)))
        out = root / (name if "\0" in name else name + "\0")
    overwrite = ["--overwrite"] if rng.random() < 0.5 else []
    if rng.random() < 0.2 and "\0" in str(out):            # the same through the scenario's output.dir
        return _Case("output.dir NUL", ["run", scenario, "-q", "--set", f'output.dir="{root}/x\\u0000y"'], True)
    return _Case(f"output {str(out)[:60]!r}{' --overwrite' if overwrite else ''}",
                 ["run", scenario, "-q", "--out", out, *overwrite], True,
                 out=None if pick in (0, 2) else out)


def _fuzz_extreme_values(rng: random.Random, root: Path, case: int) -> _Case:
    exponent = rng.uniform(101, 308.2)
    big = min(10.0 ** exponent, 1.7e308) * rng.choice([-1, 1])
    rows = [f"{rng.choice(['-1', '+1'])} " + " ".join(f"{j}:{rng.uniform(-2, 2):.3g}" for j in (1, 2, 3))
            for _ in range(8)]
    rows[rng.randrange(8)] += f" 4:{big!r}"
    rows[0], rows[1] = "-1 " + rows[0].split(" ", 1)[1], "+1 " + rows[1].split(" ", 1)[1]
    path = _libsvm(root / f"extreme{case}.svm", rows)
    scale = rng.choice(["none", "none", "unit_box", "max_abs"])
    spec = {"name": str(path), "scale": scale}

    def check():                                # a scaling may make the values usable: then they must be
        from svmsim.data import load_dataset
        from svmsim.data.registry import FEATURE_LIMIT

        X = load_dataset(**spec).X
        values = X.data if hasattr(X, "data") and not isinstance(X, np.ndarray) else np.asarray(X)
        assert np.isfinite(values).all() and np.abs(values).max() <= FEATURE_LIMIT, (big, scale)

    return _Case(f"extreme value {big:.3g} (scale {scale})", ["validate", "--data", _scenario_file(root, spec)],
                 scale == "none", check=check)


def _fuzz_labels_only(rng: random.Random, root: Path, case: int) -> _Case:
    labels = ["-1", "+1"] + [rng.choice(["-1", "+1", "1", "-1.0"]) for _ in range(rng.randrange(0, 10))]
    path = _libsvm(root / f"labels{case}.svm", [lab + rng.choice(["", " ", "\t", " # comment"]) for lab in labels])
    return _Case("labels only", ["validate", "--data", _scenario_file(root, {"name": str(path)})], True)


def _fuzz_index_zero(rng: random.Random, root: Path, case: int) -> _Case:
    """Index 0 in one of two files: both are read 0-based, so index i is column i in train and test alike."""
    d = rng.randrange(2, 8)
    zero_in = rng.choice(["train", "test"])

    def rows(name, count):
        out = []
        for i in range(count):
            idx = sorted(rng.sample(range(1, d + 1), rng.randrange(1, d)))
            if name == zero_in and i == 0:
                idx = [0] + idx
            out.append(("-1" if i % 2 else "+1") + " " + " ".join(f"{j}:{j + 0.5}" for j in idx))
        return out

    train = _libsvm(root / f"train{case}.svm", rows("train", 6))
    test = _libsvm(root / f"test{case}.svm", rows("test", 4))

    def check():
        from svmsim.data import load_dataset

        ds = load_dataset(str(train), test=str(test))
        for X in (ds.X, ds.X_test):             # value j + 0.5 sits in column j: no file is shifted
            coo = X.tocoo()
            assert np.array_equal(coo.data, coo.col + 0.5), (zero_in, X.toarray())

    return _Case(f"index 0 in the {zero_in} file", ["validate", "--data",
                                                     _scenario_file(root, {"name": str(train), "test": str(test)})],
                 False, check=check)


def _fuzz_budget(rng: random.Random, root: Path, scenario: Path) -> _Case:
    key = rng.choice(["stop.max_iterations", "stop.max_rounds", "output.eval_every", "stop.max_scalars",
                      "data.n_features", "schedule.max_messages"])
    value = rng.choice([2**63 - 1, 2**62, 2**63 - rng.randrange(1, 10**6), 10**15 + 1, 2**31])
    limit = {"stop.max_scalars": 10**15, "schedule.max_messages": 10**15, "data.n_features": 2**31 - 1}.get(key, 10**12)
    extra = ["--set", f"{key}={value}"]
    return _Case(f"{key} = {value}", ["validate", scenario, *extra], value > limit)


def _fuzz_wide_line(rng: random.Random, root: Path, case: int) -> _Case:
    width = rng.choice([10**3, 10**4, 5 * 10**4])
    top = rng.choice([width, 2**31 - 1, 2**31, 10**12])
    idx = sorted(set(rng.sample(range(1, width + 1), min(width, 2000))) | {top})
    wide = "+1 " + " ".join(f"{j}:{rng.uniform(-1, 1):.3g}" for j in idx)
    path = _libsvm(root / f"wide{case}.svm", ["-1 1:0.5 2:-0.25", wide, "-1 3:1"])
    return _Case(f"wide line, {len(idx)} features up to index {top}",
                 ["validate", "--data", _scenario_file(root, {"name": str(path)})], top > 2**31 - 1)


def _fuzz_scenario_file(rng: random.Random, root: Path, raws: dict, case: int) -> _Case:
    from svmsim.config import dump_toml

    name = rng.choice(sorted(raws))
    mutated, what, must_refuse = _mutate(raws[name], rng)
    path = root / f"mutated{case}.toml"
    try:
        path.write_text(dump_toml(mutated))
    except (TypeError, ValueError):             # a value TOML cannot hold at all (tomllib never gives one)
        return _fuzz_scenario_file(rng, root, raws, case)
    return _Case(f"{name}: {what}", ["validate", path], must_refuse)


def _fuzz_cases(root: Path, count: int):
    rng = random.Random("svmsim cli fuzz")
    scenario = _scenario_file(root, {"name": "iris"})
    raws = {name: tomllib.loads((ROOT / "scenarios" / name).read_text()) for name in SCENARIO_FILES}
    makers = [lambda i: _fuzz_output_path(rng, root, scenario), lambda i: _fuzz_extreme_values(rng, root, i),
              lambda i: _fuzz_labels_only(rng, root, i), lambda i: _fuzz_index_zero(rng, root, i),
              lambda i: _fuzz_budget(rng, root, scenario), lambda i: _fuzz_wide_line(rng, root, i),
              lambda i: _fuzz_scenario_file(rng, root, raws, i), lambda i: _fuzz_scenario_file(rng, root, raws, i)]
    for i in range(count):
        yield makers[i % len(makers)](i)


def _tiny_runs(root: Path):
    """The cases that run: each bad-input class's nearest valid input, trained for a few iterations."""
    train = _libsvm(root / "run-train.svm", ["-1 0:1 1:-2", "+1 0:-1 2:3", "-1 1:-1 2:0.5", "+1 0:-2 2:1.5"] * 3)
    test = _libsvm(root / "run-test.svm", ["-1 1:-1", "+1 2:2", "+1 3:1"])
    big = _libsvm(root / "run-big.svm", ["-1 1:1.7e308 2:-1", "+1 1:-1e200 2:1", "-1 1:3e307", "+1 2:1e250"] * 3)
    yield _Case("run: index 0 in the training file only", [
        "run", _scenario_file(root, {"name": str(train), "test": str(test)}, {"name": "saddle-svc"}), "-q",
        "--out", root / "run1"], False)
    yield _Case("run: huge values scaled by max_abs", [
        "run", _scenario_file(root, {"name": str(big), "scale": "max_abs"}, {"name": "pragam", "workers": 2}), "-q",
        "--out", root / "run2"], False)
    yield _Case("run: sklearn-svc with an iteration budget", [
        "run", _scenario_file(root, {"name": "iris"}, {"name": "sklearn-svc"}, {"max_iterations": 5}), "-q",
        "--out", root / "run3"], False)
    yield _Case("run: a budget at the limit, stopped by another rule", [
        "run", _scenario_file(root, {"name": "iris"}, {"name": "bqo-e", "workers": 2},
                              {"max_iterations": 10**12, "max_seconds": 2.0}), "-q", "--out", root / "run4"], False)


def _run_case(case: _Case) -> float:
    import json
    import time

    started = time.perf_counter()
    try:
        rc, out, err = _cli(*case.argv)
    except BaseException as exc:                # noqa: BLE001 - a traceback is what the fuzzer looks for
        raise AssertionError(f"{case.kind}: {type(exc).__name__}: {exc}") from None
    seconds = time.perf_counter() - started
    assert seconds < CASE_SECONDS, (case.kind, seconds)
    assert rc in (0, 2), (case.kind, rc, err)
    if rc == 2:
        said = " ".join(err.split())
        assert said.startswith("svmsim: error: ") and said.count("svmsim: error:") == 1, (case.kind, err)
        assert "Traceback" not in err and len(said) > 30, (case.kind, err)
        if case.out is not None:
            hidden = case.out.parent / f".{case.out.name}.incomplete"
            assert not (os.path.lexists(case.out) and "\0" not in str(case.out)) or case.out.is_file(), case.kind
            assert "\0" in str(case.out) or len(case.out.name) > 243 or not os.path.lexists(hidden), case.kind
        return seconds
    assert not case.must_refuse, f"accepted bad input: {case.kind}"
    if case.check is not None:
        case.check()
    if case.argv[0] == "run":
        run_dir = Path(out.strip())
        for name in ("summary.json", "ledger.json"):
            if (run_dir / name).exists():
                json.loads((run_dir / name).read_text(), parse_constant=lambda c: pytest.fail(f"{name}: {c}"))
        final = json.loads((run_dir / "summary.json").read_text())["final"]
        numbers = [v for v in final.values() if isinstance(v, float)]
        assert all(math.isfinite(v) for v in numbers if v == v), (case.kind, final)   # nan: a metric not computed
    return seconds


def test_the_command_line_fuzzer(tmp_path, capsys):
    """FUZZ_CASES seeded cases over output paths, extreme values, labels-only files, index 0 in one file of two,
    2^63 budgets, very wide lines and mutated scenario files, plus TINY_RUNS real runs."""
    import time

    started = time.perf_counter()
    seconds = [_run_case(case) for case in _fuzz_cases(tmp_path, FUZZ_CASES)]
    seconds += [_run_case(case) for case in _tiny_runs(tmp_path)]
    wall = time.perf_counter() - started
    with capsys.disabled():
        print(f"\ncommand-line fuzzer: {len(seconds)} cases in {wall:.1f} s (slowest {max(seconds):.2f} s)")
    assert len(seconds) == FUZZ_CASES + TINY_RUNS >= 1000
