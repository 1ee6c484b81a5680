"""The errors of the ``zk`` package: one base class, raised with a message that says what to do.

    try:
        server = ZooKeeperServer(tmp_path).start()
    except ZooKeeperNotInstalledError as exc:
        print(exc)   # names the Debian package (or ZOOKEEPER_HOME) to install
"""

from __future__ import annotations

__all__ = ["ZooKeeperError", "ZooKeeperNotInstalledError", "ZooKeeperStartError"]


class ZooKeeperError(Exception):
    """Base of every error raised by ``zk``."""


class ZooKeeperNotInstalledError(ZooKeeperError):
    """Java or the ZooKeeper jars are missing; the message names what to install."""


class ZooKeeperStartError(ZooKeeperError):
    """The server exited, or did not answer ``ruok``, within the start timeout.

    The message is one line (with the last line of the server's log); ``output`` is the end
    of that log.
    """

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output

    @property
    def port_in_use(self) -> bool:
        return "Address already in use" in self.output
