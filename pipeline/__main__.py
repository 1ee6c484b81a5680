"""``python -m pipeline``: the ``hapipe`` command line (``pipeline.cli``)."""

from pipeline.cli import main

main()
