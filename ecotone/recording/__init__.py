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
    {"kind": "step", "t": 1, "action": {...}, "observation": {...}, "reward": 1.0, "done": false,
     "truncated": false, "duration_s": 0.00012, "time": ...}
    ...
    {"kind": "end", "reason": "done" | "truncated" | "reset" | "closed:REASON" | "lost",
     "error": null | "...", "time": ...}

A file without an `end` record is an episode still running (or cut off by a crash); a partial
last record is ignored by the reader. Writes are buffered and flushed when an episode ends, so
recording costs the step path one encode and one buffered write.
"""

from ecotone.recording.reader import Episode, read_episode, read_episodes
from ecotone.recording.recorder import ClientRecorder, EpisodeWriter, TrajectoryRecorder

__all__ = [
    "ClientRecorder",
    "Episode",
    "EpisodeWriter",
    "TrajectoryRecorder",
    "read_episode",
    "read_episodes",
]
