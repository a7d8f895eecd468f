"""An OpenAI-compatible model endpoint as `ChatPolicy` calls it: JSON bodies POSTed over HTTP
from a worker thread, every failure a `PolicyError` that keeps the HTTP status, and the
paths such a server has: `{base_url}/chat/completions` and `{base_url}/completions` under
`/v1`, and vLLM's `/tokenize` beside `/v1`, at the server's root.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from ecotone.collect.protocol import PolicyError


class EndpointError(PolicyError):
    """The endpoint answered with an HTTP error (`status`), or not at all (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def post(url: str, body: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
    """POST `body` as JSON to `url`; the answer's JSON. Blocking (run it in a thread).

    Raises:
        EndpointError: an HTTP error status (kept as `status`), no connection, or an answer
            that is not JSON.
    """
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode("utf-8", "replace")
        raise EndpointError(f"the model endpoint answered {exc.code}: {detail}", exc.code) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise EndpointError(f"the model endpoint is unreachable: {exc}") from None
    except json.JSONDecodeError as exc:
        raise EndpointError(f"the model endpoint's answer is not JSON: {exc}") from None


THREADS = 256
"""Requests in flight at once, over all of a run's episodes (anyio's default is 40, fewer
than a run's episodes may be)."""


@attrs.define
class Endpoint:
    """Where a chat policy's requests go, and how."""

    base_url: str
    """`http://HOST:PORT/v1`: chat and completions under it."""
    headers: dict[str, str]
    timeout: float
    _limiter: tuple[object, anyio.CapacityLimiter] | None = None
    """The event loop's token and its limiter (one per run: a policy may serve several)."""

    def under(self, path: str) -> str:
        """`path` under the base URL (`/chat/completions`, `/completions`)."""
        return self.base_url.rstrip("/") + path

    def beside(self, path: str) -> str:
        """`path` at the server's root, beside `/v1` (vLLM's `/tokenize`)."""
        base = self.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        return base + path

    async def call(self, url: str, body: dict[str, Any]) -> Any:
        """POST `body` to `url` from a worker thread; its JSON answer (see `post`)."""
        loop = anyio.lowlevel.current_token()
        if self._limiter is None or self._limiter[0] != loop:
            self._limiter = (loop, anyio.CapacityLimiter(THREADS))
        return await anyio.to_thread.run_sync(
            post, url, body, self.headers, self.timeout, limiter=self._limiter[1]
        )


__all__ = ["THREADS", "Endpoint", "EndpointError", "post"]
