"""Who may connect and ask: the server's admission rules, in one place for every transport.

* `ConnectionGate` counts open connections, in all and per peer address, and refuses past
  `limits.max_connections` / `limits.max_connections_per_ip` (the transport writes the
  refusal: an HTTP 503, or an error frame, then closes).
* `Admission` checks every HTTP request and WebSocket handshake: Host, Origin, token. On
  tcp and unix, which have no headers, the engine asks for the token in `hello`.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import ssl
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import attrs

from ecotone.kernel import Limits
from ecotone.kernel.config import ConfigError
from ecotone.kernel.peers import token_number
from ecotone.specs import ErrorCode
from ecotone.specs.http import cookie, speaks_streamable_http


class ConnectionGate:
    """How many connections are open, in all and per peer address; refuses past the limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open = 0
        self._per_peer: dict[str, int] = {}
        self.refused = 0

    def admit(self, peer: str) -> bool:
        held = self._per_peer.get(peer, 0)
        if self.open >= self.limits.max_connections or held >= self.limits.max_connections_per_ip:
            self.refused += 1
            return False
        self.open += 1
        self._per_peer[peer] = held + 1
        return True

    def leave(self, peer: str) -> None:
        self.open -= 1
        held = self._per_peer.get(peer, 1) - 1
        if held:
            self._per_peer[peer] = held
        else:
            self._per_peer.pop(peer, None)


# --- who may ask: Host, Origin and the token ------------------------------------------------

LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
TOKEN_COOKIE: Final = "ecotone_token"


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this machine only (a unix socket path is)."""
    if host in LOOPBACK_NAMES or host.startswith("/") or not host:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> str:
    """`Host` without its port: `127.0.0.1:8000` -> `127.0.0.1`, `[::1]:80` -> `::1`."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin)
    if not parts.hostname:
        return False
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 0)
    name = _host_name(host)
    host_port = host.rsplit(":", 1)[1] if ":" in host and not host.endswith("]") else ""
    wanted = int(host_port) if host_port.isdigit() else _DEFAULT_PORTS.get(parts.scheme, 0)
    return parts.hostname.lower() == name and port == wanted


def _given(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token a request shows: `Authorization: Bearer`, `?token=`, or the web UI's cookie."""
    return bearer(headers) or query.get("token") or cookie(headers, TOKEN_COOKIE)


def bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


@attrs.frozen
class Refusal:
    status: int
    code: ErrorCode
    message: str


@attrs.frozen
class Admission:
    """The checks every HTTP request and WebSocket handshake passes before anything else:

    * `Host` must name this server (DNS rebinding: a page of `evil.example` that resolves to
      127.0.0.1 sends `Host: evil.example`): by default the loopback names when bound to
      loopback, any when bound beyond it (where the token guards);
    * a request with an `Origin` (a browser's) must come from the server's own origin or one
      allowed in `[access] origins`, so no other web page can open a socket or send a form;
    * with tokens set, the request must carry one: `Authorization: Bearer TOKEN`, `?token=`
      in the URL, or the web UI's cookie (set when `/web?token=` is opened); except an MCP
      request with a share key (`X-Ecotone-Share`), which may act in that session only.
      Which token it showed (`principal`) is whose sessions it makes.
    """

    tokens: tuple[str, ...] = ()
    origins: frozenset[str] = frozenset()
    hosts: frozenset[str] | None = None
    """Allowed Host names; None: any."""

    def admit(
        self,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        path: str = "",
        method: str = "GET",
    ) -> tuple[Refusal | None, int | None]:
        """Why this request is refused (None: it is not), and the number of the token it
        shows (None: none, or none needed), in one pass: each token is compared once. `GET
        /health` and `GET /ready` need no token (liveness and readiness probes, launchers
        waiting for a server); they tell nothing but that the server is up, and whether it
        has room for a session."""
        host = headers.get("host", "")
        if self.hosts is not None and "*" not in self.hosts:
            if _host_name(host) not in self.hosts:
                return Refusal(
                    403,
                    ErrorCode.FORBIDDEN,
                    f"Host {host!r} is not one this server answers for ([access] hosts)",
                ), None
        origin = headers.get("origin")
        if origin and "*" not in self.origins and origin not in self.origins:
            if not _same_origin(origin, host):
                return Refusal(
                    403,
                    ErrorCode.FORBIDDEN,
                    f"requests from web pages of {origin} are refused: only this server's "
                    "own pages, and origins allowed in [access] origins",
                ), None
        if not self.tokens:
            return None, None
        given = _given(headers, query)
        principal = self.number(given)
        if principal is None and path not in _PROBES and not _shared(method, headers, path):
            return Refusal(
                401,
                ErrorCode.UNAUTHORIZED,
                "this server requires a token: `Authorization: Bearer TOKEN`, or "
                "`?token=TOKEN` in the URL" + (" (this one is wrong)" if given else ""),
            ), None
        return None, principal

    def number(self, given: str | None) -> int | None:
        """Which token `given` is (its number), or None (`ecotone.kernel.token_number`)."""
        return token_number(self.tokens, given)


_PROBES: Final = frozenset({"/health", "/ready"})
"""Paths any caller may GET without a token."""

_TOKEN_CHARS: Final = re.compile(r"[!#-+\--:<-\[\]-~]+")


SHARE_HEADER: Final = "x-ecotone-share"


def _shared(method: str, headers: Mapping[str, str], path: str) -> bool:
    """A request of MCP's transport that brings a share key instead of the token: admitted,
    to act in the shared session only (the MCP face attaches it, or refuses; it makes no
    session for it). OpenEnv's dialect on the same path, and every other route, want the
    token."""
    return (
        path == "/mcp"
        and bool(headers.get(SHARE_HEADER))
        and speaks_streamable_http(method, headers)
    )


def resolve_tokens(
    token: str | None, token_file: str | None, required: bool | None, host: str
) -> tuple[tuple[str, ...], bool]:
    """The server's tokens and whether one was made here (to be printed): the one given, or
    the lines of `token_file` (one token each, for as many holders; blank lines and `#`
    comments skipped), or, when required (by default: bound beyond loopback) and none is
    given, a new random one."""
    tokens: list[str] = [token] if token is not None else []
    if token is None and token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                lines = [line.strip() for line in f]
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"[auth] token_file: cannot read {token_file}: {exc}") from None
        tokens = [line for line in lines if line and not line.startswith("#")]
        if not tokens:
            raise ConfigError(f"[auth] token_file: {token_file} holds no token")
        if len(set(tokens)) != len(tokens):
            raise ConfigError(f"[auth] token_file: {token_file} lists a token twice")
    if tokens:
        for given in tokens:
            if not _TOKEN_CHARS.fullmatch(given):
                raise ConfigError(
                    "[auth] token: use printable ASCII with no spaces, quotes, commas, "
                    "semicolons or backslashes (it travels in headers, URLs and a cookie)"
                )
        return tuple(tokens), False
    if required is None:
        required = not is_loopback(host)
    if not required:
        return (), False
    return (secrets.token_urlsafe(24),), True


def resolve_token(
    token: str | None, token_file: str | None, required: bool | None, host: str
) -> tuple[str | None, bool]:
    """The server's first token (see `resolve_tokens`) and whether it was made here."""
    tokens, made = resolve_tokens(token, token_file, required, host)
    return (tokens[0] if tokens else None), made


def admission_for(
    tokens: tuple[str, ...], origins: list[str], hosts: list[str] | None, bind_host: str
) -> Admission:
    if hosts is None:
        allowed: frozenset[str] | None = LOOPBACK_NAMES if is_loopback(bind_host) else None
        if allowed is not None and bind_host and not bind_host.startswith("/"):
            allowed = allowed | {_host_name(bind_host)}
    else:
        allowed = frozenset(_host_name(h) for h in hosts)
    return Admission(tokens=tokens, origins=frozenset(origins), hosts=allowed)


TLS_TRANSPORTS: Final = ("websocket", "http", "tcp")


def tls_context(cert: str | None, key: str | None, transport: str) -> ssl.SSLContext | None:
    """The server's TLS context from `[tls]`, or None without a certificate; a file that
    cannot be read, a key that does not fit, or a transport without TCP is a ConfigError."""
    if cert is None:
        if key is not None:
            raise ConfigError("[tls] key is set but cert is not")
        return None
    if transport not in TLS_TRANSPORTS:
        raise ConfigError(
            f"[tls] applies to the transports over TCP ({', '.join(TLS_TRANSPORTS)}), "
            f"not {transport!r}"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"[tls] cannot load {cert}{f' and {key}' if key else ''}: {exc}"
        ) from None
    return context
