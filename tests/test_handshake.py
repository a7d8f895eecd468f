"""The WebSocket opening handshake as a pure function, and the router, without a socket."""

from __future__ import annotations

import json

from ecotone.server.http11.router import Router, sync
from ecotone.server.wsloop import WsPeer
from ecotone.specs import SUBPROTOCOLS
from ecotone.specs import wsframing as wsf
from ecotone.specs.http import HttpRequest, HttpResponse, json_response
from ecotone.transports.websocket.server.handshake import Endpoint, handshake

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def _never(*args: object) -> WsPeer:
    raise AssertionError("the handshake makes no peer")


PLAIN = Endpoint(_never)
NEGOTIATED = Endpoint(_never, SUBPROTOCOLS)
ENDPOINTS = {"/": NEGOTIATED, "/ws": PLAIN}


def _request(path: str = "/", method: str = "GET", **headers: str) -> HttpRequest:
    base = {"sec-websocket-key": KEY, "sec-websocket-version": "13"}
    base.update({k.replace("_", "-"): v for k, v in headers.items()})
    return HttpRequest(method, path, {}, base, b"")


def test_a_valid_handshake_is_101_with_the_accept_key() -> None:
    shake = handshake(_request(), ENDPOINTS)
    assert shake.endpoint is NEGOTIATED and shake.codec == "json"
    assert shake.response.serialize() == (
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
        b"sec-websocket-accept: " + wsf.accept_key(KEY).encode() + b"\r\n\r\n"
    )


def test_the_first_offered_subprotocol_we_speak_picks_the_codec() -> None:
    offered = "chat, ecotone.v1.msgpack, ecotone.v1.json"
    shake = handshake(_request(sec_websocket_protocol=offered), ENDPOINTS)
    assert shake.codec == SUBPROTOCOLS["ecotone.v1.msgpack"]
    assert ("sec-websocket-protocol", "ecotone.v1.msgpack") in shake.response.headers


def test_an_endpoint_without_subprotocols_ignores_the_offer() -> None:
    shake = handshake(_request("/ws", sec_websocket_protocol="chat"), ENDPOINTS)
    assert shake.endpoint is PLAIN and shake.response.status == 101
    assert all(name != "sec-websocket-protocol" for name, _ in shake.response.headers)


def test_refusals_are_plain_text_and_close() -> None:
    cases = [
        (_request(method="POST"), 400),
        (_request(sec_websocket_version="8"), 400),
        (HttpRequest("GET", "/", {}, {"sec-websocket-version": "13"}, b""), 400),
        (_request("/nowhere"), 404),
        (_request(sec_websocket_protocol="chat"), 400),
    ]
    for request, status in cases:
        shake = handshake(request, ENDPOINTS)
        assert shake.endpoint is None
        answer = shake.response
        assert (answer.status, answer.content_type, answer.close) == (status, "text/plain", True)
    assert (
        b"no WebSocket endpoint at /nowhere"
        == handshake(_request("/nowhere"), ENDPOINTS).response.body
    )


async def test_the_router_answers_in_order_with_405_and_404() -> None:
    router = Router(not_found="nothing here")

    async def item(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return json_response(200, params)

    router.add(r"/v1/tasks", GET=sync(lambda: json_response(200, "tasks")))
    router.add(r"/(?P<env>[^/]+)/(?P<what>tasks|task)", POST=item)

    async def answer(method: str, path: str) -> HttpResponse:
        got = await router.handle(HttpRequest(method, path, {}, {}, b""))
        assert isinstance(got, HttpResponse)
        return got

    assert json.loads((await answer("GET", "/v1/tasks")).body) == "tasks"
    assert (await answer("HEAD", "/v1/tasks")).status == 200  # as the GET
    refused = await answer("POST", "/v1/tasks")  # the first match answers: 405, not item
    assert (refused.status, refused.headers) == (405, [("Allow", "GET")])
    assert json.loads((await answer("POST", "/echo/task")).body) == {"env": "echo", "what": "task"}
    missing = await answer("GET", "/a/b/c")
    assert (missing.status, json.loads(missing.body)) == (404, {"detail": "nothing here"})
    assert router.paths() == {"/v1/tasks": ["GET"], "/{env}/{what}": ["POST"]}
