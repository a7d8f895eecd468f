"""Routing HTTP requests by path pattern and method: what a transport mounts its routes on.

Patterns are regular expressions matched against the whole path, tried in the order they
were added (they overlap: `/v1/tasks` before `/(?P<env>[^/]+)/tasks`), with named groups
passed to the handler. The first pattern that matches answers: its handler for the method
(a HEAD is answered as the GET, the serializer dropping the body), or 405 with `Allow`. No
pattern matching is 404. A linear list of compiled patterns: a server has a few dozen
routes, and a match costs less than a dict of closures would save.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable

from ecotone.server.http11.asgi import Streamed
from ecotone.specs.http import HttpRequest, HttpResponse, json_response

Handler = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse | Streamed]]
"""A route: the request and the pattern's named groups, to the answer."""


def not_found(detail: str = "Not Found") -> HttpResponse:
    """The one 404 answer: `{"detail": ...}`."""
    return json_response(404, {"detail": detail})


def method_not_allowed(allowed: Iterable[str]) -> HttpResponse:
    """The one 405 answer, with the methods the path takes in `Allow` (RFC 9110 §15.5.6)."""
    return json_response(
        405, {"detail": "Method Not Allowed"}, [("Allow", ", ".join(sorted(allowed)))]
    )


def sync(fn: Callable[[], HttpResponse]) -> Handler:
    """A route whose answer needs neither the request nor a wait."""

    async def handler(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return fn()

    return handler


_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")


class Router:
    """Routes in the order they were added; `not_found`: the 404's detail."""

    def __init__(self, not_found: str = "Not Found") -> None:
        self.routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = []
        self.not_found = not_found

    def add(self, pattern: str, **methods: Handler) -> None:
        """Answer paths matching `pattern` (whole) with a handler per method: `GET=...`."""
        self.routes.append((re.compile(pattern + r"\Z"), methods))

    async def handle(self, request: HttpRequest) -> HttpResponse | Streamed:
        """The answer of the first route whose pattern matches, or 405, or 404."""
        method = request.method
        path = request.path
        for pattern, methods in self.routes:
            match = pattern.match(path)
            if match is None:
                continue
            handler = methods.get(method)
            if handler is None and method == "HEAD":
                handler = methods.get("GET")
            if handler is None:
                return method_not_allowed(methods)
            return await handler(request, match.groupdict())
        return not_found(self.not_found)

    def paths(self) -> dict[str, list[str]]:
        """Each route as OpenAPI writes a path (`/v1/sessions/{sid}`), with its methods."""
        return {
            _GROUP.sub(r"{\1}", pattern.pattern.removesuffix(r"\Z")): list(methods)
            for pattern, methods in self.routes
        }
