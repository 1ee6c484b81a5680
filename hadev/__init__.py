"""The development and test harness, kept out of the product packages (as Hadoop keeps
``MiniJournalCluster`` under ``src/test`` and kazoo keeps ``kazoo.testing`` beside its
recipes): launchers of real daemons as child processes (``hadev.journalnodes``,
``hadev.namenodes``, ``hadev.zookeeper``), the in-process ``MiniJournalCluster``
(``hadev.minicluster``), the dev cluster (``hadev.devcluster``) and its ``hadev`` command
(``hadev.cli``), the demo of ``make demo`` (``hadev.demo``) and the log tester
(``hadev.logtester``).

Tests, benchmarks and the pipeline's tests import it; no product package (``conf``,
``proto``, ``zk``, ``journalnode``, ``qjm``, ``hanamenode``, ``failover``) does.
"""
