"""A seat's trajectory as JSON Lines, in `ecotone.recording`'s format (`GET
/v1/seats/{key}/trajectory`, the web UI's seat pages' download).

What a seat saw of the episode so far, as the engine kept it (`Seating.seat_trajectory`:
its own moves and its own views only, never another seat's; a spectator's: the public
views, no move), one JSON object per line, so `ecotone.recording.read_episode` reads it:

    {"kind": "episode", "version": 1, "source": "seat", "env": ..., "seat": "north" | null,
     "session": null, "episode_id": null, "seed": null, "time": UNIX_SECONDS}
    {"kind": "reset", "event": "reset" | "restore" | "start", "observation": VIEW, "time": ...}
    {"kind": "step", "t": 1, "event": "move" | "round", "seat": ..., "moved": true | false,
     "action": ... | null, "observation": VIEW, "reward": ..., "done": ..., "truncated": ...,
     "duration_s": 0.0, "time": ...}
    ...
    {"kind": "end", "reason": "done" | "truncated", "error": null, "time": ...}

* One `step` per move of the episode, anyone's: `seat` is the seat that moved (whose turn it
  was is public: every view says it; in a round, this seat when it moved in time, else
  null), `action` this seat's own move and null for another's, `observation` this seat's
  view after it, and `reward`, `done`, `truncated` that view's (its reward as the env
  counts it: the seat's since its last move). So the file holds what the seat saw after
  every move, and `read_episode`'s `actions` are null where another seat moved.
* The log starts at the episode's reset (`event` `restore` after a restore, `start` for a
  fork's copy, whose seats were first asked for mid-episode); it keeps the episode's latest
  10,000 events, and `t` counts from the start, so a gap shows.
* Nothing names the session (the `session` is null): a seat's key must never learn it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ecotone.kernel.seats import LOG_STARTS, Seen


def _outcome(view: Any) -> tuple[Any, bool, bool]:
    """A view's `reward`, `done` and `truncated` (a mapping's keys, or an object's fields)."""
    if isinstance(view, Mapping):
        return view.get("reward"), bool(view.get("done")), bool(view.get("truncated"))
    return (
        getattr(view, "reward", None),
        bool(getattr(view, "done", False)),
        bool(getattr(view, "truncated", False)),
    )


def trajectory_records(env: str, seat: str | None, events: Sequence[Seen]) -> list[dict[str, Any]]:
    """The records of a seat's trajectory (see the module's format)."""
    started = events[0].time if events else 0.0
    records: list[dict[str, Any]] = [
        {
            "kind": "episode",
            "version": 1,
            "source": "seat",
            "env": env,
            "seat": seat,
            "session": None,
            "episode_id": None,
            "seed": None,
            "time": started,
        }
    ]
    for seen in events:
        if seen.kind in LOG_STARTS:
            records.append(
                {"kind": "reset", "event": seen.kind, "observation": seen.view, "time": seen.time}
            )
            continue
        reward, done, truncated = _outcome(seen.view)
        mover = seen.mover if seen.kind == "move" else (seat if seen.moved else None)
        records.append(
            {
                "kind": "step",
                "t": seen.index,
                "event": seen.kind,
                "seat": mover,
                "moved": seen.moved,
                "action": seen.action,
                "observation": seen.view,
                "reward": reward,
                "done": done,
                "truncated": truncated,
                "duration_s": 0.0,
                "time": seen.time,
            }
        )
    if events:
        _, done, truncated = _outcome(events[-1].view)
        if done or truncated:
            reason = "done" if done else "truncated"
            end = {"kind": "end", "reason": reason, "error": None, "time": events[-1].time}
            records.append(end)
    return records


def trajectory_lines(env: str, seat: str | None, events: Sequence[Seen]) -> bytes:
    """The trajectory as JSON Lines (one record a line, each ending with a newline).

    Raises:
        TypeError: A view or move msgspec cannot encode.
        msgspec.EncodeError: Likewise.
    """
    encode = msgspec.json.encode
    return b"".join(encode(record) + b"\n" for record in trajectory_records(env, seat, events))
