"""The `stdio` transport's client end: `stdio:ENV` serves ENV in a subprocess of this Python,
`stdio:COMMAND ARGS` runs COMMAND (`podman run -i --rm IMAGE`, say), and frames go over its
pipes on the client core's framed channel (`ecotone.client._async.framed`, and its blocking
face). The subprocess ends when the channel closes.
"""

from __future__ import annotations

from ecotone.client.channels import Faces

CHANNELS = Faces("ecotone.client._async.framed")
