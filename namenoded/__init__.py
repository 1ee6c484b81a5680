"""The NameNode process: the composition root above ``hanamenode`` and ``failover``.

A NameNode runs its ZooKeeper elector embedded (docs/architecture.md §1), and the elector
belongs to the ``failover`` layer, which sits above ``hanamenode``. So the program that
starts a NameNode is composed here, one layer above both (docs/architecture.md §2.1):
``namenoded.cli.main`` is ``hanamenode.cli.namenode_cli`` with
``failover.elector.ActiveStandbyElector`` handed in. It is the ``hanamenode`` console
script and ``python -m namenoded``.
"""
