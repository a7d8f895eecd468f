"""The web UI's static files (transports/http/web/), as HTTP responses for the http transport.

The page is plain HTML, CSS and JavaScript shipped in the package: no build step, nothing
fetched from anywhere but this server (the Content-Security-Policy says so to the browser).
It talks to the native HTTP API (`/v1/...`) like any other client.
"""

from __future__ import annotations

from importlib import resources

from ecotone.specs.http import HttpResponse

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
    folder = resources.files("ecotone.transports.http").joinpath("web")
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        media_type = MEDIA_TYPES.get(suffix)
        if media_type is None or not entry.is_file():
            continue
        assets[entry.name] = HttpResponse(200, entry.read_bytes(), media_type, list(HEADERS))
    if "index.html" not in assets:
        raise FileNotFoundError(
            "the web UI's index.html is missing from ecotone/transports/http/web/"
        )
    return assets


def asset(assets: dict[str, HttpResponse], name: str) -> HttpResponse | None:
    """A fresh response for one file (the HTTP loop may change a response it sends)."""
    found = assets.get(name)
    if found is None:
        return None
    return HttpResponse(found.status, found.body, found.content_type, list(found.headers))
