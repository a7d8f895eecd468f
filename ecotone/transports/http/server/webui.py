"""The web UI of the http transport: its static files (`web/` beside this module), as HTTP
responses, and the routes that serve them (`install`).

The page is plain HTML, CSS and JavaScript shipped in the package: no build step, nothing
fetched from anywhere but this server (the Content-Security-Policy says so to the browser).
It talks to the native HTTP API (`/v1/...`) like any other client.
"""

from __future__ import annotations

from importlib import resources

from ecotone.server.admission import TOKEN_COOKIE
from ecotone.server.http11.router import Router, not_found
from ecotone.specs.http import HttpRequest, HttpResponse

MEDIA_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; frame-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'none'"
)
"""Only this server: no CDN, no inline script. Inline styles are allowed for an env's own
HTML view, which the page shows in a sandboxed frame (no scripts run there)."""

HEADERS: list[tuple[str, str]] = [
    ("cache-control", "no-cache"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("content-security-policy", CONTENT_SECURITY_POLICY),
]


def load() -> dict[str, HttpResponse]:
    """Every file of the page by name (`index.html`, `app.js`, ...), read once."""
    assets: dict[str, HttpResponse] = {}
    folder = resources.files("ecotone.transports.http.server").joinpath("web")
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        media_type = MEDIA_TYPES.get(suffix)
        if media_type is None or not entry.is_file():
            continue
        assets[entry.name] = HttpResponse(200, entry.read_bytes(), media_type, list(HEADERS))
    if "index.html" not in assets:
        raise FileNotFoundError(
            "the web UI's index.html is missing from ecotone/transports/http/server/web/"
        )
    return assets


def redirect(request: HttpRequest) -> HttpResponse:
    """A redirect to the web UI; a `?token=` (checked already) becomes its cookie: HttpOnly,
    so the page's scripts cannot read it, and SameSite=Strict, so no other site's page can
    make the browser send it."""
    headers = [("location", "/web")]
    token = request.query.get("token")
    if token:
        headers.append(("set-cookie", f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"))
    return HttpResponse(303 if token else 302, b"", "text/plain", headers)


def install(router: Router, assets: dict[str, HttpResponse]) -> None:
    """Serve the page at /web (and /web/), its files at /web/NAME, and a redirect at /.
    Responses are sent as they are (`HttpResponse.serialize` changes nothing), so each file's
    is made once, in `load`."""

    async def root(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return redirect(request)

    async def page(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if "token" in request.query:  # it passed Admission: keep it in a cookie, not the URL
            return redirect(request)
        return assets["index.html"]  # `load` checks it is there

    async def file(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        found = assets.get(params["name"])
        return found if found is not None else not_found()

    router.add(r"/", GET=root)
    router.add(r"/web", GET=page)
    router.add(r"/web/", GET=page)
    router.add(r"/web/(?P<name>[A-Za-z0-9_.-]+)", GET=file)
