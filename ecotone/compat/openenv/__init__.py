"""OpenEnv, both ways, through one mapping table (`mapping.py`).

* Serving OpenEnv's clients: the server's transports host OpenEnv's profile (`/ws` and the
  HTTP routes) and translate its messages into engine frames with `mapping`; its JSON-RPC
  dialect (not MCP: `openenv/session/*`, `tools/*` in OpenEnv's shape) with `rpc.py`.
* Driving OpenEnv's servers: `translator.Translator` turns ecotone request frames into
  OpenEnv messages and OpenEnv's answers back into frames (sans-IO); the client's
  `openenv+http://` / `openenv+ws://` channels move the bytes.

Only the wire and kernel layers are imported here, so both sides can use it.
"""
