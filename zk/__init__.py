"""ZooKeeper access for hanamenode (DESIGN.md section 6): kazoo client factory, znode paths,
and a launcher for a real ZooKeeper server in the dev cluster and the tests. Not written yet:
issue "Automatic failover through ZooKeeper".
"""
