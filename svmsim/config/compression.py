"""The ``[compression]`` table: which codec encodes which message tag (see `svmsim.comm.compression`)."""
from __future__ import annotations

from typing import Any, Mapping

from pydantic import Field, model_validator

from svmsim.errors import PluginError, ScenarioError

from .lower import (EF_MODES, CodecChoice, CompressionSpec, check_params, codec_names, get_codec,
                    resolve_codec_params)
from .messages import TYPE_WORDS, fail, issue, several
from .sections import SectionModel, allowed_text
from .values import show

__all__ = ["CompressionSection", "TagCompression"]

_EF_ALLOWED = ("'none', 'ef' (the sender keeps the residual x + e - C(x + e) and adds it to its next message) or "
               "'ef21' (sender and receiver keep g; the sender sends C(x - g), both add it to g)")


def _resolve_codec(data: dict, loc: tuple, *, needs_codec: bool) -> dict:
    """A table's ``codec``, its parameters (the keys beside codec and error_feedback) and ``error_feedback``,
    checked and resolved: ``{"codec": name or None, "params": {...}, "error_feedback": mode or None}``. Every
    problem of the table is raised together, each naming its key, the value and what is allowed."""
    data = {k: v for k, v in data.items() if v is not None}        # None: not set (an override that unsets a key)
    codec = data.pop("codec", None)
    ef = data.pop("error_feedback", None)
    where = "".join(f"{p}." for p in loc[1:])        # "" for [compression], "tags.<tag>." for a tag's table
    errors = []

    def problem(key: str, text: str) -> None:
        errors.append(issue(loc + (key,), text))

    if ef is not None and ef not in EF_MODES:
        problem("error_feedback", f"{where}error_feedback = {show(ef)} is not an error-feedback mode; allowed: "
                                  f"{_EF_ALLOWED}")
    known = None
    if codec is None:
        if needs_codec:
            problem("codec", f"the table [compression.{where.rstrip('.')}] needs key 'codec'; allowed: "
                             f"{', '.join(codec_names())}")
        for key in data:
            problem(key, f"unknown key '{where}{key}': codec parameters need a codec; allowed keys: codec, "
                         "error_feedback, tags, and the codec's parameters beside codec")
    else:
        try:
            known = get_codec(codec) if isinstance(codec, str) else None
        except PluginError as exc:
            problem("codec", str(exc))
        else:
            if known is None:
                problem("codec", f"{where}codec = {show(codec)} is not a codec; allowed: {', '.join(codec_names())}")
    if known is not None:
        owner = f"codec '{known.name}'"
        for key, value in data.items():
            spec = known.params.get(key)
            if spec is None:
                keys = "codec, error_feedback" + ("" if where else ", tags")
                params = ", ".join(p.describe(n) for n, p in known.params.items()) or "none"
                problem(key, f"unknown key '{where}{key}' for {owner}; allowed keys: {keys}, and the codec's "
                             f"parameters: {params}")
                continue
            try:
                check_params(owner, {key: value}, {key: spec}, ScenarioError)
            except ScenarioError as exc:
                if "out of range" in str(exc):
                    problem(key, f"{where}{key} = {show(value)} is out of range; allowed: {spec.allowed}")
                else:
                    expected = TYPE_WORDS.get(spec.type, spec.type.__name__)
                    problem(key, f"{where}{key} = {show(value)} has the wrong type: expected {expected}"
                            + (f" ({spec.allowed})" if spec.allowed else ""))
    if errors:
        raise several(errors)
    if known is None:
        return {"codec": None, "params": {}, "error_feedback": ef}
    try:
        params = resolve_codec_params(codec, data)
    except ScenarioError as exc:                    # between parameters (the codec's own check)
        text = str(exc).split(f"codec '{codec}': ", 1)[-1]
        raise fail(f"{where}codec = {show(codec)} {text}", loc + ("codec",)) from None
    return {"codec": codec, "params": params, "error_feedback": ef}


class TagCompression(SectionModel):
    """One ``[compression.tags.<tag>]`` table: the codec of the messages of one tag (``none``: raw), its
    parameters beside ``codec``, and the error feedback (default: ``[compression] error_feedback``)."""

    codec: str = Field(description="the codec of this tag's float64 payloads ('none': raw)")
    params: dict[str, Any] = Field(default_factory=dict, description="the codec's parameters, defaults filled in")
    error_feedback: str | None = Field(None, description="error feedback of this tag (default: [compression] "
                                                         "error_feedback)")

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, value: Any, info) -> Any:
        if not isinstance(value, Mapping):
            return value
        tag = (info.context or {}).get("tag", "?") if info is not None else "?"
        return _resolve_codec(value, ("compression", "tags", tag), needs_codec=True)


class CompressionSection(SectionModel):
    """``[compression]``: lossy encodings of the messages a run sends (synchronous rounds and gossip; see
    `svmsim.comm.compression`). ``codec`` (with its parameters beside it) is the default for every float64 payload;
    a ``[compression.tags.<tag>]`` table sets the codec of one tag instead (``codec = "none"`` keeps it raw).
    Integer payloads (indices, counts) are never encoded, nor the tags the algorithm declares exact (an all-reduce's
    replicated result, indices and flags sent as floats). ``error_feedback`` is ``"none"``, ``"ef"`` or ``"ef21"``.
    The ledger's bytes are the encodings' sizes; its scalars stay the raw counts. With a lossy codec, metrics that
    are certificates are computed from compressed messages and are no longer certified (the stop reason and
    ``summary.json`` say so). `svmsim list codecs` lists the codecs and their parameters."""

    codec: str | None = Field(None, description="the default codec of every float64 payload whose tag has no "
                                                "table of its own (not set: those stay raw); its parameters sit "
                                                "next to it", json_schema_extra=allowed_text("a codec name"))
    params: dict[str, Any] = Field(default_factory=dict, description="the default codec's parameters, defaults "
                                                                     "filled in")
    error_feedback: str = Field("none", description="error feedback: 'ef' keeps the residual at the sender, 'ef21' "
                                                    "keeps g at both ends; the default of every tag",
                                json_schema_extra=allowed_text("'none', 'ef' or 'ef21'"))
    tags: dict[str, TagCompression] = Field(default_factory=dict, description="per-tag codecs: "
                                                                              "[compression.tags.<tag>] tables with "
                                                                              "codec, its parameters and "
                                                                              "error_feedback")

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        data = dict(value)
        tags = data.pop("tags", {})
        nested = data.pop("params", None)
        if isinstance(nested, Mapping):
            data = {**dict(nested), **data}
        head = _resolve_codec(data, ("compression",), needs_codec=False)
        if not isinstance(tags, Mapping):
            raise fail(f"tags = {show(tags)} is not a table; allowed: [compression.tags.<tag>] tables",
                       ("compression", "tags"))
        resolved_tags, errors = {}, []
        for tag, table in tags.items():
            if not isinstance(table, Mapping):
                errors.append(issue(("compression", "tags", tag), f"tags.{tag} = {show(table)} is not a table; "
                                    f"allowed: a table [compression.tags.{tag}] with codec and its parameters"))
                continue
            try:
                resolved_tags[tag] = TagCompression.model_validate(dict(table), context={"tag": tag})
            except Exception as exc:                 # the tag's own problems, each with its location
                from pydantic import ValidationError

                if not isinstance(exc, ValidationError):
                    raise
                for e in _flat(exc):
                    ctx = e.get("ctx") or {}
                    errors.append(issue(tuple(ctx.get("loc") or e.get("loc") or ("compression", "tags", tag)),
                                        ctx.get("message") or e.get("msg", "")))
        if errors:
            raise several(errors)
        if head["codec"] is None and not resolved_tags:
            raise fail("the table names no codec, so it would encode nothing; allowed: codec = one of "
                       f"{', '.join(codec_names())} (the default of every float64 payload), or "
                       "[compression.tags.<tag>] tables", ("compression",))
        return {"codec": head["codec"], "params": head["params"], "error_feedback": head["error_feedback"] or "none",
                "tags": resolved_tags}

    def spec(self, exact: tuple[str, ...] = (), tails: Mapping[str, int] | None = None) -> CompressionSpec:
        """The run's `CompressionSpec` (`exact`: the algorithm's exact tags, `tails`: its exact trailing scalars per
        tag); a tag without error_feedback of its own takes the table's."""
        ef = self.error_feedback
        default = CodecChoice(self.codec, dict(self.params), ef) if self.codec is not None else None
        return CompressionSpec(default, {tag: CodecChoice(t.codec, dict(t.params), t.error_feedback or ef)
                                         for tag, t in self.tags.items()}, tuple(exact), dict(tails or {}))

    def to_table(self) -> dict:
        """The table as a scenario file writes it (parameters beside their codec, defaults filled in)."""
        out: dict[str, Any] = {}
        if self.codec is not None:
            out.update(codec=self.codec, **{k: v for k, v in self.params.items() if v is not None})
        out["error_feedback"] = self.error_feedback
        tags = {}
        for tag, t in self.tags.items():
            body = {"codec": t.codec, **{k: v for k, v in t.params.items() if v is not None}}
            if t.error_feedback is not None:
                body["error_feedback"] = t.error_feedback
            tags[tag] = body
        if tags:
            out["tags"] = tags
        return out


def _flat(exc) -> list[dict]:
    """The entries of a ValidationError, a bundle of several (`messages.several`) expanded."""
    out = []
    for e in exc.errors():
        nested = (e.get("ctx") or {}).get("errors")
        out += list(nested) if nested else [e]
    return out
