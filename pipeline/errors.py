"""The one error of the pipeline package: a job that cannot run as asked (bad input, an
output that already exists). The CLI prints its message as one line and exits with status 2,
keeping status 1 for "the job ran and found something wrong"."""

from __future__ import annotations

__all__ = ["PipelineError"]


class PipelineError(Exception):
    """A ``hapipe`` job refused its input or could not write its output."""
