"""The series of ``python -m bench.namenode_ops``, one module each, on shared helpers:

- ``shared``: the clusters' settings, CPU and run-queue time by role, the NameNodes' counters;
- ``capacity``: (c) h2load against the echo floor, ``GetFileInfo`` and ``Create``;
- ``mkdirs``: (a) mkdirs by Python client threads, and linearizable against stale ``stat``;
- ``lag``: the followers' lag probe and (b) the standby's lag with the cluster idle;
- ``push_lag``: (d) the standby's lag under the write load, pushed against polled;
- ``observers``: reads with 0 and 2 observers, and the observer's lag.

``bench.namenode_ops`` runs them in order on its clusters and prints their tables and one
JSON line (docs/benchmarks.md §2.3, §2.4).
"""
