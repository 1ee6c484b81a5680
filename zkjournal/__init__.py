"""The ZooKeeper journal: the shared edit log as a live log of znodes, the second backend
beside the QJM (docs/architecture.md §9, docs/protocol.md §15; issue 29)."""
