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
    compiled: its arithmetic is a row kernel of `comm.codec_kernels` (the built-in codecs), which the compiled
        gossip loop runs too; a codec without one runs in the Python loops only.
    check: optional ``check(params) -> str | None``: a problem between parameters (after their own checks), as the
        text of an error message.
    """

    name: str
    encode: Callable[..., tuple[np.ndarray, int]]
    description: str
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    stochastic: bool = False
    lossless: bool = False
    compiled: bool = False
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

def kernel_plan(name: str, params: Mapping, width: int, error_feedback: str = "none") -> np.ndarray | None:
    """A one-record `comm.codec_kernels.CODEC_PLAN` array for encoding rows of `width` scalars with built-in codec
    `name` and its checked `params` (None: `name` has no kernel, as a plugin's codec). Its ``state`` and ``salt``
    are left to the caller (the compiled loop's error-feedback state and the tag's stream)."""
    from .codec_kernels import CODEC_PLAN, EF_CODES, KERNEL_CODES

    codec = get_codec(name)
    if codec is None or not codec.compiled or name not in KERNEL_CODES:
        return None
    plan = np.zeros(1, CODEC_PLAN)
    p = plan[0]
    p["code"] = KERNEL_CODES[name]
    p["bits"] = int(params.get("bits") or 0)
    p["value_bits"] = int(params.get("value_bits") or 64)
    p["unbiased"] = int(bool(params.get("unbiased")))
    if name in ("topk", "randk"):
        p["keep"] = keep_count(width, params.get("fraction"), params.get("k"))
    p["ef"] = EF_CODES[error_feedback]
    p["width"] = width
    p["stochastic"] = int(codec.stochastic)
    p["lossy"] = int(not codec.lossless)
    p["state"] = -1
    p["nbytes"] = _encoded_size(name, params, width)
    return plan


def _encoded_size(name: str, params: Mapping, d: int) -> int:
    """The bytes of one message of d values under built-in codec `name` (the formulas above)."""
    if name == "none":
        return 8 * d
    if name in ("fp16", "bf16"):
        return 2 * d
    if name == "qsgd":
        return qsgd_bytes(d, int(params["bits"]))
    if name in ("topk", "randk"):
        return sparse_bytes(keep_count(d, params.get("fraction"), params.get("k")), int(params["value_bits"]))
    return sign_bytes(d)


def _kernel(name: str):
    """The `encode` of built-in codec `name`: `codec_kernels.encode_rows`, row by row (compiled on first use)."""
    def encode(rows: np.ndarray, uniforms, **params) -> tuple[np.ndarray, int]:
        from .codec_kernels import encode_rows

        rows = np.ascontiguousarray(rows, dtype=np.float64)
        m, d = rows.shape
        plan = kernel_plan(name, params, d)
        u = np.empty((m, 0)) if uniforms is None else np.ascontiguousarray(uniforms, dtype=np.float64)
        with np.errstate(over="ignore"):      # beyond 65504 half precision is inf: the codec's meaning, not an error
            return encode_rows(plan, rows, u), int(plan[0]["nbytes"])
    encode.__name__ = encode.__qualname__ = f"_{name}"
    return encode


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

def _none(rows: np.ndarray, uniforms) -> tuple[np.ndarray, int]:
    return rows.copy(), rows.shape[1] * rows.dtype.itemsize


register_codec(Codec("none", _none, "the payload as it is (raw): exempts a tag from the default codec",
                     lossless=True, compiled=True))
register_codec(Codec("fp16", _kernel("fp16"), "IEEE half precision, round to nearest even: 2 bytes per value",
                     compiled=True))
register_codec(Codec("bf16", _kernel("bf16"), "brain floating point (bfloat16), round to nearest even on the float32 "
                                              "bits: 2 bytes per value", compiled=True))
register_codec(Codec(
    "qsgd", _kernel("qsgd"), "QSGD stochastic quantisation to 2^bits - 1 levels of the row's 2-norm: bits + 1 bits per "
    "value and a float32 norm", {"bits": ParamSpec(int, 4, "bits of level per value (plus one sign bit)",
                                                   "an integer in 1..16", valid=lambda v: 1 <= v <= 16)},
    stochastic=True, compiled=True))
register_codec(Codec(
    "topk", _kernel("topk"), "the k entries of largest magnitude: a value and a 4-byte index each",
    {"fraction": _FRACTION, "k": _K, "value_bits": _VALUE_BITS}, check=_one_of_fraction_k, compiled=True))
register_codec(Codec(
    "randk", _kernel("randk"), "a uniformly random choice of k entries per message: a value and a 4-byte index each",
    {"fraction": _FRACTION, "k": _K, "value_bits": _VALUE_BITS,
     "unbiased": ParamSpec(bool, False, "scale the kept values by d/k (an unbiased estimate; false: the plain, "
                                        "contractive operator error feedback expects)")},
    stochastic=True, check=_one_of_fraction_k, compiled=True))
register_codec(Codec("sign", _kernel("sign"), "scaled sign (|v|_1 / d) sgn(v): one bit per value and a float32 scale",
                     compiled=True))
