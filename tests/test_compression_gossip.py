"""Compressed messages on the gossip scheduler (`schedule.event_host` with a `comm.compression.Compressor`): the
ledger's bytes against encoding sizes computed here (a Push-Sum share's weight travelling raw beside its encoded
sums), the compiled loop's encoding as the Python loop's bit for bit, codec "none" as the uncompressed run bit for
bit, seeded replays, and the same compressed run on Ray."""
from __future__ import annotations

import math

import numpy as np
import pytest

import svmsim
from svmsim.core.metrics import WALL_CLOCK_METRICS

#: GADGET (paper 002) on heart_scale (d = 13), 6 peers on a ring, 40 Pegasos steps each
GADGET = {"name": "gadget-compressed", "seed": 2, "data": {"name": "heart_scale"}, "topology": {"kind": "ring"},
          "algorithm": {"name": "gadget", "nodes": 6, "lam": 0.01, "eps": 0.0, "iterations": 40},
          "schedule": {"kind": "gossip", "eval_time": 10.0},
          "output": {"plots": False, "progress": False}}
#: Push-Sum of random 20-vectors over 12 nodes on a ring, 300 ticks each
PUSHSUM = {"name": "pushsum-compressed", "seed": 1, "data": {"name": "heart_scale"}, "topology": {"kind": "ring"},
           "algorithm": {"name": "pushsum", "nodes": 12, "values": "random", "dim": 20, "max_wakes": 300},
           "schedule": {"kind": "gossip", "eval_time": 20.0},
           "output": {"plots": False, "progress": False}}


def _run(base: dict, compression=None, **changes) -> svmsim.RunResult:
    scenario = {**base, **changes}
    if compression is not None:
        scenario["compression"] = compression
    return svmsim.run(scenario, write=False)


def _rows(result) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_METRICS} for r in result.metrics]


#: (codec table, bytes of the encoding of d values), the sizes written out here from the codecs' definitions
SIZES = [({"codec": "topk", "fraction": 0.25}, lambda d: round(0.25 * d) * (4 + 4)),
         ({"codec": "topk", "k": 2, "value_bits": 16, "error_feedback": "ef"}, lambda d: 2 * (2 + 4)),
         ({"codec": "qsgd", "bits": 4}, lambda d: math.ceil(d * 5 / 8) + 4),
         ({"codec": "qsgd", "bits": 2, "error_feedback": "ef21"}, lambda d: math.ceil(d * 3 / 8) + 4),
         ({"codec": "fp16"}, lambda d: 2 * d),
         ({"codec": "sign", "error_feedback": "ef"}, lambda d: math.ceil(d / 8) + 4)]


@pytest.mark.parametrize("compression, size", SIZES)
def test_a_push_sum_share_is_its_encoded_sums_and_its_raw_weight(compression, size):
    """GADGET's and Push-Sum's "push" rows are d sums and a weight: the codec encodes the sums, the weight travels
    as 8 raw bytes (both families declare it an exact tail); the scalars stay the raw count."""
    for base, d in ((GADGET, 13), (PUSHSUM, 20)):
        plain, run = _run(base), _run(base, compression)
        messages, scalars, nbytes = run.ledger.by_tag["push"]
        assert scalars == messages * (d + 1)
        assert nbytes == messages * (size(d) + 8)
        assert run.ledger.totals["bytes"] == nbytes == run.summary["compression"]["encoded_bytes"]
        assert run.summary["compression"]["raw_bytes"] == messages * (d + 1) * 8
        assert run.ledger.edges[:, 4].sum() == nbytes                      # per edge too
        assert run.summary["compression"]["python_rounds"] is None and run.summary["compiled_loop"] is True
        assert run.summary["certified"] is False
        if base is PUSHSUM:                   # the weights never pass a codec: every node's weight is the raw run's
            assert [r["weight_at_nodes"] for r in run.metrics] == [r["weight_at_nodes"] for r in plain.metrics]


def test_pairwise_averaging_encodes_whole_rows():
    """GADGET's pairwise gossip sends d = 13 values each way and declares no exact tail: all of a row is encoded."""
    run = _run({**GADGET, "algorithm": {**GADGET["algorithm"], "gossip": "pairwise"}}, {"codec": "qsgd", "bits": 3})
    assert set(run.ledger.by_tag) == {"average", "average_reply"}
    for messages, scalars, nbytes in run.ledger.by_tag.values():
        assert scalars == 13 * messages and nbytes == messages * (math.ceil(13 * 4 / 8) + 4)


def _python_loop(base: dict) -> dict:
    return {**base, "schedule": {**base["schedule"], "compiled": False}}


def _same_run(a, b) -> None:
    """Every metrics row, the ledger, the model and the encoder's counts alike, bit for bit."""
    assert repr(_rows(a)) == repr(_rows(b))               # (repr: NaN equals NaN)
    assert a.ledger.totals == b.ledger.totals and a.ledger.by_tag == b.ledger.by_tag
    assert np.array_equal(a.ledger.edges, b.ledger.edges)
    assert a.model.keys() == b.model.keys() and a.model
    for key, value in a.model.items():
        assert np.array_equal(np.asarray(b.model[key]), np.asarray(value), equal_nan=True), key
    if "compression" in a.summary:
        sa, sb = (dict(r.summary["compression"]) for r in (a, b))
        sa.pop("python_rounds"), sb.pop("python_rounds")
        assert sa == sb


@pytest.mark.parametrize("base", [GADGET, PUSHSUM], ids=["gadget", "pushsum"])
def test_codec_none_is_the_uncompressed_run_bit_for_bit(base):
    """With codec "none" the messages pass the encoder untouched: the compiled and the Python event loop then give
    the uncompressed run, every metrics row and the ledger alike."""
    plain = _run(base)
    for none in (_run(base, {"codec": "none"}), _run(_python_loop(base), {"codec": "none"})):
        assert none.summary["certified"] is True
        _same_run(plain, none)
    assert _run(base, {"codec": "none"}).summary["compiled_loop"] is True


#: every built-in codec, with each error feedback on some: the compiled loop's kernels against the Python loop
LOOP_CODECS = [{"codec": "fp16"}, {"codec": "bf16", "error_feedback": "ef21"},
               {"codec": "qsgd", "bits": 3}, {"codec": "qsgd", "bits": 6, "error_feedback": "ef"},
               {"codec": "topk", "fraction": 0.2, "error_feedback": "ef"},
               {"codec": "topk", "k": 3, "value_bits": 16},
               {"codec": "randk", "k": 4, "unbiased": True, "error_feedback": "ef21"},
               {"codec": "randk", "fraction": 0.5, "value_bits": 64},
               {"codec": "sign", "error_feedback": "ef"}]


@pytest.mark.parametrize("compression", LOOP_CODECS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_the_compiled_loop_encodes_the_python_loops_bits(compression):
    """The compiled gossip loop encodes with the codecs' row kernels, the error feedback's state per edge and the
    uniforms from each sender's stream: GADGET and Push-Sum give the Python loop's run bit for bit, every metrics
    row, the ledger (bytes at the encoded sizes), the model and the encoder's counts."""
    for base in (GADGET, PUSHSUM):
        compiled, python = _run(base, compression), _run(_python_loop(base), compression)
        assert compiled.summary["compiled_loop"] is True and python.summary["compiled_loop"] is False
        assert compiled.summary["compression"]["python_rounds"] is None
        assert python.summary["compression"]["python_rounds"].startswith("the gossip event loop ran in Python")
        assert compiled.summary["compression"]["lossy_messages"] == compiled.ledger.by_tag["push"][0] > 0
        _same_run(compiled, python)


def test_a_codec_without_a_compiled_form_runs_the_python_loop_and_says_why():
    """A plugin's codec is NumPy only: the host runs the Python event loop, and the summary names the codec."""
    from svmsim.comm import codecs

    def halve(rows, uniforms):
        return rows * 0.5, 4 * rows.shape[1]

    codecs.register_codec(codecs.Codec("halve_for_test", halve, "halves every value (a test's codec)"))
    try:
        run = _run(GADGET, {"codec": "halve_for_test"})
        assert run.summary["compiled_loop"] is False
        assert "codec 'halve_for_test' (tag 'push') has no compiled form" in run.summary["compression"]["python_rounds"]
        assert run.ledger.by_tag["push"][2] == run.ledger.by_tag["push"][0] * (4 * 13 + 8)
    finally:
        codecs.CODECS.pop("halve_for_test")


def test_same_seed_same_bits_and_another_seed_other_bits():
    compression = {"codec": "qsgd", "bits": 2, "error_feedback": "ef"}
    a, b = _run(GADGET, compression), _run(GADGET, compression)
    assert _rows(a) == _rows(b) and a.ledger.totals == b.ledger.totals
    assert _rows(_run(GADGET, compression, seed=3)) != _rows(a)


def test_a_lossy_push_sum_loses_its_consensus_and_the_exact_one_keeps_it():
    """Top-2 of 20 sums without error feedback drops the rest of every share: Push-Sum's mass is no longer
    conserved, so the nodes agree on a value that is not the average (the consensus error, measured against the
    known average, says so); half precision keeps it within fp16's rounding."""
    plain = _run(PUSHSUM)
    assert plain.metrics[-1]["consensus_error"] < 1e-6
    assert _run(PUSHSUM, {"codec": "fp16"}).metrics[-1]["consensus_error"] < 1e-2
    lossy = _run(PUSHSUM, {"codec": "topk", "k": 2})
    assert lossy.metrics[-1]["consensus_error"] > 0.05 and "warnings" not in lossy.summary
    fed = _run(PUSHSUM, {"codec": "topk", "k": 2, "error_feedback": "ef"})       # residuals grow: it says so
    assert fed.metrics[-1]["consensus_error"] > 1.0
    assert any("error feedback on gossip messages (tags push)" in w for w in fed.summary["warnings"])


@pytest.mark.ray
def test_deterministic_ray_gossip_gives_the_in_process_compressed_run(ray_local, tmp_path):
    """Each Ray host encodes its own senders' messages (per-sender streams and residuals): the deterministic Ray
    run writes the in-process ledger and model byte for byte, and the hosts' encoder counts add up to the
    in-process ones."""
    compression = {"codec": "qsgd", "bits": 3, "error_feedback": "ef"}
    base = {**PUSHSUM, "schedule": {**PUSHSUM["schedule"], "latency": 0.5}, "compression": compression}
    here = svmsim.run(base, out_dir=tmp_path / "inproc")
    there = svmsim.run({**base, "engine": {"name": "ray", "actors": 2, "gossip": "deterministic", "metrics": False}},
                       out_dir=tmp_path / "ray")
    for f in ("ledger.json", "model.npz", "ledger_edges.csv"):
        assert (tmp_path / "ray" / f).read_bytes() == (tmp_path / "inproc" / f).read_bytes(), f
    assert there.summary["compression"] == here.summary["compression"]
    assert there.summary["ray_gossip"]["cross_host_messages"] > 0
    assert _rows(there) == _rows(here)


def test_a_run_whose_objective_stops_being_finite_stops_and_says_so():
    """The runner's recorder stops a run whose objective turns NaN or infinite after a finite one (the iterates
    overflowed), and names compression when the messages were compressed."""
    from svmsim.runner import _diverged

    assert _diverged(10, {"objective": 1.5}, {"objective": 2.0}, None) is None
    assert _diverged(10, {"objective": math.nan}, None, None) is None              # never finite: not a divergence
    assert _diverged(10, {"objective": math.nan}, {"objective": math.nan}, None) is None
    why = _diverged(60, {"objective": math.inf}, {"objective": 22.5}, None)
    assert why == "diverged: the objective became inf at iteration 60 (it was 22.5)"
    assert "its messages were compressed" in _diverged(60, {"objective": math.nan}, {"objective": 1.0}, "x")


def test_an_engine_whose_gossip_takes_no_compression_is_a_clear_error():
    """A plugin engine written before gossip encoded messages: its gossip() has no `compression` argument. A run
    with [compression] says so instead of running its messages raw or failing with a TypeError."""
    from svmsim.engine import ENGINE_KINDS, EngineKind, InProcessEngine, register_engine
    from svmsim.errors import PluginError

    class OldEngine(InProcessEngine):
        name = "old-gossip"

        def gossip(self, roles, seed, topology, *, node_names=None, clock=None, latency=None, faults=None,
                   round_time=None, compiled=None):
            return super().gossip(roles, seed, topology, node_names=node_names, clock=clock, latency=latency,
                                  faults=faults, round_time=round_time, compiled=compiled)

    register_engine(EngineKind("old-gossip", lambda **options: OldEngine(), "an engine without compression"))
    try:
        assert _run(GADGET, engine={"name": "old-gossip"}).ledger.totals == _run(GADGET).ledger.totals
        with pytest.raises(PluginError, match=r"engine 'old-gossip': its gossip\(\) takes no 'compression' "
                                              r"argument, so it cannot encode this run's messages"):
            _run(GADGET, {"codec": "fp16"}, engine={"name": "old-gossip"})
    finally:
        ENGINE_KINDS.pop("old-gossip")
