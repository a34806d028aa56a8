"""Headless Chromium over the DevTools protocol (CDP), through a pipe: no port, no download, no extra package.

``Browser.start()`` launches the system's Chromium (Debian's ``chromium``; ``find_chromium`` says where it
looks and how to install it) with ``--remote-debugging-pipe``: CDP messages are JSON objects ended by a NUL
byte, written to the browser's fd 3 and read from its fd 4. A reader thread hands each reply to the caller
waiting on its id, so any number of threads may call ``send`` at once (the GUI env's steps run in threads).

``Browser.new_page()`` opens a tab in a fresh browser context (its own cookies and storage, like an incognito
window), so episodes sharing one browser never see each other's state; ``Page.close()`` disposes of the
context. ``shared_browser()`` is the process-wide browser the GUI env uses: started on first use, restarted
if it died, closed at exit.

The browser reaches nothing but loopback: every other host goes to a proxy address where nothing listens,
and the background services that phone home are off. It runs with ``--no-sandbox`` (Chromium's own sandbox
needs privileges it refuses to use as root); the pages it shows are our own task pages and the agent can
only click, type, select, press keys and scroll on them, never navigate to an address of its choosing.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
INSTALL_HINT = "install Debian's chromium with `make browser` (apt-get install chromium), or pass its path"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-quic", "--disable-extensions", "--disable-features=Translate,MediaRouter",
         "--mute-audio", "--hide-scrollbars", "--password-store=basic", "--disable-background-timer-throttling",
         "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
         "--proxy-server=127.0.0.1:9")  # loopback bypasses a proxy; everything else hits a closed port
WINDOW = (1024, 768)


class BrowserError(RuntimeError):
    """The browser is missing, would not start, died, or a CDP command failed."""


def find_chromium(path: str | None = None) -> str:
    """The Chromium executable: `path` if given (it must exist), else the first of CANDIDATES on PATH."""
    if path:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise BrowserError(f"no executable browser at {path!r}; {INSTALL_HINT}")
        return path
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise BrowserError(f"no Chromium found on PATH (looked for {', '.join(CANDIDATES)}); {INSTALL_HINT}")


class _Connection:
    """One CDP pipe: ``send`` from any thread, replies matched by id, events to listeners by session."""

    def __init__(self, write_fd: int, read_fd: int):
        self._w = os.fdopen(write_fd, "wb", buffering=0)
        self._r = os.fdopen(read_fd, "rb", buffering=0)
        self._lock = threading.Lock()
        self._next = 0
        self._pending: dict[int, Future] = {}
        self._listeners: dict[str, Callable[[str, dict], None]] = {}  # session id -> fn(method, params)
        self.closed: str | None = None  # why the connection ended, once it has
        self._reader = threading.Thread(target=self._read_loop, name="cdp-reader", daemon=True)
        self._reader.start()

    def listen(self, session_id: str, fn: Callable[[str, dict], None] | None) -> None:
        if fn is None:
            self._listeners.pop(session_id, None)
        else:
            self._listeners[session_id] = fn

    def send(self, method: str, params: dict | None = None, session_id: str | None = None,
             timeout: float = 30.0) -> dict:
        """The command's result; BrowserError with CDP's message on an error reply, a dead browser or a timeout."""
        fut: Future = Future()
        with self._lock:
            if self.closed:
                raise BrowserError(f"the browser is gone ({self.closed}); cannot send {method}")
            self._next += 1
            msg_id = self._next
            self._pending[msg_id] = fut
            msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
            if session_id:
                msg["sessionId"] = session_id
            try:
                self._w.write(json.dumps(msg).encode() + b"\0")
            except OSError as e:
                self._pending.pop(msg_id, None)
                raise BrowserError(f"the browser is gone ({e}); cannot send {method}") from None
        try:
            reply = fut.result(timeout)
        except TimeoutError:
            self._pending.pop(msg_id, None)
            raise BrowserError(f"{method}: no reply from the browser in {timeout:g} s") from None
        if "error" in reply:
            err = reply["error"]
            raise BrowserError(f"{method}: {err.get('message', err)}" + (f" ({err['data']})" if err.get("data") else ""))
        return reply.get("result", {})

    def _read_loop(self) -> None:
        buf = b""
        try:
            while True:
                chunk = self._r.read(1 << 16)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    self._dispatch(json.loads(raw))
            reason = "the browser closed its end of the pipe"
        except (OSError, ValueError) as e:
            reason = f"reading from the browser failed: {e}"
        with self._lock:
            self.closed = reason
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_result({"error": {"message": reason}})

    def _dispatch(self, msg: dict) -> None:
        if "id" in msg:
            fut = self._pending.pop(msg["id"], None)
            if fut is not None:
                fut.set_result(msg)
            return
        fn = self._listeners.get(msg.get("sessionId", ""))
        if fn is not None:
            fn(msg.get("method", ""), msg.get("params", {}))

    def close(self) -> None:
        for f in (self._w, self._r):
            try:
                f.close()
            except OSError:
                pass


class Browser:
    """A headless Chromium process and its CDP connection. ``start_s`` is how long the start took."""

    def __init__(self, executable: str | None = None):
        self.executable = find_chromium(executable)
        self.proc: subprocess.Popen | None = None
        self.conn: _Connection | None = None
        self.start_s = 0.0
        self.version = ""
        self._profile: str | None = None
        self._spare: Future | None = None  # the next new_page's tab, being made in the background
        self._spare_lock = threading.Lock()

    def start(self, timeout: float = 30.0) -> Browser:
        t0 = time.monotonic()
        self._profile = tempfile.mkdtemp(prefix="openclaw-rl-chromium-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def child_fds() -> None:  # the browser reads CDP on fd 3 and writes on fd 4
            r, w = os.dup(to_browser_r), os.dup(from_browser_w)  # above 4 by now, so neither clobbers the other
            os.dup2(r, 3)
            os.dup2(w, 4)

        cmd = [self.executable, *FLAGS, f"--window-size={WINDOW[0]},{WINDOW[1]}", "--remote-debugging-pipe",
               f"--user-data-dir={self._profile}", "about:blank"]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(3, 4), preexec_fn=child_fds,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            raise BrowserError(f"could not start {self.executable}: {e}") from None
        finally:
            os.close(to_browser_r)
            os.close(from_browser_w)
        self.conn = _Connection(to_browser_w, from_browser_r)
        try:
            self.version = self.conn.send("Browser.getVersion", timeout=timeout)["product"]
        except BrowserError as e:
            err = self._stderr_tail()
            self.close()
            raise BrowserError(f"{self.executable} did not start: {e}" + (f"; it said: {err}" if err else "")) from None
        self.start_s = time.monotonic() - t0
        return self

    def _stderr_tail(self) -> str:
        if self.proc is None or self.proc.stderr is None or self.proc.poll() is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace").strip()[-500:]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.conn is not None and not self.conn.closed

    def send(self, method: str, params: dict | None = None, session_id: str | None = None,
             timeout: float = 30.0) -> dict:
        if self.conn is None:
            raise BrowserError("the browser is not started")
        return self.conn.send(method, params, session_id, timeout)

    def new_page(self) -> Page:
        """A blank tab in a fresh browser context. One more is made ready in the background for the next call
        (a context with its renderer takes a few hundred ms), so an episode's start seldom waits for one."""
        with self._spare_lock:
            spare, self._spare = self._spare, None
        page = None
        if spare is not None:
            try:
                page = spare.result(timeout=30)
            except (BrowserError, TimeoutError):
                page = None
        if page is None:
            page = self._make_page()
        self._make_spare()
        return page

    def _make_spare(self) -> None:
        fut: Future = Future()
        with self._spare_lock:
            if self._spare is not None or not self.alive:
                return
            self._spare = fut

        def make() -> None:
            try:
                fut.set_result(self._make_page())
            except Exception as e:  # noqa: BLE001 (handed to whoever takes the spare)
                fut.set_exception(e)

        threading.Thread(target=make, name="spare-page", daemon=True).start()

    def _make_page(self) -> Page:
        context = self.send("Target.createBrowserContext", {"disposeOnDetach": True})["browserContextId"]
        try:
            target = self.send("Target.createTarget", {"url": "about:blank", "browserContextId": context,
                                                       "width": WINDOW[0], "height": WINDOW[1]})["targetId"]
            session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        except BrowserError:
            self.send("Target.disposeBrowserContext", {"browserContextId": context})
            raise
        return Page(self, context, target, session)

    def close(self) -> None:
        """Ask the browser to quit, then make sure it has; remove its profile. Idempotent."""
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None and spare.done() and spare.exception() is None:
            spare.result().close()
        if self.conn is not None and not self.conn.closed:
            try:
                self.conn.send("Browser.close", timeout=5)
            except BrowserError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr is not None:
                self.proc.stderr.close()
        if self.conn is not None:
            self.conn.close()
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
        self.proc = self.conn = self._profile = None


_shared: dict[str | None, Browser] = {}
_shared_lock = threading.Lock()


def shared_browser(executable: str | None = None) -> Browser:
    """The process-wide browser for `executable` (None: found on PATH); started, or restarted, on demand."""
    with _shared_lock:
        browser = _shared.get(executable)
        if browser is None or not browser.alive:
            if browser is not None:
                browser.close()
            browser = _shared[executable] = Browser(executable).start()
        return browser


@atexit.register
def _close_shared() -> None:
    for browser in list(_shared.values()):
        browser.close()
    _shared.clear()


# ----------------------------------------------------------------------------- one tab
_SELECT_JS = """function (label) {
  if (this.tagName !== 'SELECT') return 'not a drop-down list (select)';
  const want = label.trim().toLowerCase();
  const opt = Array.from(this.options).find(o => o.label.trim().toLowerCase() === want || o.value.toLowerCase() === want);
  if (!opt) return 'no option ' + JSON.stringify(label) + '; the options are: ' + Array.from(this.options).map(o => JSON.stringify(o.label.trim())).join(', ');
  if (opt.disabled || this.disabled) return 'that option is disabled';
  this.value = opt.value;
  this.dispatchEvent(new Event('input', {bubbles: true}));
  this.dispatchEvent(new Event('change', {bubbles: true}));
  return '';
}"""
_OPTION_JS = """function () {
  const sel = this.closest('select');
  if (this.tagName !== 'OPTION' || !sel) return null;
  return this.label;
}"""
_CLEAR_JS = """function () {
  if (this.isContentEditable) { this.focus(); document.execCommand('selectAll'); return ''; }
  const nonText = ['button', 'submit', 'reset', 'checkbox', 'radio', 'file', 'image', 'color', 'range', 'hidden'];
  const field = this.tagName === 'TEXTAREA' || (this.tagName === 'INPUT' && !nonText.includes(this.type));
  if (!field) return 'not a text field';
  if (this.readOnly || this.disabled) return 'a read-only text field';
  this.focus(); this.select(); return '';
}"""
_KEYS = {"enter": ("Enter", 13, "\r"), "tab": ("Tab", 9, ""), "escape": ("Escape", 27, ""),
         "backspace": ("Backspace", 8, ""), "arrowdown": ("ArrowDown", 40, ""), "arrowup": ("ArrowUp", 38, ""),
         "arrowleft": ("ArrowLeft", 37, ""), "arrowright": ("ArrowRight", 39, ""), "space": (" ", 32, " ")}
KEY_NAMES = tuple(v[0] if v[0] != " " else "Space" for v in _KEYS.values())


class Page:
    """One tab of a browser context: navigate, read its accessibility tree, act on nodes by backend node id."""

    def __init__(self, browser: Browser, context: str, target: str, session: str):
        self.browser, self.context, self.target, self.session = browser, context, target, session
        self._loaded = threading.Event()  # clear while the main frame is navigating
        self._loaded.set()
        self.loads = 0  # main-frame loads started so far: a changed count means the page was replaced
        browser.conn.listen(session, self._on_event)
        for domain in ("Page", "DOM", "Accessibility", "Runtime"):
            self.send(f"{domain}.enable")
        self.send("Page.setLifecycleEventsEnabled", {"enabled": True})

    def send(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        return self.browser.send(method, params, self.session, timeout)

    def _on_event(self, method: str, params: dict) -> None:
        if method in ("Page.frameRequestedNavigation", "Page.frameStartedLoading") and not params.get("parentId"):
            if method == "Page.frameStartedLoading" or params.get("disposition", "currentTab") == "currentTab":
                self._loaded.clear()
            if method == "Page.frameStartedLoading":
                self.loads += 1
        elif method == "Page.frameStoppedLoading":
            self._loaded.set()
        elif method == "Page.javascriptDialogOpening":  # an alert would block the page: accept it
            threading.Thread(target=self._dismiss, daemon=True).start()

    def _dismiss(self) -> None:
        try:
            self.send("Page.handleJavaScriptDialog", {"accept": True}, timeout=5)
        except BrowserError:
            pass

    def navigate(self, url: str, timeout: float = 15.0) -> None:
        self._loaded.clear()
        reply = self.send("Page.navigate", {"url": url}, timeout)
        if reply.get("errorText"):
            raise BrowserError(f"could not open {url}: {reply['errorText']}")
        self.settle(timeout)

    def settle(self, timeout: float = 10.0, quiet_s: float = 0.05) -> None:
        """Wait until a navigation the last action started has loaded and its scripts have had a turn."""
        time.sleep(quiet_s)  # a click's navigation is requested within this
        if not self._loaded.wait(timeout):
            raise BrowserError(f"the page did not finish loading in {timeout:g} s")
        deadline = time.monotonic() + timeout
        while True:
            try:
                # a task after the load's own: its handlers have run (no requestAnimationFrame: a hidden page has none)
                self.evaluate("new Promise(r => setTimeout(r, 0))", timeout=timeout)
                return
            except BrowserError:  # the context went away mid-navigation: wait for the new one
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def evaluate(self, expression: str, timeout: float = 10.0) -> Any:
        """The JSON value of a JavaScript expression in the page (a promise is awaited)."""
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                               "awaitPromise": True}, timeout)
        if "exceptionDetails" in reply:
            d = reply["exceptionDetails"]
            raise BrowserError(f"JavaScript error: {d.get('exception', {}).get('description') or d.get('text')}")
        return reply.get("result", {}).get("value")

    def ax_nodes(self) -> list[dict]:
        """The page's full accessibility tree as CDP AXNodes (the root first)."""
        return self.send("Accessibility.getFullAXTree")["nodes"]

    def _call(self, backend_id: int, function: str, *args: Any) -> Any:
        obj = self.send("DOM.resolveNode", {"backendNodeId": backend_id})["object"]["objectId"]
        reply = self.send("Runtime.callFunctionOn", {"objectId": obj, "functionDeclaration": function,
                                                     "arguments": [{"value": a} for a in args],
                                                     "returnByValue": True})
        if "exceptionDetails" in reply:
            raise BrowserError(f"JavaScript error: {reply['exceptionDetails'].get('text')}")
        return reply.get("result", {}).get("value")

    def _center(self, backend_id: int) -> tuple[float, float]:
        try:
            self.send("DOM.scrollIntoViewIfNeeded", {"backendNodeId": backend_id})
            quads = self.send("DOM.getContentQuads", {"backendNodeId": backend_id})["quads"]
        except BrowserError:
            quads = []
        if not quads:
            raise BrowserError("it is not visible on the page")
        q = quads[0]
        return sum(q[0::2]) / 4, sum(q[1::2]) / 4

    def click(self, backend_id: int) -> None:
        """A real mouse click at the node's centre (an option of a drop-down list is selected instead)."""
        label = self._call(backend_id, _OPTION_JS)
        if label is not None:
            obj = self.send("DOM.resolveNode", {"backendNodeId": backend_id})["object"]["objectId"]
            parent = self.send("Runtime.callFunctionOn", {"objectId": obj, "functionDeclaration":
                                                          "function () { return this.closest('select'); }"})
            node = self.send("DOM.describeNode", {"objectId": parent["result"]["objectId"]})["node"]
            self.select(node["backendNodeId"], label)
            return
        x, y = self._center(backend_id)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type(self, backend_id: int, text: str) -> None:
        """Replace the text field's content with `text`, as typed (input events fire)."""
        error = self._call(backend_id, _CLEAR_JS)
        if error:
            raise BrowserError(f"it is {error}")
        self.send("DOM.focus", {"backendNodeId": backend_id})
        if text:
            self.send("Input.insertText", {"text": text})
        else:
            self.press("Backspace")

    def select(self, backend_id: int, label: str) -> None:
        """Choose the option labelled `label` (case-insensitive; or its value) in a drop-down list."""
        error = self._call(backend_id, _SELECT_JS, label)
        if error:
            raise BrowserError(error)

    def press(self, key: str) -> None:
        """Press and release `key` (one of KEY_NAMES, case-insensitive) on the focused element."""
        try:
            name, code, text = _KEYS[key.lower()]
        except KeyError:
            raise BrowserError(f"unknown key {key!r}; keys: {', '.join(KEY_NAMES)}") from None
        down = {"type": "keyDown", "key": name, "code": name if name != " " else "Space",
                "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}
        if text:
            down["text"] = text
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", {**down, "type": "keyUp", "text": ""})

    def scroll(self, dy: int) -> None:
        """Scroll the page by `dy` pixels (positive: down) with the mouse wheel."""
        self.send("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": WINDOW[0] / 2, "y": WINDOW[1] / 2,
                                               "deltaX": 0, "deltaY": dy})

    def screenshot_png(self) -> bytes:
        """The visible part of the page (the window, ``WINDOW`` pixels) as PNG bytes."""
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])

    def close(self) -> None:
        """Close the tab and throw its browser context away (idempotent; quiet when the browser is gone)."""
        if self.browser.conn is None:
            return
        self.browser.conn.listen(self.session, None)
        if self.browser.alive:
            try:
                self.browser.send("Target.disposeBrowserContext", {"browserContextId": self.context}, timeout=10)
            except BrowserError:
                pass
