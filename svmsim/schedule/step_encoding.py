"""The compiled synchronous rounds' encoding of a step's messages (`compiled_sync`, with a run's `[compression]`):
what `comm.compression.Compressor.apply` does to the batches `program.kernel_step` makes of a step's output, in
numba, with the built-in codecs' row kernels (`comm.codec_kernels`), so that the compiled rounds encode the Python
rounds' bits."""
from __future__ import annotations

import numba
import numpy as np

from ..comm.codec_kernels import channel_encode
from ..comm.edges import sorted_position
from ..core.streams import mix64

__all__ = ["encode_step"]


@numba.njit(cache=True, nogil=True)
def _same_row(bits, a, b, w):
    for c in range(w):
        if bits[a, c] != bits[b, c]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def encode_step(n_out, out_tag, out_src, out_dst, out_payload, widths, codec, codec_state, codec_keys, codec_drawn,
                 codec_sent, codec_buf, codec_idx, where, row_hash, ptr, nbr):
    """Encode a step's messages in place (`comm.compression.Compressor.apply` on the batches `program.kernel_step`
    makes of them: consecutive rows of one tag). Within a batch, a sender's identical rows (bit for bit) are one
    encoding that all their receivers read, on the sender's broadcast channel (len(nbr) + sender) when there are
    several, else on the edge's; each distinct row is encoded in order of first appearance (`codec_kernels.
    channel_encode`, with its channel's row of codec_state[plan.state] and the sender's uniforms). A message along
    no edge is left as it is (metering refuses it). where, row_hash: int64 / uint64 scratch of the output's size."""
    n_edges = nbr.shape[0]
    bits = out_payload.view(np.uint64)
    start = 0
    while start < n_out:
        t = out_tag[start]
        end = start + 1
        while end < n_out and out_tag[end] == t:
            end += 1
        p = codec[t]
        codec_sent[t] += end - start
        if p.code < 0:
            start = end
            continue
        w = widths[t]
        for r in range(start, end):              # each row's first appearance: hashes, then exact comparisons
            h = mix64(np.uint64(out_src[r]) + np.uint64(0x9E3779B97F4A7C15))
            for c in range(w):
                h = mix64(h ^ bits[r, c])
            row_hash[r] = h
        order = np.argsort(row_hash[start:end], kind="mergesort") + start
        i = 0
        m = end - start
        while i < m:
            j = i + 1
            while j < m and row_hash[order[j]] == row_hash[order[i]]:
                j += 1
            for a in range(i, j):                # equal hashes, in increasing row order
                r = order[a]
                where[r] = r
                for b in range(i, a):
                    q = order[b]
                    if where[q] == q and out_src[q] == out_src[r] and _same_row(bits, q, r, w):
                        where[r] = q
                        break
            i = j
        for r in range(start, end):
            if where[r] != r:
                continue
            e = 0
            if p.ef != 0:
                shared = False
                for q in range(r + 1, end):
                    if where[q] == r:
                        shared = True
                        break
                s = out_src[r]
                if shared:
                    e = n_edges + s
                else:
                    e = sorted_position(ptr, nbr, s, out_dst[r])
                    if e >= ptr[s + 1] or nbr[e] != out_dst[r]:
                        continue
            channel_encode(p, codec_state[max(p.state, 0), e], codec_keys, codec_drawn, t, out_src[r],
                           out_payload[r], codec_buf, codec_idx)
        for r in range(start, end):
            q = where[r]
            if q != r:
                for c in range(w):
                    out_payload[r, c] = out_payload[q, c]
        start = end
