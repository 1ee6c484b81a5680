"""The Quorum Journal Manager: the writer's side of the edit-log protocol (docs/protocol.md §4).

The pure protocol algorithms live here first, free of I/O in the spirit of etcd's raft library
(docs/architecture.md §3.1): ``quorum`` (``QuorumCall`` and the majority rule, HDFS-3077
§5.1.2), ``epochs`` (epoch generation, §2.5) and ``recovery`` (``SegmentRecoveryComparator``
and the recovery decision, §2.8-§2.9 after HDFS-3845). The gRPC ``AsyncLogger``, the
``AsyncLoggerSet``, the ``QuorumJournalManager`` and the deterministic simulator are thin shells
around them.
"""
