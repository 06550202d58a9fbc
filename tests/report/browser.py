"""A headless Chromium driven over the Chrome DevTools Protocol (websockets, no WebDriver).

Chromium is Debian's (``apt-get install chromium``; ``.ci/run`` installs it). It starts with a fresh
``--user-data-dir``, background networking, component updates and sync off, and
``--remote-debugging-port=0``; the port it picked is read from ``DevToolsActivePort``. ``Page``
records console errors and uncaught exceptions from the moment it attaches.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from tests.conftest import skip_or_fail

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
         "--no-default-browser-check", "--remote-debugging-port=0", "--window-size=1280,900")


def find_chromium() -> str | None:
    """Path of a Chromium executable, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One Chromium process; ``open(url)`` gives a ``Page``. Use as a context manager."""

    def __init__(self, executable: str, profile: Path) -> None:
        self.profile = profile
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited {self.proc.returncode}: {self.proc.stderr.read()[-2000:]!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port within 30 s")
            time.sleep(0.05)
        self.port = int(port_file.read_text().split()[0])

    def page(self) -> Page:
        """The first page target (about:blank)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as response:
            targets = json.load(response)
        target = next(t for t in targets if t.get("type") == "page")
        return Page(target["webSocketDebuggerUrl"])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """One tab over CDP: navigate, evaluate JavaScript, screenshot; console errors collected."""

    def __init__(self, ws_url: str) -> None:
        self.ws = connect(ws_url, max_size=64 * 2**20, open_timeout=10)
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.requests: list[str] = []
        for method in ("Runtime.enable", "Log.enable", "Page.enable", "Network.enable"):
            self.send(method)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                      for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails") or {}
            self.errors.append("exception: " + str((details.get("exception") or {}).get("description")
                                                   or details.get("text")))
        elif method == "Log.entryAdded" and (params.get("entry") or {}).get("level") == "error":
            self.errors.append("log: " + str(params["entry"].get("text")))
        elif method == "Network.requestWillBeSent":
            self.requests.append(str((params.get("request") or {}).get("url")))

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its result (events meanwhile are recorded)."""
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result") or {}
            self._event(message)

    def drain(self, seconds: float = 0.3) -> None:
        """Record events that arrive within ``seconds`` (console output after an action)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self._event(json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic()))))
            except TimeoutError:
                return

    def goto(self, url: str) -> None:
        """Navigate and wait until the document finished loading."""
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not finish loading")
            time.sleep(0.05)
        self.drain()

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (a thrown error is raised here)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate failed: {result['exceptionDetails']}")
        return (result.get("result") or {}).get("value")

    def screenshot(self, path: Path) -> Path:
        """A full-page PNG."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics.get("contentSize")
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000),
                               "scale": 1})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.ws.close()


def require_chromium() -> str:
    """The Chromium path; without one the test is skipped, or fails under CI=true (``skip_or_fail``)."""
    path = find_chromium()
    if path is None:
        skip_or_fail("no chromium on PATH (apt-get install -y chromium; .ci/run installs it)")
    return path
