"""The Quorum Journal Manager: the writer's side of the edit-log protocol (DESIGN.md section 3).

The pure protocol algorithms live here first, free of I/O in the spirit of etcd's raft library
(DESIGN.md section 2): ``quorum`` (``QuorumCall`` and the majority rule, design doc section
5.1.2), ``epochs`` (epoch generation, section 2.5) and ``recovery`` (``SegmentRecoveryComparator``
and the recovery decision, sections 2.8-2.9 after HDFS-3845). The gRPC ``AsyncLogger``, the
``AsyncLoggerSet``, the ``QuorumJournalManager`` and the deterministic simulator are thin shells
around them.
"""
