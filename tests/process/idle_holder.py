"""An idle-connection flood from a process of its own (issue 25 item 2), for
``tests/process/test_idle_connection_flood.py``: ``python -m tests.process.idle_holder HOST
PORT COUNT [--refill]`` opens ``COUNT`` plain TCP connections to ``HOST:PORT`` and sends
nothing on them, as an attacker without a certificate would. With ``--refill`` a connection
the server closes is opened again at once, so that the daemon stays flooded.

It raises its own open-file limit to the hard limit first, and prints one JSON line per
``REPORT_SECONDS`` on stdout: ``opened`` (connections opened in all), ``held`` (open now),
``closed_by_server`` (ended by the server, in all), ``refused`` (connects that failed) and
``seconds`` since the start. SIGTERM ends it (its connections close with it).
"""

from __future__ import annotations

import argparse
import errno
import json
import resource
import selectors
import socket
import sys
import time

REPORT_SECONDS = 0.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--refill", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()
    opened = closed = refused = 0
    held: set[socket.socket] = set()
    start = time.monotonic()
    next_report = start

    def open_one() -> bool:
        nonlocal opened, refused
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((args.host, args.port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            refused += 1
            return False
        sel.register(s, selectors.EVENT_READ)
        held.add(s)
        opened += 1
        return True

    while True:
        wanted = args.count - len(held)
        if wanted > 0 and (args.refill or opened < args.count):
            for _ in range(min(wanted, 500)):
                try:
                    if not open_one():
                        break
                except OSError:  # this process's own descriptors: try again later
                    refused += 1
                    break
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:  # the server closed it (or refused it late)
                sel.unregister(s)
                s.close()
                held.discard(s)
                closed += 1
        now = time.monotonic()
        if now >= next_report:
            report = {"opened": opened, "held": len(held), "closed_by_server": closed,
                      "refused": refused, "seconds": round(now - start, 3)}
            print(json.dumps(report), flush=True)
            next_report = now + REPORT_SECONDS


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
