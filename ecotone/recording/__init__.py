"""Trajectory recording: every step's action, observation, reward and timing, one file per
episode, and `read_episodes` to load them back.

Two writers produce the same files:

* **Server side**, `TrajectoryRecorder(dir)`: a plugin on the kernel's lifecycle hooks
  (`ecotone_episode_started`, `ecotone_step_completed`, `ecotone_session_closed`). Register it
  on the server's registry (`registry.register(TrajectoryRecorder("runs/traj"))`) and every
  session's episodes are recorded with the typed actions and observations the env saw and
  returned, and the env's own step time.
* **Client side**, `ecotone.VectorEnv(..., record_to=dir)`: the trainer's view, one file per
  sub-env episode, timed from the client (the round trip included).

Layout: `DIR/ENV/NAME.jsonl` (or `.msgpack`), one file per episode. Each file is a sequence of
records, one JSON object per line (`jsonl`) or the same objects as a stream of concatenated
MessagePack maps (`msgpack`, readable by any MessagePack stream unpacker):

    {"kind": "episode", "version": 1, "source": "server" | "client", "env": ..., "session": ...,
     "episode_id": ..., "seed": ..., "env_index": ... (client), "time": UNIX_SECONDS}
    {"kind": "reset", "observation": {...}, "time": ...}
    {"kind": "policy", "t": 0, "messages": [...], "turns": [...], "time": ...} (collect)
    {"kind": "step", "t": 1, "action": {...}, "observation": {...}, "reward": 1.0, "done": false,
     "truncated": false, "duration_s": 0.00012, "time": ...}
    ...
    {"kind": "end", "reason": "done" | "truncated" | "reset" | "closed:REASON" | "lost",
     "error": null | "...", "time": ...}

A file without an `end` record is an episode still running (or cut off by a crash); a partial
last record is ignored by the reader. Writes are buffered and flushed when an episode ends, so
recording costs the step path one encode and one buffered write.

`ecotone collect` also writes, before a step, how its policy chose the action when the
policy says (`ecotone.collect.Decision`): the conversation's new messages and the model's
calls in token ids (`prompt_ids`, `completion_ids`, `logprobs`, `continued`); `t` counts
the steps before it. A reader that does not know a record's kind passes over it.

`write_parquet(runs, path)` (and `to_dataset`) turn recorded episodes into a dataset, one
row per episode, through the optional `datasets` package (see `ecotone.recording.dataset`).
"""

from ecotone.recording.dataset import episode_row, to_dataset, token_sequence, write_parquet
from ecotone.recording.reader import Episode, is_success, read_episode, read_episodes
from ecotone.recording.recorder import ClientRecorder, EpisodeWriter, TrajectoryRecorder

__all__ = [
    "ClientRecorder",
    "Episode",
    "EpisodeWriter",
    "TrajectoryRecorder",
    "episode_row",
    "is_success",
    "read_episode",
    "read_episodes",
    "to_dataset",
    "token_sequence",
    "write_parquet",
]
