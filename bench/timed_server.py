"""`ecotone serve ...` with the engine's own time per request measured (bench/inplace.py).

Every `Engine.submit` (a request decoded, answered and encoded; for an inline env the env's
work too) is timed with `time.perf_counter`, as is the time between one request's end and the
next one's start. At exit (SIGINT: the server's usual shutdown) the requests that came after
the first `--skip` are written as JSON to the file named by `$ECOTONE_BENCH_TIMES`:
`{"submit_us": [...], "gap_us": [...]}`.

    ECOTONE_BENCH_TIMES=/tmp/t.json python bench/timed_server.py serve counter --port 8765
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

from ecotone.cli import main
from ecotone.kernel import engine

SKIP = 300
"""Requests not recorded (session opening and the client's warm-up)."""

_submit = engine.Engine.submit
_times: list[float] = []
_gaps: list[float] = []
_last = [0.0]


def _timed_submit(self: Any, *args: Any, **kwargs: Any) -> Any:
    began = time.perf_counter()
    try:
        return _submit(self, *args, **kwargs)
    finally:
        ended = time.perf_counter()
        _times.append(ended - began)
        if _last[0]:
            _gaps.append(began - _last[0])
        _last[0] = ended


def _write() -> None:
    path = os.environ.get("ECOTONE_BENCH_TIMES")
    if path:
        data = {
            "submit_us": [t * 1e6 for t in _times[SKIP:]],
            "gap_us": [t * 1e6 for t in _gaps[SKIP:]],
        }
        with open(path, "w") as f:
            json.dump(data, f)


engine.Engine.submit = _timed_submit  # type: ignore[method-assign]
atexit.register(_write)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
