"""Message compression: a scenario's ``[compression]`` applied to the messages a run sends, with error feedback.

A `CompressionSpec` says which codec (`comm.codecs`) encodes which tag: a default for every float64 payload, and
per-tag choices that replace it (``none`` keeps a tag raw). Integer and float32 payloads are never encoded: they
are indices, counts and flags that a lossy codec would corrupt; nor are the tags an algorithm declares exact
(`AlgorithmInfo.exact_tags`: replicated results, indices and flags sent as floats). A `Compressor` holds one run's codec state and
applies the spec to a `MessageBatch`: it returns the batch the receivers read (the decoded rows) with its encoded
size per message (`MessageBatch.wire_bytes`), which the meter counts as the message's bytes; the scalars stay the
raw count, the papers' unit.

Broadcasts, channels and state. A sender that sends the same row to several receivers in one batch (a broadcast,
stored as one row or as copies) encodes it once, and every receiver reads that one encoding. A codec's state lives
on a *channel*: (tag, sender, receiver) for a message to one receiver, (tag, sender, all) for a broadcast, and the
row width. In the protocols that send one row per tag and round (a gather, a broadcast, a star all-reduce) that is
the state per sender and tag. Error feedback (`error_feedback`):

* ``"ef"`` (Seide et al. 2014; Karimireddy et al. 2019): the channel keeps the residual e (0 at first), sends
  ``c = C(x + e)`` and keeps ``e <- x + e - c``; the receiver reads c.
* ``"ef21"`` (Richtarik et al. 2021): sender and receiver keep g (0 at first); the sender sends ``c = C(x - g)``,
  both set ``g <- g + c``, and the receiver reads the new g. The receiver's copy of g is the sender's only while it
  receives every message: a broadcast channel's receivers must stay the same (`ProtocolError` otherwise), and a
  scenario with lost messages refuses ef21.

Randomness. A stochastic codec's uniforms come from the counter-based streams of `core.streams` (stream
`STREAM_CODEC`, one key per sender, mixed with the tag): the n-th uniform a sender draws for a tag is the same on
every engine and any grouping of nodes, so a seed gives the same bits everywhere.

Exact tails. An algorithm may declare the last scalars of a tag's rows exact (`AlgorithmInfo.exact_tail`: a
Push-Sum share's weight after its sums): the codec encodes the rest of each row, error feedback included, and the
tail travels as sent at 8 bytes a value, counted in the encoding's size.

Where it applies: the synchronous scheduler encodes every batch a program sends, before the fault model and the
meter (`schedule.sync`), and so does the gossip event loop (`schedule.event_host`, on every host of a run): a
message is encoded once by its sender, and the network then loses or duplicates that encoding. The compiled gossip
loop encodes with the built-in codecs' row kernels (`comm.codec_kernels`, which `apply` runs too) from the plans
of `compiled_plans`, so a run gives the same bits in either loop; the compiled synchronous rounds do not encode,
so a synchronous run with compression runs its rounds in Python.
"""
from __future__ import annotations

import zlib

import numba
import numpy as np

from ..core.streams import STREAM_CODEC, counter_uniform, mix64, stream_keys
from ..errors import ProtocolError
from .codecs import EF_MODES, CodecChoice, CompressionSpec, get_codec, kernel_plan
from .message import MessageBatch

__all__ = ["EF_MODES", "CodecChoice", "CompressionSpec", "Compressor"]

_ALL = -1            # the receiver of a broadcast channel


@numba.njit(cache=True)
def _uniform_rows(node_keys, salt, starts, d):
    """Row i: the uniforms starts[i] .. starts[i] + d - 1 of the stream of node key node_keys[i] and tag `salt`."""
    m = node_keys.shape[0]
    out = np.empty((m, d))
    for i in range(m):
        key = mix64(node_keys[i] ^ salt)
        for j in range(d):
            out[i, j] = counter_uniform(key, starts[i] + j)
    return out


class Compressor:
    """One run's encoder: `apply(batch)` returns the batch the receivers read (see the module docstring).

    `stats` per tag: [codec label, messages, scalars, raw bytes, encoded bytes] of what the programs sent;
    `lossy_messages`: messages a lossy codec encoded so far."""

    def __init__(self, spec: CompressionSpec, n_nodes: int, seed: int):
        self.spec = spec
        self._node_keys = stream_keys(int(seed), STREAM_CODEC, int(n_nodes))
        self._plans: dict[str, tuple] = {}                   # tag -> (choice, codec or None: raw, label)
        self._salts: dict[str, np.uint64] = {}
        self._drawn: dict[tuple[str, int], int] = {}        # (tag, sender) -> uniforms drawn so far
        self._state: dict[tuple, np.ndarray] = {}            # channel -> e (ef) or g (ef21)
        self._receivers: dict[tuple, np.ndarray] = {}        # ef21 broadcast channel -> its receivers
        self._sizes: dict[tuple, tuple] = {}                # (tag, width, dtype) -> (encoded bytes or None,)
        self.stats: dict[str, list] = {}
        self.lossy_messages = 0

    def __getstate__(self) -> dict:
        """Pickled (a Ray host's checkpoint) without the per-tag plans, which hold the codecs' functions: they are
        made again from the spec at the next message."""
        return {k: ({} if k == "_plans" else v) for k, v in self.__dict__.items()}

    # -- the batch ------------------------------------------------------------------------------------------------
    def apply(self, batch: MessageBatch) -> MessageBatch:
        """The batch as its receivers read it: decoded rows and the encoding's bytes per message, or `batch` itself
        when its tag stays raw (no codec, ``none``, or a payload that is not float64)."""
        m = batch.n_messages
        payload = batch.payload
        spm = batch.scalars_per_message
        choice, codec, label, tail = self._plan(batch.tag)
        raw_bpm = spm * payload.dtype.itemsize
        if codec is None or payload.dtype != np.float64 or m == 0 or spm <= tail:
            self._count(batch.tag, label if codec is None else f"raw ({payload.dtype} payload)", m, spm, raw_bpm,
                        raw_bpm)
            return batch
        src = batch.src
        if payload.shape[0] == 1 and m > 1:          # one row for every message
            rows, where = payload.reshape(1, spm), np.zeros(m, dtype=np.int64)
            senders, first = src[:1], np.zeros(1, dtype=np.int64)
            if not bool((src == src[0]).all()):
                rows, senders, first, where = self._broadcasts(src, np.repeat(rows, m, axis=0))
        else:
            rows, senders, first, where = self._broadcasts(src, batch.rows().reshape(m, spm))
        counts = np.bincount(where, minlength=rows.shape[0])
        receivers = np.where(counts > 1, _ALL, batch.dst[first])
        width = spm - tail                            # the encoded part of each row; the tail travels as sent
        head = rows[:, :width] if tail else rows
        uniforms = self._uniforms(batch.tag, senders, width) if codec.stochastic else None
        if choice.error_feedback == "none":
            decoded, bpm = codec.encode(head, uniforms, **choice.params)
        else:
            decoded, bpm = self._with_feedback(batch, codec, choice, head, uniforms, senders, receivers)
            if choice.error_feedback == "ef21" and (counts > 1).any():
                self._same_receivers(batch, senders, receivers, where, width)
        if tail:
            decoded = np.concatenate([np.asarray(decoded, dtype=np.float64), rows[:, width:]], axis=1)
            bpm = int(bpm) + tail * payload.dtype.itemsize
        self._count(batch.tag, label, m, spm, raw_bpm, int(bpm))
        if not codec.lossless:
            self.lossy_messages += m
        decoded = np.asarray(decoded, dtype=np.float64)
        if decoded.shape[0] == 1 and payload.shape[0] == 1:
            decoded = decoded.reshape(payload.shape)
        else:
            decoded = decoded[where]
            if payload.shape[0] == m and decoded.size == payload.size:
                decoded = decoded.reshape(payload.shape)          # (a payload of one scalar per message: 1-d)
        return MessageBatch(batch.tag, src, batch.dst, decoded, int(bpm))

    def _plan(self, tag: str) -> tuple:
        """(choice, codec or None: raw, label, exact tail) of `tag`."""
        plan = self._plans.get(tag)
        if plan is None:
            choice = self.spec.choice(tag)
            codec = None if choice is None or choice.codec == "none" else get_codec(choice.codec)
            label = "raw" if codec is None else choice.label()
            if choice is None and self.spec.configured(tag) is not None:
                label = "raw (an exact tag of the algorithm)"
            plan = self._plans[tag] = (choice, codec, label, self.spec.tail(tag))
        return plan

    # -- the compiled gossip loop ---------------------------------------------------------------------------------
    def compiled_plans(self, tags, widths, dtypes=None) -> tuple[np.ndarray | None, str | None]:
        """The encoding of a compiled loop's message kinds (`tags`, each of `widths` scalars of `dtypes`, float64
        by default): one `codec_kernels.CODEC_PLAN` record per kind, its error-feedback state numbered among the
        kinds that keep one (``state``; -1: none) and its stream salt; code -1 for a kind that travels raw. (None,
        why) where a codec has no compiled form (a plugin's), which leaves the run to the Python loop."""
        from .codec_kernels import CODEC_PLAN

        plans = np.zeros(len(tags), CODEC_PLAN)
        n_state = 0
        for i, (tag, w) in enumerate(zip(tags, widths)):
            choice, codec, _, tail = self._plan(tag)
            w = int(w)
            dtype = np.dtype(np.float64 if dtypes is None else dtypes[i])
            if codec is None or w <= tail or dtype != np.float64:
                plans[i]["code"], plans[i]["state"], plans[i]["nbytes"] = -1, -1, dtype.itemsize * w
                continue
            plan = kernel_plan(choice.codec, choice.params, w - tail, choice.error_feedback)
            if plan is None:
                return None, f"codec {choice.codec!r} (tag {tag!r}) has no compiled form"
            plans[i] = plan[0]
            plans[i]["nbytes"] += 8 * tail
            plans[i]["salt"] = self._salt(tag)
            if choice.error_feedback != "none":
                plans[i]["state"] = n_state
                n_state += 1
        return plans, None

    def count_compiled(self, tags, widths, sent: np.ndarray, dtypes=None) -> None:
        """Count `sent[i]` messages of kind `tags[i]` (`widths[i]` scalars of `dtypes[i]` each, float64 by default)
        that a compiled loop encoded, as `apply` counts the messages it encodes."""
        for i, (tag, w, m) in enumerate(zip(tags, widths, sent.tolist())):
            if m == 0:
                continue
            choice, codec, label, tail = self._plan(tag)
            dtype = np.dtype(np.float64 if dtypes is None else dtypes[i])
            raw = dtype.itemsize * int(w)
            if codec is None or w <= tail or dtype != np.float64:
                self._count(tag, label if codec is None else f"raw ({dtype} payload)", m, int(w), raw, raw)
                continue
            self._count(tag, label, m, int(w), raw, self.encoded_bytes(tag, int(w), np.float64))
            if not codec.lossless:
                self.lossy_messages += m

    def channel_arrays(self, plans: np.ndarray, tags, ptr: np.ndarray, nbr: np.ndarray) -> tuple:
        """This encoder's error-feedback state and uniforms drawn as the compiled synchronous rounds keep them, for
        the kinds `tags` with `plans` (`compiled_plans`) on the topology (ptr, nbr): (state, drawn). state[plan.state,
        channel] is a channel's e or g, the channel of a message to one receiver being its edge id (its position in
        nbr) and that of a sender s's broadcast ``len(nbr) + s``; drawn[kind, node] counts the uniforms a node drew
        for a kind. `take_channel_arrays` reads them back."""
        n_nodes, n_edges = ptr.shape[0] - 1, nbr.shape[0]
        width = max(1, int(plans["width"].max()))
        n_state = max(1, int((plans["state"] >= 0).sum()))
        state = np.zeros((n_state, n_edges + n_nodes, width))
        kind = {tag: i for i, tag in enumerate(tags)}
        for (tag, s, r, _), vec in self._state.items():
            if tag not in kind:
                continue
            p = plans[kind[tag]]
            ch = n_edges + s if r == _ALL else int(np.searchsorted(nbr[ptr[s]:ptr[s + 1]], r)) + int(ptr[s])
            state[p["state"], ch, :vec.shape[0]] = vec
        drawn = np.zeros((len(tags), n_nodes), dtype=np.int64)
        for (tag, s), c in self._drawn.items():
            if tag in kind:
                drawn[kind[tag], s] = c
        return state, drawn

    def take_channel_arrays(self, plans: np.ndarray, tags, ptr: np.ndarray, nbr: np.ndarray, state: np.ndarray,
                            drawn: np.ndarray) -> None:
        """Take back the state and the uniforms drawn of `channel_arrays` after the compiled rounds changed them: a
        channel whose state is all zero bits is left out (as one that never sent: its state starts at zero)."""
        n_edges = nbr.shape[0]
        src_of = np.repeat(np.arange(ptr.shape[0] - 1, dtype=np.int64), np.diff(ptr))
        kinds = set(tags)
        for key in [k for k in self._state if k[0] in kinds]:
            del self._state[key]
        for i, tag in enumerate(tags):
            p = plans[i]
            if p["state"] >= 0:
                rows = state[p["state"], :, :p["width"]]
                for ch in np.flatnonzero(rows.view(np.int64).any(axis=1)).tolist():
                    s, r = (int(src_of[ch]), int(nbr[ch])) if ch < n_edges else (ch - n_edges, _ALL)
                    self._state[(tag, s, r, int(p["width"]))] = rows[ch].copy()
            for s in np.flatnonzero(drawn[i]).tolist():
                self._drawn[(tag, s)] = int(drawn[i, s])

    def stream_keys(self) -> np.ndarray:
        """Each node's key of the codecs' random stream (mixed with a tag's salt per tag)."""
        return self._node_keys

    def _salt(self, tag: str) -> np.uint64:
        salt = self._salts.get(tag)
        if salt is None:
            salt = self._salts[tag] = np.uint64(zlib.crc32(tag.encode()))
        return salt

    @staticmethod
    def _broadcasts(src: np.ndarray, rows: np.ndarray):
        """The distinct (sender, row) pairs of a batch, in order of first appearance: a sender that sends the same
        row to several receivers encodes it once (a broadcast, however the batch stores it). Returns (distinct
        rows, their senders, the batch row of each one's first appearance, the distinct row of every batch row)."""
        m = rows.shape[0]
        if m == 1:
            return rows, src, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        seen: dict[tuple, int] = {}
        where = np.empty(m, dtype=np.int64)
        first = []
        for i, s in enumerate(src.tolist()):
            key = (s, rows[i].tobytes())
            j = seen.get(key)
            if j is None:
                j = seen[key] = len(first)
                first.append(i)
            where[i] = j
        first = np.asarray(first, dtype=np.int64)
        return rows[first], src[first], first, where

    def _uniforms(self, tag: str, senders: np.ndarray, d: int) -> np.ndarray:
        """d uniforms per row from each sender's stream for `tag`, in row order (a sender's rows take consecutive
        counters, continuing from its earlier messages of the tag)."""
        salt = self._salt(tag)
        starts = np.empty(senders.shape[0], dtype=np.int64)
        drawn = self._drawn
        for i, s in enumerate(senders.tolist()):
            key = (tag, s)
            c = drawn.get(key, 0)
            starts[i] = c
            drawn[key] = c + d
        keys = self._node_keys[np.asarray(senders, dtype=np.int64)]
        return _uniform_rows(keys, salt, starts, d)

    def _with_feedback(self, batch, codec, choice, rows, uniforms, senders, receivers):
        """Encode with error feedback, channel by channel; a channel that carries several rows of one batch takes
        them in row order (one wave per repetition)."""
        m, d = rows.shape
        channels = [(batch.tag, s, r, d) for s, r in zip(senders.tolist(), receivers.tolist())]
        seen: dict[tuple, int] = {}
        wave = np.empty(m, dtype=np.int64)
        for i, ch in enumerate(channels):
            wave[i] = seen.get(ch, 0)
            seen[ch] = wave[i] + 1
        out = np.empty((m, d))
        bpm = 0
        zero = np.zeros(d)
        ef21 = choice.error_feedback == "ef21"
        for w in range(int(wave.max()) + 1):
            idx = np.flatnonzero(wave == w)
            state = np.stack([self._state.get(channels[i], zero) for i in idx.tolist()])
            x = rows[idx]
            u = None if uniforms is None else uniforms[idx]
            with np.errstate(over="ignore", invalid="ignore"):   # a state that diverged is the run's result (its
                if ef21:                                          # stop says so), as in the compiled loops
                    c, bpm = codec.encode(x - state, u, **choice.params)
                    new = state + c
                    out[idx] = new
                else:
                    target = x + state
                    c, bpm = codec.encode(target, u, **choice.params)
                    new = target - c
                    out[idx] = c
            for j, i in enumerate(idx.tolist()):
                self._state[channels[i]] = new[j]
        return out, bpm

    def _same_receivers(self, batch: MessageBatch, senders, receivers, where, d: int) -> None:
        """ef21 on a broadcast channel: its receivers must be the same every time (each keeps its copy of g)."""
        for j in np.flatnonzero(receivers == _ALL).tolist():
            sender = int(senders[j])
            key = (batch.tag, sender, d)
            dst = np.sort(batch.dst[where == j])
            known = self._receivers.get(key)
            if known is None:
                self._receivers[key] = dst
            elif not np.array_equal(known, dst):
                raise ProtocolError(
                    f"error_feedback = 'ef21' on tag {batch.tag!r}: node {sender} broadcast to nodes {dst.tolist()} "
                    f"after broadcasting to {known.tolist()}; ef21's receivers keep their copy of g only while they "
                    "receive every message of the channel; allowed: error_feedback = 'ef' for this tag")

    def _count(self, tag: str, label: str, m: int, spm: int, raw_bpm: int, bpm: int) -> None:
        st = self.stats.get(tag)
        if st is None:
            st = self.stats[tag] = [label, 0, 0, 0, 0]
        st[1] += m
        st[2] += m * spm
        st[3] += m * raw_bpm
        st[4] += m * bpm

    def encoded_bytes(self, tag: str, spm: int, dtype) -> int | None:
        """The bytes of one message of `tag` with `spm` scalars of `dtype` as `apply` encodes it (None: it stays
        raw). A codec's size depends only on the width and its parameters, so a host that meters a message another
        host encoded sizes it without its payload."""
        key = (tag, int(spm), np.dtype(dtype).str)
        known = self._sizes.get(key)
        if known is None:
            probe = MessageBatch(tag, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                 np.zeros((1, int(spm)), dtype=dtype))
            encoder = Compressor(self.spec, 1, 0)          # a scratch encoder: this one's state and counts stay
            known = self._sizes[key] = (encoder.apply(probe).wire_bytes,)
        return known[0]

    def counts(self) -> tuple[dict, int]:
        """What this encoder counted (`stats`, `lossy_messages`), for `absorb` on another host's encoder."""
        return {tag: list(st) for tag, st in self.stats.items()}, self.lossy_messages

    def absorb(self, counts: tuple[dict, int]) -> None:
        """Add another encoder's `counts` (a run's hosts encode their own senders' messages) to this one's."""
        stats, lossy = counts
        for tag, (label, m, sc, rb, eb) in stats.items():
            st = self.stats.get(tag)
            if st is None:
                st = self.stats[tag] = [label, 0, 0, 0, 0]
            st[1] += m
            st[2] += sc
            st[3] += rb
            st[4] += eb
        self.lossy_messages += int(lossy)

    # -- reporting --------------------------------------------------------------------------------------------------
    @property
    def lossy_used(self) -> bool:
        return self.lossy_messages > 0

    def summary(self) -> dict:
        """The summary's ``compression`` section: per tag the codec and what the programs sent (messages, scalars,
        raw and encoded bytes, ratio = raw / encoded), and the totals."""
        tags = {}
        raw = enc = 0
        for tag, (label, m, sc, rb, eb) in sorted(self.stats.items()):
            tags[tag] = {"codec": label, "messages": m, "scalars": sc, "raw_bytes": rb, "encoded_bytes": eb,
                         "ratio": rb / eb if eb else None}
            raw += rb
            enc += eb
        spec = self.spec
        return {"default": spec.default.label() if spec.default is not None else None,
                "tags": tags, "raw_bytes": raw, "encoded_bytes": enc, "ratio": raw / enc if enc else None,
                "lossy_messages": self.lossy_messages}
