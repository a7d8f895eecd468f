"""A small HTTP/1.1 client for tests: the stdlib's http.client on one keep-alive connection,
plus raw bytes on a fresh socket for what a well-behaved client never sends."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

import attrs

JSON = {"content-type": "application/json"}
MSGPACK = {"content-type": "application/msgpack"}


@attrs.frozen
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Http:
    """One keep-alive HTTP/1.1 connection to the server."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            headers = {**JSON, **(headers or {})}
        self.conn.request(method, path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    @property
    def sock(self) -> socket.socket | None:
        return self.conn.sock

    def open_session(self) -> str:
        reply = self.request("POST", "/v1/sessions")
        assert reply.status == 200, reply
        assert reply.json()["op"] == "opened"
        return str(reply.json()["session"])

    def close(self) -> None:
        self.conn.close()


def raw_exchange(port: int, data: bytes) -> tuple[bytes, bool]:
    """Send bytes on a fresh TCP connection; return everything the server wrote and whether it
    then closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return received, False
            if not chunk:
                return received, True
            received += chunk
