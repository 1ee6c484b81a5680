"""The HTTP port of every daemon: Prometheus ``/metrics``, and a status page (``/``,
``/status``) with its facts for machines (``/status.json``); docs/operations.md §13.

The page is plain HTML rendered on the server, readable in a terminal browser. A small
script re-fetches ``/status?fragment=1`` every ``REFRESH_SECONDS`` and swaps the ``<main>``
element. When a fetch fails (or gets no answer within ``FETCH_TIMEOUT_SECONDS``) the page
turns "unreachable since HH:MM:SS": greyed, a banner on top, every element of class
``state`` replaced (the daemon's own, marked ``data-self``, by "unreachable since ...", the
others by "unknown") and every one of class ``when-reachable`` hidden, so a dead daemon's
page never shows a stale "active"
(docs/operations.md §13.1). The script keeps trying, and the next answer restores the page.

    server = WebServer("127.0.0.1:0", registry, status=collect, render=render_main,
                       title="NameNode nn1",
                       pages={"cluster": Page(cluster_collect, cluster_render, "Cluster")})
    server.start().port

Each extra page ``NAME`` is served at ``/NAME`` and ``/NAME.json`` as the status page is.
"""

from __future__ import annotations

import errno
import html
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import make_wsgi_app

from conf import connections
from conf.rpc import BindError, PortInUseError

__all__ = [
    "FETCH_TIMEOUT_SECONDS", "REFRESH_SECONDS", "Page", "WebServer", "esc", "page",
    "planted_banner", "table",
]

log = structlog.get_logger(__name__)

REFRESH_SECONDS = 2
FETCH_TIMEOUT_SECONDS = 4
"""A refresh with no answer by then counts as failed: a stopped (SIGSTOP) daemon too."""

Status = Mapping[str, Any]


@dataclass(frozen=True)
class Page:
    """A page of its own beside the status page: its facts, their HTML, its title."""

    status: Callable[[], Status]
    render: Callable[[Status], str]
    title: str

_STYLE = """
body { font-family: sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: 0.4em 0; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.6em; text-align: left; }
th { background: #eee; }
td.num { text-align: right; font-family: monospace; }
.state { font-weight: bold; padding: 0 0.3em; }
.good { color: #060; } .bad { color: #a00; font-weight: bold; } .warn { color: #a60; }
footer { margin-top: 1.5em; color: #666; font-size: 0.9em; }
nav { font-size: 0.9em; margin-bottom: 0.6em; }
#unreachable { background: #a00; color: #fff; font-weight: bold; padding: 0.3em 0.6em; }
body.unreachable main { opacity: 0.4; filter: grayscale(1); }
body.unreachable .when-reachable { display: none; }
.state.unknown { color: #555; }
"""

# Re-fetch the <main> fragment; when that fails, grey the page and replace every state.
_SCRIPT = """
(function () {
  var footer = document.getElementById('refreshed');
  var banner = document.getElementById('unreachable');
  var since = null;
  function unreachable(why) {
    if (since === null) { since = new Date(); }
    var text = 'unreachable since ' + since.toISOString().substring(11, 19) + ' UTC';
    document.body.classList.add('unreachable');
    banner.textContent = text + ' (' + why + '): the page below is its last answer';
    banner.hidden = false;
    document.querySelectorAll('main .state').forEach(function (el) {
      el.textContent = el.hasAttribute('data-self') ? text : 'unknown';
      el.classList.add('unknown');
    });
    footer.textContent = 'refresh failed at ' + new Date().toISOString() + ' (' + why + ')';
    footer.className = 'bad';
  }
  function refresh() {
    var control = new AbortController();
    var timer = setTimeout(function () { control.abort(); }, TIMEOUT_MS);
    fetch('NAME?fragment=1', {cache: 'no-store', signal: control.signal}).then(function (r) {
      if (!r.ok) { throw new Error('HTTP ' + r.status); }
      return r.text();
    }).then(function (text) {
      document.querySelector('main').innerHTML = text;
      since = null;
      document.body.classList.remove('unreachable');
      banner.hidden = true;
      footer.textContent = 'refreshed ' + new Date().toISOString();
      footer.className = '';
    }).catch(function (err) {
      unreachable(err.name === 'AbortError' ? 'no answer within TIMEOUT_S s' : err.message);
    }).finally(function () {
      clearTimeout(timer);
      setTimeout(refresh, PERIOD_MS);
    });
  }
  setTimeout(refresh, PERIOD_MS);
})();
""".replace("PERIOD_MS", str(REFRESH_SECONDS * 1000)).replace(
    "TIMEOUT_MS", str(FETCH_TIMEOUT_SECONDS * 1000)
).replace("TIMEOUT_S", str(FETCH_TIMEOUT_SECONDS))


def esc(value: object) -> str:
    """HTML text of ``value`` (None is a dash)."""
    return "-" if value is None else html.escape(str(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, id_: str = "") -> str:
    """A table of already escaped cells; a cell that starts with ``<td`` is taken whole."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>"
        for row in rows
    )
    ident = f' id="{esc(id_)}"' if id_ else ""
    return f"<table{ident}><tr>{head}</tr>{body}</table>"


def planted_banner(status: Status) -> str:
    """The warning at the top of a status page when planted bugs are on (``conf.mutants``),
    empty when none is: ``status["planted_bugs"]`` as ``conf.mutants.planted_status`` made it."""
    bugs = status.get("planted_bugs") or []
    if not bugs:
        return ""
    items = "".join(
        f"<li><code>{esc(b['switch'])}</code>: {esc(b['description'])}</li>" for b in bugs
    )
    return (
        f"<div id='planted-bugs' class='bad'><p>Planted bugs are ON ({len(bugs)}): this "
        f"daemon misbehaves on purpose (HANAMENODE_MUTANTS; tests only).</p><ul>{items}</ul>"
        "</div>"
    )


def page(title: str, main: str, name: str = "status", nav: str = "") -> str:
    """The whole HTML of page ``name`` (``/name``), whose ``<main>`` is ``main``; ``nav``:
    already escaped links above it."""
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>"
        f"<body><div id='unreachable' hidden></div><h1>{esc(title)}</h1>"
        + (f"<nav>{nav}</nav>" if nav else "")
        + f"<main>{main}</main>"
        f"<footer><span id='refreshed'>refreshes every {REFRESH_SECONDS} s</span> · "
        f"<a href='{esc(name)}.json'>{esc(name)}.json</a> · <a href='metrics'>metrics</a>"
        f"</footer><script>{_SCRIPT.replace('NAME', name)}</script></body></html>\n"
    )


HTTP_WORKERS = 16
"""Connections the HTTP server serves at once; it closes the others as they arrive (and
counts them, ``conf.connections``), rather than starting a thread for each."""
HTTP_IDLE_SECONDS = 5.0
"""A connection that sends nothing for this long is closed (its worker is free again)."""
_REFUSAL_LOG_SECONDS = 10.0


class _QuietHandler(WSGIRequestHandler):
    timeout = HTTP_IDLE_SECONDS  # socket timeout of each read and write (StreamRequestHandler)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a page refreshes every few seconds)."""


class _BoundedWSGIServer(WSGIServer):
    """A WSGI server that serves at most ``HTTP_WORKERS`` connections at once, on a fixed
    pool of threads: a connection beyond them is closed at once, counted, and logged (at most
    once every ``_REFUSAL_LOG_SECONDS``). ``ThreadingWSGIServer`` started a thread for every
    connection, so an idle flood cost a thread and its stack each (issue 25 item 2)."""

    daemon_threads = True
    # Queued connections wait in the kernel's backlog, not in this process.
    request_queue_size = 64

    def server_activate(self) -> None:
        super().server_activate()
        self._pool = ThreadPoolExecutor(max_workers=HTTP_WORKERS, thread_name_prefix="http")
        self._slots = threading.BoundedSemaphore(HTTP_WORKERS)
        self._refused_since_log = 0
        self._last_refusal_log = 0.0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request, client_address)
            return
        connections.http_connection_opened()
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except (OSError, TimeoutError):
            pass  # the client went away or stayed silent past the timeout: nothing to answer
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()
            connections.http_connection_closed()

    def _refuse(self, request: socket.socket, client_address: Any) -> None:
        connections.http_connection_refused()
        self.shutdown_request(request)
        self._refused_since_log += 1
        now = time.monotonic()
        if now - self._last_refusal_log >= _REFUSAL_LOG_SECONDS:
            log.warning(
                "HTTP connections refused: every worker is busy",
                refused=self._refused_since_log,
                workers=HTTP_WORKERS,
                port=self.server_port,
                last_client=str(client_address),
            )
            self._refused_since_log = 0
            self._last_refusal_log = now

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("HTTP request failed", client=str(client_address))

    def server_close(self) -> None:
        super().server_close()
        # Also called when the bind fails, before server_activate made the pool.
        pool: ThreadPoolExecutor | None = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class WebServer:
    """``/metrics`` from ``registry``; ``/``, ``/status`` and ``/status.json`` from
    ``status()`` (a JSON-able mapping) and ``render(status)`` (the HTML of ``<main>``)."""

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        *,
        status: Callable[[], Status],
        render: Callable[[Status], str],
        title: str,
        pages: Mapping[str, Page] | None = None,
        nav: str = "",
    ) -> None:
        self.address = address
        self._metrics = make_wsgi_app(registry)
        self._pages = {"status": Page(status, render, title), **(pages or {})}
        self.title = title
        self._nav = nav
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> WebServer:
        host, port = self.address.rsplit(":", 1)
        try:
            httpd = make_server(
                host.strip("[]"), int(port), self._app, _BoundedWSGIServer,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(self.address) from None
            raise BindError(f"cannot listen on {self.address}: {exc.strerror or exc}") from None
        self._httpd = httpd
        self.port = httpd.server_port
        self._thread = threading.Thread(
            target=httpd.serve_forever, name=f"http-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return list(self._metrics(environ, start_response))
        name = "status" if path == "/" else path[1:].removesuffix(".json")
        served = self._pages.get(name)
        if served is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            pages = ", ".join(f"/{p}, /{p}.json" for p in self._pages)
            return [f"no page {path}; try {pages} or /metrics\n".encode()]
        try:
            status = served.status()
            if path.endswith(".json"):
                body = json.dumps(status, indent=1, sort_keys=True).encode()
                content_type = "application/json"
            else:
                main = served.render(status)
                fragment = parse_qs(environ.get("QUERY_STRING", "")).get("fragment")
                body = (
                    main if fragment else page(served.title, main, name, self._nav)
                ).encode()
                content_type = "text/html; charset=utf-8"
        except Exception as exc:
            log.exception("status page failed", path=path)
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [f"status failed: {type(exc).__name__}: {exc}\n".encode()]
        start_response(
            "200 OK", [("Content-Type", content_type), ("Cache-Control", "no-store")]
        )
        return [body]
