"""ZooKeeper access for hanamenode (DESIGN.md section 6): the kazoo client factory
(``zk.client``), the znode layout of the election (``zk.paths``) and a launcher of a real
ZooKeeper server for the dev cluster and the tests (``zk.server``). Depends on ``conf`` only.
"""
