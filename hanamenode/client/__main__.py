"""Run ``hafs`` as ``python -m hanamenode.client``."""

from hanamenode.client.shell import main

main(prog_name="hafs")
