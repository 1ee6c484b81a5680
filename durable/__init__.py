"""Crash-safe files shared by the JournalNode and the NameNode: ``durable.files`` (atomic
replace, fsync of a file or directory, the ``in_use.lock`` directory lock) and
``durable.version`` (the VERSION file both daemons keep beside their data).

It sits at the bottom of the layering with ``conf`` and ``proto``: it imports nothing of
the project but ``proto.values``, and each daemon turns its ``OSError`` and
``VersionFileError`` into its own error type at the call site.
"""
