"""The built-in codecs' row kernels (`comm.codec_kernels`, which the codecs' NumPy interface and the compiled gossip
loop both run) against the codecs' formulas written here in NumPy: seeded fuzzing over shapes, scales from
subnormal to overflowing, ties, zeros, signed zeros, infinities and NaN, bit for bit. The reference sums run left to
right (`np.cumsum`), the order the kernels add in."""
from __future__ import annotations

import numpy as np
import pytest

from svmsim.comm.codecs import get_codec, keep_count


def _as32(x):
    return x.astype(np.float32).astype(np.float64)


def _at_width(v, value_bits):
    if value_bits == 16:
        return v.astype(np.float16).astype(np.float64)
    return _as32(v) if value_bits == 32 else v.copy()


def _reference(name, rows, u, **p):
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "fp16":
            return rows.astype(np.float16).astype(np.float64)
        if name == "bf16":                     # round to nearest even on the float32 bits; NaN stays a quiet NaN
            x = np.ascontiguousarray(rows, dtype=np.float32)
            bits = x.view(np.uint32)
            r = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
            r = np.where(np.isnan(x), (bits | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), r)
            return r.view(np.float32).astype(np.float64)
        if name == "qsgd":
            s = float((1 << p["bits"]) - 1)
            norm = np.sqrt(np.cumsum(rows * rows, axis=1)[:, -1])
            safe = np.where(norm > 0, norm, 1.0)
            scaled = np.abs(rows) / safe[:, None] * s
            level = np.floor(scaled)
            level += u < (scaled - level)
            np.minimum(level, s, out=level)
            out = np.where(rows < 0, -level, level) * (_as32(norm) / s)[:, None]
            out[norm == 0] = 0.0
            return out
        if name in ("topk", "randk"):
            d = rows.shape[1]
            k = keep_count(d, p.get("fraction"), p.get("k"))
            key = -np.abs(rows) if name == "topk" else u
            idx = np.argsort(key, axis=1, kind="stable")[:, :k]
            vals = np.take_along_axis(rows, idx, axis=1)
            if name == "randk" and p.get("unbiased"):
                vals = vals * (d / k)
            out = np.zeros_like(rows)
            np.put_along_axis(out, idx, _at_width(vals, p["value_bits"]), axis=1)
            return out
        assert name == "sign"
        scale = _as32(np.cumsum(np.abs(rows), axis=1)[:, -1] / rows.shape[1])
        return np.where(rows < 0, -1.0, 1.0) * scale[:, None]


CASES = [("fp16", {}), ("bf16", {}), ("qsgd", {"bits": 1}), ("qsgd", {"bits": 4}), ("qsgd", {"bits": 16}),
         ("topk", {"fraction": 0.1, "k": None, "value_bits": 32}),
         ("topk", {"fraction": None, "k": 3, "value_bits": 16}), ("topk", {"fraction": None, "k": 7, "value_bits": 64}),
         ("randk", {"fraction": 0.3, "k": None, "value_bits": 32, "unbiased": True}),
         ("randk", {"fraction": None, "k": 2, "value_bits": 16, "unbiased": False}), ("sign", {})]

#: values at the edges of half precision, bfloat16 and float32: the largest finite ones, the midpoints that round to
#: infinity, subnormals, their ties, and values beyond every range
EDGES = [65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 6e-8, 1e-300,
         np.inf, -np.inf, 3.4e38, 3.39e38, 3.3961e38, 1.2e-38, 1e-45, -0.0, 0.0, np.nan]


def _rows(rng, shape_kind: int):
    m, d = int(rng.integers(1, 6)), int(rng.choice([rng.integers(1, 60), rng.integers(60, 700)]))
    if shape_kind == 0:                                        # one scale, from subnormal to huge
        return rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-45, 40)
    if shape_kind == 1:                                        # ties everywhere
        return np.round(rng.standard_normal((m, d)) * 4) / 4
    if shape_kind == 2:                                        # zeros, a signed zero
        rows = rng.standard_normal((m, d))
        rows[rng.random((m, d)) < 0.3] = 0.0
        rows[0, 0] = -0.0
        return rows
    if shape_kind == 3:
        return rng.choice(EDGES, size=(m, d))
    if shape_kind == 4:                                        # every entry its own scale
        return rng.standard_normal((m, d)) * 10.0 ** rng.integers(-30, 30, size=(m, d))
    return np.full((m, d), rng.choice([1.0, -1.0, 0.0]))      # a constant row: all ties


@pytest.mark.parametrize("name, params", CASES, ids=[f"{n}-{'-'.join(map(str, p.values()))}" for n, p in CASES])
def test_the_kernels_give_the_codecs_formulas_bit_for_bit(name, params):
    rng = np.random.default_rng(7)
    codec = get_codec(name)
    for trial in range(240):
        rows = _rows(rng, trial % 6)
        if params.get("k") is not None and params["k"] > rows.shape[1]:
            continue
        u = rng.random(rows.shape)
        got, nbytes = codec.encode(rows, u if codec.stochastic else None, **params)
        want = _reference(name, rows, u, **params)
        same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (trial, rows[~same][:3], got[~same][:3], want[~same][:3])
        assert got.dtype == np.float64 and got.shape == rows.shape and isinstance(nbytes, int)


def test_a_codec_never_changes_its_input():
    rows = np.random.default_rng(0).standard_normal((3, 17))
    before = rows.copy()
    for name, params in CASES:
        codec = get_codec(name)
        codec.encode(rows, np.full(rows.shape, 0.5) if codec.stochastic else None, **params)
        assert np.array_equal(rows, before), name
