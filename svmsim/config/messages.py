"""Validation errors as readable messages: every problem becomes one line of one `ScenarioError`.

A line names the table, the key, the bad value and what is allowed, e.g. ``[stop] gap = 2.0 is out of range;
allowed: a number in (0, 1)``. The models raise `fail` (one complete message) or `several` (a list of problems of
one table); `error_from_validation` turns pydantic's `ValidationError` into the `ScenarioError`, naming the
overrides that set a bad value. ``root`` is the scenario model whose fields are the tables.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Literal, Mapping

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from svmsim.errors import ScenarioError

from .values import SECTIONS, TOP_KEYS, show


TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def fail(message: str, loc: tuple | None = None) -> PydanticCustomError:
    """A validation error carrying a complete message; ``loc`` (absolute key path) overrides pydantic's."""
    ctx: dict[str, Any] = {"message": message}
    if loc is not None:
        ctx["loc"] = tuple(loc)
    return PydanticCustomError("svmsim", "{message}", ctx)


def issue(loc: tuple, message: str) -> dict[str, Any]:
    """One entry of a list of problems found in a section (see :func:`several`)."""
    return {"type": "svmsim", "loc": tuple(loc), "input": None, "ctx": {"message": message}}


def several(errors: list[dict[str, Any]], params_model: type[BaseModel] | None = None,
            algorithm: str | None = None) -> PydanticCustomError:
    """A validation error bundling several problems (absolute locations), expanded again by the formatter."""
    text = "; ".join(_format_error(e, params_model, algorithm) for e in errors)
    ctx = {"message": text, "errors": errors, "params_model": params_model, "algorithm": algorithm}
    return PydanticCustomError("svmsim_nested", "{message}", ctx)


def choice(key: str, value: Any, what: str, allowed: Iterable[str], loc: tuple | None = None):
    shown = ", ".join(allowed) or "(none registered)"
    return fail(f"{key} = {value!r} is not {what}; allowed: {shown}", loc)


def key_path(loc: Iterable[Any]) -> str:
    """``("algorithm", "steps", 0)`` -> ``"algorithm.steps[0]"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_UNION_TAGS = {"int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set", "frozenset", "none",
               "decimal", "date", "datetime", "path", "enum"}
_UNION_TAG_RE = re.compile(r"^(function-|constrained-|lax-or-strict|json-or-python|tagged-union|nullable|"
                           r"literal\[|list\[|dict\[|tuple\[|set\[|frozenset\[|union\[)")


def _clean_loc(loc: Iterable[Any]) -> tuple:
    """Drop union-member tags that pydantic adds to locations (e.g. ``('data', 'positive_label', 'int')``)."""
    loc = tuple(loc)
    if len(loc) <= 2:
        return loc
    head, rest = loc[:2], loc[2:]
    return head + tuple(
        p for p in rest if not (isinstance(p, str) and (p in _UNION_TAGS or _UNION_TAG_RE.match(p)))
    )


def _split_loc(loc: tuple) -> tuple[str, tuple]:
    """``("stop", "gap")`` -> ``("[stop] ", ("gap",))``; top-level keys get no section prefix."""
    if loc and loc[0] in SECTIONS:
        return f"[{loc[0]}] ", loc[1:]
    return "", loc


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _field_for(loc: tuple, params_model: type[BaseModel] | None, root: type[BaseModel] | None) -> FieldInfo | None:
    """The pydantic field a location points at, if any."""
    if not loc:
        return None
    fields = root.model_fields if root is not None else {}
    if len(loc) == 1:
        return fields.get(loc[0])
    section, key = loc[0], loc[1]
    if section == "algorithm" and key != "name":
        if params_model is None or not isinstance(key, str):
            return None
        fields = params_model.model_fields
        return fields.get(key) or next((f for f in fields.values() if f.alias == key), None)
    field = fields.get(section)
    model = field.annotation if field is not None else None
    if isinstance(model, type) and issubclass(model, BaseModel) and isinstance(key, str):
        return model.model_fields.get(key)
    return None


def _member_words(member: Any) -> str:
    """What a non-literal member of a union allows: ``float`` -> ``a number``, ``Annotated[float, Field(gt=0)]``
    -> ``a number > 0``; empty for literals, strings and None."""
    base = getattr(member, "__origin__", member) if hasattr(member, "__metadata__") else member
    if base not in TYPE_WORDS or base is str:
        return ""
    if hasattr(member, "__metadata__"):
        infos = [m for m in member.__metadata__ if isinstance(m, FieldInfo)]
        inner = FieldInfo.merge_field_infos(*infos) if infos else FieldInfo(annotation=base)
        inner.annotation = base
        return describe_field(inner)
    return TYPE_WORDS[base]


def _literal_choices(annotation: Any) -> list:
    """The values of a ``Literal[...]`` annotation, also inside a union (``Literal["a", "b"] | float``)."""
    if getattr(annotation, "__origin__", None) is Literal:
        return list(annotation.__args__)
    return [c for a in getattr(annotation, "__args__", ()) if getattr(a, "__origin__", None) is Literal
            for c in a.__args__]


def _base_type(annotation: Any) -> Any:
    """``int | None`` -> ``int``; anything else unchanged."""
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if args and len(args) == 1 and getattr(annotation, "__origin__", None) is not list:
        return args[0]
    return annotation


def describe_field(field: FieldInfo | None, ctx: Mapping[str, Any] | None = None) -> str:
    """What a field allows, e.g. ``a number in (0, 1)`` or ``an integer >= 1``."""
    extra = field.json_schema_extra if field is not None else None
    if isinstance(extra, Mapping) and "allowed" in extra:
        return str(extra["allowed"])
    lo = hi = None
    if field is not None:
        for m in field.metadata:
            for attr, side in (("gt", "lo("), ("ge", "lo["), ("lt", "hi)"), ("le", "hi]")):
                v = getattr(m, attr, None)
                if v is not None and isinstance(m, (annotated_types.BaseMetadata, annotated_types.Interval)):
                    if side.startswith("lo"):
                        lo = (side[2], v)
                    else:
                        hi = (side[2], v)
    if lo is None and hi is None and ctx:
        for attr, side in (("gt", "("), ("ge", "[")):
            if attr in ctx:
                lo = (side, ctx[attr])
        for attr, side in (("lt", ")"), ("le", "]")):
            if attr in ctx:
                hi = (side, ctx[attr])
    base = _base_type(field.annotation) if field is not None else None
    choices = _literal_choices(field.annotation) if field is not None else []
    if choices and lo is None and hi is None:
        others = [_member_words(a) for a in getattr(field.annotation, "__args__", ())]
        return ", ".join(show(c) for c in choices) + "".join(f" or {w}" for w in others if w)
    noun = "an integer" if base is int else "a number"
    if lo and hi:
        return f"{noun} in {lo[0]}{_num(lo[1])}, {_num(hi[1])}{hi[0]}"
    if lo:
        return f"{noun} {'>' if lo[0] == '(' else '>='} {_num(lo[1])}"
    if hi:
        return f"{noun} {'<' if hi[0] == ')' else '<='} {_num(hi[1])}"
    if base in TYPE_WORDS:
        return TYPE_WORDS[base]
    return "see the documentation of this key"


_EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list", "frozen_set_type": "a list",
    "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table",
}
_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
          "string_too_short", "string_too_long", "multiple_of"}


def _allowed_keys(section: str, params_model: type[BaseModel] | None, algorithm: str | None,
                  root: type[BaseModel]) -> str:
    if section == "algorithm":
        names = sorted(params_model.model_fields) if params_model is not None else []
        return f"allowed keys for {algorithm}: {', '.join(names) if names else '(none besides name)'}"
    model = _base_type(root.model_fields[section].annotation)        # [network] is NetworkSection | None
    return f"allowed keys: {', '.join(model.model_fields)}"


def _format_error(e: Mapping[str, Any], params_model: type[BaseModel] | None = None, algorithm: str | None = None,
                  root: type[BaseModel] | None = None) -> str:
    """One error as ``[section] key = value <what is wrong>; allowed: ...``."""
    ctx = e.get("ctx") or {}
    etype = e["type"]
    loc = _clean_loc(ctx.get("loc", e.get("loc", ())))
    prefix, rest = _split_loc(loc)
    key = key_path(rest)
    value = e.get("input")
    if etype == "svmsim":
        return prefix + str(ctx["message"])
    if etype == "extra_forbidden":
        if not rest:  # pragma: no cover - an extra key always has a location
            return prefix + "unknown key"
        if len(loc) == 1:
            kind = "section" if isinstance(value, Mapping) else "key"
            return (f"unknown top-level {kind} '{loc[0]}'; allowed: {', '.join(TOP_KEYS)}, "
                    f"and the sections {', '.join(f'[{s}]' for s in SECTIONS)}")
        return f"{prefix}unknown key '{key}'; {_allowed_keys(loc[0], params_model, algorithm, root)}"
    if etype == "missing":
        if len(loc) == 1 and loc[0] in SECTIONS:
            return f"required section [{loc[0]}] is missing"
        field = _field_for(loc, params_model, root)
        return f"{prefix}required key '{key}' is missing; allowed: {describe_field(field)}"
    what = f"{key} = {show(value)} " if key else f"{show(value)} " if not prefix else ""
    if etype in _EXPECTED:
        if etype in ("dict_type", "model_type", "model_attributes_type") and len(loc) == 1 and loc[0] in SECTIONS:
            return f"{loc[0]} = {show(value)} has the wrong type: expected a table [{loc[0]}]"
        return f"{prefix}{what}has the wrong type: expected {ctx.get('_expected', _EXPECTED[etype])}"
    if etype in ("too_short", "too_long"):
        bound = f"at least {ctx.get('min_length')}" if etype == "too_short" else f"at most {ctx.get('max_length')}"
        return f"{prefix}{what}has {ctx.get('actual_length', 'a wrong number of')} items; allowed: {bound} items"
    if etype in _RANGE:
        allowed = describe_field(_field_for(loc, params_model, root), ctx)
        if etype == "string_too_short":
            return f"{prefix}{what}is too short; allowed: {allowed}"
        if etype == "string_too_long":
            return f"{prefix}{what}is too long; allowed: {allowed}"
        if etype == "finite_number":
            return f"{prefix}{what}is not a finite number; allowed: {allowed}"
        return f"{prefix}{what}is out of range; allowed: {allowed}"
    if etype in ("literal_error", "enum"):
        return f"{prefix}{what}is not allowed; allowed: {ctx.get('expected', '?')}"
    if etype == "string_pattern_mismatch":
        return f"{prefix}{what}does not match; allowed: strings matching {ctx.get('pattern', '?')}"
    msg = str(e.get("msg", etype))
    for lead in ("Value error, ", "Assertion failed, "):
        if msg.startswith(lead):
            msg = msg[len(lead):]
    return f"{prefix}{what}is invalid: {msg}" if what else f"{prefix}{msg}"


def _flatten_errors(errors: Iterable[Mapping[str, Any]], params_model=None, algorithm=None):
    """Expand bundled errors; yield ``(error, params_model, algorithm)``."""
    for e in errors:
        if e["type"] == "svmsim_nested":
            ctx = e["ctx"]
            yield from _flatten_errors(ctx["errors"], ctx.get("params_model"), ctx.get("algorithm"))
        else:
            yield e, params_model, algorithm


def _merge_unions(items: list[tuple[dict, Any, Any]]) -> list[tuple[dict, Any, Any]]:
    """Merge wrong-type errors that pydantic reports once per member of a union (same location)."""
    out: list[tuple[dict, Any, Any]] = []
    by_loc: dict[tuple, dict] = {}
    for e, pm, alg in items:
        loc = _clean_loc((e.get("ctx") or {}).get("loc", e.get("loc", ())))
        if e["type"] in _EXPECTED and e["type"] not in ("dict_type", "model_type", "model_attributes_type"):
            first = by_loc.get(loc)
            if first is not None:
                words = first["ctx"]["_expected"]
                new = _EXPECTED[e["type"]]
                if new not in words.split(" or "):
                    first["ctx"]["_expected"] = f"{words} or {new}"
                continue
            e = dict(e, ctx=dict(e.get("ctx") or {}, _expected=_EXPECTED[e["type"]]))
            by_loc[loc] = e
        out.append((e, pm, alg))
    # a union of literals and a type ("auto" or a number): one line naming both
    literal = {_clean_loc((e.get("ctx") or {}).get("loc", e.get("loc", ()))): e for e, _, _ in out
               if e["type"] == "literal_error"}
    merged = []
    for e, pm, alg in out:
        loc = _clean_loc((e.get("ctx") or {}).get("loc", e.get("loc", ())))
        if loc in literal and (e["type"] in _EXPECTED or e["type"] in _RANGE):
            lit = literal[loc]
            lit["ctx"] = dict(lit.get("ctx") or {})
            other = e["ctx"]["_expected"] if e["type"] in _EXPECTED else describe_field(None, e.get("ctx"))
            lit["ctx"]["expected"] = f"{lit['ctx'].get('expected', '?')} or {other}"
            continue
        merged.append((e, pm, alg))
    return merged


def error_from_validation(exc: ValidationError | None, where: str, overrides: Mapping[str, Any],
                          root: type[BaseModel], more: Iterable[tuple[str, str]] = ()) -> ScenarioError:
    """One ScenarioError for all the problems of ``exc`` (one line each), prefixed with ``where`` (the file);
    ``more`` adds ``(key, line)`` problems found outside pydantic, each unless a line already names its key."""
    items = _merge_unions(list(_flatten_errors(exc.errors(include_url=False)))) if exc is not None else []
    lines = []
    for e, pm, alg in items:
        text = _format_error(e, pm, alg, root)
        loc = _clean_loc((e.get("ctx") or {}).get("loc", e.get("loc", ())))
        dotted = key_path(loc)
        if dotted in overrides:
            text += f" (set by the override {dotted}={show(overrides[dotted])})"
        elif dotted and any(k.startswith(dotted + ".") for k in overrides):
            text += " (set by an override " + ", ".join(k for k in overrides if k.startswith(dotted + ".")) + ")"
        if text not in lines:
            lines.append(text)
    for key_text, text in more:
        if not any(line.startswith(key_text) for line in lines):
            lines.append(text)
    if len(lines) == 1:
        return ScenarioError(f"{where}: {lines[0]}")
    return ScenarioError(f"{where} has {len(lines)} errors:\n" + "\n".join(f"  {line}" for line in lines))
