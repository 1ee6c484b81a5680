"""hachaos: the Jepsen-style harness of issue 11. It runs the dev cluster with every daemon
in its own network namespace, drives concurrent clients on a small key set while nemeses
kill, pause and partition the daemons, records every invocation and completion, and checks
the history: linearizability per key (``hachaos.checker``), acknowledged mutations present at
the end, no txid written twice, the standby's namespace a prefix of the active's.

A tool: it imports the product packages and the dev cluster; nothing imports it.
"""
