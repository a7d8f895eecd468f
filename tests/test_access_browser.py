"""The attacks of a web page, in a real browser (headless Chromium): a page of another origin
the user visits tries to drive a server on this machine, by WebSocket, by no-CORS fetch and by
form post, and a DNS-rebinding page (a name of its own that resolves to 127.0.0.1) tries to
read it as same-origin. None opens a session. The server's own web UI, with a token, works
through its cookie. Without Playwright or Chromium these tests skip, except on CI."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ecotone.kernel.config import AuthConfig
from tests import browser
from tests.conftest import RunningServer, run_server, wait_until

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext

# Names only this browser resolves, both to 127.0.0.1: an attacker's site, and a rebinding one.
RULES = "--host-resolver-rules=MAP attacker.test 127.0.0.1, MAP rebind.test 127.0.0.1"

ATTACK = """<!doctype html><html><body><form id="f" method="POST" enctype="text/plain"
action="http://127.0.0.1:{port}/reset"><input name='{{"seed":' value='1}}'></form>
<script>
window.report = {{ws: "pending", fetch: "pending", steps: "pending"}};
const ws = new WebSocket("ws://127.0.0.1:{port}/", "ecotone.v1.json");
ws.onopen = () => {{ ws.send('{{"op":"open","id":1}}'); window.report.ws = "open"; }};
ws.onmessage = (m) => {{ window.report.ws = "answered: " + m.data; }};
ws.onclose = () => {{ if (window.report.ws === "pending") window.report.ws = "refused"; }};
fetch("http://127.0.0.1:{port}/reset", {{method: "POST", mode: "no-cors", body: "{{}}"}})
  .then(() => {{ window.report.fetch = "sent"; }}, () => {{ window.report.fetch = "failed"; }});
fetch("http://127.0.0.1:{port}/v1/sessions", {{method: "POST", mode: "no-cors"}})
  .then(() => {{ window.report.steps = "sent"; }}, () => {{ window.report.steps = "failed"; }});
</script></body></html>"""


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    reason = browser.unavailable()
    if reason is not None:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"the browser attack tests need a browser on CI: {reason}", pytrace=False)
        pytest.skip(reason)
    profile = tmp_path_factory.mktemp("chromium-attack-profile")
    with browser.chromium(Path(profile), extra_args=[RULES]) as context:
        yield context


@pytest.fixture
def target() -> Iterator[RunningServer]:
    with run_server("counter", transport="http", web=True) as server:
        yield server


@pytest.fixture
def attacker(target: RunningServer) -> Iterator[str]:
    """An ordinary web site on another port: one page, the attack on `target`."""
    page = ATTACK.format(port=target.port).encode()

    class Site(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://attacker.test:{site.server_address[1]}/"
    finally:
        site.shutdown()
        site.server_close()


def test_a_page_of_another_site_cannot_open_a_socket_fetch_or_post_a_form(
    context: BrowserContext, target: RunningServer, attacker: str
) -> None:
    page = context.new_page()
    try:
        page.goto(attacker)
        page.wait_for_function(
            "Object.values(window.report).every(v => v !== 'pending')", timeout=15_000
        )
        report = page.evaluate("window.report")
        assert report["ws"] == "refused", report
        # no-cors requests resolve opaquely whatever the answer: what counts is the server.
        with page.expect_navigation() as navigation:
            page.evaluate("document.getElementById('f').submit()")
        answer = navigation.value
        assert answer is not None and answer.status == 403
        assert "forbidden" in answer.text()
    finally:
        page.close()
    assert target.recorder.opened == []


def test_a_rebinding_name_that_resolves_to_loopback_gets_403_not_the_ui(
    context: BrowserContext, target: RunningServer
) -> None:
    page = context.new_page()
    try:
        response = page.goto(f"http://rebind.test:{target.port}/web")
        assert response is not None and response.status == 403
        api = page.goto(f"http://rebind.test:{target.port}/schema")
        assert api is not None and api.status == 403
    finally:
        page.close()
    assert target.recorder.opened == []


def test_the_web_ui_of_a_server_with_a_token_works_through_its_cookie(
    context: BrowserContext,
) -> None:
    with run_server("counter", transport="http", web=True, auth=AuthConfig(required=True)) as s:
        base, _, token = s.url.partition("?token=")
        assert token
        page = context.new_page()
        try:
            bare = page.goto(f"{base}/web")
            assert bare is not None and bare.status == 401
            page.goto(f"{base}/web?token={token}")
            page.wait_for_selector("body[data-ready]")
            assert page.url == f"{base}/web"  # the token left the address bar
            assert wait_until(lambda: len(s.recorder.opened) == 1)
            cookies = context.cookies(base)
            (jar,) = [c for c in cookies if c["name"] == "ecotone_token"]
            assert jar["httpOnly"] and jar["sameSite"] == "Strict"
            assert page.evaluate("document.cookie") == ""  # no script can read it
        finally:
            page.close()
            context.clear_cookies()
