"""The blocking face of the client, generated from `_async/` by `scripts/unasync.py` (except
`io.py`, the blocking primitives, written by hand). Edit the async source, not these files."""
