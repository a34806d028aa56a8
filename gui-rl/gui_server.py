"""The loopback web server that shows GUI task pages: one per process, every episode under its own prefix.

``site(pages)`` publishes a task's pages (path -> HTML) under ``http://127.0.0.1:PORT/e/<token>/`` and
returns a ``Site`` whose ``close()`` withdraws them. Tokens are random, so concurrent episodes of the same
task never share URLs. Every HTML page gets ``RECORD_JS`` injected at the top of its ``<head>``: the pages
call ``record(key, value)`` to note what the user did (a submitted form, a chosen option), and the checker
reads it back with ``STATE_JS``; it also keeps the episode in one tab (a link or ``window.open`` that would open
another tab opens in this one). The record lives in the tab's ``sessionStorage``, so it survives the
page-to-page navigation of multi-step flows and dies with the episode's browser context.

Only GET is served, only on 127.0.0.1; unknown paths are 404. Nothing is logged per request.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

RECORD_JS = """<script>
window.record = function (key, value) {
  const s = JSON.parse(sessionStorage.getItem('__task') || '{}'); s[key] = value;
  sessionStorage.setItem('__task', JSON.stringify(s));
};
window.recorded = function (key) { return JSON.parse(sessionStorage.getItem('__task') || '{}')[key]; };
// one tab per episode: links and window.open that would open another tab open in this one
document.addEventListener('click', e => {
  const a = e.target.closest && e.target.closest('a[target]'); if (a) a.removeAttribute('target');
}, true);
window.open = function (url) { if (url) location.href = url; return window; };
</script>"""
STATE_JS = "JSON.parse(sessionStorage.getItem('__task') || '{}')"


@dataclasses.dataclass
class Site:
    """One episode's pages on the server; ``url(path)`` is a page's address."""

    base_url: str  # ends with "/"
    token: str
    server: PageServer

    def url(self, path: str) -> str:
        return self.base_url + path.lstrip("/")

    def close(self) -> None:
        self.server.withdraw(self.token)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        parts = urlsplit(self.path).path.split("/", 3)  # "", "e", token, page path
        body = None
        if len(parts) == 4 and parts[1] == "e":
            body = self.server.owner.page(parts[2], parts[3] or "index.html")
        if body is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        data = body.encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # quiet: no line per request
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: PageServer


class PageServer:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port) holding the published sites."""

    def __init__(self) -> None:
        self._sites: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._http = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._http.owner = self
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name="gui-pages", daemon=True)
        self._thread.start()

    def publish(self, pages: dict[str, str]) -> Site:
        if not pages:
            raise ValueError("a site needs at least one page")
        token = secrets.token_hex(6)
        with self._lock:
            self._sites[token] = {path.lstrip("/"): inject(html) for path, html in pages.items()}
        return Site(f"http://127.0.0.1:{self.port}/e/{token}/", token, self)

    def page(self, token: str, path: str) -> str | None:
        with self._lock:
            return self._sites.get(token, {}).get(path)

    def withdraw(self, token: str) -> None:
        with self._lock:
            self._sites.pop(token, None)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def inject(html: str) -> str:
    """`html` with RECORD_JS first in its head (ValueError if it has no ``<head>``)."""
    i = html.lower().find("<head>")
    if i < 0:
        raise ValueError("a task page needs a <head> element")
    return html[:i + 6] + RECORD_JS + html[i + 6:]


_server: PageServer | None = None
_server_lock = threading.Lock()


def site(pages: dict[str, str]) -> Site:
    """Publish `pages` on the process's page server (started on first use)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = PageServer()
    return _server.publish(pages)
