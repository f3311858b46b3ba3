"""Browser tests: Playwright for Python driving Debian's ``chromium`` (headless).

Playwright's own browser download is not available here, so the browser is
the system's (``executable_path``); ``.ci/run`` installs the Debian package.
Without it, or without the ``playwright`` package, these tests skip and say
which is missing. Playwright's sync API runs its own event loop in a thread of
its own, so these tests are plain functions, not Trio ones, and the daemon is
a real subprocess (:class:`tests.sync_daemon.Daemon`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sync_daemon import Daemon

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium's own background traffic (updates, sync, lookups of Google's hosts) is refused on a closed
# network; leaving it off keeps a run quiet and quick.
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _missing() -> str | None:
    if CHROMIUM is None:
        return "chromium is not installed (Debian package 'chromium'; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


MISSING = _missing()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium per test module (each test opens its own context).

    Not one for the whole run: Playwright's sync API keeps an asyncio loop running in this thread
    while it is open, and later tests that call ``asyncio.run`` (the ACP SDK's clients) would fail.
    """
    if MISSING:
        pytest.skip(MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page in a fresh context (its own storage), closed after the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Any]:
    """``daemons(port=0)`` makes a :class:`Daemon` (not started); all are stopped at the test's end."""
    made: list[Daemon] = []

    def make(port: int = 0) -> Daemon:
        made.append(Daemon(tmp_path, port))
        return made[-1]

    try:
        yield make
    finally:
        for daemon in made:
            daemon.stop()
