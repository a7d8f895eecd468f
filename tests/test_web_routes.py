"""What the web UI stands on, without a browser: the `render` frame and its HTTP route, the
close route a page's beacon hits, EnvInfo's readme, serving /web (and not serving it without
`web`), the `web` config key and the `--web` flag."""

from __future__ import annotations

import base64
import functools
import os
import re
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import ecotone
from ecotone.kernel import Registry
from ecotone.kernel.config import ConfigError, ServerConfig, load
from ecotone.kernel.envspec import EnvDefinitionError, EnvSpec
from ecotone.serving import serve
from ecotone.specs import Described, JsonCodec
from tests.conftest import RunningServer, ecotone_serving, make_registry, run_server, wait_until
from tests.httpraw import Http
from tests.web_envs import Counting, MarkdownView, ViewEnvs, tiny_png


def started(client: Http) -> str:
    sid = client.open_session()
    assert client.request("POST", f"/v1/sessions/{sid}/reset", {}).status == 200
    return sid


@pytest.fixture
def web_server() -> Iterator[RunningServer]:
    with run_server("gridworld", web=True) as server:
        yield server


@pytest.fixture
def web(web_server: RunningServer) -> Iterator[Http]:
    client = Http(web_server.port)
    yield client
    client.close()


# --- render ----------------------------------------------------------------------------------


def test_gridworld_renders_its_grid_as_text_and_the_view_follows_the_agent(web: Http) -> None:
    sid = web.open_session()
    before_reset = web.request("GET", f"/v1/sessions/{sid}/render")
    assert before_reset.status == 200
    assert "reset" in before_reset.json()["content"]
    reply = web.request(
        "POST", f"/v1/sessions/{sid}/reset", {"options": {"layout": ["S..", "...", "..G"]}}
    )
    assert reply.status == 200
    first = web.request("GET", f"/v1/sessions/{sid}/render").json()
    assert first["op"] == "rendered" and first["session"] == sid and first["kind"] == "text"
    assert first["content"].splitlines()[:3] == ["A..", "...", "..G"]
    assert "A agent, G goal" in first["content"]
    web.request("POST", f"/v1/sessions/{sid}/step", {"action": {"move": "right"}})
    second = web.request("GET", f"/v1/sessions/{sid}/render").json()
    assert second["content"].splitlines()[:3] == [".A.", "...", "..G"]
    assert "step 1 of" in second["content"]


def test_render_of_an_env_without_a_view_is_unsupported() -> None:
    with run_server("counter", transport="http") as server:
        client = Http(server.port)
        try:
            sid = started(client)
            reply = client.request("GET", f"/v1/sessions/{sid}/render")
            assert reply.status == 501
            assert reply.json()["code"] == "unsupported"
            assert reply.json()["session"] == sid
            # the session is unharmed
            step = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 2}})
            assert step.json()["observation"]["count"] == 2
        finally:
            client.close()


def test_render_of_an_unknown_session_is_unknown_session(web: Http) -> None:
    reply = web.request("GET", "/v1/sessions/nosuchsession/render")
    assert (reply.status, reply.json()["code"]) == (404, "unknown_session")


@pytest.mark.parametrize(
    ("env", "kind", "check"),
    [
        ("markdown_view", "markdown", lambda c: c == "## Count\n\nThe count is **3**."),
        ("picture_view", "image", lambda c: base64.b64decode(c) == tiny_png(5, 2)),
        ("html_view", "html", lambda c: c.startswith("<p id='count' style='color: red'>3</p>")),
    ],
)
def test_render_kinds_travel_as_the_env_declares_them(env: str, kind: str, check: Any) -> None:
    with run_server(env, transport="http", plugins=[ViewEnvs()]) as server:
        client = Http(server.port)
        try:
            sid = started(client)
            client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 3}})
            reply = client.request("GET", f"/v1/sessions/{sid}/render")
            assert reply.status == 200, reply
            frame = reply.json()
            assert frame["kind"] == kind
            assert check(frame["content"]), frame["content"]
        finally:
            client.close()


@pytest.mark.parametrize(
    ("env", "says"), [("broken_view", "the view is broken"), ("number_view", "returned int")]
)
def test_a_render_that_fails_is_an_env_error_and_the_session_goes_on(env: str, says: str) -> None:
    with run_server(env, transport="http", plugins=[ViewEnvs()]) as server:
        client = Http(server.port)
        try:
            sid = started(client)
            reply = client.request("GET", f"/v1/sessions/{sid}/render")
            assert (reply.status, reply.json()["code"]) == (500, "env_error")
            assert says in reply.json()["message"]
            step = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}})
            assert step.status == 200
        finally:
            client.close()


def test_render_is_a_native_frame_on_every_path(web_server: RunningServer) -> None:
    """`render` through /v1/frames (JSON), as any frame is."""
    client = Http(web_server.port)
    try:
        sid = started(client)
        reply = client.request("POST", "/v1/frames", {"op": "render", "id": "r1", "session": sid})
        assert reply.status == 200
        frame = reply.json()
        assert (frame["op"], frame["id"], frame["kind"]) == ("rendered", "r1", "text")
        assert "A agent" in frame["content"]
    finally:
        client.close()


def test_render_kind_must_be_one_the_protocol_knows() -> None:
    class Wrong(Counting):
        render_kind = "latex"

        def render(self) -> str:
            return r"\frac{1}{2}"

    with pytest.raises(EnvDefinitionError, match="render_kind must be one of text, markdown"):
        EnvSpec.from_class(Wrong, "wrong")


def test_a_multi_agent_envs_render_must_take_the_seat_it_draws_for() -> None:
    from tests.envs import CardsEnv

    class Seatless(CardsEnv):
        def render(self) -> str:  # type: ignore[override]
            return "the whole table, both hands"

    with pytest.raises(EnvDefinitionError, match="render takes the seat it draws for"):
        EnvSpec.from_class(Seatless, "seatless")
    assert EnvSpec.from_class(CardsEnv, "cards").has_render


# --- closing from a page that is going away ------------------------------------------------


def test_the_close_route_takes_a_beacon_and_closes_the_session(
    web_server: RunningServer, web: Http
) -> None:
    sid = started(web)
    # What navigator.sendBeacon sends: a POST with a text/plain body (or none).
    reply = web.request(
        "POST", f"/v1/sessions/{sid}/close", b"", headers={"content-type": "text/plain"}
    )
    assert reply.status == 200
    assert reply.json() == {"op": "closed", "id": reply.json()["id"], "session": sid}
    assert wait_until(lambda: web_server.recorder.close_reason(sid) == "client")
    assert web.request("GET", f"/v1/sessions/{sid}/state").json()["code"] == "unknown_session"
    again = web.request("POST", f"/v1/sessions/{sid}/close")
    assert (again.status, again.json()["code"]) == (404, "unknown_session")


# --- metadata: the readme ---------------------------------------------------------------------


def test_describe_carries_a_readme_from_the_module_and_class_docstrings(web: Http) -> None:
    info = web.request("GET", "/v1/describe").json()["info"]
    assert info["readme"].startswith("`gridworld`: walk a seeded maze to the goal.")
    assert "Reset options: `size`" in info["readme"]  # GridworldEnv's own docstring


def test_a_readme_attribute_wins_over_docstrings_and_reaches_openenv_metadata() -> None:
    assert EnvSpec.from_class(MarkdownView, "m").info().readme == (
        "# Markdown view\n\nA counter whose view is **markdown**."
    )
    with run_server("markdown_view", transport="http", plugins=[ViewEnvs()]) as server:
        client = Http(server.port)
        try:
            meta = client.request("GET", "/metadata").json()
        finally:
            client.close()
    assert meta["readme_content"].startswith("# Markdown view")


def test_an_env_without_docstrings_has_an_empty_readme() -> None:
    class Bare(Counting):
        pass

    Bare.__module__ = "not_a_loaded_module"
    info = EnvSpec.from_class(Bare, "bare").info()
    assert info.readme == ""
    wire = JsonCodec().encode(Described(id=1, info=info))
    assert b"readme" not in wire  # omitted on the wire when empty


def test_a_gymnasium_env_shows_gymnasiums_own_documentation() -> None:
    pytest.importorskip("gymnasium")
    readme = Registry.discover().env_spec("gymnasium:CartPole-v1").info().readme
    assert "## Action Space" in readme


# --- serving the page -------------------------------------------------------------------------


def test_web_serves_the_page_and_its_files_from_the_package(web: Http) -> None:
    page = web.request("GET", "/web")
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="/web/app.js">' in page.body
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self';" in policy
    assert web.request("GET", "/web/").body == page.body
    files = {
        "app.js": "text/javascript",
        "form.js": "text/javascript",
        "views.js": "text/javascript",
        "board.js": "text/javascript",
        "style.css": "text/css",
    }
    for name, media_type in files.items():
        reply = web.request("GET", f"/web/{name}")
        assert reply.status == 200, name
        assert reply.headers["content-type"].startswith(media_type)
        shipped = Path(ecotone.__file__).parent / "transports" / "http" / "server" / "web" / name
        assert reply.body == shipped.read_bytes()


def test_the_page_names_nothing_to_load_but_its_own_files() -> None:
    web_dir = Path(ecotone.__file__).parent / "transports" / "http" / "server" / "web"
    for path in web_dir.iterdir():
        text = path.read_text()
        assert "http://" not in text and "https://" not in text, path.name
        assert "@import" not in text and "url(" not in text, path.name
    html = (web_dir / "index.html").read_text()
    for target in re.findall(r"""(?:src|href)=["']([^"']*)["']""", html):
        assert target.startswith(("/web/", "data:")), target
    for path in web_dir.glob("*.js"):
        for target in re.findall(r"""\bfrom\s+["']([^"']+)["']""", path.read_text()):
            assert target.startswith("/web/"), (path.name, target)


def test_web_answers_404_for_files_it_does_not_have(web: Http) -> None:
    for path in ("/web/nope.js", "/web/..%2fpyproject.toml", "/web/../cli.py", "/web/sub/x.js"):
        reply = web.request("GET", path)
        assert reply.status == 404, path


def test_the_root_redirects_to_the_page_and_websocket_still_works_there(
    web_server: RunningServer, web: Http
) -> None:
    reply = web.request("GET", "/")
    assert (reply.status, reply.headers["location"]) == (302, "/web")
    with ecotone.connect(web_server.ws_url) as env:
        env.reset(layout=["SG"])
        assert env.step({"move": "right"}).done


def test_without_web_there_is_no_page() -> None:
    with run_server("counter", transport="http") as server:
        client = Http(server.port)
        try:
            for path in ("/web", "/web/", "/web/app.js", "/"):
                assert client.request("GET", path).status == 404, path
            # the routes the page uses are there all the same
            sid = started(client)
            assert client.request("POST", f"/v1/sessions/{sid}/close").status == 200
        finally:
            client.close()


PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]


def test_the_web_files_ship_in_the_wheel(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [*PIP_WHEEL, "--no-index", "-q", "-w", str(tmp_path), str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("ecotone-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("index.html", "app.js", "form.js", "style.css"):
        assert f"ecotone/transports/http/server/web/{name}" in names


# --- configuration and the command line -------------------------------------------------------


def test_web_switches_the_default_websocket_transport_to_http() -> None:
    assert ServerConfig(web=True).transport == "http"
    assert ServerConfig(web=True, transport="websocket").transport == "http"
    assert ServerConfig().transport == "websocket"
    assert ServerConfig(web=False).transport == "websocket"


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("off", False)])
def test_ecotone_web_sets_web(
    value: str, expected: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load(environ={"ECOTONE_WEB": value})
    assert config.web is expected
    assert config.transport == ("http" if expected else "websocket")


def test_web_in_ecotone_toml_and_a_wrong_value_named(tmp_path: Path) -> None:
    path = tmp_path / "ecotone.toml"
    path.write_text('env = "counter"\nweb = true\n')
    assert load(path, environ={}).web is True
    with pytest.raises(ConfigError, match="web"):
        load(path, environ={"ECOTONE_WEB": "maybe"})
    path.write_text('web = "sometimes"\n')
    with pytest.raises(ConfigError, match="web"):
        load(path, environ={})


def test_web_with_a_transport_that_cannot_serve_it_is_refused() -> None:
    config = ServerConfig(env="counter", transport="tcp", port=0, web=True)
    with pytest.raises(ValueError, match="transport 'tcp' cannot serve the web UI"):
        trio.run(functools.partial(serve, config, registry=make_registry()))


@pytest.fixture
def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}


def test_serve_web_prints_the_page_url_and_serves_page_and_websocket(tmp_path: Path) -> None:
    with ecotone_serving("counter", "--web", "--port", "0", cwd=tmp_path) as proc:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        match = re.fullmatch(
            r"ecotone: serving 'counter' over http at http://127\.0\.0\.1:(\d+)\n", first
        )
        assert match, first
        port = match[1]
        assert proc.stderr.readline() == f"ecotone: web UI at http://127.0.0.1:{port}/web\n"
        client = Http(int(port))
        try:
            page = client.request("GET", "/web")
            assert page.status == 200 and b"<title>ecotone</title>" in page.body
        finally:
            client.close()
        with ecotone.connect(f"ws://127.0.0.1:{port}") as env:
            env.reset()
            assert env.step({"delta": 4}).observation["count"] == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_serve_web_over_tcp_exits_2_saying_why(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "counter", "--web", "--transport", "tcp"],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "transport 'tcp' cannot serve the web UI" in done.stderr
    assert "Traceback" not in done.stderr


def test_play_prints_the_web_ui_url_plays_over_websocket_and_exits_0(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "play", "echo", "--steps", "10"],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    match = re.search(
        r"^serving 'echo' at ws://127\.0\.0\.1:(\d+)\n"
        r"web UI: http://127\.0\.0\.1:\1/web \(open it while the server runs; "
        r"ecotone serve echo --web keeps it up\)$",
        done.stdout,
        re.M,
    )
    assert match, done.stdout
    assert "episode done" in done.stdout
