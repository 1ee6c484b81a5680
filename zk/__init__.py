"""ZooKeeper access for hanamenode (docs/architecture.md §6.1): the kazoo client factory
(``zk.client``) and the znode layout of the election (``zk.paths``). Depends on ``conf``
only. The launcher of a real ZooKeeper server for the dev cluster and the tests is harness
code, in ``hadev.zookeeper``.
"""
