"""The server's log: a line per session event (opened, episode started, closed) at `info`,
and `[log] format = "json"`: one JSON object per line, each event's fields as keys, for the
log pipelines that read them (Loki, CloudWatch, `jq`)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Final

from ecotone.kernel import hookimpl

log = logging.getLogger("ecotone.sessions")
FIELDS: Final = ("event", "session", "env", "reason", "episode_id", "seed")
"""The structured fields a record may carry (`extra=`), as JSON keys."""


class SessionLog:
    """Hook plugin: one log record per session event, with its fields."""

    @hookimpl
    def ecotone_session_opened(self, session_id: str, env: str) -> None:
        log.info(
            "session %s opened (%s)",
            session_id,
            env,
            extra={"event": "session_opened", "session": session_id, "env": env},
        )

    @hookimpl
    def ecotone_episode_started(
        self, session_id: str, env: str, episode_id: str | None, seed: int | None, observation: Any
    ) -> None:
        log.info(
            "session %s started an episode",
            session_id,
            extra={
                "event": "episode_started",
                "session": session_id,
                "env": env,
                "episode_id": episode_id,
                "seed": seed,
            },
        )

    @hookimpl
    def ecotone_session_closed(self, session_id: str, env: str, reason: str) -> None:
        log.info(
            "session %s closed (%s)",
            session_id,
            reason,
            extra={"event": "session_closed", "session": session_id, "env": env, "reason": reason},
        )


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: time (RFC 3339, UTC), level, logger, message, the
    structured fields it carries, and the exception's text if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(format: str, level: str) -> None:
    """Point the root logger's handlers at `format` and `level` (the CLI's `serve`)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    if not root.handlers:
        logging.basicConfig()
    if format == "json":
        for handler in root.handlers:
            handler.setFormatter(JsonFormatter())
