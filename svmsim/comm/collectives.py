"""Collectives: reduce (sum), broadcast, all-reduce and all-gather over the registered patterns (`comm.patterns`).

Every hop is an ordinary message (a tag, src, dst, payload row) written by a node program's step, so the
scheduler meters it like any other traffic and the ledger counts collectives exactly. Three pieces:

* `plan(op, pattern, nodes, d, root=, branching=)` -> `Plan`: who sends which chunk to whom in which step
  (`Plan.schedule()`), the tags it needs (`Plan.tag_table`) and closed-form counts (`scalars()`, `messages()`,
  `rounds()`: rounds that carry messages) that the ledger equals; `Plan.reference(values)` is the result in the
  documented order, in plain numpy.
* numba steps: `collective_start` / `collective_receive` / `collective_reset` (a group's part of one collective, on a
  `CollectiveArrays` from `Plan.arrays`), for a `SyncKernel` step to call in the compiled loop; and the star's
  primitives `send_row`, `gather_to`, `broadcast_from`, `sum_rows`, `star_reduce` for protocols whose rounds
  interleave a star reduce with their own work.
* per-column combining: an all-reduce or reduce sums by default; ``combine`` names each column's operation
  (``"sum"``, ``"min"``, ``"max"``), so one message can carry a sum and a minimum together (MPI's user-defined
  operation; e.g. paper 001's exact step sends its d-vector, three sums and one minimum in one all-reduce).
* a ready node program that runs one collective among peers: `svmsim.algorithms.collective.CollectiveProgram`
  (above this floor: it is a `NodeProgram`).

Patterns (K participants at positions 0..K-1 of `nodes`) are units of the registry `comm.patterns`, one module
each (star, ring, tree, binomial, torus; `PATTERNS` lists them): each lays out the participants, says which
operations it runs, gives its closed-form counts and its summation order (in its module's docstring). A pattern is
a tree (a parent per position, children in the order they are sent to) or stages of rings (disjoint rings of one
length per stage); `Plan.arrays` turns either into the tables the numba steps read, so the steps never look at a
pattern's name. A new pattern is one new module in `svmsim/comm/patterns/`.

Summation order (deterministic, the same for any grouping of nodes onto hosts):
  trees  a node's partial sum is its own value, then its children's partial sums added one at a time in the
         order they arrive (by round, i.e. by the child's subtree height, then by node id); the star's root: own
         value, then the leaves by node id. `star_reduce` (a hub without a value) starts at 0.0.
  rings  in each stage, chunk j of a ring (all-reduce) or the whole vector (reduce, j = root + 1) is summed left
         to right along the ring from ring index j: ((v[j] + v[j+1]) + v[j+2]) + ... + v[j-1].
All-gather gives every node the K*d vector of the blocks in position order (the root's tree and star send the
gathered blocks up in preorder, each message one tag per width).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np

from ..core.jit import inner
from .patterns import Pattern, chunk_bounds, fail, get_pattern, pattern_names

__all__ = ["OPS", "PATTERNS", "COMBINES", "Plan", "plan", "CollectiveArrays", "collective_start", "collective_receive",
           "collective_reset", "state_with_collective", "aux_collective", "AUX_FIELDS",
           "send_row", "gather_to", "broadcast_from", "sum_rows", "star_reduce"]

OPS = ("reduce", "broadcast", "allreduce", "allgather")
PATTERNS = pattern_names()
COMBINES = ("sum", "min", "max")
SUM, MIN, MAX = range(3)
REDUCE, BROADCAST, ALLREDUCE, ALLGATHER = range(4)
TREE, RINGS = 0, 1         # the two shapes of `comm.patterns` the steps run (`Pattern.shape`)
_SHAPES = {"tree": TREE, "rings": RINGS}


# -- the star's primitives (rows into a step's out arrays; n_out in, n_out out) --------------------------------

@inner(inline="always")
def send_row(tag, src, dst, values, width, out_tag, out_src, out_dst, out_payload, n_out):
    """One message: values[:width] from src to dst (inlined into its callers: the per-message cost of a
    hand-written loop)."""
    out_tag[n_out] = tag
    out_src[n_out] = src
    out_dst[n_out] = dst
    for c in range(width):
        out_payload[n_out, c] = values[c]
    return n_out + 1


@inner
def gather_to(tag, srcs, dst, rows, out_tag, out_src, out_dst, out_payload, n_out):
    """The leaves' half of a star reduce: srcs[j] sends rows[j] (all its columns) to the hub dst."""
    for j in range(srcs.shape[0]):
        n_out = send_row(tag, srcs[j], dst, rows[j], rows.shape[1], out_tag, out_src, out_dst, out_payload, n_out)
    return n_out


@inner
def broadcast_from(tag, src, dsts, values, width, out_tag, out_src, out_dst, out_payload, n_out):
    """The hub's broadcast: values[:width] from src to every dsts[j], in that order."""
    for j in range(dsts.shape[0]):
        n_out = send_row(tag, src, dsts[j], values, width, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out


@inner
def sum_rows(tag, dst, in_tag, in_dst, in_payload, n_in, width, acc):
    """acc[:width] += every inbox row with this tag addressed to dst, in inbox order ((tag, src, dst): by
    sender). Returns how many rows it added."""
    n = 0
    for r in range(n_in):
        if in_tag[r] == tag and in_dst[r] == dst:
            for c in range(width):
                acc[c] += in_payload[r, c]
            n += 1
    return n


@inner
def star_reduce(tag, hub, in_tag, in_dst, in_payload, n_in, width, acc):
    """The hub's half of a star reduce when the hub has no value of its own: acc[:width] = 0.0 + the leaves'
    rows by sender. Returns how many rows it added."""
    for c in range(width):
        acc[c] = 0.0
    return sum_rows(tag, hub, in_tag, in_dst, in_payload, n_in, width, acc)


# -- the plan --------------------------------------------------------------------------------------------------

_fail = fail


@dataclass(frozen=True)
class Plan:
    """One collective among `nodes` (ids by position). Build with `plan`."""

    op: str
    pattern: str        # a name of the registry `comm.patterns`
    nodes: np.ndarray
    d: int
    root: int           # the root's position
    parent: np.ndarray  # trees: parent position per position (-1 at the root); rings: all -1
    children: tuple     # trees: children positions per position, in the order a parent sends down in (tree and
                        # star: ascending node id; binomial: tallest subtree first)
    lo: np.ndarray      # rings all-reduce: chunk c of the first stage is [lo[c], lo[c+1]); else the whole block
    combine: np.ndarray  # (d,) int8: SUM, MIN or MAX per column (reduce, all-reduce)
    stages: tuple = ()  # rings: per stage an (rings, L) array of positions in ring order
    stage_lo: tuple = ()  # rings all-reduce: per stage its L + 1 chunk bounds

    @property
    def unit(self) -> Pattern:
        """The registered pattern that laid the plan out."""
        return get_pattern(self.pattern)

    @property
    def k(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def width(self) -> int:
        """Scalars each node holds: d, or K*d for all-gather."""
        return self.k * self.d if self.op == "allgather" else self.d

    def height(self) -> int:
        """The tree's height (0 for rings)."""
        return int(self.heights().max()) if self.unit.shape == "tree" else 0

    def heights(self) -> np.ndarray:
        """Each position's subtree height (trees)."""
        h = np.zeros(self.k, np.int64)
        for p in self.preorder()[::-1]:
            for c in self.children[p]:
                h[p] = max(h[p], h[c] + 1)
        return h

    def preorder(self) -> list[int]:
        """Positions in preorder from the root (trees)."""
        out, stack = [], [self.root]
        while stack:
            p = stack.pop()
            out.append(p)
            stack.extend(reversed(self.children[p]))
        return out

    def subtree_sizes(self) -> np.ndarray:
        """Each position's subtree size (trees; 1 everywhere for rings)."""
        s = np.ones(self.k, np.int64)
        for p in self.preorder()[::-1]:
            for c in self.children[p]:
                s[p] += s[c]
        return s

    # closed-form counts (the pattern's) -----------------------------------------------------------------------
    def messages(self) -> int:
        return self.unit.messages(self)

    def scalars(self) -> int:
        return self.unit.scalars(self)

    def rounds(self) -> int:
        """Rounds that carry messages (from the round the collective starts)."""
        return self.unit.rounds(self)

    # tags --------------------------------------------------------------------------------------------------
    def tag_table(self, up: str = "up", down: str = "down") -> list[tuple[str, int]]:
        """(tag, width) of every message kind, named by the caller: the phase's name, or "name:width" where a
        phase sends messages of more than one width."""
        return self._named("up", up) + self._named("down", down)

    def _named(self, phase: str, name: str) -> list[tuple[str, int]]:
        ws = self.unit.phase_widths(self).get(phase, [])
        return [(name if len(ws) == 1 else f"{name}:{w}", w) for w in ws]

    def schedule(self) -> list[tuple[int, int, int, str, int]]:
        """Every message as (step, src node, dst node, tag of `tag_table()`, width), by step then src."""
        table = self.tag_table()
        st = self.arrays(self.nodes, np.zeros((self.k, self.d)), {t: i for i, (t, _) in enumerate(table)})
        return _simulate(self, st)

    def reference(self, values: np.ndarray) -> np.ndarray:
        """What each position holds at the end (rows by position; all-gather: K*d), in the documented order.
        Reduce: only the root's row is defined (the others hold partial sums; NaN here)."""
        v = np.asarray(values, dtype=np.float64).reshape(self.k, self.d)
        if self.op == "allgather":
            return np.tile(v.reshape(-1), (self.k, 1))
        if self.op == "broadcast":
            return np.tile(v[self.root], (self.k, 1))
        total = self.unit.total(self, v)
        out = np.full_like(v, np.nan) if self.op == "reduce" else np.empty_like(v)
        out[self.root if self.op == "reduce" else slice(None)] = total
        return out

    # numba state -------------------------------------------------------------------------------------------
    def arrays(self, hosted: np.ndarray, values: np.ndarray, tag_ids: dict[str, int], up: str = "up",
               down: str = "down") -> "CollectiveArrays":
        """The state of a group that hosts the participants `hosted` (node ids), each starting from its row of
        `values` (d scalars; at the root only for a broadcast); `tag_ids` maps the tags of
        ``tag_table(up, down)`` to their indices in the kernel's tag table."""
        k, d = self.k, self.d
        hosted = np.asarray(hosted, dtype=np.int64)
        pos_of = {int(n): p for p, n in enumerate(self.nodes)}
        bad = [int(n) for n in hosted if int(n) not in pos_of]
        if bad:
            raise _fail(f"nodes {bad} are not participants", f"the plan's nodes {self.nodes.tolist()}")
        values = np.asarray(values, dtype=np.float64).reshape(len(hosted), -1)
        if values.shape[1] != d:
            raise _fail(f"values of {values.shape[1]} scalars per node where the plan has d = {d}",
                        f"{d} scalars per node")
        member = np.full(k, -1, np.int64)
        buf = np.zeros((len(hosted), self.width))
        for i, n in enumerate(hosted):
            p = pos_of[int(n)]
            member[p] = i
            off = p * d if self.op == "allgather" else 0
            buf[i, off:off + d] = values[i]
        node_pos = np.full(int(self.nodes.max()) + 1, -1, np.int64)
        node_pos[self.nodes] = np.arange(k)
        ids = {ph: {w: tag_ids[t] for t, w in self._named(ph, name)}
               for ph, name in (("up", up), ("down", down))}
        shape = _SHAPES[self.unit.shape]
        sizes = self.subtree_sizes() if shape == TREE else np.ones(k, np.int64)
        stages = self.stages or (np.arange(k, dtype=np.int64).reshape(1, k),)
        n_st = len(stages)
        wide = max([k] + [int(r.shape[1]) for r in stages])
        ring_next = np.zeros((n_st, k), np.int64)
        ring_at = np.zeros((n_st, k), np.int64)
        ring_len = np.array([int(r.shape[1]) for r in stages], np.int64)
        for s, rings in enumerate(stages):
            for ring in rings:
                ring_at[s, ring] = np.arange(ring.shape[0])
                ring_next[s, ring] = np.roll(ring, -1)
        lo = np.zeros((n_st, wide + 1), np.int64)
        up_tag = np.full((n_st, wide), -1, np.int64)
        down_tag = np.full((n_st, wide), -1, np.int64)
        if shape == RINGS and self.op == "allreduce":      # by stage and chunk
            for s, bounds in enumerate(self.stage_lo):
                lo[s, :bounds.shape[0]] = bounds
                for j, w in enumerate(np.diff(bounds)):
                    up_tag[s, j] = ids["up"].get(int(w), -1)
                    down_tag[s, j] = ids["down"].get(int(w), -1)
        else:                                               # by position (rings: one ring, positions in order)
            lo[0, 1] = d
            widths = sizes * d if (self.op == "allgather" and shape == TREE) else np.full(k, d, np.int64)
            down_w = np.full(k, k * d) if (self.op == "allgather" and shape == TREE) else widths
            up_tag[0, :k] = [ids["up"].get(int(w), -1) for w in widths]
            down_tag[0, :k] = [ids["down"].get(int(w), -1) for w in down_w]
        mine = np.zeros(max(tag_ids.values(), default=0) + 1, np.bool_)
        for t in (*ids["up"].values(), *ids["down"].values()):
            mine[t] = True
        pre = np.array(self.preorder() if shape == TREE else range(k), np.int64)
        pre_at = np.empty(k, np.int64)
        pre_at[pre] = np.arange(k)
        ptr = np.zeros(k + 1, np.int64)
        ptr[1:] = np.cumsum([len(c) for c in self.children])
        kids = np.array([c for cs in self.children for c in cs], np.int64)
        return CollectiveArrays(
            shape=shape, op=OPS.index(self.op), d=d, k=k, root=self.root,
            nodes=self.nodes, member=member, node_pos=node_pos, parent=self.parent, child_ptr=ptr, child_pos=kids,
            pre=pre, pre_at=pre_at, size=sizes, lo=lo, ring_next=ring_next, ring_at=ring_at, ring_len=ring_len,
            up_tag=up_tag, down_tag=down_tag, mine=mine, combine=self.combine, value=buf,
            count=np.zeros(len(hosted), np.int64), stage=np.zeros(len(hosted), np.int64),
            finished=np.zeros(len(hosted), np.int64), started=np.zeros(1, np.int64))

    def max_out(self, hosted: np.ndarray) -> int:
        """The most messages the group hosting `hosted` sends in one round."""
        pos_of = {int(n): p for p, n in enumerate(self.nodes)}
        return max(1, sum(max(1, len(self.children[pos_of[int(n)]])) for n in hosted))


def _combine_codes(combine, d: int, op: str) -> np.ndarray:
    if combine is None:
        return np.zeros(d, np.int8)
    names = [combine] * d if isinstance(combine, str) else list(combine)
    if len(names) != d:
        raise _fail(f"combine names {len(names)} columns where d = {d}", f"one of {', '.join(COMBINES)} per column")
    bad = [c for c in names if c not in COMBINES]
    if bad:
        raise _fail(f"combine {bad[0]!r} is unknown", ", ".join(COMBINES))
    codes = np.array([COMBINES.index(c) for c in names], np.int8)
    if codes.any() and op not in ("reduce", "allreduce"):
        raise _fail(f"combine {names[int(np.flatnonzero(codes)[0])]!r} for a {op}", "combine with reduce or allreduce")
    return codes


def plan(op: str, pattern: str, nodes, d: int, root: int | None = None, branching: int = 2,
         combine=None) -> Plan:
    """Check and lay out one collective over a registered `pattern` (`PATTERNS`); `root` is a node id (default:
    the first node; all-reduce and all-gather over rings have no root); `branching` is the tree's (star: K - 1;
    other patterns ignore it); `combine`: how a reduce or
    all-reduce combines each column, one of `COMBINES` for all columns or a sequence of d of them (default:
    sum)."""
    if op not in OPS:
        raise _fail(f"operation {op!r} is unknown", ", ".join(OPS))
    unit = get_pattern(pattern)
    if op not in unit.ops:
        raise _fail(f"the {pattern} pattern has no {op}", f"{', '.join(unit.ops)} over {pattern}, or another pattern")
    ids = np.asarray(nodes).reshape(-1)
    if ids.size < 1:
        raise _fail("K = 0 participants", "K >= 1 node ids")
    if not np.issubdtype(ids.dtype, np.integer) or (ids < 0).any() or np.unique(ids).size != ids.size:
        raise _fail(f"nodes {ids.tolist()} are not distinct non-negative integer node ids",
                    "distinct non-negative integer node ids")
    ids = ids.astype(np.int64)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise _fail(f"d = {d!r} scalars per node", "an integer d >= 1")
    d = int(d)
    codes = _combine_codes(combine, d, op)
    k = ids.size
    if root is None:
        root = int(ids[0])
    if int(root) not in ids.tolist():
        raise _fail(f"root {root!r} is not a participant", f"one of the nodes {ids.tolist()}")
    rp = int(np.flatnonzero(ids == int(root))[0])
    unit.check(op, k, d, branching)
    lay = unit.layout(k, rp, ids, branching)
    stage_lo = tuple(chunk_bounds(d, int(r.shape[1])) for r in lay.stages) if op == "allreduce" else ()
    lo = stage_lo[0] if stage_lo else np.array([0, d], np.int64)
    return Plan(op, pattern, ids, d, rp, lay.parent, lay.children, lo, codes, lay.stages, stage_lo)


def _simulate(p: Plan, st: "CollectiveArrays") -> list[tuple[int, int, int, str, int]]:
    """Run the collective on `st` (a group that hosts everyone, tags numbered as in `tag_table()`) with the
    numba steps, delivering each step's messages to the next one; returns the messages."""
    table = p.tag_table()
    widths = np.array([w for _, w in table], np.int64)
    room = 2 * p.max_out(p.nodes) + 16          # a step's messages: at most every participant's max_out
    width = max(1, int(widths.max()) if widths.size else 1)
    bufs = [np.zeros(room, np.int64) for _ in range(3)] + [np.zeros((room, width))]
    n = _start_from_python(st, *bufs)
    out, step = [], 0
    while n:
        rows = sorted(zip(bufs[0][:n], bufs[1][:n], bufs[2][:n], range(n)), key=lambda r: (r[0], r[1], r[2]))
        out += [(step, int(s), int(d), table[t][0], int(widths[t])) for t, s, d, _ in rows]
        idx = [r[3] for r in rows]
        inbox = [b[:n][idx].copy() for b in bufs]
        n = _receive_from_python(st, inbox[0], inbox[1], inbox[2], inbox[3], n, *bufs)
        step += 1
    return sorted(out, key=lambda m: (m[0], m[1], m[2]))


@numba.njit(cache=True, nogil=True)
def _start_from_python(st, out_tag, out_src, out_dst, out_payload):
    return collective_start(st, out_tag, out_src, out_dst, out_payload, 0)


@numba.njit(cache=True, nogil=True)
def _receive_from_python(st, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload):
    return collective_receive(st, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload, 0)


# -- the numba steps -------------------------------------------------------------------------------------------

class CollectiveArrays(NamedTuple):
    """A group's part of one collective, as the numba steps read it (from `Plan.arrays`). Positions index
    `nodes`; members index this group's hosted participants."""

    shape: int              # TREE or RINGS: which tables below the steps follow
    op: int                 # REDUCE, BROADCAST, ALLREDUCE, ALLGATHER
    d: int                  # scalars per node
    k: int                  # participants
    root: int               # the root's position
    nodes: np.ndarray       # (K,) node id by position
    member: np.ndarray      # (K,) this group's member index of a position, -1 where hosted elsewhere
    node_pos: np.ndarray    # position of a node id, -1 for non-participants
    parent: np.ndarray      # (K,) tree: parent position, -1 at the root
    child_ptr: np.ndarray   # (K+1,) tree: children of p are child_pos[child_ptr[p]:child_ptr[p+1]]
    child_pos: np.ndarray
    pre: np.ndarray         # (K,) tree: positions in preorder (a subtree is pre[pre_at[p]:pre_at[p] + size[p]])
    pre_at: np.ndarray
    size: np.ndarray        # (K,) tree: subtree sizes
    lo: np.ndarray          # (S, W+1) rings all-reduce: stage s's chunk bounds
    ring_next: np.ndarray   # (S, K) rings: the position after p in its ring of stage s
    ring_at: np.ndarray     # (S, K) rings: p's index in its ring of stage s
    ring_len: np.ndarray    # (S,) rings: the length of stage s's rings
    up_tag: np.ndarray      # (S, W) tag of the message position p sends up (trees: row 0 by position; rings
                            # all-reduce: by stage and chunk)
    down_tag: np.ndarray    # (S, W) tag of the messages carrying position p's block / a chunk down (-1: none)
    mine: np.ndarray        # by tag index: the tag is one of this collective's
    combine: np.ndarray     # (d,) int8 per column: SUM, MIN or MAX
    value: np.ndarray       # (members, d or K*d) each member's vector: its input, then its result
    count: np.ndarray       # (members,) messages received (rings: in the current stage)
    stage: np.ndarray       # (members,) rings: the stage each member is in
    finished: np.ndarray    # (members,) 1 once the member holds its result
    started: np.ndarray     # [1] 1 once `collective_start` ran (for a kernel that runs one collective)


#: the field names of a state's second, auxiliary collective (`state_with_collective(..., aux=True)`)
AUX_FIELDS = tuple("aux_" + f for f in CollectiveArrays._fields)


def state_with_collective(name: str, fields: list[tuple[str, type]], aux: bool = False) -> type:
    """A named tuple type with every field of `CollectiveArrays` and then the program's own `fields`, for a
    program whose compiled state runs a collective among its other work: the numba steps read fields by name, so
    they accept it as their `st`, and the state stays one flat tuple (as the compiled loop requires). Build one with
    ``State(*plan.arrays(...), *own_values)``.

    With ``aux=True`` the state also carries a second collective's fields (`AUX_FIELDS`, after the program's own:
    ``State(*plan.arrays(...), *own_values, *aux_plan.arrays(...))``), e.g. a few scalars all-reduced between the
    main collectives; a step reaches it as `aux_collective(st)`, which every collective step accepts."""
    own = {f for f, _ in fields}
    clash = sorted((set(CollectiveArrays._fields) | set(AUX_FIELDS)) & own)
    if clash:
        raise ValueError(f"fields {clash} are the collective's; allowed: other names")
    extra = [(a, CollectiveArrays.__annotations__[f]) for a, f in zip(AUX_FIELDS, CollectiveArrays._fields)]
    cls = NamedTuple(name, [(f, CollectiveArrays.__annotations__[f]) for f in CollectiveArrays._fields] + fields
                     + (extra if aux else []))
    # the caller's module, where the type is bound to `name`: pickling the type (numba's cache index keys on it)
    # must find it again in another process, or every process compiles the steps anew
    cls.__module__ = sys._getframe(1).f_globals["__name__"]
    return cls


@inner
def aux_collective(st) -> CollectiveArrays:
    """The auxiliary collective of a state built by ``state_with_collective(..., aux=True)``, as the
    `CollectiveArrays` the collective steps take (the same arrays, no copy)."""
    return CollectiveArrays(st.aux_shape, st.aux_op, st.aux_d, st.aux_k, st.aux_root, st.aux_nodes, st.aux_member,
                            st.aux_node_pos, st.aux_parent, st.aux_child_ptr, st.aux_child_pos, st.aux_pre,
                            st.aux_pre_at, st.aux_size, st.aux_lo, st.aux_ring_next, st.aux_ring_at,
                            st.aux_ring_len, st.aux_up_tag, st.aux_down_tag, st.aux_mine, st.aux_combine,
                            st.aux_value, st.aux_count, st.aux_stage, st.aux_finished, st.aux_started)


@numba.njit(cache=True, nogil=True, inline="always")
def _combine(op, a, b):
    if op == SUM:
        return a + b
    if op == MIN:
        return min(a, b)
    return max(a, b)


@inner
def _send_block(st, tag, p, dst_p, a, b, out_tag, out_src, out_dst, out_payload, n_out):
    """Position p sends value[a:b] of its buffer to position dst_p."""
    return send_row(tag, st.nodes[p], st.nodes[dst_p], st.value[st.member[p], a:b], b - a, out_tag, out_src, out_dst,
                    out_payload, n_out)


@inner
def _send_down(st, p, out_tag, out_src, out_dst, out_payload, n_out):
    """Position p (holding the result) sends its whole buffer to its children and is finished."""
    st.finished[st.member[p]] = 1
    w = st.value.shape[1]
    for c in range(st.child_ptr[p], st.child_ptr[p + 1]):
        n_out = _send_block(st, st.down_tag[0, p], p, st.child_pos[c], 0, w, out_tag, out_src, out_dst, out_payload,
                            n_out)
    return n_out


@inner
def _tree_up(st, p, out_tag, out_src, out_dst, out_payload, n_out):
    """Position p has its children's parts: send them up, or (at the root) finish or turn down."""
    if p == st.root:
        if st.op == REDUCE:
            st.finished[st.member[p]] = 1
            return n_out
        return _send_down(st, p, out_tag, out_src, out_dst, out_payload, n_out)
    if st.op == ALLGATHER:           # the subtree's blocks in preorder
        i, d = st.member[p], st.d
        r = n_out
        n_out = send_row(st.up_tag[0, p], st.nodes[p], st.nodes[st.parent[p]], st.value[i], 0, out_tag, out_src,
                         out_dst, out_payload, n_out)
        for k in range(st.size[p]):
            blk = st.pre[st.pre_at[p] + k]
            for c in range(d):
                out_payload[r, k * d + c] = st.value[i, blk * d + c]
        return n_out
    if st.op == REDUCE:
        st.finished[st.member[p]] = 1
    return _send_block(st, st.up_tag[0, p], p, st.parent[p], 0, st.d, out_tag, out_src, out_dst, out_payload, n_out)


@inner
def _ring_chunk(st, s, j):
    """The scalars of chunk j of stage s: an all-reduce's chunk, an all-gather's block j, or the whole vector."""
    if st.op == ALLREDUCE:
        return st.lo[s, j], st.lo[s, j + 1]
    if st.op == ALLGATHER:
        return j * st.d, (j + 1) * st.d
    return 0, st.d


@inner
def _ring_begin(st, p, out_tag, out_src, out_dst, out_payload, n_out):
    """Position p starts its stage of a rings collective (all-reduce, all-gather: every member sends its own chunk
    or block; reduce: the ring's member after the root sends its vector; broadcast: the root sends it)."""
    i = st.member[p]
    s = st.stage[i]
    q = st.ring_at[s, p]
    nxt = st.ring_next[s, p]
    if st.op == REDUCE:
        if q == (st.ring_at[s, st.root] + 1) % st.ring_len[s]:
            st.finished[i] = 1
            return _send_block(st, st.up_tag[s, q], p, nxt, 0, st.d, out_tag, out_src, out_dst, out_payload, n_out)
        return n_out
    if st.op == BROADCAST:
        if p == st.root:
            st.finished[i] = 1
            return _send_block(st, st.down_tag[s, q], p, nxt, 0, st.d, out_tag, out_src, out_dst, out_payload,
                               n_out)
        return n_out
    a, b = _ring_chunk(st, s, q)
    tag = st.up_tag[s, q] if st.op == ALLREDUCE else st.down_tag[s, q]
    return _send_block(st, tag, p, nxt, a, b, out_tag, out_src, out_dst, out_payload, n_out)


@inner
def collective_start(st, out_tag, out_src, out_dst, out_payload, n_out):
    """The first step of the collective for this group's members (every participant starts in the same round):
    writes their first messages from row n_out on; returns the new n_out."""
    k = st.k
    st.started[0] = 1
    for p in range(k):
        i = st.member[p]
        if i < 0:
            continue
        if k == 1:
            st.finished[i] = 1
            continue
        if st.shape == TREE:
            if st.op == BROADCAST:
                if p == st.root:
                    n_out = _send_down(st, p, out_tag, out_src, out_dst, out_payload, n_out)
            elif st.child_ptr[p + 1] == st.child_ptr[p]:                # a leaf
                n_out = _tree_up(st, p, out_tag, out_src, out_dst, out_payload, n_out)
            continue
        n_out = _ring_begin(st, p, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out


@inner
def collective_reset(st):
    """Make the collective ready to run again (e.g. once per iteration): the caller then writes the members'
    new inputs into `st.value` (all-gather: each member's block at its position) and calls `collective_start`."""
    st.count[:] = 0
    st.stage[:] = 0
    st.finished[:] = 0
    st.started[0] = 0


@inner
def _ring_receive(st, p, row, out_tag, out_src, out_dst, out_payload, n_out):
    """Position p receives its next message of its stage's ring (from the position before it)."""
    i = st.member[p]
    s = st.stage[i]
    n, q, nxt = st.ring_len[s], st.ring_at[s, p], st.ring_next[s, p]
    st.count[i] += 1
    c = st.count[i]
    if st.op == REDUCE or (st.op == ALLREDUCE and c <= n - 1):
        j = (q - c) % n if st.op == ALLREDUCE else 0
        a, b = _ring_chunk(st, s, j)
        for x in range(a, b):                      # the partial from upstream, plus this node's own
            st.value[i, x] = _combine(st.combine[x], row[x - a], st.value[i, x])
        last = p == st.root if st.op == REDUCE else c == n - 1
        if st.op == REDUCE and last:
            st.finished[i] = 1
            return n_out
        tag = st.down_tag[s, j] if last else st.up_tag[s, j]       # a complete chunk starts the all-gather
        if st.op == REDUCE:
            st.finished[i] = 1
        return _send_block(st, tag, p, nxt, a, b, out_tag, out_src, out_dst, out_payload, n_out)
    t = c - (n - 1) if st.op == ALLREDUCE else c              # copying steps: broadcast, all-gather
    j = (q + 1 - t) % n if st.op == ALLREDUCE else (q - t) % n
    a, b = _ring_chunk(st, s, j)
    for x in range(a, b):
        st.value[i, x] = row[x - a]
    if (st.op == BROADCAST and nxt == st.root) or (st.op != BROADCAST and t == n - 1):
        if st.op == ALLREDUCE and s + 1 < st.ring_len.shape[0]:     # the stage is done: the next one starts
            st.stage[i] = s + 1
            st.count[i] = 0
            return _ring_begin(st, p, out_tag, out_src, out_dst, out_payload, n_out)
        st.finished[i] = 1
        return n_out
    if st.op == BROADCAST:
        st.finished[i] = 1
    return _send_block(st, st.down_tag[s, j], p, nxt, a, b, out_tag, out_src, out_dst, out_payload, n_out)


@inner
def collective_receive(st, in_tag, in_src, in_dst, in_payload, n_in, out_tag, out_src, out_dst, out_payload,
                       n_out):
    """Apply this round's collective messages to this group's members (rows addressed to them whose tag is one
    of the plan's; others are left alone), in inbox order, and write what they send next from row n_out on;
    returns the new n_out."""
    for r in range(n_in):
        dst = in_dst[r]
        if dst >= st.node_pos.shape[0] or st.node_pos[dst] < 0:
            continue
        p = st.node_pos[dst]
        i = st.member[p]
        if i < 0:
            continue
        t = in_tag[r]
        src_p = st.node_pos[in_src[r]] if in_src[r] < st.node_pos.shape[0] else -1
        if src_p < 0:
            continue
        if t >= st.mine.shape[0] or not st.mine[t]:
            continue
        row = in_payload[r]
        if st.shape == RINGS:
            n_out = _ring_receive(st, p, row, out_tag, out_src, out_dst, out_payload, n_out)
            continue
        w = st.value.shape[1]
        if src_p == st.parent[p]:                              # down: the result
            for c in range(w):
                st.value[i, c] = row[c]
            n_out = _send_down(st, p, out_tag, out_src, out_dst, out_payload, n_out)
            continue
        d = st.d                                               # up: a child's part
        if st.op == ALLGATHER:
            for kk in range(st.size[src_p]):
                blk = st.pre[st.pre_at[src_p] + kk]
                for c in range(d):
                    st.value[i, blk * d + c] = row[kk * d + c]
        else:
            for c in range(d):
                st.value[i, c] = _combine(st.combine[c], st.value[i, c], row[c])
        st.count[i] += 1
        if st.count[i] == st.child_ptr[p + 1] - st.child_ptr[p]:
            n_out = _tree_up(st, p, out_tag, out_src, out_dst, out_payload, n_out)
    return n_out
