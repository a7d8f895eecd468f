"""Stopping in one order: the engine's part of a drain (the driver keeps the time).

A server told to stop (SIGTERM) goes through these phases; the runner
(`ecotone.server.runner.Runner.drain`) moves it from one to the next and waits in between:

1. **Draining** (`drain`): the server admits no new session and starts no new episode:
   `open`, `fork`, and a `reset` or `restore` of a session, are refused `shutting_down`, and
   so is each reset item of a `step_many` or `step_columns` (its steps go on). `readiness`
   says `draining`, so `/ready` answers 503 and a load balancer routes new connections
   elsewhere. Running episodes go on; the driver waits until none runs
   (`episodes_running`), or `limits.drain_timeout`.
2. **Stopping** (`stop`): every session left that can be resumed (`resumable`) is
   checkpointed: an idle one at once, a busy one as soon as its call ends, before anything
   queued behind it (`freed`). From then on every request of a session but `close` is refused
   `shutting_down`, and since a session's requests run in order, the refusal always comes
   after the session's checkpoint is in place: a client that resumes elsewhere finds it.
   The message says whether the session was checkpointed (resume it) or not (the server
   keeps no checkpoints, the env cannot be saved, or there was no episode).
3. **Telling** (`stop_notices`): once the checkpoints are made (`checkpoints_due` is 0) or
   `limits.shutdown_timeout` passed, each connection that still holds sessions is sent one
   `shutting_down` error without an id, saying the same; a client waiting for an answer gets
   it as its answer. Then the driver closes the connections and every session
   (`Engine.shutdown`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ecotone.kernel import answers
from ecotone.kernel.calls import Call
from ecotone.kernel.core import EngineCore
from ecotone.kernel.sessions import Session
from ecotone.kernel.states import Phase
from ecotone.specs import Error, ErrorCode, Fork, Open, Reset, Restore, StepColumns, StepMany
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer

NEW_EPISODES = (Open, Fork, Reset, Restore)
"""Requests a draining server refuses: they start a session or an episode."""
BATCHES = (StepMany, StepColumns)

DRAINING = (
    "this server is shutting down (draining): it opens no session and starts no episode; "
    "open one on another server"
)
CHECKPOINTED = (
    "this server is shutting down: session {session} was checkpointed; resume it on "
    "another server (a client connected with resume=True does so by itself)"
)
NOT_CHECKPOINTED = (
    "this server is shutting down: session {session} ends here and cannot be resumed ({why}); "
    "open a new session on another server"
)


class Draining(EngineCore):
    """The engine's part of stopping (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connections: weakref.WeakSet[Peer] = weakref.WeakSet()
        """The peers of connections (a sink, answers encoded): where `stop_notices` go."""

    def connected(self, peer: Peer) -> None:
        """`peer` is a connection's (`Engine.peer`): it hears `stop_notices`."""
        self._connections.add(peer)

    # --- the phases ---------------------------------------------------------------------------

    def drain(self) -> None:
        """Phase 1: admit no new session or episode, and say so to readiness probes."""
        self.draining = True

    def episodes_running(self) -> int:
        """Sessions whose episode runs (or that are in the middle of a call)."""
        return sum(1 for s in self.sessions if s.phase is Phase.RUNNING or s.busy)

    def stop(self) -> Sequence[Call]:
        """Phase 2: checkpoint every resumable session (busy ones when their call ends), and
        refuse every request of a session but `close` from then on. Returns the calls."""
        self.draining = self.stopping = True
        jobs: list[Call] = []
        for session in self.sessions:
            if not self.resumable(session):
                continue
            if session.active is None:
                session.stop_checkpoint = 2
                self.checkpoint_now(session, jobs)
            else:
                session.stop_checkpoint = 1
        self._drain(jobs)
        return jobs

    def freed(self, session: Session, jobs: list[Call]) -> bool:
        """`session` became idle while the server stops: start its due checkpoint, before
        anything queued behind it. Whether one was started."""
        if session.stop_checkpoint != 1 or session.closed or session.closing is not None:
            return False
        session.stop_checkpoint = 2
        if not self.resumable(session):  # its call ended the episode's chance (set aside)
            return False
        self.checkpoint_now(session, jobs)
        return session.active is not None

    def checkpoints_due(self) -> int:
        """Checkpoints of the stop not yet in place (due, or being made)."""
        return sum(
            1
            for s in self.sessions
            if s.stop_checkpoint == 1 or (s.stop_checkpoint == 2 and s.active is not None)
        )

    def stop_notices(self) -> None:
        """Phase 3: tell each connection that holds sessions, with an error without an id."""
        for peer in list(self._connections):
            if peer.closed:
                continue
            held = self.sessions.owned_by(peer.owner)
            if not held:
                continue
            resumed = [s.id for s in held if s.stop_checkpoint == 2]
            if resumed and len(resumed) == len(held):
                text = CHECKPOINTED.format(session=", ".join(resumed))
            else:
                text = NOT_CHECKPOINTED.format(
                    session=", ".join(s.id for s in held), why=self._why_not(held[0])
                )
            peer.pending += 1  # not an answer to a request: keep the count of those right
            peer.emit(answers.error(ErrorCode.SHUTTING_DOWN, text, None))

    # --- refusals -----------------------------------------------------------------------------

    def refuse_new(self, kind: type, rid: RequestId, session: str | None) -> Error | None:
        """The refusal of a request of kind `kind` by a draining server, or None."""
        if kind in NEW_EPISODES or (self.stopping and kind in BATCHES):
            return answers.error(ErrorCode.SHUTTING_DOWN, DRAINING, rid, session)
        return None

    def refuse_stopping(self, session: Session, rid: RequestId) -> Error:
        """The refusal of a request of `session` once the server stops."""
        if session.stop_checkpoint == 2 and session.active is None:
            text = CHECKPOINTED.format(session=session.id)
        else:
            text = NOT_CHECKPOINTED.format(session=session.id, why=self._why_not(session))
        return answers.error(ErrorCode.SHUTTING_DOWN, text, rid, session.id)

    def abandoned_at_stop(self, session: Session, what: str, rid: RequestId | None) -> Error:
        """The answer to a call of `session` the server gave up on as it stopped."""
        if self.checkpoints is not None and session.spec.snapshots is not None:
            text = (
                f"this server is shutting down: the {what} was abandoned; resume session "
                f"{session.id} from its last checkpoint on another server (a client connected "
                "with resume=True does so by itself)"
            )
        else:
            text = NOT_CHECKPOINTED.format(session=session.id, why=self._why_not(session))
        return answers.error(ErrorCode.SHUTTING_DOWN, text, rid, session.id)

    def _why_not(self, session: Session) -> str:
        if self.checkpoints is None:
            return answers.NO_CHECKPOINTS
        if session.spec.snapshots is None:
            return f"env {session.spec.name!r} cannot be saved"
        if session.phase not in (Phase.RUNNING, Phase.ENDED):
            return "it had no episode"
        return "its checkpoint could not be made in time"
