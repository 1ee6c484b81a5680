"""``python -m hachaos``: the ``hachaos`` command."""

from hachaos.cli import main

main()
