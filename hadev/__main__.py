"""``python -m hadev``: the ``hadev`` command (``hadev.cli``)."""

from hadev.cli import main

main()
