"""Many small draws without replacement in one compiled pass, with the bits of NumPy's `Generator.choice`.

`k_out_draws(n, k, seed)` gives, for every node i of n, k distinct other nodes: row i is what
``rng.choice(n - 1, size=k, replace=False)`` (then shifted past i) returns when called once per node in order on
``rng = np.random.default_rng(seed)`` -- the random k-out overlay's draws. A Python loop of n `choice` calls costs
about 10 µs each (16 s at 10^6 nodes); this reads the generator's raw 64-bit stream (`BitGenerator.random_raw`,
whose outputs NumPy keeps stable across versions) and applies the same integer algorithms in numba:

* PCG64 hands out 32-bit words as the low, then the high half of each 64-bit output (its ``next_uint32`` keeps
  the other half for the next call); a fresh generator starts with no half kept;
* a bounded draw in [0, r] (r < 2^32 - 1) is Lemire's multiply-and-reject on one 32-bit word
  (``buffered_bounded_lemire_uint32``); r = 0 draws nothing;
* `choice` without replacement draws by Floyd's algorithm with a small open-addressing set and then shuffles the k
  picks (Fisher-Yates from the top, one bounded draw per position); above 10 000 candidates, a k larger than
  1/50 of them is drawn instead by shuffling the tail of the whole range.

The tests hold the result equal to the `choice` loop it replaces and to graphs recorded before it.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["k_out_draws"]

_U32 = np.uint64(0xFFFFFFFF)
#: 32-bit words a node may need beyond its 2k - 1 (rejections are rare: each has probability below r / 2^32)
_SLACK_WORDS = 64
#: `choice` shuffles the tail of the whole range instead of Floyd's set above this many candidates ...
_TAIL_SHUFFLE_POPULATION = 10_000
#: ... when k exceeds the candidates over this
_TAIL_SHUFFLE_CUTOFF = 50


@numba.njit(cache=True)
def _bounded(words, pos, r):
    """A uniform integer in [0, r] from the word stream at pos (Lemire's method); (value, next pos)."""
    if r == 0:
        return np.uint64(0), pos
    r_excl = r + np.uint64(1)
    m = words[pos] * r_excl
    pos += 1
    leftover = m & _U32
    if leftover < r_excl:
        threshold = ((_U32 - r) & _U32) % r_excl
        while leftover < threshold:
            m = words[pos] * r_excl
            pos += 1
            leftover = m & _U32
    return m >> np.uint64(32), pos


@numba.njit(cache=True)
def _shuffle(data, first, words, pos):
    """NumPy's `_shuffle_int`: positions len-1 down to `first` each swapped with a bounded draw below them."""
    for i in range(data.shape[0] - 1, first - 1, -1):
        j, pos = _bounded(words, pos, np.uint64(i))
        t = data[j]
        data[j] = data[i]
        data[i] = t
    return pos


@numba.njit(cache=True)
def _draw_rows(out, start, pop, words, pos, tail):
    """Rows start.. of `out` (each k picks from range(pop), as `choice`), until the words may run short; returns
    (next row, next pos)."""
    n, k = out.shape
    empty = np.uint64(0xFFFFFFFFFFFFFFFF)
    size = np.uint64(int(1.2 * k))
    mask = size                                    # `_gen_mask`: the smallest all-ones mask covering size
    mask |= mask >> np.uint64(1)
    mask |= mask >> np.uint64(2)
    mask |= mask >> np.uint64(4)
    mask |= mask >> np.uint64(8)
    mask |= mask >> np.uint64(16)
    mask |= mask >> np.uint64(32)
    table = np.empty(int(mask) + 1, dtype=np.uint64)
    picks = np.empty(k, dtype=np.int64)
    whole = np.empty(pop if tail else 0, dtype=np.int64)
    need = (pop if tail else 2 * k) + _SLACK_WORDS
    i = start
    while i < n and pos + need <= words.shape[0]:
        if tail:
            for q in range(pop):
                whole[q] = q
            pos = _shuffle(whole, max(pop - k, 1), words, pos)
            for q in range(k):                  # (element by element: a slice assignment compiles numba's
                picks[q] = whole[pop - k + q]   # shape-mismatch message, seconds of a first run)
        else:
            table[:] = empty
            for j in range(pop - k, pop):
                val, pos = _bounded(words, pos, np.uint64(j))
                loc = val & mask
                while table[loc] != empty and table[loc] != val:
                    loc = (loc + np.uint64(1)) & mask
                if table[loc] == empty:
                    table[loc] = val
                    picks[j - pop + k] = np.int64(val)
                else:
                    loc = np.uint64(j) & mask
                    while table[loc] != empty:
                        loc = (loc + np.uint64(1)) & mask
                    table[loc] = np.uint64(j)
                    picks[j - pop + k] = j
            pos = _shuffle(picks, 1, words, pos)
        for q in range(k):
            out[i, q] = picks[q] + 1 if picks[q] >= i else picks[q]     # skip node i itself
        i += 1
    return i, pos


#: 32-bit words drawn at a time (128 MB as the uint64 the draws read): the same stream, consumed in order, whatever
#: the chunk (a whole 10 002-node, k = 300 draw took 2.7 GB at once)
_CHUNK_WORDS = 1 << 24


def k_out_draws(n: int, k: int, seed: int) -> np.ndarray:
    """(n, k) int64: row i holds k distinct nodes other than i, as the per-node `choice` loop of the module
    docstring draws them from ``np.random.default_rng(seed)``."""
    pop = n - 1
    if not 1 <= k <= pop or pop >= 2 ** 32 - 1:
        raise ValueError(f"k_out_draws needs 1 <= k <= n - 1 < 2^32 - 1, got n = {n}, k = {k}")
    tail = pop > _TAIL_SHUFFLE_POPULATION and k > pop // _TAIL_SHUFFLE_CUTOFF
    bitgen = np.random.default_rng(seed).bit_generator
    out = np.empty((n, k), dtype=np.int64)
    per_row = (pop if tail else 2 * k) + 1
    words = np.empty(0, dtype=np.uint64)
    row, pos = 0, 0
    chunk_rows = max(1, _CHUNK_WORDS // per_row)      # the stream in chunks: memory O(chunk), not O(n * pop)
    while row < n:
        more = bitgen.random_raw(min(n - row, chunk_rows) * per_row // 2 + _SLACK_WORDS)
        words = np.concatenate([words[pos:], more.view(np.uint32).astype(np.uint64)])
        row, pos = _draw_rows(out, row, pop, words, 0, tail)
    return out
