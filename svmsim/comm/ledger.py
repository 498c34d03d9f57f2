"""The ledger: a frozen summary of what a meter counted, its files, and the merge of several meters' ledgers.

Message quantities (`MESSAGE_QUANTITIES`, from the registry in `quantities`: messages, scalars, bytes) are kept
per tag, per directed edge and per round; node quantities (e.g. ``"kernel_evaluations"``: work one node did, not a
message) per node and per round. A ledger written by one meter that saw everything equals the merge of the
ledgers of meters that each saw a part (hosts of a Ray run): every table is a sum keyed by tag, edge, node or
round.
"""
from __future__ import annotations

import io
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np

from ..core import jsonio
from ..core.names import NodeNames
from .quantities import MESSAGE_QUANTITIES

__all__ = ["Ledger", "merge_ledgers", "MESSAGE_QUANTITIES"]

_Q = len(MESSAGE_QUANTITIES)   # the message quantities of the registry (`quantities`), in the ledger's column order


@dataclass
class Ledger:
    """A frozen summary of what the meter counted.

    ``node_totals[q]`` is quantity q per node (length n_nodes) and ``node_rounds[q]`` its rows (round, amount) for
    the rounds in which some node did any; both are empty unless a node quantity was recorded.
    """

    totals: dict
    by_tag: dict
    dropped_by_tag: dict
    edges: np.ndarray  # rows (src, dst, messages, scalars, bytes)
    dropped_edges: np.ndarray
    rounds: np.ndarray  # rows (round, messages, scalars, bytes) for rounds that carried messages
    iteration_rounds: np.ndarray  # rows (iteration, round at which it ended)
    node_names: Sequence[str]    # a list, or a `NodeNames`
    node_totals: dict = field(default_factory=dict)   # quantity -> per-node amounts
    node_rounds: dict = field(default_factory=dict)   # quantity -> rows (round, amount)

    @classmethod
    def from_meter(cls, meter) -> "Ledger":
        return meter.ledger()

    def by_node(self) -> dict[str, dict]:
        """Sent and received messages/scalars/bytes per node that took part, in the order nodes first appear in the
        edge rows (source, then destination, row by row)."""
        order, sent, received = self._traffic()
        names = self.node_names
        return {names[i]: {"sent": dict(zip(MESSAGE_QUANTITIES, s)), "received": dict(zip(MESSAGE_QUANTITIES, r))}
                for i, s, r in zip(order.tolist(), sent.tolist(), received.tolist())}

    def _traffic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the nodes that took part, in `by_node`'s order; their sent and received (messages, scalars, bytes)),
        summed over the edge rows in one compiled pass (`_node_traffic`: 8 + 48 bytes a node beside the rows, not a
        sort of both ends of every row; 10^6 nodes: 0.3 s with the sort, 40 s row by row in Python)."""
        # pragma: no mutate start (equivalent: the meter's edge table is int64 rows of 2 + _Q already)
        E = np.ascontiguousarray(np.asarray(self.edges, dtype=np.int64).reshape(-1, 2 + _Q))
        # pragma: no mutate end
        size = int(E[:, :2].max()) + 1 if E.shape[0] else 0  # pragma: no mutate (equivalent: more rows stay unread)
        first, sent, received = _node_traffic(E, size)
        nodes = np.flatnonzero(first >= 0)
        order = nodes[np.argsort(first[nodes])]
        return order, sent[order], received[order]

    def equals(self, other: "Ledger") -> bool:
        return (self.totals == other.totals and self.by_tag == other.by_tag
                and self.dropped_by_tag == other.dropped_by_tag and np.array_equal(self.edges, other.edges)
                and np.array_equal(self.dropped_edges, other.dropped_edges)
                and np.array_equal(self.rounds, other.rounds)
                and np.array_equal(self.iteration_rounds, other.iteration_rounds)
                and sorted(self.node_totals) == sorted(other.node_totals)
                and all(np.array_equal(v, other.node_totals[q]) for q, v in self.node_totals.items())
                and all(np.array_equal(v, other.node_rounds.get(q)) for q, v in self.node_rounds.items()))

    def nodes_summary(self) -> dict:
        """Per node quantity: its total, the amount of every node that did any (by name), rounds with any."""
        out = {}
        for q in sorted(self.node_totals):
            v = self.node_totals[q]
            nz = np.flatnonzero(v)
            out[q] = {"total": _plain(v.sum()), "n_rounds": int(self.node_rounds[q].shape[0]),
                      "by_node": {self.node_names[i]: _plain(v[i]) for i in nz}}
        return out

    def summary(self, by_node: bool = True) -> dict:
        """What ledger.json holds (without its largest part, `by_node`, when `by_node` is False)."""
        tags = {t: dict(zip(MESSAGE_QUANTITIES, v)) for t, v in self.by_tag.items()}
        dropped = {t: dict(zip(MESSAGE_QUANTITIES, v)) for t, v in self.dropped_by_tag.items()}
        out = {"totals": self.totals, "by_tag": tags, "dropped_by_tag": dropped,
               "by_node": self.by_node() if by_node else {}, "n_rounds_with_messages": int(self.rounds.shape[0]),
               "iterations": int(self.iteration_rounds.shape[0])}
        if self.node_totals:
            out["nodes"] = self.nodes_summary()
        return out

    def json_text(self) -> str:
        """``jsonio.dumps(self.summary())`` (strict JSON, indent 2), byte for byte (`write_json` into a string)."""
        text = io.StringIO()
        self.write_json(text)
        return text.getvalue()

    def write_json(self, out, block: int = 8192) -> None:  # pragma: no mutate (equivalent: any block, same bytes)
        """Write ``jsonio.dumps(self.summary())`` (strict JSON, indent 2) to the text stream `out`, byte for byte, with `by_node`
        formatted from whole arrays `block` nodes at a time (the json module's indenting encoder is pure Python: 70 s
        for 10^6 nodes, against about 2 s here; the text of every node at once added about 0.4 KB a node to the
        run's peak)."""
        names = self.node_names
        lazy = isinstance(names, NodeNames)  # pragma: no mutate (equivalent: the keys' path writes the same bytes)
        # the plain encoder where the fast path does not apply (both write the same bytes)
        if not (lazy or all(type(name) is str for name in names)):  # pragma: no mutate (equivalent: same bytes, slower)
            out.write(jsonio.dumps(self.summary()))
            return
        order, sent, received = self._traffic()
        if not order.size:  # pragma: no mutate (equivalent: the same bytes, slower)
            out.write(jsonio.dumps(self.summary()))
            return
        mark = "\u0000by_node\u0000"  # pragma: no mutate (equivalent: any mark that no other field can show)
        summary = self.summary(by_node=False)  # pragma: no mutate (equivalent: the mark replaces by_node anyway)
        head = jsonio.dumps({**summary, "by_node": mark})
        fields = ",\n".join(f'{" " * 8}"{q}": %d' for q in MESSAGE_QUANTITIES)
        node = f'    %s: {{\n      "sent": {{\n{fields}\n      }},\n      "received": {{\n{fields}\n      }}\n    }}'
        key = '"by_node": ' + json.dumps(mark)
        before, _, after = head.partition(key)  # pragma: no mutate (equivalent: the key occurs once)
        if lazy:                                         # a key is the prefix's JSON text and the node's id
            # pragma: no mutate start (equivalent: the template holds one %s, the key's)
            node = node.replace("%s", '"' + json.dumps(names.prefix)[1:-1].replace("%", "%%") + '%d"', 1)
            # pragma: no mutate end
        out.write(before + '"by_node": {\n')
        for lo in range(0, order.shape[0], block):
            ids = order[lo:lo + block].tolist()
            keys = ids if lazy else [json.dumps(names[i]) for i in ids]
            values = np.concatenate([sent[lo:lo + block], received[lo:lo + block]], axis=1).tolist()
            out.write((",\n" if lo else "") + ",\n".join(node % (k, *row) for k, row in zip(keys, values)))
        out.write("\n  }" + after)

    def save(self, directory: Path) -> None:
        """ledger.json, ledger_edges.csv, ledger_rounds.csv; with node quantities also ledger_nodes.csv (one row per
        node) and ledger_node_rounds.csv (one row per round in which a node quantity was recorded)."""
        directory = Path(directory)
        with open(directory / "ledger.json", "w") as f:
            self.write_json(f)
        names = self.node_names
        _write_edges_csv(directory / "ledger_edges.csv", self.edges, names)
        _write_int_csv(directory / "ledger_rounds.csv", ",".join(("round",) + MESSAGE_QUANTITIES), self.rounds)
        if self.node_totals:
            qs = sorted(self.node_totals)
            with open(directory / "ledger_nodes.csv", "w") as f:
                f.write(",".join(["node", "name"] + qs) + "\n")
                for i, name in enumerate(names):
                    f.write(",".join([str(i), str(name)] + [str(_plain(self.node_totals[q][i])) for q in qs]) + "\n")
            rounds = np.unique(np.concatenate([self.node_rounds[q][:, 0] for q in qs]).astype(np.int64))
            cols = []
            for q in qs:
                t = self.node_rounds[q]
                col = np.zeros(rounds.shape[0], dtype=t.dtype)
                col[np.searchsorted(rounds, t[:, 0].astype(np.int64))] = t[:, 1]
                cols.append(col)
            with open(directory / "ledger_node_rounds.csv", "w") as f:
                f.write(",".join(["round"] + qs) + "\n")
                for i, r in enumerate(rounds):
                    f.write(",".join([str(int(r))] + [str(_plain(c[i])) for c in cols]) + "\n")

    @staticmethod
    def merge(ledgers: list["Ledger"]) -> "Ledger":
        """One ledger from several meters' (see `merge_ledgers`)."""
        return merge_ledgers(ledgers)


@numba.njit(cache=True)
def _node_traffic(E, size):
    """Per node 0..size-1 of the edge rows E (src, dst, quantities...): where it first appears when the rows are read
    as src, dst, src, dst, ... (-1: nowhere), and what it sent and received, in one pass in row order."""
    nq = E.shape[1] - 2
    first = np.full(size, -1, dtype=np.int64)
    sent = np.zeros((size, nq), dtype=np.int64)
    received = np.zeros((size, nq), dtype=np.int64)
    for r in range(E.shape[0]):
        s, d = E[r, 0], E[r, 1]
        if first[s] < 0:
            first[s] = 2 * r
        if first[d] < 0:
            first[d] = 2 * r + 1
        for q in range(nq):
            sent[s, q] += E[r, 2 + q]
            received[d, q] += E[r, 2 + q]
    return first, sent, received


def frozen_names(names):
    """A ledger's own copy of a run's node names: a `NodeNames` as it is (it cannot change), anything else as a
    list."""
    return names if isinstance(names, NodeNames) else list(names)


def merge_ledgers(ledgers: list[Ledger]) -> Ledger:
    """One ledger from several meters' (exact: totals, tags and dropped tags summed; edges summed by (src, dst),
    sorted; rounds summed by round; iteration rows together in order; node quantities summed per node and by
    round)."""
    if not ledgers:
        raise ValueError("no ledgers to merge")

    def add(dicts):
        out: dict = {}
        for d in dicts:
            for k, v in d.items():
                acc = out.setdefault(k, [0] * len(v))
                for i, x in enumerate(v):
                    acc[i] += int(x)
        return {k: out[k] for k in sorted(out)}

    totals = {k: sum(int(lg.totals[k]) for lg in ledgers) for k in ledgers[0].totals}
    quantities = sorted({q for lg in ledgers for q in lg.node_totals})
    node_totals, node_rounds = {}, {}
    for q in quantities:
        parts = [lg for lg in ledgers if q in lg.node_totals]
        node_totals[q] = np.sum([lg.node_totals[q] for lg in parts], axis=0)
        rows = [lg.node_rounds[q] for lg in parts]
        node_rounds[q] = _sum_rows(rows, 1, 2, dtype=np.result_type(*rows))
    return Ledger(totals=totals, by_tag=add(lg.by_tag for lg in ledgers),
                  dropped_by_tag=add(lg.dropped_by_tag for lg in ledgers),
                  edges=_sum_rows([lg.edges for lg in ledgers], 2, 2 + _Q),
                  dropped_edges=_sum_rows([lg.dropped_edges for lg in ledgers], 2, 2 + _Q),
                  rounds=_sum_rows([lg.rounds for lg in ledgers], 1, 1 + _Q),
                  iteration_rounds=_sorted_rows([lg.iteration_rounds for lg in ledgers]),
                  node_names=frozen_names(ledgers[0].node_names), node_totals=node_totals, node_rounds=node_rounds)


def _sum_rows(tables: list[np.ndarray], key_cols: int, width: int, dtype=np.int64) -> np.ndarray:
    """The rows of the tables together, one per distinct key (the first `key_cols` columns, in sorted order), the
    other columns summed."""
    # pragma: no mutate start (equivalent: numpy reads any negative size in reshape as -1)
    tables = [np.asarray(t, dtype=dtype).reshape(-1, width) for t in tables]
    # pragma: no mutate end
    # pragma: no mutate start (equivalent: never empty: merge_ledgers refuses no ledgers)
    rows = np.concatenate(tables) if tables else np.zeros((0, width), dtype=dtype)
    # pragma: no mutate end
    if rows.shape[0] == 0:  # pragma: no mutate (equivalent: a shortcut to the same table)
        return rows.copy()
    keys, inv = np.unique(rows[:, :key_cols], axis=0, return_inverse=True)
    inv = inv.ravel()
    # pragma: no mutate start (equivalent: without minlength, inv already reaches every key)
    sums = np.column_stack([np.bincount(inv, rows[:, c], minlength=keys.shape[0]) for c in range(key_cols, width)])
    # pragma: no mutate end
    if np.dtype(dtype).kind in "iu":  # pragma: no mutate (equivalent: one-letter kinds)
        return np.column_stack([keys, sums.astype(np.int64)]).astype(np.int64)
    # pragma: no mutate start (equivalent: float node quantities are float64, the meter keeps them as array('d'))
    return np.column_stack([keys, sums]).astype(dtype)
    # pragma: no mutate end


def _sorted_rows(tables: list[np.ndarray]) -> np.ndarray:
    """The rows of (iteration, round) tables together, in lexicographic order."""
    # pragma: no mutate start (equivalent: numpy reads any negative size in reshape as -1)
    rows = np.concatenate([np.asarray(t, dtype=np.int64).reshape(-1, 2) for t in tables])
    # pragma: no mutate end
    return rows[np.lexsort((rows[:, 1], rows[:, 0]))]


def _plain(x):
    """A numpy scalar as a JSON-ready int or float."""
    return np.asarray(x).item()


def _write_edges_csv(path: Path, edges: np.ndarray, names: list,
                     chunk: int = 8192) -> None:  # pragma: no mutate (equivalent: any chunk writes the same bytes)
    """The edge table with both ends' names, a chunk of rows formatted at a time (row by row: 10 s for 3·10^6
    edges)."""
    # pragma: no mutate start (equivalent: the meter's edge table is int64 rows of 2 + _Q already)
    rows = np.asarray(edges, dtype=np.int64).reshape(-1, 2 + _Q)
    # pragma: no mutate end
    if isinstance(names, NodeNames):                # a name is its prefix and the node's id: no strings kept
        prefix = names.prefix.replace("%", "%%")
        line = f"%d,%d,{prefix}%d,{prefix}%d" + ",%d" * _Q + "\n"
    else:
        named = np.empty(len(names), dtype=object)
        named[:] = [str(name) for name in names]
        line = "%d,%d,%s,%s" + ",%d" * _Q + "\n"
    with open(path, "w") as f:
        f.write("src,dst,src_name,dst_name," + ",".join(MESSAGE_QUANTITIES) + "\n")
        for i in range(0, rows.shape[0], chunk):
            block = rows[i:i + chunk]
            ends = [block[:, 0].tolist(), block[:, 1].tolist()]
            columns = ends + (ends if isinstance(names, NodeNames) else [named[block[:, 0]].tolist(),
                                                                          named[block[:, 1]].tolist()])
            columns += [block[:, 2 + q].tolist() for q in range(_Q)]
            f.write((line * block.shape[0]) % tuple(itertools.chain.from_iterable(zip(*columns))))


def _write_int_csv(path: Path, header: str, rows: np.ndarray,
                   chunk: int = 65536) -> None:  # pragma: no mutate (equivalent: rows formatted at once; same bytes)
    """An integer table as CSV, formatted a chunk of rows at a time (np.savetxt formats row by row: 2 s for
    the 1.75 million rounds of a long Saddle-DSVC run, against 0.4 s here; same bytes)."""
    # pragma: no mutate start (equivalent: '%d' formats a numeric table as its int64 conversion does)
    rows = np.asarray(rows, dtype=np.int64)
    # pragma: no mutate end
    line = ",".join(["%d"] * header.count(",") + ["%d"]) + "\n"
    with open(path, "w") as f:
        f.write(header + "\n")
        for i in range(0, rows.shape[0], chunk):
            block = rows[i:i + chunk]
            f.write((line * block.shape[0]) % tuple(block.ravel().tolist()))
