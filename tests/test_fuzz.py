"""Seeded fuzzing of what users hand to svmsim: scenario files and LIBSVM data files.

Every mutation must end in one of two ways: the input is accepted, or svmsim refuses it with its own error
(`ScenarioError`, `DataError`) -- never another exception. Mutations of a kind that no input may pass (an unknown
key, nan or inf, an integer outside TOML's 64-bit range, text where a number belongs; a malformed LIBSVM line) must
be refused. The seeds are fixed, so a failure names a case that reproduces.
"""
from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import numpy as np
import pytest
import tomllib

from svmsim.config import load_scenario
from svmsim.data.libsvm import load_libsvm
from svmsim.errors import DataError, ScenarioError

ROOT = Path(__file__).resolve().parents[1]
SCENARIO_FILES = ("quickstart.toml", "gadget_a9a_faults.toml", "paper001_a9a.toml", "paper004_a9a.toml",
                  "paper003_a9a.toml", "paper000_fig3_synthetic.toml")
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
        # [stop] below names metrics, which the algorithm reports only when it runs: refused then (test_bqo)
        return out, f"{kind} {'.'.join(table + (key,))}", table != ("stop", "below")
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
