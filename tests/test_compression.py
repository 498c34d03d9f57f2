"""Message compression (`svmsim.comm.codecs`, `svmsim.comm.compression`, a scenario's ``[compression]``): the codecs'
properties, the ledger's bytes against sizes computed here, seeded replays, engines alike, error feedback, and the
honest word on certificates."""
from __future__ import annotations

import math

import numpy as np
import pytest

import svmsim
from svmsim.core.metrics import WALL_CLOCK_METRICS
from svmsim.comm.codecs import CODECS, Codec, get_codec, register_codec, resolve_codec_params
from svmsim.comm.compression import CodecChoice, CompressionSpec, Compressor
from svmsim.comm.message import MessageBatch
from svmsim.core.metrics import stop_reason, uncertified_label
from svmsim.engine.base import split_roles
from svmsim.engine.inproc import InProcessEngine
from svmsim.errors import PluginError, ProtocolError, ScenarioError

RNG = np.random.default_rng(7)

#: a cheap distributed run: DSVM-AVE / CoCoA (paper 001's baseline), 4 workers, a star all-reduce of d = 13 floats
#: per message (tags "partial" up, "total" down), 40 iterations on heart_scale
COCOA = {"name": "cocoa-compressed", "seed": 3, "data": {"name": "heart_scale"}, "topology": {"kind": "complete"},
         "algorithm": {"name": "dsvm-ave", "workers": 4, "allreduce": "star"}, "stop": {"max_iterations": 40},
         "output": {"eval_every": 10, "plots": False, "progress": False}}


def _run(compression=None, **changes) -> svmsim.RunResult:
    scenario = {**COCOA, **changes}
    if compression is not None:
        scenario["compression"] = compression
    return svmsim.run(scenario, write=False)


def _rows(result) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in result.metrics]


def _encode(name, rows, uniforms=None, **params):
    codec = get_codec(name)
    p = resolve_codec_params(name, params)
    if codec.stochastic and uniforms is None:
        uniforms = RNG.random(rows.shape)
    return codec.encode(rows, uniforms, **p)


# -- the codecs ---------------------------------------------------------------------------------------------------

def test_fp16_is_numpys_half_precision_round_trip():
    x = RNG.normal(scale=100.0, size=(5, 33))
    decoded, nbytes = _encode("fp16", x)
    assert np.array_equal(decoded, x.astype(np.float16).astype(np.float64))
    assert nbytes == 2 * 33


def _bf16_reference(v: float) -> float:
    """The bfloat16 nearest to float32(v), ties to an even last bit, from the two candidates around it."""
    f = np.float32(v)
    bits = int(np.array([f]).view(np.uint32)[0])
    low = bits & 0xFFFF0000
    cands = [np.array([low], dtype=np.uint32).view(np.float32)[0],
             np.array([low + 0x10000], dtype=np.uint32).view(np.float32)[0]]
    d0, d1 = abs(float(cands[0]) - float(f)), abs(float(cands[1]) - float(f))
    if d0 != d1:
        return float(cands[0] if d0 < d1 else cands[1])
    return float(cands[0] if ((low >> 16) & 1) == 0 else cands[1])


def test_bf16_rounds_to_nearest_even_on_the_float32_bits():
    x = np.concatenate([RNG.normal(size=200) * 10.0 ** RNG.integers(-5, 5, 200),
                        [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 0.0, -0.0]]).reshape(1, -1)
    decoded, nbytes = _encode("bf16", x)
    assert nbytes == 2 * x.shape[1]
    expected = np.array([_bf16_reference(v) for v in x[0]])
    assert np.array_equal(decoded[0], expected)
    assert decoded[0, -5] == 1.0 and decoded[0, -4] == 1 + 2 ** -6         # both ties go to the even neighbour
    assert np.isnan(_encode("bf16", np.array([[np.nan, 1.0]]))[0][0, 0])
    assert np.isinf(_encode("bf16", np.array([[np.inf, 1.0]]))[0][0, 0])


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_qsgd_is_unbiased_and_lands_on_its_levels(bits):
    d, draws = 9, 20000
    x = np.array([0.3, -1.2, 0.0, 2.5, -0.01, 0.7, 0.7, -3.1, 1e-3])
    rows = np.repeat(x[None, :], draws, axis=0)
    decoded, nbytes = _encode("qsgd", rows, bits=bits)
    assert nbytes == math.ceil(d * (bits + 1) / 8) + 4
    s = 2 ** bits - 1
    norm32 = float(np.float32(np.linalg.norm(x)))
    levels = decoded / norm32 * s
    assert np.allclose(levels, np.round(levels)) and np.abs(levels).max() <= s
    assert np.all(decoded[:, 2] == 0) and np.all(np.sign(decoded[:, 1]) <= 0)
    # the variance of one coordinate is at most (norm / s)^2 / 4: the mean of `draws` is within 5 sigma of x
    tol = 5 * (norm32 / s) / 2 / math.sqrt(draws)
    assert np.all(np.abs(decoded.mean(axis=0) - x) <= tol + 1e-7 * np.abs(x))


def test_qsgd_is_unbiased_through_the_run_streams():
    """The compressor's own uniforms (counter streams, a new stretch per message) give the same expectation."""
    x = np.array([[0.4, -0.9, 1.7, 0.05]])
    comp = Compressor(CompressionSpec(CodecChoice("qsgd", {"bits": 2})), n_nodes=2, seed=11)
    out = np.array([comp.apply(MessageBatch.single("g", 1, 0, x[0])).payload[0] for _ in range(4000)])
    s, norm32 = 3, float(np.float32(np.linalg.norm(x)))
    assert np.all(np.abs(out.mean(axis=0) - x[0]) <= 5 * (norm32 / s) / 2 / math.sqrt(4000))
    assert len({r.tobytes() for r in out}) > 10                              # the draws differ message by message


@pytest.mark.parametrize("params, k", [({"fraction": 0.1}, 3), ({"k": 5}, 5), ({"k": 99}, 30),
                                       ({"fraction": 0.01}, 1)])
def test_topk_keeps_the_k_largest_magnitudes(params, k):
    x = RNG.normal(size=(4, 30))
    decoded, nbytes = _encode("topk", x, **params)
    assert nbytes == k * (4 + 4)
    for row, dec in zip(x, decoded):
        kept = np.flatnonzero(dec)
        assert set(kept) == set(np.argsort(-np.abs(row))[:k])
        assert np.array_equal(dec[kept], row[kept].astype(np.float32).astype(np.float64))
    assert np.array_equal(_encode("topk", x, k=5, value_bits=64)[0][x != 0] != 0,
                          _encode("topk", x, k=5)[0][x != 0] != 0)
    assert _encode("topk", x, k=5, value_bits=16)[1] == 5 * 6


def test_randk_keeps_k_random_entries_and_its_unbiased_form_scales_them():
    x = np.tile(np.arange(1.0, 11.0), (3000, 1))
    decoded, nbytes = _encode("randk", x, k=2, unbiased=True, value_bits=64)
    assert nbytes == 2 * 12
    assert np.all((decoded != 0).sum(axis=1) == 2)
    assert np.all(np.abs(decoded.mean(axis=0) - x[0]) <= 5 * 5 * x[0] / math.sqrt(3000) + 1e-12)
    plain, _ = _encode("randk", x, fraction=0.2)
    assert np.all((plain == 0) | (plain == x))


def test_scaled_sign():
    x = RNG.normal(size=(3, 20))
    x[0, 0] = 0.0
    decoded, nbytes = _encode("sign", x)
    assert nbytes == math.ceil(20 / 8) + 4
    scale = np.abs(x).mean(axis=1).astype(np.float32).astype(np.float64)
    assert np.array_equal(decoded, np.where(x < 0, -1.0, 1.0) * scale[:, None])


@pytest.mark.parametrize("name, params, formula", [
    ("fp16", {}, lambda d: 2 * d),
    ("bf16", {}, lambda d: 2 * d),
    ("qsgd", {"bits": 1}, lambda d: -(-2 * d // 8) + 4),
    ("qsgd", {"bits": 16}, lambda d: -(-17 * d // 8) + 4),
    ("topk", {"fraction": 0.25}, lambda d: max(1, math.floor(0.25 * d + 0.5)) * 8),
    ("randk", {"k": 3, "value_bits": 64}, lambda d: min(3, d) * 12),
    ("sign", {}, lambda d: -(-d // 8) + 4),
    ("none", {}, lambda d: 8 * d),
])
@pytest.mark.parametrize("d", [1, 7, 8, 123])
def test_encoded_sizes(name, params, formula, d):
    assert _encode(name, RNG.normal(size=(2, d)), **params)[1] == formula(d)


def test_codecs_never_change_their_input():
    x = RNG.normal(size=(3, 12))
    copy = x.copy()
    for name, codec in CODECS.items():
        _encode(name, x, **({"k": 2} if name in ("topk", "randk") else {}))
    assert np.array_equal(x, copy)


# -- the compressor: channels and error feedback --------------------------------------------------------------------

def test_error_feedback_sends_the_residual_later():
    spec = CompressionSpec(CodecChoice("topk", {"k": 1, "fraction": None, "value_bits": 64}, "ef"))
    comp = Compressor(spec, n_nodes=3, seed=0)
    first = comp.apply(MessageBatch.gather("g", [1, 2], 0, np.array([[3.0, 1.0], [0.5, -2.0]])))
    assert np.array_equal(first.payload, [[3.0, 0.0], [0.0, -2.0]]) and first.wire_bytes == 12
    second = comp.apply(MessageBatch.gather("g", [1, 2], 0, np.array([[0.0, 0.0], [0.0, 0.0]])))
    assert np.array_equal(second.payload, [[0.0, 1.0], [0.5, 0.0]])         # what the first messages left out


def test_ef21_receivers_read_g_and_a_broadcast_keeps_its_receivers():
    spec = CompressionSpec(CodecChoice("topk", {"k": 1, "fraction": None, "value_bits": 64}, "ef21"))
    comp = Compressor(spec, n_nodes=4, seed=0)
    x = np.array([2.0, -1.0, 0.5])
    seen = [comp.apply(MessageBatch.broadcast("b", 0, np.array([1, 2, 3]), x)).payload[0] for _ in range(3)]
    assert np.array_equal(seen[0], [2.0, 0.0, 0.0]) and np.array_equal(seen[1], [2.0, -1.0, 0.0])
    assert np.array_equal(seen[2], x)                                        # g has caught up with a constant x
    with pytest.raises(ProtocolError, match="ef21.*broadcast to nodes \\[1, 2\\] after broadcasting to \\[1, 2, 3\\]"):
        comp.apply(MessageBatch.broadcast("b", 0, np.array([1, 2]), x))


def test_integer_payloads_and_none_stay_raw():
    spec = CompressionSpec(CodecChoice("sign"), {"keep": CodecChoice("none")})
    comp = Compressor(spec, n_nodes=3, seed=0)
    ints = MessageBatch.single("idx", 1, 0, np.array([5, 7], dtype=np.int64))
    raw = MessageBatch.single("keep", 1, 0, np.array([0.123, 4.5]))
    assert comp.apply(ints) is ints and comp.apply(raw) is raw
    assert comp.summary()["tags"]["idx"]["codec"] == "raw (int64 payload)"
    assert comp.summary()["tags"]["keep"] == {"codec": "raw", "messages": 1, "scalars": 2, "raw_bytes": 16,
                                              "encoded_bytes": 16, "ratio": 1.0}
    assert not comp.lossy_used


def test_a_plugin_codec_registers_once():
    def _halve(rows, uniforms):
        return rows / 2, 1

    codec = register_codec(Codec("halve_test", _halve, "halves every value (a test codec)"))
    try:
        assert resolve_codec_params("halve_test", {}) == {}
        with pytest.raises(PluginError, match="registered twice"):
            register_codec(Codec("halve_test", np.negative, "another"))
    finally:
        CODECS.pop(codec.name)


# -- runs -----------------------------------------------------------------------------------------------------------

def test_the_ledgers_bytes_are_the_encodings_and_its_scalars_the_raw_count():
    plain = _run()
    for compression, per_message in (({"codec": "topk", "fraction": 0.25}, lambda d: 3 * (4 + 4)),
                                      ({"codec": "randk", "k": 5, "value_bits": 16}, lambda d: 5 * (2 + 4)),
                                      ({"codec": "qsgd", "bits": 4}, lambda d: math.ceil(d * 5 / 8) + 4),
                                      ({"codec": "qsgd", "bits": 16, "error_feedback": "ef21"},
                                       lambda d: math.ceil(d * 17 / 8) + 4),
                                      ({"codec": "fp16"}, lambda d: 2 * d),
                                      ({"codec": "bf16", "error_feedback": "ef"}, lambda d: 2 * d),
                                      ({"codec": "sign", "error_feedback": "ef"}, lambda d: math.ceil(d / 8) + 4)):
        run = _run(compression)
        assert run.ledger.totals["messages"] == plain.ledger.totals["messages"]
        assert run.ledger.totals["scalars"] == plain.ledger.totals["scalars"]
        expected = 0
        for tag, (messages, scalars, nbytes) in run.ledger.by_tag.items():
            d = scalars // messages                                          # heart_scale: d = 13
            # "total" (the all-reduce's result, one replicated w per host) is exact for dsvm-ave: it stays raw
            assert d == 13 and nbytes == messages * (8 * d if tag == "total" else per_message(d))
            expected += nbytes
        assert run.summary["compression"]["tags"]["total"]["codec"] == "raw (an exact tag of the algorithm)"
        assert run.ledger.totals["bytes"] == expected == run.summary["compression"]["encoded_bytes"]
        assert run.summary["compression"]["raw_bytes"] == plain.ledger.totals["bytes"]
        assert run.summary["compression"]["ratio"] == plain.ledger.totals["bytes"] / expected
        assert run.summary["certified"] is False and "rel_gap" in run.summary["certified_reason"]
        assert run.ledger.edges[:, 4].sum() == expected                        # per edge too


@pytest.mark.parametrize("name, tail", [("bqo-e", 4), ("bqo-a", 3), ("tron", 1), ("pragam", 2), ("pragam-b", 2),
                                        ("ls-bmrm", 2), ("qp-bmrm", 2)])
def test_a_line_searchs_scalars_travel_exact_and_the_run_still_converges(name, tail):
    """BQO-E's worker message is [Delta w, e^T d, s||d||^2, s alpha^T d, lambda_min] (BQO-A: the first three
    scalars, TRON: f(w) after the gradient; Pragam and BMRM: the loss and offset partials after the d-vector): the
    codec encodes the vector and the tail travels raw, at 8 bytes each. (A lambda_min quantised to 0 gave every
    step eta = 0: the run never moved.)"""
    loss = {"loss": "squared_hinge"} if name == "tron" else {}
    algorithm = {"name": name, "workers": 4, "allreduce": "star", **loss}
    scenario = {"algorithm": algorithm, "stop": {"max_iterations": 60}}
    plain = _run(None, **scenario)
    run = _run({"codec": "qsgd", "bits": 4, "error_feedback": "ef"}, **scenario)
    messages, scalars, nbytes = run.ledger.by_tag["partial"]
    width = scalars // messages
    assert width == 13 + tail
    assert nbytes == messages * (math.ceil((width - tail) * 5 / 8) + 4 + 8 * tail)
    assert run.final["rel_primal"] <= 1.5 * plain.final["rel_primal"] + 0.05


def test_tron_on_half_precision_products_that_overflow_ends_its_iterations():
    """fp16 rounds a Hessian-vector product above 65504 to inf: CG's step is then NaN, and no residual test would
    ever end CG (one all-reduce after another, for ever); the trial point ends the Newton iteration instead."""
    scenario = {"algorithm": {"name": "tron", "workers": 4, "allreduce": "star", "loss": "squared_hinge"},
                "stop": {"max_iterations": 5, "max_rounds": 5000}}
    run = _run({"codec": "fp16"}, **scenario)
    assert run.final["iteration"] == 5 and run.stop_reason.startswith("iteration budget")
    assert run.final["round"] < 5000


def test_lost_messages_are_metered_at_their_encoded_size():
    run = _run({"codec": "qsgd", "bits": 2}, faults={"drop": 0.2})
    dropped = run.ledger.dropped_by_tag
    assert dropped["partial"][0] > 0
    for tag, (messages, scalars, nbytes) in dropped.items():
        assert nbytes == messages * (13 * 8 if tag == "total" else math.ceil(13 * 3 / 8) + 4)


def test_codec_none_everywhere_is_todays_run_bit_for_bit():
    plain, none = _run(), _run({"codec": "none"})
    assert _rows(none) == _rows(plain)
    assert none.ledger.totals == plain.ledger.totals and none.ledger.by_tag == plain.ledger.by_tag
    assert none.summary["certified"] is True and "certified_reason" not in none.summary
    assert "compression" not in plain.summary and "certified" not in plain.summary


def test_same_seed_same_bits_and_another_seed_other_bits():
    compression = {"codec": "qsgd", "bits": 2, "tags": {"partial": {"codec": "randk", "fraction": 0.5}}}
    a, b = _run(compression), _run(compression)
    assert _rows(a) == _rows(b) and a.ledger.totals == b.ledger.totals
    c = _run(compression, seed=4)
    assert _rows(c) != _rows(a)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_error_feedback_reaches_a_lower_objective_after_the_same_rounds(seed):
    """Top-10 % (k = 1 of d = 13) on the workers' all-reduce messages: without error feedback 12 of every 13
    entries of an update are lost and the replicated w drifts from the dual iterate; with it, the residuals follow
    in later messages."""
    compression = {"tags": {"partial": {"codec": "topk", "fraction": 0.1}}}
    longer = {"seed": seed, "stop": {"max_iterations": 200}, "output": {**COCOA["output"], "eval_every": 50}}
    plain = _run(None, **longer)
    without = _run(compression, **longer)
    with_ef = _run({**compression, "error_feedback": "ef"}, **longer)
    assert with_ef.final["round"] == without.final["round"] == plain.final["round"]
    assert with_ef.final["objective"] < without.final["objective"]
    assert with_ef.final["objective"] - plain.final["objective"] < 0.5 * (without.final["objective"]
                                                                         - plain.final["objective"])


def test_a_gap_stop_on_compressed_messages_is_not_called_certified():
    assert stop_reason("rel_gap", 1e-3, "computed from compressed messages") == (
        "relative gap (rel_gap) <= 0.001, computed from compressed messages: not a certificate")
    assert stop_reason("rel_gap", 1e-3) == "certified relative gap (rel_gap) <= 0.001"
    assert stop_reason("objective", 1.0, "computed from compressed messages") == "objective (objective) <= 1"
    assert uncertified_label("gap_lower") == "lower bound D"
    run = _run({"codec": "fp16"}, stop={"gap": 0.15, "max_iterations": 200})
    rule = "relative gap (rel_gap) <= 0.15, computed from compressed messages: not a certificate"
    assert run.stop_reason == rule or run.stop_reason.startswith(rule + ", ")    # then how far from the optimum
    if run.final["rel_primal"] > 0.01:
        assert f"{run.final['rel_primal']:.3g} relative above the optimum" in run.stop_reason
    assert run.final["iteration"] < 200
    assert run.summary["certified"] is False


#: synchronous families whose steps are compiled, with what they send: DSVM-AVE's and BQO-E's star all-reduce
#: (workers up, an exact replicated result down; BQO-E's exact tail), Pragam's ring all-reduce and Saddle-DSVC's
#: server, which broadcasts its replies (one encoding per broadcast, on the sender's broadcast channel)
SYNC_FAMILIES = {
    "dsvm-ave": {},
    "bqo-e": {"algorithm": {"name": "bqo-e", "workers": 4, "allreduce": "star"}},
    "pragam": {"algorithm": {"name": "pragam", "workers": 3, "allreduce": "ring", "lam": 0.01}},
    "saddle-dsvc": {"algorithm": {"name": "saddle-dsvc", "clients": 3, "alpha": 0.8, "beta": 1.0},
                    "topology": {"kind": "star"},
                    "stop": {"max_iterations": 300}, "output": {"eval_every": 100, "plots": False, "progress": False}},
}
SYNC_CODECS = [{"codec": "qsgd", "bits": 3}, {"codec": "topk", "fraction": 0.3, "error_feedback": "ef"},
               {"codec": "randk", "k": 4, "unbiased": True}, {"codec": "sign", "error_feedback": "ef"},
               {"codec": "bf16"}]


@pytest.mark.parametrize("compression", SYNC_CODECS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_the_compiled_rounds_encode_the_python_rounds_bits(compression, monkeypatch):
    """The compiled synchronous rounds encode with the codecs' row kernels (a sender's broadcast once, error
    feedback per channel, the uniforms from each sender's stream), taking the channels' state from the Python
    rounds and handing it back at every return: each family gives the Python rounds' run bit for bit (every
    metrics row, the ledger, the model, the encoder's counts)."""
    from svmsim.schedule import sync

    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)       # as if the Python rounds had run long enough
    for name, changes in SYNC_FAMILIES.items():
        compiled = _run(compression, **changes)
        python = _run(compression, **changes, schedule={"compiled": False})
        assert compiled.summary["compression"]["python_rounds"] is None, name
        assert python.summary["compression"]["python_rounds"] is None, name
        assert repr(_rows(compiled)) == repr(_rows(python)), name      # (repr: NaN equals NaN)
        assert compiled.ledger.totals == python.ledger.totals and compiled.ledger.by_tag == python.ledger.by_tag
        assert np.array_equal(compiled.ledger.edges, python.ledger.edges), name
        for key, value in python.model.items():
            assert np.array_equal(np.asarray(compiled.model[key]), np.asarray(value), equal_nan=True), (name, key)
        assert compiled.summary["compression"] == python.summary["compression"], name
        assert compiled.summary["compression"]["lossy_messages"] > 0


def test_a_certificate_check_on_an_overflowed_iterate_ends_the_run_instead_of_probing_for_ever():
    """Saddle-DSVC with its default beta = "auto" and sign + error feedback: the iterate becomes NaN, and the next
    certificate check's threshold search could never close; the run stops and says why (it used to hang, a
    max_seconds budget not reached while no iteration ends)."""
    run = _run({"codec": "sign", "error_feedback": "ef"}, **{
        **SYNC_FAMILIES["saddle-dsvc"], "algorithm": {"name": "saddle-dsvc", "clients": 3, "alpha": 0.8}})
    assert run.stop_reason.startswith("algorithm 'saddle-dsvc' failed on compressed messages in round ")
    assert "FloatingPointError: the certificate check cannot order the values" in run.stop_reason


def test_ef21_keeps_the_synchronous_rounds_in_python_and_says_why(monkeypatch):
    from svmsim.schedule import sync

    monkeypatch.setattr(sync, "COMPILE_AFTER_SECONDS", 0.0)
    run = _run({"codec": "qsgd", "bits": 4, "error_feedback": "ef21"})
    assert "ef21" in run.summary["compression"]["python_rounds"]


class _SplitEngine(InProcessEngine):
    """The in-process engine with every role split over `k` groups (as Ray hosts split them)."""

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def plan(self, roles):
        return split_roles(roles, {r.role: self.k for r in roles})


@pytest.mark.parametrize("compression", [
    {"codec": "qsgd", "bits": 3, "error_feedback": "ef"},
    {"codec": "fp16", "tags": {"partial": {"codec": "randk", "k": 4, "error_feedback": "ef21"}}},
], ids=["qsgd-ef", "randk-ef21"])
def test_any_grouping_of_the_workers_gives_the_same_compressed_run(compression):
    """A host keeps one replicated w for the workers it hosts: the all-reduce's result ("total", exact for this
    family) stays raw, so every worker holds the same w and the grouping changes nothing."""
    one = _run(compression)
    for k in (2, 4):
        split = svmsim.run({**COCOA, "compression": compression}, engine=_SplitEngine(k), write=False)
        assert repr(_rows(split)) == repr(_rows(one)) and split.ledger.totals == one.ledger.totals


def test_an_exact_tag_takes_no_lossy_codec():
    with pytest.raises(ScenarioError) as err:
        svmsim.load_scenario({**COCOA, "compression": {"codec": "fp16", "tags": {"total": {"codec": "sign"}}}})
    assert "[compression] tags.total: algorithm 'dsvm-ave' declares tag 'total' exact" in str(err.value)
    assert "allowed: codec = \"none\", or a codec on a tag that is not exact (exact: total)" in str(err.value)
    assert svmsim.load_scenario({**COCOA, "compression": {"codec": "sign", "tags": {"total": {"codec": "none"}}}})


def test_an_algorithm_that_breaks_on_compressed_messages_says_so():
    run = svmsim.run({"name": "x", "seed": 3, "data": {"name": "iris"},
                      "algorithm": {"name": "saddle-dsvc", "clients": 5, "eps": 0.05}, "stop": {"max_iterations": 30},
                      "output": {"eval_every": 10, "plots": False, "progress": False},
                      "compression": {"codec": "randk", "fraction": 0.5, "error_feedback": "ef21"}}, write=False)
    assert run.stop_reason.startswith("algorithm 'saddle-dsvc' failed on compressed messages in round ")
    assert run.stop_reason.endswith("; it assumes exact messages")
    assert run.summary["compression"]["algorithm_failed"] is True
    assert run.summary["compression"]["tags"]["coord"]["codec"] == "raw (an exact tag of the algorithm)"


@pytest.mark.ray
def test_inprocess_and_ray_meter_the_same_compressed_ledger(ray_local):
    compression = {"codec": "qsgd", "bits": 3, "error_feedback": "ef",
                   "tags": {"partial": {"codec": "randk", "k": 4, "error_feedback": "ef21"}}}
    here = _run(compression)
    there = _run(compression, engine={"name": "ray", "actors": 2})
    assert there.ledger.totals == here.ledger.totals and there.ledger.by_tag == here.ledger.by_tag
    assert np.array_equal(there.ledger.edges, here.ledger.edges)
    assert _rows(there) == _rows(here)


# -- the scenario's table -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("table, message", [
    ({"codec": "zip"}, "[compression] codec = \"zip\" is not a codec; allowed: none, fp16, bf16, qsgd, topk, randk, "
                       "sign"),
    ({"codec": "qsgd", "bits": 17}, "[compression] bits = 17 is out of range; allowed: an integer in 1..16"),
    ({"codec": "qsgd", "bits": 4.0}, "[compression] bits = 4.0 has the wrong type: expected an integer (an integer "
                                     "in 1..16)"),
    ({"codec": "qsgd", "bit": 4}, "[compression] unknown key 'bit' for codec 'qsgd'; allowed keys: codec, "
                                  "error_feedback, tags, and the codec's parameters: bits: int = 4"),
    ({"codec": "topk"}, "[compression] codec = \"topk\" needs exactly one of 'fraction' and 'k', given: neither; "
                        "allowed: fraction = the share of entries kept, in (0, 1], or k = how many are kept, an "
                        "integer >= 1"),
    ({"codec": "randk", "k": 2, "fraction": 0.5}, "needs exactly one of 'fraction' and 'k', given: fraction and k"),
    ({"codec": "sign", "error_feedback": "ef3"}, "[compression] error_feedback = \"ef3\" is not an error-feedback "
                                                 "mode; allowed: 'none', 'ef'"),
    ({"error_feedback": "ef"}, "[compression] the table names no codec, so it would encode nothing"),
    ({"codec": "fp16", "tags": {"partial": {"codec": "topk", "fraction": 2.0}}},
     "[compression] tags.partial.fraction = 2.0 is out of range; allowed: a number in (0, 1]"),
    ({"tags": {"partial": {"fraction": 0.5}}}, "[compression] the table [compression.tags.partial] needs key "
                                               "'codec'"),
    ({"codec": "sign", "error_feedback": "ef21"}, None),
])
def test_bad_tables_get_one_clear_message(table, message):
    if message is None:
        assert svmsim.load_scenario({**COCOA, "compression": table}).compression.error_feedback == "ef21"
        return
    with pytest.raises(ScenarioError) as err:
        svmsim.load_scenario({**COCOA, "compression": table})
    assert message in str(err.value)


def test_compression_is_refused_where_it_cannot_apply():
    with pytest.raises(ScenarioError, match=r"\[compression\] algorithm 'pegasos' runs on a single machine, so "
                                            "there are no messages to compress"):
        svmsim.load_scenario({"name": "p", "data": {"name": "heart_scale"}, "algorithm": {"name": "pegasos"},
                              "stop": {"max_iterations": 5}, "compression": {"codec": "fp16"}})
    gossip = svmsim.load_scenario({"name": "g", "data": {"name": "heart_scale"}, "topology": {"kind": "ring"},
                                   "algorithm": {"name": "gadget"}, "stop": {"max_iterations": 5},
                                   "compression": {"codec": "fp16"}})      # the gossip event loop encodes too
    assert gossip.compression.spec((), gossip.algorithm.info.exact_tail).tail("push") == 1
    with pytest.raises(ScenarioError, match=r"error_feedback = 'ef21' keeps the receiver's copy of g"):
        svmsim.load_scenario({**COCOA, "faults": {"drop": 0.1},
                              "compression": {"codec": "sign", "error_feedback": "ef21"}})
    scenario = svmsim.load_scenario({**COCOA, "compression": {"codec": "topk", "k": 2,
                                                              "tags": {"partial": {"codec": "none"}}}})
    assert svmsim.load_scenario(scenario.to_dict()) == scenario
    assert scenario.to_dict()["compression"] == {"codec": "topk", "k": 2, "value_bits": 32, "error_feedback": "none",
                                                 "tags": {"partial": {"codec": "none"}}}


def test_the_cli_refuses_a_bad_table_with_status_2(tmp_path, capsys):
    from svmsim.cli import main

    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\n[data]\nname = "heart_scale"\n[topology]\nkind = "complete"\n[algorithm]\n'
                    'name = "dsvm-ave"\n[stop]\nmax_iterations = 5\n[compression]\ncodec = "qsgd"\nbits = 0\n')
    assert main(["validate", str(path)]) == 2
    assert "[compression] bits = 0 is out of range; allowed: an integer in 1..16" in " ".join(
        capsys.readouterr().err.split())


def test_modelled_time_counts_the_encoded_bytes():
    """[network]'s alpha-beta model charges a message its encoded bytes: on a slow link, top-k messages take less
    modelled time."""
    network = {"latency": 0.0, "bandwidth": 1000.0, "compute_rate": 1e12}
    plain = _run(None, network=network)
    sparse = _run({"codec": "topk", "k": 1}, network=network)
    assert sparse.final["modelled_time"] < plain.final["modelled_time"]
    assert sparse.summary["modelled_time"]["seconds"] == sparse.final["modelled_time"]


def test_a_batch_keeps_its_payload_shape():
    comp = Compressor(CompressionSpec(CodecChoice("fp16")), n_nodes=4, seed=0)
    flat = MessageBatch("s", np.array([1, 2, 3]), np.array([0, 0, 0]), np.array([0.1, 0.2, 0.3]))
    out = comp.apply(flat)
    assert out.payload.shape == (3,) and np.array_equal(out.payload, flat.payload.astype(np.float16).astype(float))
    copies = MessageBatch("b", np.array([0, 0, 0]), np.array([1, 2, 3]), np.tile([0.1, 0.2], (3, 1)))
    assert comp.apply(copies).payload.shape == (3, 2)
    assert comp.summary()["tags"]["b"]["encoded_bytes"] == 3 * 4          # every copy is counted, encoded once
