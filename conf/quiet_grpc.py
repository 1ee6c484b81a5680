"""gRPC core's own log lines, kept off a command-line tool's terminal (issue 28 item 4;
docs/operations.md §3.4).

gRPC's C core logs through absl to file descriptor 2: a failed TLS handshake prints a line of
``ssl_transport_security.cc`` before the tool's own one-line error. The core reads
``GRPC_VERBOSITY`` once, when ``grpc`` is first imported, so the tools import this module
before anything that imports ``grpc``, as the first import of their entry module (or of the
package it sits in: ``hanamenode.client`` for ``hafs``)::

    import conf.quiet_grpc  # noqa: F401 - before grpc: no gRPC core line on the terminal

``GRPC_VERBOSITY`` given in the environment is left as it is (``GRPC_VERBOSITY=debug hafs ls
/`` still shows everything), and the variable is taken out of the environment again once
``grpc`` is imported, so that the daemons a tool starts (``hadev up``) log as they would.
Nothing here imports ``grpc`` at module level except to set it up, and nothing else of the
project's is imported.
"""

from __future__ import annotations

import os
import sys

__all__ = ["VERBOSITY_ENV", "quiet_grpc_core"]

VERBOSITY_ENV = "GRPC_VERBOSITY"
"""The environment variable gRPC's core reads its least severe log level from."""


def quiet_grpc_core() -> bool:
    """Import ``grpc`` with its core's logging off unless the environment names a level;
    whether it was (False: ``grpc`` was imported already, or the level is the user's)."""
    if "grpc" in sys.modules or VERBOSITY_ENV in os.environ:
        return False
    os.environ[VERBOSITY_ENV] = "NONE"
    try:
        import grpc  # noqa: F401 - the import reads GRPC_VERBOSITY, once
    finally:
        os.environ.pop(VERBOSITY_ENV, None)
    return True


quiet_grpc_core()
