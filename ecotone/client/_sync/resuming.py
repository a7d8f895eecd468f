# Generated from ecotone/client/_async/resuming.py by scripts/unasync.py: do not edit.
"""A session that outlives its server: what a client connected with `resume=True` keeps, and
how it resumes, written once.

The source is ecotone/client/_async/resuming.py; scripts/unasync.py generates the blocking
face. The server keeps checkpoints (`serve --checkpoint-dir DIR`): on request, and for every
session left when it stops. The client keeps its session's resume key, the episode's reset,
and the actions taken since the last checkpoint it knows of (each with its step number). When
the connection breaks under a call:

1. it reconnects to the same URL (a server restarted on the same directory, or another one
   sharing the directory and the snapshot key, such as another replica behind the same
   Service), retrying until `resume_timeout` passes;
2. opens a session and restores the last checkpoint of its key; with none (the server died
   before writing one), it resets as the episode was reset, to replay it from its start;
3. replays the logged actions the checkpoint does not hold, then makes the call again. A step
   the checkpoint already holds (its answer was lost with the server) is not made twice: the
   restored episode's last observation is its answer.

For an env whose episodes are deterministic (the conformance suite's `seeded_determinism` and
`snapshots` checks), the rest of the episode is then step for step what it would have been.
`checkpoint_every=K` asks for a checkpoint every K steps, which bounds the replay (and the log).

A server that is stopping (`shutting_down`: it drains, then checkpoints its sessions and
refuses their requests) counts as a broken connection: the client resumes elsewhere. A server
that answers `open` with `shutting_down` is tried again until one admits the session.

An env whose process died (`env_error` with `details.reason` `env_lost`: a server that runs
each session's env in a process of its own, `serve --isolate`) is resumed the same way, in
the same session (the server lives): the last checkpoint restored in it (a fresh process),
the logged actions replayed, and the call made again, once. A step whose env dies again is
raised: it is what kills the env.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ecotone.client._sync import io
from ecotone.client.errors import ConnectionLost, ServerError
from ecotone.client.results import Resumed, StepResult
from ecotone.specs import ErrorCode, Restore, Restored, Snapshot, Snapshotted

log = logging.getLogger("ecotone.client")

RESUME_TIMEOUT = 60.0
"""Seconds a resuming client keeps trying to reach a server again."""
RETRY_SECONDS = (0.05, 0.1, 0.2, 0.5, 1.0)
"""The pauses between its tries (the last one repeats)."""


def close_quietly(connection: Any) -> None:
    """Close a connection left behind (its server gone or going), whatever becomes of it."""
    with io.shielded():
        try:
            connection.close()
        except ConnectionLost:
            pass


def retry_pause(tries: int) -> None:
    """Wait before the next try to reach a server again (after `tries` tries)."""
    io.sleep(RETRY_SECONDS[min(tries, len(RETRY_SECONDS) - 1)])


def gave_up(url: str, what: str, seconds: float, exc: BaseException) -> ConnectionLost:
    """The error of a resume that found no server at `url` to take `what` for `seconds`."""
    return ConnectionLost(
        f"could not resume: no server at {url} took {what} for {seconds:g}s ({exc})"
    )


def _gone(exc: Exception) -> bool:
    """Whether `exc` says the session's server is gone or going, or its env's process died:
    resume elsewhere."""
    if isinstance(exc, ConnectionLost):
        return True
    return (isinstance(exc, ServerError) and exc.code == ErrorCode.SHUTTING_DOWN) or _lost(exc)


def _lost(exc: Exception) -> bool:
    """Whether `exc` says the session's env died with its process (the server lives)."""
    return (
        isinstance(exc, ServerError)
        and exc.code == ErrorCode.ENV_ERROR
        and exc.details.get("reason") == "env_lost"
    )


class Resumer:
    """What a session connected with `resume=True` keeps to resume its episode elsewhere.

    Args:
        url: Where to reconnect.
        opener: `Connection.open_url`.
        connecting: Its options.
        checkpoint_every: Ask the server for a checkpoint every this many steps (None: only
            those the server writes when it stops).
        resume_timeout: Seconds to keep trying to reconnect.
    """

    def __init__(
        self,
        url: str,
        opener: Callable[..., Any],
        connecting: dict[str, Any],
        checkpoint_every: int | None = None,
        resume_timeout: float = RESUME_TIMEOUT,
    ) -> None:
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
        self.url = url
        self.opener = opener
        self.connecting = connecting
        self.every = checkpoint_every
        self.resume_timeout = resume_timeout
        self.key: str | None = None
        """The session's resume key (the server's `opened` gave it)."""
        self.reset_args: dict[str, Any] | None = None
        """The episode's reset, to replay it from its start when no checkpoint was written."""
        self.log: list[tuple[int, Any]] = []
        """The actions since the last checkpoint known, each with its step number."""
        self.steps = 0
        """Steps of the episode so far."""
        self.checkpointed = 0
        """The step number of the last checkpoint known."""
        self.resumes = 0
        """How many times the session was resumed."""
        self.episode_id: str | None = None
        """The episode the last checkpoint known holds (a checkpoint of another is stale)."""
        self.savable = True
        """The env can be checkpointed (else a resume replays the episode from its reset)."""

    # --- the calls, made so that a broken connection resumes ------------------------------------

    def reset(self, client: Any, args: dict[str, Any], timeout: float | None) -> Any:
        """`client`'s reset; a broken connection is reconnected (a new session) and the reset
        made again."""
        for attempt in (0, 1):
            try:
                result = client._reset_once(args, timeout)
                break
            except (ConnectionLost, ServerError) as exc:
                if attempt or not _gone(exc):
                    raise
                if not _lost(exc):  # a dead env's reset is made again in a fresh process
                    self._reconnect(client, restore=False)
        self.reset_args = dict(args)
        self.log.clear()
        self.steps = self.checkpointed = 0
        self.episode_id = None
        self.checkpoint(client, timeout)  # a resume never finds the last episode's
        return result

    def step(
        self, client: Any, action: Any, timeout: float | None, call_timeout: float | None
    ) -> StepResult[Any]:
        """`client`'s step; a broken connection is resumed and the step made again (or taken
        from the checkpoint, when it holds it)."""
        index = self.steps
        deaths = 0
        while True:
            try:
                result: StepResult[Any] = client._step_once(action, timeout, call_timeout)
                break
            except (ConnectionLost, ServerError) as exc:
                if not _gone(exc):
                    raise
                deaths += _lost(exc)
                if deaths > 1:  # made again after a resume, it killed its env again
                    raise
                resumed = self._resume(client, index, here=_lost(exc))
                if resumed is not None:  # the checkpoint holds this step: its answer
                    result = resumed
                    break
        self.log.append((index, action))  # a step that failed is not replayed
        self.steps = index + 1
        if self.every is not None and self.steps - self.checkpointed >= self.every:
            self.checkpoint(client, timeout)
        return result

    def checkpoint(self, client: Any, timeout: float | None) -> None:
        """Ask the server for a checkpoint of the session (the log is then trimmed). One it
        cannot write (an env that cannot be saved, a full disk) is logged, and the episode
        goes on: a resume then replays more."""
        if not self.savable:
            return
        core = client.connection.core
        frame = Snapshot(id=core.next_id(), session=client.session_id, durable=True)
        try:
            answer = core.check(client.connection.request(frame, timeout))
        except (ConnectionLost, ServerError) as exc:
            if _gone(exc):
                return  # the next call resumes from the checkpoint before
            assert isinstance(exc, ServerError)
            if exc.code == "unsupported":  # the env cannot be saved: resumes replay
                self.savable = False
            log.warning("no checkpoint of session %s: %s", client.session_id, exc)
            return
        assert isinstance(answer, Snapshotted), answer
        self.checkpointed = self.steps
        self.episode_id = answer.episode_id
        self.log = [(i, a) for i, a in self.log if i >= self.steps]

    def moved(self, client: Any, resumed: Resumed[Any], timeout: float | None) -> None:
        """The session was restored to another state (`restore`): that is the episode to
        resume from now on, checkpointed at once (the log of the one it left is dropped)."""
        self.log.clear()
        self.reset_args = None  # it cannot be replayed from a reset
        self.steps = self.checkpointed = resumed.step_count
        self.episode_id = resumed.episode_id
        self.checkpoint(client, timeout)

    # --- resuming -------------------------------------------------------------------------------

    def _resume(self, client: Any, inflight: int, here: bool) -> StepResult[Any] | None:
        """Reconnect (`here`: stay, the server lives but the env's process died), restore,
        replay up to step `inflight`; that step's answer when the restored episode holds it
        already, else None (make it again)."""
        if here:
            resumed = self._restored(client, client, restore=True)
            self.resumes += 1
        else:
            resumed = self._reconnect(client, restore=True)
        at = resumed.step_count
        if at > inflight:  # written after the step ran (the shutdown's): its answer is lost
            if at == inflight + 1:
                return resumed.result
            raise ServerError(
                "internal",
                f"the checkpoint holds step {at}, past this client's step {inflight + 1}: "
                "another client resumed the same session",
            )
        for index, action in self.log:
            if at <= index < inflight:
                client._step_once(action, None, None)
        return None

    def _reconnect(self, client: Any, *, restore: bool) -> Resumed[Any]:
        """A new connection and session for `client`, holding the episode as the last
        checkpoint has it (or reset as it was, when there is none). The old connection is
        closed."""
        connection, session = self._admitted(client)
        old = client.connection
        try:
            client.connection, client.session_id = connection, session.session_id
            resumed = self._restored(client, session, restore)
        except BaseException:
            with io.shielded():
                connection.close()
            raise
        self.resumes += 1
        close_quietly(old)
        return resumed

    def _restored(self, client: Any, session: Any, restore: bool) -> Resumed[Any]:
        if restore and self.key is not None:
            core = client.connection.core
            frame = Restore(id=core.next_id(), session=session.session_id, checkpoint=self.key)
            try:
                answer = core.check(client.connection.request(frame, None))
            except ServerError as exc:
                if exc.code != "unknown_snapshot":
                    raise
            else:
                assert isinstance(answer, Restored), answer
                stale = self.episode_id is not None and answer.episode_id != self.episode_id
                if stale:  # a checkpoint of an earlier episode: replay this one from its reset
                    log.warning("the checkpoint of %s holds another episode", self.key)
                else:
                    self.checkpointed = answer.step_count
                    return Resumed(
                        result=core.observation(answer.observation, client.types, answer.task),
                        episode_id=answer.episode_id,
                        step_count=answer.step_count,
                    )
        self.key = session.resume_key
        if not restore or self.reset_args is None:
            return Resumed(result=StepResult(observation=None))
        first = client._reset_once(self.reset_args, None)
        self.checkpointed = 0
        return Resumed(result=first, step_count=0)

    def _admitted(self, client: Any) -> tuple[Any, Any]:
        """A new connection and a session opened on it, retried until `resume_timeout` while
        nothing answers at the URL or what answers is stopping."""
        deadline = time.monotonic() + self.resume_timeout
        tries = 0
        while True:
            connection = None
            try:
                connection = self.opener(self.url, **self.connecting)
                kind = client.types.observation
                session = connection.open(client.env, observation_type=kind)
                return connection, session
            except (ConnectionLost, OSError, ServerError) as exc:
                if connection is not None:
                    close_quietly(connection)
                if isinstance(exc, ServerError) and not _gone(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise gave_up(self.url, "the session", self.resume_timeout, exc) from exc
            retry_pause(tries)
            tries += 1
