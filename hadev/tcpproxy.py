"""A TCP relay in its own process: one loopback port per target, each connection relayed
byte for byte both ways. Tests put it between one daemon and others to stall that path
alone, with real signals: ``SIGSTOP`` to the relay and every byte on it waits, while the
daemons' other connections go on; ``SIGCONT`` and they flow again. (hachaos's network
namespaces cut paths too, but need root and a partition of whole hosts; this cuts one
daemon's view of others on plain loopback.)

    with TcpRelay(["127.0.0.1:9001", "127.0.0.1:9002"]) as relay:
        relay.addresses          # ['127.0.0.1:40125', '127.0.0.1:40127'], in target order
        relay.pause(); ...; relay.resume()

Run alone: ``python -m hadev.tcpproxy TARGET...`` prints ``listening`` and the relay's
addresses on one line, then relays until it is killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from conf.keys import parse_address

CHUNK = 64 * 1024


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass  # the other side went away: closing this side is the whole answer
    except OSError as exc:
        print(f"tcpproxy: relay failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        writer.close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


def _relay_to(target: str) -> Handler:
    host, _, port_text = parse_address(target).rpartition(":")
    host, port = host.strip("[]"), int(port_text)

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, port)
        except OSError as exc:
            print(f"tcpproxy: cannot reach {target}: {exc}", file=sys.stderr, flush=True)
            client_w.close()
            return
        await asyncio.gather(_pump(client_r, server_w), _pump(server_r, client_w))

    return relay


async def _serve(targets: Sequence[str]) -> None:
    servers = [
        await asyncio.start_server(_relay_to(t), "127.0.0.1", 0) for t in targets
    ]
    bound = [f"127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers]
    print("listening", *bound, flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


class TcpRelay:
    """``python -m hadev.tcpproxy`` as a child process: ``addresses`` relay to ``targets``."""

    def __init__(self, targets: Sequence[str]) -> None:
        self.targets = list(targets)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hadev.tcpproxy", *self.targets],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if not line or line[0] != "listening" or len(line) != len(self.targets) + 1:
            self.close()
            raise RuntimeError(f"tcpproxy did not start: {line!r}")
        self.addresses = line[1:]

    @property
    def pid(self) -> int:
        return self._proc.pid

    def pause(self) -> None:
        """Every byte on every relayed connection waits (SIGSTOP)."""
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self._proc.pid, signal.SIGCONT)

    def close(self) -> None:
        if self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)
            self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> int:
    targets = list(sys.argv[1:] if argv is None else argv)
    if not targets:
        print("usage: python -m hadev.tcpproxy HOST:PORT...", file=sys.stderr)
        return 2
    asyncio.run(_serve(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
