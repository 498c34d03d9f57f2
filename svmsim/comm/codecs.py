"""The registry of message codecs: named lossy encodings of float payloads with typed parameters, chosen per tag in
a scenario's ``[compression]`` table, registered in Python by `register_codec`, or provided by an installed plugin
through the entry-point group ``svmsim.codecs``.

A codec is a pure, vectorised function of a batch of payload rows::

    encode(rows, uniforms, **params) -> (decoded, bytes_per_message)

`rows` is an (m, d) float64 array (one row per message), `uniforms` an (m, d) array of numbers in (0, 1) drawn
from the run's counter-based streams (`core.streams`; None for a deterministic codec), and the result is what the
receiver decodes (float64, the same shape) and the size of one encoded message in bytes at its real widths
(values, indices, norms, scales). The size depends only on d and the parameters, never on the values. A codec
never changes its input. `comm.compression` applies codecs to messages (with error feedback and its state);
this module is declarations and NumPy only, so validating a scenario imports no compiler.

Built-in codecs (`svmsim list codecs`):

* ``fp16``: IEEE half precision, round to nearest even (NumPy's float16): 2 bytes per value.
* ``bf16``: bfloat16, round to nearest even on the float32 bits (the value is first rounded to float32): 2 bytes.
* ``qsgd``: QSGD's stochastic quantisation (Alistarh et al. 2017): with s = 2^bits - 1 levels,
  ``Q(v)_i = |v|_2 sgn(v_i) xi_i / s``, xi_i = l + 1 with probability ``|v_i| s / |v|_2 - l`` else l, where
  ``l = floor(|v_i| s / |v|_2)``; unbiased (up to the norm's rounding to float32). Each value: `bits` bits of
  level and one sign bit; plus the norm as a float32: ``ceil(d (bits + 1) / 8) + 4`` bytes.
* ``topk``: the k entries of largest magnitude (ties: the lower index first), k = `k` or
  ``max(1, round(fraction d))``, at most d; each kept entry is its value at `value_bits` and a 4-byte index:
  ``k (value_bits / 8 + 4)`` bytes.
* ``randk``: k entries chosen uniformly at random (a new draw per message), optionally scaled by d/k (`unbiased`);
  sized as topk.
* ``sign``: scaled sign (Karimireddy et al. 2019): ``(|v|_1 / d) sgn(v)`` with sgn(0) = +1, one bit per value and
  the scale as a float32: ``ceil(d / 8) + 4`` bytes.
* ``none``: the payload as it is (raw; exempts a tag from a default codec).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..core.params import ParamSpec, allowed_params_text, check_params, register_with_params
from ..errors import ScenarioError

__all__ = ["Codec", "CODECS", "EF_MODES", "CodecChoice", "CompressionSpec", "tag_matches", "register_codec", "codec_names", "get_codec", "resolve_codec_params", "keep_count",
           "qsgd_bytes", "sparse_bytes", "sign_bytes"]

#: every known codec: the built-in ones (below) and the registered ones
CODECS: dict[str, "Codec"] = {}


@dataclass(frozen=True)
class Codec:
    """A registered codec (see the module docstring for `encode`).

    stochastic: `encode` reads `uniforms` (one per entry of `rows`); False: it is called with ``uniforms=None``.
    lossless: the decoded rows always equal the rows (only ``none``); a lossy codec makes the certificates of a run
        that uses it uncertified.
    check: optional ``check(params) -> str | None``: a problem between parameters (after their own checks), as the
        text of an error message.
    """

    name: str
    encode: Callable[..., tuple[np.ndarray, int]]
    description: str
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    stochastic: bool = False
    lossless: bool = False
    check: Callable[[dict], str | None] | None = None

    def signature(self) -> str:
        """Render as ``name(p1: type = default, ...)`` for listings and error messages."""
        return f"{self.name}({', '.join(p.describe(n) for n, p in self.params.items())})"


def register_codec(codec: Codec) -> Codec:
    """Make a codec known to scenarios (``[compression] codec = "<name>"``) and the CLI; returns it.

    A plugin calls it when its module is imported (entry-point group ``svmsim.codecs``, the entry point named after
    the codec). A codec registered again by another module is refused."""
    return register_with_params(CODECS, codec, Codec, "register_codec", "codec", "encode",
                                "encode(rows, uniforms, **params) -> (decoded rows, bytes per message)")


def codec_names() -> list[str]:
    """Every codec a scenario may name: built in, registered, and installed plugins' (none imported)."""
    from ..core.plugins import registered_names

    return registered_names("codecs", CODECS)


def get_codec(name: str) -> Codec | None:
    """The codec `name`, loading its plugin on first use; None for a codec nothing provides."""
    from ..core.plugins import find_registered

    return find_registered("codecs", CODECS, name, register_codec, Codec)


def resolve_codec_params(name: Any, params: Mapping[str, Any], where: str = "compression") -> dict[str, Any]:
    """Check a codec's name and parameters (names, types, ranges, and the codec's own `check`); defaults filled
    in. `where` names the table in messages. ScenarioError naming the key, the value and what is allowed."""
    codec = get_codec(name) if isinstance(name, str) else None
    if codec is None:
        raise ScenarioError(f"{where}.codec = {name!r} is not a codec; allowed: {', '.join(codec_names())}")
    owner = f"codec '{codec.name}'"
    for key in params:
        if key not in codec.params:
            raise ScenarioError(f"{where}: unknown key '{key}' for {owner}; {allowed_params_text(owner, codec.params)}"
                                " (and codec, error_feedback)")
    resolved = check_params(owner, params, codec.params, ScenarioError)
    if codec.check is not None:
        problem = codec.check(resolved)
        if problem:
            raise ScenarioError(f"{where}: {owner}: {problem}")
    return resolved


# ----------------------------------------------------------------------------------------------------------------
# A run's choices (what a scenario's [compression] table resolves to; `comm.compression` applies them)
# ----------------------------------------------------------------------------------------------------------------

#: error-feedback modes
EF_MODES = ("none", "ef", "ef21")


@dataclass(frozen=True)
class CodecChoice:
    """How one tag is encoded: a registered codec, its checked parameters, and the error feedback."""

    codec: str
    params: Mapping = field(default_factory=dict)
    error_feedback: str = "none"

    @property
    def lossless(self) -> bool:
        return get_codec(self.codec).lossless

    def label(self) -> str:
        """``qsgd(bits=4)+ef``: the codec, its parameters that are set, and the error feedback."""
        args = ", ".join(f"{k}={v}" for k, v in self.params.items() if v is not None)
        ef = "" if self.error_feedback == "none" else f"+{self.error_feedback}"
        return f"{self.codec}({args}){ef}"


def tag_matches(name: str, tag: str) -> bool:
    """Whether the name of a table or a declaration covers message tag `tag`: the tag itself, or its
    ``name:width`` forms (a collective's tags when it sends several widths)."""
    return tag == name or (tag.startswith(name) and tag[len(name):len(name) + 1] == ":")


@dataclass(frozen=True)
class CompressionSpec:
    """A run's codecs: `default` for every float64 payload whose tag `tags` does not name (None: those stay raw);
    a table named ``partial`` also covers ``partial:<width>`` (its own table first). `exact`: the tags the algorithm
    declares exact (`AlgorithmInfo.exact_tags`), which no lossy codec encodes. `tails`: per tag, the trailing
    scalars of each row that travel as sent while a codec encodes the rest (`AlgorithmInfo.exact_tail`: a Push-Sum
    weight beside its sums)."""

    default: CodecChoice | None = None
    tags: Mapping[str, CodecChoice] = field(default_factory=dict)
    exact: tuple[str, ...] = ()
    tails: Mapping[str, int] = field(default_factory=dict)

    def tail(self, tag: str) -> int:
        """The trailing scalars of `tag`'s rows that no codec encodes (0: the whole row is encoded)."""
        for name, count in self.tails.items():
            if tag_matches(name, tag):
                return int(count)
        return 0

    def configured(self, tag: str) -> CodecChoice | None:
        """The choice the tables make for `tag`, before the algorithm's exact tags are taken out."""
        own = self.tags.get(tag)
        if own is None and ":" in tag:
            own = self.tags.get(tag.rsplit(":", 1)[0])
        return self.default if own is None else own

    def is_exact(self, tag: str) -> bool:
        return any(tag_matches(name, tag) for name in self.exact)

    def choice(self, tag: str) -> CodecChoice | None:
        """The codec that encodes `tag`: `configured`, except that an exact tag gets no lossy codec (None: raw)."""
        c = self.configured(tag)
        if c is not None and not c.lossless and self.is_exact(tag):
            return None
        return c

    @property
    def lossy(self) -> bool:
        """Whether any codec configured is lossy (a run that encodes with it loses its certificates)."""
        return any(not c.lossless for c in [self.default, *self.tags.values()] if c is not None)

    @property
    def uses_ef21(self) -> bool:
        return any(c.error_feedback == "ef21" for c in [self.default, *self.tags.values()] if c is not None)


# ----------------------------------------------------------------------------------------------------------------
# Sizes (the formulas the encodings below return; tests hold the ledger to them)
# ----------------------------------------------------------------------------------------------------------------

def keep_count(d: int, fraction: float | None, k: int | None) -> int:
    """The entries a sparsifier keeps of d: `k` (at most d), or ``max(1, round(fraction d))`` (halves up)."""
    if k is not None:
        return min(int(d), int(k))
    return min(int(d), max(1, int(math.floor(float(fraction) * d + 0.5))))


def qsgd_bytes(d: int, bits: int) -> int:
    """QSGD's encoding of d values: `bits` bits of level and a sign bit each, and a float32 norm."""
    return -(-d * (bits + 1) // 8) + 4


def sparse_bytes(k: int, value_bits: int) -> int:
    """k kept entries: a value of `value_bits` and a 4-byte index each."""
    return k * (value_bits // 8 + 4)


def sign_bytes(d: int) -> int:
    """One bit per value and a float32 scale."""
    return -(-d // 8) + 4


# ----------------------------------------------------------------------------------------------------------------
# Built-in codecs
# ----------------------------------------------------------------------------------------------------------------

def _as_float32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64)


def _at_width(values: np.ndarray, value_bits: int) -> np.ndarray:
    """`values` as the receiver reads them when sent at `value_bits` (16: half, 32: single, 64: as they are)."""
    if value_bits == 16:
        return values.astype(np.float16).astype(np.float64)
    if value_bits == 32:
        return _as_float32(values)
    return values.copy()


def _none(rows: np.ndarray, uniforms) -> tuple[np.ndarray, int]:
    return rows.copy(), rows.shape[1] * rows.dtype.itemsize


def _fp16(rows: np.ndarray, uniforms) -> tuple[np.ndarray, int]:
    with np.errstate(over="ignore"):          # beyond 65504 half precision is inf: the codec's meaning, not an error
        return rows.astype(np.float16).astype(np.float64), 2 * rows.shape[1]


def _bf16(rows: np.ndarray, uniforms) -> tuple[np.ndarray, int]:
    x = np.ascontiguousarray(rows, dtype=np.float32)
    bits = x.view(np.uint32)
    # round to nearest even on the 16 bits dropped: add 0x7FFF plus the lowest kept bit, then cut
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    nan = np.isnan(x)
    if nan.any():                                       # a NaN stays a (quiet) NaN, never rounds into infinity
        rounded = np.where(nan, (bits | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), rounded)
    return rounded.view(np.float32).astype(np.float64), 2 * rows.shape[1]


def _qsgd(rows: np.ndarray, uniforms: np.ndarray, bits: int) -> tuple[np.ndarray, int]:
    s = float((1 << bits) - 1)
    norm = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    safe = np.where(norm > 0, norm, 1.0)
    scaled = np.abs(rows) / safe[:, None] * s          # in [0, s]
    level = np.floor(scaled)
    level += uniforms < (scaled - level)               # up with probability scaled - level: E[level] = scaled
    np.minimum(level, s, out=level)                    # (rounding can put |v_i| s / |v| a hair above s)
    norm32 = _as_float32(norm)                         # the norm travels as a float32
    decoded = np.where(rows < 0, -level, level) * (norm32 / s)[:, None]
    decoded[norm == 0] = 0.0
    return decoded, qsgd_bytes(rows.shape[1], bits)


def _topk(rows: np.ndarray, uniforms, fraction: float | None, k: int | None, value_bits: int):
    d = rows.shape[1]
    kk = keep_count(d, fraction, k)
    idx = np.argsort(-np.abs(rows), axis=1, kind="stable")[:, :kk]
    out = np.zeros_like(rows, dtype=np.float64)
    np.put_along_axis(out, idx, _at_width(np.take_along_axis(rows, idx, axis=1), value_bits), axis=1)
    return out, sparse_bytes(kk, value_bits)


def _randk(rows: np.ndarray, uniforms: np.ndarray, fraction: float | None, k: int | None, value_bits: int,
           unbiased: bool):
    d = rows.shape[1]
    kk = keep_count(d, fraction, k)
    idx = np.argsort(uniforms, axis=1, kind="stable")[:, :kk]      # a uniformly random k-subset per row
    vals = np.take_along_axis(rows, idx, axis=1)
    if unbiased:
        vals = vals * (d / kk)
    out = np.zeros_like(rows, dtype=np.float64)
    np.put_along_axis(out, idx, _at_width(vals, value_bits), axis=1)
    return out, sparse_bytes(kk, value_bits)


def _sign(rows: np.ndarray, uniforms) -> tuple[np.ndarray, int]:
    d = rows.shape[1]
    scale = _as_float32(np.abs(rows).sum(axis=1) / d)
    return np.where(rows < 0, -1.0, 1.0) * scale[:, None], sign_bytes(d)


def _one_of_fraction_k(params: dict) -> str | None:
    given = [n for n in ("fraction", "k") if params.get(n) is not None]
    if len(given) != 1:
        return (f"needs exactly one of 'fraction' and 'k', given: {' and '.join(given) or 'neither'}; allowed: "
                "fraction = the share of entries kept, in (0, 1], or k = how many are kept, an integer >= 1")
    return None


_FRACTION = ParamSpec(float, None, "the share of a message's entries kept: k = max(1, round(fraction d))",
                      "a number in (0, 1]", valid=lambda v: 0 < v <= 1, none_means="not set")
_K = ParamSpec(int, None, "how many entries are kept (at most d)", "an integer >= 1", valid=lambda v: v >= 1,
               none_means="not set")
_VALUE_BITS = ParamSpec(int, 32, "the width of a kept value on the wire (16: half, 32: single, 64: double)",
                        "16, 32 or 64", valid=lambda v: v in (16, 32, 64))

register_codec(Codec("none", _none, "the payload as it is (raw): exempts a tag from the default codec",
                     lossless=True))
register_codec(Codec("fp16", _fp16, "IEEE half precision, round to nearest even: 2 bytes per value"))
register_codec(Codec("bf16", _bf16, "brain floating point (bfloat16), round to nearest even on the float32 bits: 2 "
                                    "bytes per value"))
register_codec(Codec(
    "qsgd", _qsgd, "QSGD stochastic quantisation to 2^bits - 1 levels of the row's 2-norm: bits + 1 bits per "
    "value and a float32 norm", {"bits": ParamSpec(int, 4, "bits of level per value (plus one sign bit)",
                                                   "an integer in 1..16", valid=lambda v: 1 <= v <= 16)},
    stochastic=True))
register_codec(Codec(
    "topk", _topk, "the k entries of largest magnitude: a value and a 4-byte index each",
    {"fraction": _FRACTION, "k": _K, "value_bits": _VALUE_BITS}, check=_one_of_fraction_k))
register_codec(Codec(
    "randk", _randk, "a uniformly random choice of k entries per message: a value and a 4-byte index each",
    {"fraction": _FRACTION, "k": _K, "value_bits": _VALUE_BITS,
     "unbiased": ParamSpec(bool, False, "scale the kept values by d/k (an unbiased estimate; false: the plain, "
                                        "contractive operator error feedback expects)")},
    stochastic=True, check=_one_of_fraction_k))
register_codec(Codec("sign", _sign, "scaled sign (|v|_1 / d) sgn(v): one bit per value and a float32 scale"))
