"""Run the JournalNode CLI as ``python -m journalnode``."""

from journalnode.cli import main

main()
