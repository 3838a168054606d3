"""Debian's headless Chromium under Python Playwright, watched for requests and script errors.

Used by the HTML report's browser tests (``tests/engine/test_engine_html_browser.py``), its
benchmark (``bench/html_report.py``) and the README screenshot
(``scripts/report-screenshot.py``). Playwright launches the browser by path:
``scripts/get-chromium.sh`` installs it (``make test`` runs that); ``playwright install``
is never used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("AGENT_HEALTH_CHROMIUM", "/usr/bin/chromium-headless-shell"))
INSTALL = (
    "install it with scripts/get-chromium.sh (as root; it runs `apt-get install -y "
    "chromium-headless-shell`), or point AGENT_HEALTH_CHROMIUM at a Chromium binary; "
    "`make test` installs it"
)


class BrowserMissing(RuntimeError):
    """The headless Chromium (or the playwright package) is not installed."""


def executable() -> Path:
    """The Chromium binary, or a clear error saying how to install it."""
    if not CHROMIUM.is_file() or not os.access(CHROMIUM, os.X_OK):
        raise BrowserMissing(f"no headless Chromium at {CHROMIUM}: {INSTALL}")
    return CHROMIUM


@dataclass
class Watched:
    """A page plus everything it asked the network for and every script error it hit."""

    page: Any
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def outside(self, allowed: str) -> list[str]:
        """Requests for anything but ``allowed`` (the report itself)."""
        return [url for url in self.requests if url.split("#", 1)[0] != allowed]


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a Playwright ``Browser``)."""
    path = executable()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        raise BrowserMissing(
            "the playwright package is missing: pip install -e '.[dev]' (or make test)"
        ) from err
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(path))
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def watched_page(browser: Any, *, width: int = 1400, height: int = 900) -> Iterator[Watched]:
    """A fresh page that records every request, console error and uncaught exception."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    seen = Watched(page)
    page.on("request", lambda request: seen.requests.append(request.url))
    page.on("pageerror", lambda error: seen.errors.append(f"uncaught: {error}"))
    page.on(
        "console",
        lambda message: (
            seen.errors.append(f"console.{message.type}: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    try:
        yield seen
    finally:
        context.close()
