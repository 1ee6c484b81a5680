"""Failover (docs/architecture.md §6): the NameNode's embedded ``ActiveStandbyElector`` (a kazoo
Lock plus a breadcrumb and a fence step, ``failover.elector``), its health monitor
(``failover.health``) and metrics (``failover.metrics``), fencing methods
(``failover.fencing``), the RPC side of failover and ``format-zk`` (``failover.controller``),
and the ``hactl`` command (``failover.hactl``). Depends on ``zk``, ``conf`` and the
NameNode's HAServiceProtocol.
"""
