"""Who may talk to a server: the token (every transport), the Host and Origin checks that
keep web pages and DNS rebinding out, the web UI's cookie, and the defaults (a token made and
printed when bound beyond loopback)."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import ecotone
from ecotone.kernel.config import AccessConfig, AuthConfig, load
from tests.conftest import RunningServer, ecotone_serving, run_server
from tests.httpraw import Http, raw_exchange
from tests.wsraw import HandshakeRefused, RawWebSocket

TOKEN = "s3cret-token_for-tests"


def _split(url: str) -> tuple[str, str | None]:
    base, _, query = url.partition("?token=")
    return base, query or None


@pytest.fixture
def ws_server() -> Iterator[RunningServer]:
    with run_server("counter", auth=AuthConfig(token=TOKEN)) as server:
        yield server


@pytest.fixture
def http_server() -> Iterator[RunningServer]:
    with run_server("counter", transport="http", web=True, auth=AuthConfig(token=TOKEN)) as s:
        yield s


# --- the token over WebSocket ------------------------------------------------------------------


def test_a_websocket_without_the_token_is_refused_401_and_opens_nothing(
    ws_server: RunningServer,
) -> None:
    with pytest.raises(HandshakeRefused) as refused:
        RawWebSocket(ws_server.url)
    assert refused.value.status == 401
    with pytest.raises(ecotone.AccessDenied, match="token"):
        ecotone.connect(ws_server.url)
    with pytest.raises(ecotone.AccessDenied, match="wrong"):
        ecotone.connect(ws_server.url, token="not-it")
    assert ws_server.recorder.opened == []


def test_the_token_is_taken_from_the_argument_the_url_or_ecotone_token(
    ws_server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ecotone.connect(ws_server.url, token=TOKEN) as env:
        assert env.reset().observation["count"] == 0
    with ecotone.connect(f"{ws_server.url}?token={TOKEN}") as env:
        env.reset()
        assert env.step({"delta": 2}).observation["count"] == 2
        assert "token" not in env.connection.url  # taken out: it travels in a header
    monkeypatch.setenv("ECOTONE_TOKEN", TOKEN)
    with ecotone.connect(ws_server.url) as env:
        env.reset()
    raw = RawWebSocket(ws_server.url, headers={"authorization": f"Bearer {TOKEN}"})
    raw.close()
    assert len(ws_server.recorder.opened) == 3


async def test_the_async_client_and_vector_env_carry_the_token(ws_server: RunningServer) -> None:
    async with ecotone.aconnect(ws_server.url, token=TOKEN) as env:
        assert (await env.reset()).observation["count"] == 0
    with ecotone.VectorEnv(ws_server.url, 3, token=TOKEN) as vec:
        observations, _ = vec.reset()
        assert [o["count"] for o in observations] == [0, 0, 0]


# --- the token over HTTP -----------------------------------------------------------------------


def test_http_routes_need_the_token_but_health_does_not(http_server: RunningServer) -> None:
    http = Http(http_server.port)
    refused = http.request("POST", "/v1/sessions")
    assert refused.status == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["code"] == "unauthorized"
    assert http.request("POST", "/reset", {}).status == 401  # the OpenEnv routes too
    assert http.request("GET", "/schema").status == 401
    assert http.request("GET", "/health").status == 200
    wrong = http.request("POST", "/v1/sessions", headers={"authorization": "Bearer nope"})
    assert wrong.status == 401 and "wrong" in wrong.json()["message"]
    assert http_server.recorder.opened == []
    ok = http.request("POST", "/v1/sessions", headers={"authorization": f"Bearer {TOKEN}"})
    assert ok.status == 200
    assert http.request("POST", f"/reset?token={TOKEN}", {}).status == 200
    with ecotone.connect(http_server.url, token=TOKEN) as env:
        env.reset()
        assert env.step({"delta": 1}).observation["count"] == 1


def test_the_web_ui_link_with_the_token_sets_an_httponly_strict_cookie_that_authorizes(
    http_server: RunningServer,
) -> None:
    http = Http(http_server.port)
    assert http.request("GET", "/web").status == 401
    go = http.request("GET", f"/web?token={TOKEN}")
    assert go.status == 303 and go.headers["location"] == "/web"
    cookie = go.headers["set-cookie"]
    assert cookie.startswith(f"ecotone_token={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    jar = {"cookie": f"theme=dark; ecotone_token={TOKEN}"}
    page = http.request("GET", "/web", headers=jar)
    assert page.status == 200 and b"<html" in page.body.lower()
    assert http.request("POST", "/v1/sessions", headers=jar).status == 200
    bad = {"cookie": "ecotone_token=guess"}
    assert http.request("POST", "/v1/sessions", headers=bad).status == 401


# --- the token over tcp: hello ------------------------------------------------------------------


def _frame(value: dict[str, object]) -> bytes:
    body = msgspec.json.encode(value)
    return struct.pack(">I", len(body)) + body


def _read_frame(sock: socket.socket) -> dict[str, object]:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (size,) = struct.unpack(">I", head)
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return msgspec.json.decode(body)


def test_on_tcp_every_request_before_hello_with_the_token_is_unauthorized() -> None:
    with run_server("counter", transport="tcp", auth=AuthConfig(token=TOKEN)) as server:
        host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(_frame({"op": "ping", "id": 1}))  # liveness needs no token
            assert _read_frame(sock)["op"] == "pong"
            sock.sendall(_frame({"op": "open", "id": 2}))
            answer = _read_frame(sock)
            assert (answer["op"], answer["code"], answer["id"]) == ("error", "unauthorized", 2)
            sock.sendall(_frame({"op": "hello", "id": 3, "token": "guess"}))
            assert _read_frame(sock)["message"] == "wrong token"
            sock.sendall(_frame({"op": "hello", "id": 4, "token": TOKEN}))
            assert _read_frame(sock)["op"] == "welcome"
            sock.sendall(_frame({"op": "open", "id": 5}))
            assert _read_frame(sock)["op"] == "opened"
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(server.url)
        with ecotone.connect(server.url, token=TOKEN) as env:
            env.reset()
            assert env.step({"delta": 3}).observation["count"] == 3
        assert len(server.recorder.opened) == 2


# --- Origin and Host: web pages and DNS rebinding ----------------------------------------------


def test_a_socket_or_form_from_another_web_origin_is_refused_403() -> None:
    with run_server("counter", transport="http") as server:  # no token: loopback default
        port = server.port
        evil = {"origin": "http://evil.example"}
        with pytest.raises(HandshakeRefused) as refused:
            RawWebSocket(server.ws_url, headers=evil)
        assert refused.value.status == 403
        other_port = {"origin": f"http://127.0.0.1:{port + 1}"}  # another local site
        with pytest.raises(HandshakeRefused):
            RawWebSocket(server.ws_url, headers=other_port)
        http = Http(port)
        # A no-CORS form post: no content type, a foreign Origin.
        form = http.request("POST", "/step", b'{"action": {}}', headers=evil)
        assert form.status == 403 and form.json()["code"] == "forbidden"
        assert "evil.example" in form.json()["message"]
        assert http.request("POST", "/v1/sessions", headers={"origin": "null"}).status == 403
        assert server.recorder.opened == []
        # The server's own pages (the web UI) and clients without a browser are welcome.
        RawWebSocket(server.ws_url, headers={"origin": f"http://127.0.0.1:{port}"}).close()
        assert http.request("POST", "/v1/sessions").status == 200


def test_origins_allowed_in_config_are_admitted() -> None:
    access = AccessConfig(origins=["https://lab.example"])
    with run_server("counter", access=access) as server:
        RawWebSocket(server.url, headers={"origin": "https://lab.example"}).close()
        with pytest.raises(HandshakeRefused):
            RawWebSocket(server.url, headers={"origin": "https://lab.example.evil"})


def test_a_host_header_of_another_name_is_refused_on_a_loopback_server() -> None:
    """DNS rebinding: a page of rebind.example whose name now resolves to 127.0.0.1 is
    same-origin to itself, so its requests carry Host: rebind.example."""
    with run_server("counter", transport="http") as server:
        data, closed = raw_exchange(
            server.port,
            b"POST /v1/sessions HTTP/1.1\r\nHost: rebind.example:%d\r\n"
            b"Content-Length: 0\r\n\r\n" % server.port,
        )
        assert data.startswith(b"HTTP/1.1 403"), data
        assert b"rebind.example" in data
        for host in (b"localhost", b"127.0.0.1", b"[::1]"):
            data, _ = raw_exchange(
                server.port,
                b"GET /health HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
                % (host, server.port),
            )
            assert data.startswith(b"HTTP/1.1 200"), (host, data)
    with run_server("counter", transport="http", access=AccessConfig(hosts=["*"])) as server:
        data, _ = raw_exchange(
            server.port, b"GET /health HTTP/1.1\r\nHost: any.example\r\nConnection: close\r\n\r\n"
        )
        assert data.startswith(b"HTTP/1.1 200")
    assert closed or data


# --- defaults and configuration ----------------------------------------------------------------


def test_a_required_token_on_loopback_is_made_and_announced_in_the_url() -> None:
    with run_server("counter", auth=AuthConfig(required=True)) as server:
        base, token = _split(server.url)
        assert token is not None and len(token) >= 32
        with ecotone.connect(server.url) as env:  # the URL as printed works as it is
            env.reset()
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(base)


def _announced(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    lines = [proc.stderr.readline()]
    found = re.search(r"at ((?:ws|http|tcp)://\S+)", lines[0])
    assert found, lines
    return found.group(1)


def test_serve_beyond_loopback_makes_a_token_and_no_auth_warns() -> None:
    with ecotone_serving("counter", "--host", "0.0.0.0", "--port", "0") as proc:
        url = _announced(proc)
        base, token = _split(url)
        assert token, url
        local = base.replace("0.0.0.0", "127.0.0.1")
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(local)
        with ecotone.connect(local, token=token) as env:
            env.reset()
    with ecotone_serving("counter", "--host", "0.0.0.0", "--port", "0", "--no-auth") as proc:
        url = _announced(proc)
        assert "token" not in url
        assert proc.stderr is not None
        assert "WARNING" in proc.stderr.readline()


def test_the_token_comes_from_the_config_file_a_token_file_or_the_environment(
    tmp_path: Path,
) -> None:
    root = tmp_path
    secret = root / "token"
    secret.write_text(f"{TOKEN}\n")
    config = root / "ecotone.toml"
    config.write_text(f'env = "counter"\n[auth]\ntoken_file = "{secret}"\n')
    loaded = load(config, environ={})
    assert loaded.auth.token_file == str(secret)
    loaded = load(config, environ={"ECOTONE_AUTH_TOKEN": "from-env"})
    assert loaded.auth.token == "from-env"
    with ecotone_serving("counter", "--port", "0", "--token-file", secret) as proc:
        url = _announced(proc)
        assert "token" not in url  # the user's own token is not printed
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(url)
        with ecotone.connect(url, token=TOKEN) as env:
            env.reset()


@pytest.mark.parametrize(
    ("args", "environ", "said"),
    [
        ((), {"ECOTONE_AUTH_TOKEN": "two words"}, "printable ASCII"),
        (("--token-file", "/nonexistent/token"), {}, "cannot read /nonexistent/token"),
    ],
)
def test_a_token_that_cannot_work_is_a_clear_error_before_serving(
    args: tuple[str, ...], environ: dict[str, str], said: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "counter", "--port", "0", *args],
        env={**clean, **environ},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr


# --- several tokens: one per holder, sessions counted per token ----------------------------

ALICE, BOB = "alice-token-1", "bob-token-2"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"# one token per holder\n{ALICE}\n\n{BOB}\n")
    return path


def test_each_token_in_the_file_admits_and_is_counted_on_its_own(token_file: Path) -> None:
    from ecotone.kernel import Limits

    auth = AuthConfig(token_file=str(token_file))
    limits = Limits(max_sessions_per_token=2)
    for transport in ("websocket", "http", "tcp"):
        with run_server("counter", transport=transport, auth=auth, limits=limits) as server:
            url = server.url
            alice = [ecotone.Connection(url, token=ALICE) for _ in range(2)]
            try:
                held = [alice[0].open(), alice[1].open()]  # two connections, one token
                with pytest.raises(ecotone.CapacityError, match="max_sessions_per_token") as full:
                    alice[1].open()
                assert full.value.details == {"active": 2, "limit": 2, "scope": "token"}
                with ecotone.connect(url, token=BOB) as bob:  # another holder is not affected
                    bob.reset()
                held[0].close()  # a slot comes back
                alice[0].open().reset()
            finally:
                for conn in alice:
                    conn.close()
            with pytest.raises(ecotone.AccessDenied):
                ecotone.connect(url, token="carol-token-3")


def test_over_http_a_tokens_sessions_are_its_own(token_file: Path) -> None:
    auth = AuthConfig(token_file=str(token_file))
    with run_server("counter", transport="http", auth=auth) as server:
        http = Http(server.port)
        as_alice = {"authorization": f"Bearer {ALICE}"}
        as_bob = {"authorization": f"Bearer {BOB}"}
        sid = http.request("POST", "/v1/sessions", {}, headers=as_alice).json()["session"]
        reset = f"/v1/sessions/{sid}/reset"
        assert http.request("POST", reset, {}, headers=as_alice).status == 200
        other = http.request("POST", reset, {}, headers=as_bob)
        assert other.status == 404 and other.json()["code"] == "unknown_session"


def test_a_token_file_listing_a_token_twice_or_none_is_refused(tmp_path: Path) -> None:
    from ecotone.kernel.config import ConfigError
    from ecotone.server.admission import resolve_tokens

    twice = tmp_path / "twice"
    twice.write_text(f"{ALICE}\n{ALICE}\n")
    with pytest.raises(ConfigError, match="lists a token twice"):
        resolve_tokens(None, str(twice), None, "127.0.0.1")
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ConfigError, match="holds no token"):
        resolve_tokens(None, str(empty), None, "127.0.0.1")
