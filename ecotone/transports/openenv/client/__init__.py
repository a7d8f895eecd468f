"""The `openenv` transport's client end: OpenEnv servers at openenv+ws://, openenv+http://
(and over TLS, openenv+wss://, openenv+https://). The channel is written once, in `_async.py`
(trio or asyncio); its blocking face, `_sync.py`, is generated from it by scripts/unasync.py."""

from __future__ import annotations

from ecotone.client.channels import Faces

CHANNELS = Faces(__name__ + "._async")
