"""The sans-IO heart of every client: ids, frames, typed decoding, errors.

Both the blocking and the async client are thin loops around `ClientCore`: it makes request
frames with fresh ids, remembers which ids were abandoned (timed out) so their late answers are
dropped rather than mistaken for later ones, and turns response frames into results.
"""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import urlsplit

import attrs

from ecotone.client.errors import ServerError
from ecotone.kernel.contract import StepResult
from ecotone.wire import Codec, Error, ObservationFrame, Response, StateFrame, codec_for


@attrs.frozen(slots=True)
class Endpoint:
    """A parsed server URL."""

    scheme: str
    host: str
    port: int
    path: str


def parse_url(url: str) -> Endpoint:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "http", "openenv+ws", "openenv+http"):
        raise ValueError(
            f"unsupported URL {url!r}: expected ws://HOST:PORT (or inproc://ENV for an "
            "in-process engine)"
        )
    if not parts.hostname:
        raise ValueError(f"URL {url!r} has no host")
    return Endpoint(parts.scheme, parts.hostname, parts.port or 80, parts.path or "/")


@attrs.define(slots=True)
class EnvTypes:
    """The env types a client decodes into; None means plain data."""

    observation: Any = None
    state: Any = None


class ClientCore:
    """Frames, ids and decoding for one client connection."""

    def __init__(self, codec: str = "json") -> None:
        self.codec: Codec = codec_for(codec)
        self._ids = itertools.count(1)
        self.abandoned: set[int] = set()

    def next_id(self) -> int:
        return next(self._ids)

    def encode(self, frame: Any) -> bytes:
        return self.codec.encode(frame)

    def decode(self, data: bytes | str) -> Response:
        return self.codec.decode_response(data)  # type: ignore[arg-type]

    def raw(self, value: Any) -> Any:
        return self.codec.raw(value)

    def check(self, response: Response) -> Response:
        if isinstance(response, Error):
            raise ServerError.from_frame(response)
        return response

    def step_result(self, response: Response, types: EnvTypes) -> StepResult[Any]:
        response = self.check(response)
        if not isinstance(response, ObservationFrame):
            raise ServerError("internal", f"expected an observation, got {type(response)}")
        return self.observation(response.observation, types)

    def observation(self, raw: Any, types: EnvTypes) -> StepResult[Any]:
        if types.observation is not None:
            obs = self.codec.decode_as(raw, types.observation)
            return StepResult(
                observation=obs,
                reward=getattr(obs, "reward", None),
                done=bool(getattr(obs, "done", False)),
                truncated=bool(getattr(obs, "truncated", False)),
            )
        data = self.codec.decode_as(raw, dict[str, Any])
        return StepResult(
            observation=data,
            reward=data.get("reward"),
            done=bool(data.get("done", False)),
            truncated=bool(data.get("truncated", False)),
        )

    def state(self, response: Response, types: EnvTypes) -> Any:
        response = self.check(response)
        if not isinstance(response, StateFrame):
            raise ServerError("internal", f"expected a state, got {type(response)}")
        if types.state is not None:
            return self.codec.decode_as(response.state, types.state)
        return self.codec.decode_as(response.state, dict[str, Any])
