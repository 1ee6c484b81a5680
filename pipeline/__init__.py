"""``hapipe``: the Spark (PySpark) jobs of docs/architecture.md §8.5.

* ``soak`` (``pipeline.soak``): the QJM fault simulator over thousands of seeds, one Spark
  task per seed (HDFS-3077 §7.3);
* ``verify`` (``pipeline.verify``): every finalized segment identical on every JournalNode,
  no txid acknowledged twice (HDFS-3077 §7.4.1);
* ``analyze`` (``pipeline.analyze``): fsimage plus edits as tables and reports.

``pipeline.session`` builds the one SparkSession; ``pipeline.cli`` is the command line
(``hapipe``, ``python -m pipeline``, or ``spark-submit pipeline/cli.py``). PySpark is the
optional ``spark`` extra: ``pip install -e '.[spark]'``.
"""
