"""Headless Chromium for the web UI's tests, driven by Playwright (sync API), and the script
that takes the README's screenshot of a played episode:

    .venv/bin/python -m tests.browser docs/web-ui.png

The browser is the system's (Debian's `chromium` package at /usr/bin/chromium), never one
Playwright downloads; each launch gets a fresh profile directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PLAYWRIGHT_PIN = "playwright==1.65.2"


def unavailable() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"Playwright for Python is not installed (pip install '{PLAYWRIGHT_PIN}')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@contextlib.contextmanager
def chromium(
    profile: Path | None = None, extra_args: list[str] | None = None
) -> Iterator[BrowserContext]:
    """A browser context of a fresh headless Chromium (its own profile directory);
    `extra_args`: more command-line switches (`--host-resolver-rules=...`)."""
    from playwright.sync_api import sync_playwright

    with contextlib.ExitStack() as stack:
        if profile is None:
            profile = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chromium-")))
        playwright = stack.enter_context(sync_playwright())
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=[*CHROMIUM_ARGS, *(extra_args or [])],
            headless=True,
            accept_downloads=True,
            viewport={"width": 1280, "height": 900},
        )
        stack.callback(context.close)
        yield context


def open_page(context: BrowserContext, url: str) -> Page:
    """A new tab on the web UI at `url` (http://HOST:PORT), once it has opened its session and
    reset the env."""
    page = context.new_page()
    page.goto(url.rstrip("/") + "/web")
    page.wait_for_selector("body[data-ready]")
    return page


def step_with(page: Page, values: dict[str, Any]) -> None:
    """Fill the action form's fields (`select` for enums, text for the rest) and press Step."""
    for name, value in values.items():
        control = page.locator(f'[data-field="{name}"] > .field-body').locator(
            "input, select, textarea"
        )
        if control.first.evaluate("node => node.tagName") == "SELECT":
            control.first.select_option(label=str(value))
        else:
            control.first.fill(str(value))
    page.get_by_role("button", name="Step").click()


def take_screenshot(path: Path, context: BrowserContext | None = None) -> None:
    """The page after a seeded gridworld episode played to the goal, saved as a PNG at `path`
    (in a tab of `context`, else of a browser of its own)."""
    from playwright.sync_api import expect

    from ecotone.plugins.gridworld import shortest_path
    from tests.conftest import run_server

    with contextlib.ExitStack() as stack:
        server = stack.enter_context(run_server("gridworld", web=True))
        if context is None:
            context = stack.enter_context(chromium())
        page = open_page(context, server.url)
        stack.callback(page.close)
        page.fill("#reset-seed", "3")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator("#status")).to_have_text("reset with seed 3")
        expect(page.locator('#state-fields [data-key="seed"]')).to_have_text("3")
        step_with(page, {"move": "up"})  # a detour first, for a longer trajectory
        expect(page.locator('#state-fields [data-key="step_count"]')).to_have_text("1")
        state = json.loads(page.locator("#state-raw").text_content() or "{}")
        moves = shortest_path(state["layout"], tuple(state["position"]), tuple(state["goal"]))
        assert moves, "the goal is reachable"
        for i, move in enumerate(moves, start=2):
            step_with(page, {"move": move})
            expect(page.locator("#step-count")).to_have_text(str(i))
        expect(page.locator("#done")).to_have_text("true")
        page.screenshot(path=str(path), full_page=True)


if __name__ == "__main__":
    reason = unavailable()
    if reason is not None:
        sys.exit(f"cannot take the screenshot: {reason}")
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/web-ui.png")
    take_screenshot(target)
    print(f"wrote {target}")
