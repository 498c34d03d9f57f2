"""Named cluster profiles and cluster trace files for the modelled cluster time (`schedule.cluster_time`): light
(no numba), so that reading a scenario checks a trace file without compiling anything."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ScenarioError

__all__ = ["PROFILES", "ClusterTrace", "read_trace"]

#: named clusters: the defaults of ``[network]`` for a kind of cluster (a key given in the table overrides its
#: profile's) and where the numbers come from. They are orders of magnitude to start from, not measurements of any
#: one cluster: measurements of one's own cluster belong in the table.
PROFILES = {
    "datacenter-10g": ({"latency": 50e-6, "bandwidth": 1.25e9, "compute_rate": 1e9, "compute_spread": 0.0,
                        "link_spread": 0.0},
                       "servers in one rack on 10 Gbit/s Ethernet: 1.25e9 bytes/s is the line rate, tens of "
                       "microseconds per message through the kernel's network stack, 1e9 operations/s per node"),
    "wan": ({"latency": 30e-3, "bandwidth": 12.5e6, "compute_rate": 1e9, "compute_spread": 0.0, "link_spread": 0.5},
            "servers in different regions: 100 Mbit/s (12.5e6 bytes/s) per flow and 30 ms one way, the order of a "
            "path across a continent; links differ by a log-normal factor of spread 0.5"),
    "edge": ({"latency": 50e-3, "bandwidth": 2.5e6, "compute_rate": 1e8, "compute_spread": 0.8,
              "link_spread": 0.5},
             "phones and small boards on a mobile or home uplink: 20 Mbit/s (2.5e6 bytes/s), 50 ms, 1e8 "
             "operations/s, with devices several-fold apart in speed (compute spread 0.8: the middle 90 % of nodes "
             "within a factor 13.9) and links apart by a factor of spread 0.5"),
}


@dataclass(frozen=True)
class ClusterTrace:
    """What a cluster trace file gives: compute rates by node and (latency, bandwidth) by link (None where a
    row leaves the value to the table)."""

    path: str
    node_rates: dict
    links: dict


_TRACE_COLUMNS = ("kind", "node", "peer", "compute_rate", "latency", "bandwidth")


def read_trace(path: str) -> ClusterTrace:
    """Read a cluster trace: a CSV file with a header of some of the columns kind, node, peer, compute_rate, latency,
    bandwidth (kind and node required); a row of kind ``node`` gives a node's compute_rate, a row of kind ``link``
    the latency and/or bandwidth of the link node-peer (both directions). Raises `ScenarioError` naming the file,
    the line and what is allowed."""
    from ..core.csv_table import read_csv_table

    def bad(line, text):
        return ScenarioError(f"[network] trace {path!r} line {line}: {text}")

    header, rows = read_csv_table(path, "[network] trace")
    if not header:
        raise ScenarioError(f"[network] trace {path!r} is empty; allowed: a header line ({', '.join(_TRACE_COLUMNS)}) "
                            "and one row per node or link")
    unknown = [h for h in header if h not in _TRACE_COLUMNS]
    if unknown or "kind" not in header or "node" not in header or len(set(header)) != len(header):
        what = (f"unknown column {unknown[0]!r}" if unknown else "a column appears twice" if len(set(header)) !=
                len(header) else "the columns kind and node are required")
        raise bad(1, f"{what}; allowed columns: {', '.join(_TRACE_COLUMNS)}")
    col = {h: i for i, h in enumerate(header)}
    node_rates: dict[int, float] = {}
    links: dict[tuple, tuple] = {}

    def number(line, cells, name, positive):
        text = cells[col[name]].strip() if name in col else ""
        if not text:
            return None
        try:
            v = float(text)
        except ValueError:
            raise bad(line, f"{name} = {text!r} is not a number; allowed: a finite number "
                            f"{'> 0' if positive else '>= 0'}") from None
        if not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
            raise bad(line, f"{name} = {text} is out of range; allowed: a finite number {'> 0' if positive else '>= 0'}")
        return v

    def node_id(line, cells, name):
        text = cells[col[name]].strip() if name in col else ""
        if not text.isdigit():
            raise bad(line, f"{name} = {text!r} is not a node id; allowed: an integer >= 0")
        return int(text)

    for line, cells in rows:
        if len(cells) != len(header):
            raise bad(line, f"{len(cells)} cells for the header's {len(header)} columns; allowed: one cell per column")
        kind = cells[col["kind"]].strip()
        node = node_id(line, cells, "node")
        if kind == "node":
            rate = number(line, cells, "compute_rate", True)
            if rate is None:
                raise bad(line, "a node row needs its compute_rate; allowed: a finite number > 0")
            if node in node_rates:
                raise bad(line, f"node {node} appears twice; allowed: one row per node")
            node_rates[node] = rate
        elif kind == "link":
            peer = node_id(line, cells, "peer")
            lat, bw = number(line, cells, "latency", False), number(line, cells, "bandwidth", True)
            if lat is None and bw is None:
                raise bad(line, "a link row needs its latency or bandwidth (or both)")
            if peer == node:
                raise bad(line, f"link {node}-{peer} joins a node to itself; allowed: two different nodes")
            key = (min(node, peer), max(node, peer))
            if key in links:
                raise bad(line, f"link {key[0]}-{key[1]} appears twice; allowed: one row per link")
            links[key] = (lat, bw)
        else:
            raise bad(line, f"kind = {kind!r} is unknown; allowed: 'node' or 'link'")
    return ClusterTrace(str(path), node_rates, links)
