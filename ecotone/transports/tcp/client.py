"""The `tcp` and `unix` transports' client end: tcp://HOST:PORT, tcp+tls://HOST:PORT and
unix:///PATH URLs, length-prefixed frames on the client core's framed channel
(`ecotone.client._async.framed`, written once, and its blocking face generated from it).
These channels have no headers: a token goes in `hello`.
"""

from __future__ import annotations

from ecotone.client.channels import Faces

CHANNELS = Faces("ecotone.client._async.framed")
