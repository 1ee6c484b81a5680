"""Failover (DESIGN.md section 6): ActiveStandbyElector, fencing, `hactl`. Not written yet:
issue "Automatic failover through ZooKeeper".
"""
