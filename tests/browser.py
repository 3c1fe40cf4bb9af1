"""A real headless Chromium for the routing page's tests, driven over the DevTools protocol (its
websocket), so that a test does what an operator does: open the sign-in form, type the key, submit,
and read the page the browser then shows, with the browser's own cookie handling (HttpOnly,
SameSite) and JavaScript. `--dump-dom` cannot: it can neither submit a form nor keep a cookie.
The layout tests also size the window, read the DOM's geometry with JavaScript (`evaluate`) and
take screenshots.

    with Chromium(tmp_path / "chromium", width=1400) as browser:
        browser.sign_in(proxy.url, proxy.master_key)
        html = browser.page_dom()
        browser.resize(900, 1000)
        rect = browser.evaluate("document.getElementById('deployments').getBoundingClientRect().toJSON()")
        browser.screenshot(tmp_path / "routing-900.png")
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

import pytest
from websockets.sync.client import connect

LOADED = "document.body && document.body.getAttribute('data-loaded') === '1'"


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("the routing page's browser tests need Chromium: `apt-get install chromium` "
                "(.ci/run installs it when it is missing)")


class BrowserError(RuntimeError):
    pass


class Chromium:
    def __init__(self, profile: Path, width: int = 1400, height: int = 900, limit_s: float = 120.0):
        profile.mkdir(parents=True, exist_ok=True)
        self.limit_s = limit_s
        self.proc = subprocess.Popen(
            [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", f"--user-data-dir={profile}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._ids = itertools.count(1)
        try:
            port = self._until(lambda: self._port(profile / "DevToolsActivePort"), "Chromium's DevTools port")
            page = self._until(lambda: next((t for t in self._targets(port) if t["type"] == "page"), None),
                               "Chromium's page")
            self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=limit_s)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # -- the protocol ---------------------------------------------------------------------------
    @staticmethod
    def _port(path: Path):
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _targets(port: int) -> list:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            return json.load(r)

    def _until(self, probe, what: str):
        """The first true value `probe` returns, trying until limit_s (a bound, not a measure)."""
        deadline = time.monotonic() + self.limit_s
        while True:
            try:
                value = probe()
            except (OSError, BrowserError):
                value = None
            if value:
                return value
            if self.proc.poll() is not None:
                raise BrowserError(f"Chromium exited ({self.proc.returncode}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise BrowserError(f"no {what} within {self.limit_s:.0f} s")
            time.sleep(0.1)

    def call(self, method: str, **params) -> dict:
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=self.limit_s))
            if message.get("id") == call_id:  # events (no id) are not used
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str):
        return self._until(lambda: self.evaluate(expression), what)

    # -- what an operator does ------------------------------------------------------------------
    def open(self, url: str) -> None:
        # A mark on the document being left, so that the wait cannot end on it (the same URL again
        # reloads: its readyState and href already match until the new document replaces it).
        self.evaluate("window.__leaving = true")
        self.call("Page.navigate", url=url)
        self.wait_for(f"!window.__leaving && document.readyState === 'complete' && location.href === {json.dumps(url)}",
                      url)

    def resize(self, width: int, height: int) -> None:
        """The page's viewport `width` x `height` CSS pixels from now on (the next page loads keep it)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at `path` (for the reader of a failed layout assertion)."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def sign_in(self, base_url: str, key: str) -> None:
        """Open the routing page's sign-in form, type the key, submit, and wait for the page."""
        self.open(base_url + "/aisia/ui/login")
        self.evaluate(f"document.getElementById('key').value = {json.dumps(key)}; "
                      "document.querySelector('button[type=submit]').click(); true")
        self.wait_for(f"location.pathname === '/aisia/ui' && {LOADED}", "the routing page after signing in")

    def page_dom(self, base_url: str = "") -> str:
        """The routing page's markup once it has shown its data (reloaded first when `base_url`)."""
        if base_url:
            self.open(base_url + "/aisia/ui")
        self.wait_for(LOADED, "the routing page's data")
        return self.evaluate("document.documentElement.outerHTML")

    def visited(self) -> list[str]:
        """Every URL of the tab's history."""
        return [e["url"] for e in self.call("Page.getNavigationHistory")["entries"]]
