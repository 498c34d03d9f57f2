"""Loading a scenario: a TOML file or a dict, dotted-key overrides (``engine.name=ray`` on the command line),
validation."""
from __future__ import annotations

import copy
import datetime as _dt
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping

from pydantic import ValidationError

from svmsim.errors import ScenarioError

from .messages import error_from_validation
from .schema import Scenario
from .sweep_table import check_sweep_table
from .values import normalise, out_of_machine_range, show


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def read_toml(path: Path, where: str) -> dict[str, Any]:
    """The contents of a TOML file; a ScenarioError (naming the file as ``where``) says why it cannot be read."""
    if not path.exists():
        full = "" if path.is_absolute() else f" (looked for {path.absolute()})"
        raise ScenarioError(f"scenario file '{where}' does not exist{full}")
    if not path.is_file():
        raise ScenarioError(f"scenario file '{where}' is not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{where} is not valid TOML: it is not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file '{where}': {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_POSITION.search(msg)
        if m:
            msg = f"line {m.group(1)}, column {m.group(2)}: {msg[:m.start()]}"
        else:
            msg = msg.replace(" (at end of document)", "")
            if msg != str(exc):
                msg = f"at the end of the file: {msg}"
        raise ScenarioError(f"{where} is not valid TOML: {msg}") from None


def apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any] | None, where: str = "scenario") \
        -> dict[str, Any]:
    """Set dotted keys (``{"engine.name": "ray", "seed": 3}``) in a copy of the raw scenario dict."""
    out = copy.deepcopy(raw)
    for dotted, value in (overrides or {}).items():
        if not isinstance(dotted, str) or not dotted or any(not p for p in dotted.split(".")):
            raise ScenarioError(f"{where}: override key {dotted!r} is invalid; allowed: dotted keys such as "
                                "'engine.name' or 'algorithm.eps'")
        parts = dotted.split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                prefix = ".".join(parts[: i + 1])
                raise ScenarioError(f"{where}: override {dotted} cannot be applied: {prefix} = {show(child)} is "
                                    "not a table")
            node = child
        node[parts[-1]] = normalise(value)
    return out


def load_scenario(source: str | os.PathLike | Mapping[str, Any],
                  overrides: Mapping[str, Any] | None = None, base: str | os.PathLike | None = None) -> Scenario:
    """Load and validate a scenario from a TOML file path or a dict.

    ``overrides`` maps dotted keys to values (``{"engine.name": "ray", "algorithm.eps": 1e-4}``); they are
    applied before validation. ``base`` is the folder where ``[algorithm] module`` is looked for first (default:
    the scenario file's folder; for a dict, only ``sys.path``). Raises :class:`ScenarioError` describing every
    problem found.
    """
    overrides = dict(overrides or {})
    if isinstance(source, Mapping):
        where, path = "scenario", None
        raw = normalise(source)
    elif isinstance(source, (str, os.PathLike)):
        where, path = os.fspath(source), Path(source)
        raw = read_toml(path, where)
    else:
        raise ScenarioError(f"a scenario must be a TOML file path or a dict, got {type(source).__name__}")
    raw = apply_overrides(raw, overrides, where)
    # TOML's 64-bit integers and finite floats, everywhere (tomllib reads any size, and nan and inf)
    out_of_range = _machine_range_lines(out_of_machine_range(raw), overrides)
    if "sweep" in raw:                 # a sweep file's [sweep] table: checked here, used by `svmsim sweep`
        raw = dict(raw)
        sweep = raw.pop("sweep")
        if not any(key.startswith("[sweep]") for key, _ in out_of_range):
            check_sweep_table(sweep, where)
    if base is None and path is not None:
        base = path.parent
    try:
        scenario = Scenario.model_validate(raw, context={"base": base})
    except ValidationError as exc:
        raise error_from_validation(exc, where, overrides, Scenario, out_of_range) from None
    if out_of_range:
        raise error_from_validation(None, where, overrides, Scenario, out_of_range)
    if path is not None:
        scenario.source = str(path)
        _beside_the_file(scenario, path.parent)
    return scenario


def _beside_the_file(scenario: Scenario, directory: Path) -> None:
    """A relative data path of a scenario file (``[data] name``, ``test``, ``data_dir``) names what lies next to
    the file when something is there, as configuration files do; otherwise it stays relative to the working
    directory. Output directories stay relative to the working directory."""
    data = scenario.data
    for key in ("name", "test", "data_dir"):
        value = getattr(data, key)
        if not isinstance(value, str) or not value or Path(value).is_absolute() or not (
                os.sep in value or (os.altsep and os.altsep in value) or value.startswith(".")):
            continue                                    # a data set name, "auto", "none", or an absolute path
        beside = directory / value
        if beside.exists() and directory.resolve() != Path.cwd().resolve():
            setattr(data, key, str(beside))


def _machine_range_lines(bad: list[tuple[tuple, Any, str]], overrides: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key as error lines begin, error line)`` for each value outside TOML's machine range."""
    lines = []
    for path, value, problem in bad:
        section = f"[{path[0]}] " if len(path) > 1 else ""
        key = f"{section}{'.'.join(path[1:] if section else path)} ="
        text = f"{key} {show(value)} {problem}"
        dotted = ".".join(path)
        if dotted in overrides:
            text += f" (set by the override {dotted}={show(overrides[dotted])})"
        lines.append((key, text))
    return lines


def validate_file(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Validate a scenario file (for ``svmsim validate``); returns the scenario or raises ScenarioError."""
    if isinstance(path, Mapping):
        raise ScenarioError("validate_file expects the path of a scenario file; use load_scenario for a dict")
    return load_scenario(path, overrides)


_OVERRIDE_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``"key.path=value"`` into ``(key, value)``; the value is read as a TOML value.

    ``eps=1e-4`` gives a float, ``clients=20`` an int, ``plots=false`` a bool, ``name="a b"`` a string,
    ``steps=[1, 2]`` a list; anything that is not a TOML value (a bare word such as ``ray``) is a string.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ScenarioError(f"override {text!r} is invalid; allowed: key=value, e.g. engine.name=ray or "
                            "algorithm.eps=1e-4")
    key, value = (s.strip() for s in text.split("=", 1))
    if not _OVERRIDE_KEY.fullmatch(key):
        raise ScenarioError(f"override {text!r} has an invalid key {key!r}; allowed: dotted keys of letters, "
                            "digits, '_' and '-', e.g. algorithm.eps")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value
    if isinstance(parsed, (_dt.date, _dt.time, _dt.datetime, dict)):
        return key, value
    return key, parsed


def parse_overrides(texts: Iterable[str]) -> dict[str, Any]:
    """Parse several ``key=value`` strings (later ones win)."""
    return dict(parse_override(t) for t in texts)
