"""The NameNode (docs/architecture.md §5): namespace, edit log through the QJM, HA states, tailer,
checkpointer and the `hafs` client.

- ``paths``, ``namespace``, ``retry_cache``, ``fsimage``: the pure core (decide, apply, save).
- ``editlog`` (FSEditLog, group commit), ``namesystem`` (FSNamesystem: lock, mutations, HA
  transitions), ``ha`` (HAState and the pure HA rules), ``tailer`` (EditLogTailer),
  ``checkpointer`` (StandbyCheckpointer), ``storage`` (the name dir), ``peers`` (the other
  NameNodes), ``metrics``.
- ``server`` (NameNodeServer and the gRPC servicers), ``bootstrap`` (format,
  bootstrap-standby), ``cli`` (the ``hanamenode`` command).
"""
