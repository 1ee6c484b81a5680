"""Run the NameNode CLI (``hanamenode``) as ``python -m namenoded``."""

from namenoded.cli import main

main()
