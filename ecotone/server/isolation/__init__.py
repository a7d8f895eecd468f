"""Each session's env in a process of its own, forked from a warm parent: a crash of env code
costs that session an `env_error`, not the server.

An opt-in per env (`isolation = "process"` on its class) or per server (`serve --isolate`,
`isolate = true`). The engine is untouched: it serves an `IsolatedEnv` (`proxy.py`), an async
env whose calls cross a socket to a worker process that a zygote (`zygote.py`, the other side;
`parent.py`, the server's side) forked for the session, with MessagePack frames (`wire.py`).
`Workers` (`workers.py`) starts each isolated env's zygote and makes the spec the engine
serves. docs/reliability.md says what it promises and which test holds it to it.
"""

from ecotone.server.isolation.parent import Exit, Zygote, ZygoteDied
from ecotone.server.isolation.proxy import IsolatedEnv
from ecotone.server.isolation.workers import Workers, check, isolated

__all__ = ["Exit", "IsolatedEnv", "Workers", "Zygote", "ZygoteDied", "check", "isolated"]
