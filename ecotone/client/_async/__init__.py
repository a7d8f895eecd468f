"""The async face of the client: the source the blocking face (`_sync/`) is generated from.

`connection.py` and `vector.py` are written once, here, for trio and asyncio (anyio);
`scripts/unasync.py` turns them into `_sync/connection.py` and `_sync/vector.py` (no `async`,
no `await`, the names of the blocking face), and `make test` checks the generated files are
up to date, so the two faces cannot drift. What the faces really do differently (locks,
deadlines, shields, opening a channel, waiting on several connections) is in `io.py`, one
hand-written module per face.
"""
