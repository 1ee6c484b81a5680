"""Run the NameNode CLI as ``python -m hanamenode``."""

from hanamenode.cli import main

main()
