"""Algorithms of one's own for svmsim: `subgrad` (synchronous rounds) and `gossip_pegasos` (gossip).

svmsim imports each module through its entry point (group ``svmsim.algorithms``) when a scenario names the
algorithm; importing the module registers it."""
