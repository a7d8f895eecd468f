"""Snapshots, restores and forks of live episodes: the engine's part for them.

What each request does (`snapshots.py` has what a snapshot holds and how an env is saved):

* `snapshot` saves the session's episode (an env call, run as the env's methods run) into the
  bounded store, owned by the requester's token, or its connection on a server without
  tokens. FRESH sessions refuse it (`reset_required`: there is no episode), as do sessions
  whose env was set aside; an env that cannot be saved answers `unsupported` with the reason.
* `restore` puts a saved episode (by id from the store, or a sealed blob) into the session:
  the blob is opened with the server's `Seal` and checked against the session's env before
  anything reaches it (`snapshot_mismatch`, the session untouched). The session then runs the
  saved episode (RESUMED, or RESUMED_ENDED for one that had ended), its task and last
  observation included. A restore the env fails leaves the episode unknown: the session goes
  back to FRESH (a reset is needed) and the client hears the env's error.
* `fork` claims `n` slots first (all or none: `capacity`), then, in one env call, saves the
  episode and makes `n` envs holding it, each a new session of the requester with a new
  episode id that names its origin (`forked_from`). A fork that fails makes no session.
* `export_snapshot` seals a stored snapshot for another server; `drop_snapshot` frees one.

Durable checkpoints, on a server given a checkpoint store (`checkpoints`: a directory, see
`ecotone.server.checkpoints`): every session gets a resume key at `open` (and each fork's
copy its own); a `snapshot` with `durable` writes the session's episode, sealed and bound to
that key, under it (the session held until the file is in place, so writes never cross); a
`restore` with `checkpoint` reads one back and, once it is restored, the session checkpoints
under that key from then on; `checkpoint_all` (the shutdown) writes every idle session with an
episode (`draining.py` checkpoints busy ones too, as their calls end); a client's `close`
removes the session's file. The store's calls run in worker
threads (`CheckpointCall`): the engine does no I/O.

Only a session's owner may snapshot, restore or fork it (a guest gets `forbidden`).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import (
    Call,
    CheckpointCall,
    DisposeCall,
    ForkCall,
    RestoreCall,
    SnapshotCall,
)
from ecotone.kernel.core import EngineCore, log
from ecotone.kernel.sealing import Seal, SealError
from ecotone.kernel.sessions import CapacityError, Session
from ecotone.kernel.snapshots import (
    Saved,
    SnapshotMismatch,
    SnapshotStore,
    StoreFull,
    check,
    decode,
    encode,
    new_episode_id,
)
from ecotone.kernel.states import Event, Phase, advance
from ecotone.specs import (
    DropSnapshot,
    Error,
    ErrorCode,
    ExportSnapshot,
    Fork,
    Forked,
    Response,
    Restore,
    Restored,
    Snapshot,
    SnapshotDropped,
    SnapshotExport,
    Snapshotted,
)
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer


class Snapshotting(EngineCore):
    """Snapshot, restore, fork, export and drop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = self.limits
        self.snapshots = SnapshotStore(
            limits.max_snapshots, limits.max_snapshot_bytes, limits.max_snapshot_store_bytes
        )
        """The snapshots kept on the server."""
        self.seal = Seal.random()
        """What seals exported snapshots and opens blobs to restore (the server sets the key
        replicas share, `--snapshot-key-file`; else its own, random)."""
        self.checkpoints: Any = None
        """Where durable checkpoints go (`write(key, blob)`, `read(key) -> bytes`,
        `delete(key)`, called in worker threads), or None: the server keeps none."""
        self._finishers.update(
            {
                SnapshotCall: self._snapshotted,
                RestoreCall: self._restored,
                ForkCall: self._forked,
                CheckpointCall: self._checkpointed,
            }
        )
        self._begin.update(
            {
                Snapshot: self._begin_snapshot,
                Restore: self._begin_restore,
                Fork: self._begin_fork,
            }
        )

    @staticmethod
    def snapshot_owner(peer: Peer) -> object:
        """Who owns what `peer` snapshots: its token, or its owner (a connection)."""
        principal = peer.owner.principal
        return peer.owner if principal is None else ("token", principal)

    def _unsaveable(self, session: Session, rid: RequestId) -> Error | None:
        spec = session.spec
        if spec.snapshots is None:
            return answers.error(ErrorCode.UNSUPPORTED, spec.snapshot_reason, rid, session.id)
        return None

    # --- snapshot -----------------------------------------------------------------------------

    def _begin_snapshot(self, session: Session, peer: Peer, req: Snapshot, jobs: list[Call]) -> Any:
        error = self._unsaveable(session, req.id)
        if error is not None:
            return error
        if req.durable and (self.checkpoints is None or session.resume_key is None):
            return answers.no_checkpoints(req.id, session.id)
        call = SnapshotCall(session.spec.mode, session, peer, req)
        return self._make(call, jobs, self._limit(session.spec, req.call_timeout))

    def _chain(self, session: Session, call: Call, jobs: list[Call]) -> None:
        """Hand `call` to the driver as the next part of the request that holds `session`:
        that call answers the request."""
        session.active = call
        jobs.append(call)

    def _sealed(self, saved: Saved, key: str) -> bytes:
        return self.seal.seal(encode(saved), context=key.encode())

    def resume_key(self, session: Session) -> str | None:
        """A new resume key for `session` when the server keeps checkpoints, else None."""
        if self.checkpoints is None:
            return None
        session.resume_key = secrets.token_urlsafe(24)
        return session.resume_key

    def _episode(self, session: Session, saved: Saved, peer: Peer) -> Saved:
        """`saved` with what the kernel knows of the session's episode."""
        try:
            observation = msgspec.msgpack.encode(session.observation)
        except (TypeError, msgspec.EncodeError):
            observation = b""
        return msgspec.structs.replace(
            saved,
            ended=session.phase is Phase.ENDED,
            task=session.task,
            forked_from=session.forked_from,
            observation=observation,
        )

    def _snapshotted(self, call: SnapshotCall, jobs: list[Call]) -> Response | None:
        session, req = call.session, call.request
        if call.error is not None:
            if call.peer is None:  # the shutdown's: nobody to tell
                log.error("checkpoint of session %s failed", session.id, exc_info=call.error)
                session.stop_checkpoint = 0
                return None
            return answers.env_error(call.error, req.id, session.id, "snapshot")
        saved = self._episode(session, call.value, call.peer)
        if req.durable:
            write = CheckpointCall(
                session,
                call.peer,
                req,
                session.resume_key or "",
                (
                    "write",
                    self.checkpoints.write,
                    (session.resume_key, self._sealed(saved, session.resume_key or "")),
                ),
            )
            self._chain(session, write, jobs)
            return None
        try:
            sid = self.snapshots.put(self.snapshot_owner(call.peer), saved)
        except StoreFull as exc:
            return answers.error(
                ErrorCode.CAPACITY, str(exc), req.id, session.id, scope=exc.scope, limit=exc.limit
            )
        return Snapshotted(
            id=req.id,
            session=session.id,
            snapshot=sid,
            size=saved.size,
            episode_id=saved.episode_id,
            step_count=saved.step_count,
        )

    # --- restore ------------------------------------------------------------------------------

    def _saved_for(self, session: Session, peer: Peer, req: Restore) -> Saved | Error:
        """The saved episode a restore names, checked against the session's env."""
        rid = req.id
        if sum(x is not None for x in (req.snapshot, req.blob, req.checkpoint)) != 1:
            return answers.error(
                ErrorCode.INVALID_ARGUMENT,
                "restore takes one of `snapshot` (an id), `blob` (an exported snapshot) and "
                "`checkpoint` (a resume key)",
                rid,
                session.id,
            )
        if req.snapshot is not None:
            saved = self.snapshots.get(self.snapshot_owner(peer), req.snapshot)
            if saved is None:
                return answers.unknown_snapshot(req.snapshot, rid, session.id)
        else:
            try:
                saved = decode(self.seal.open(req.blob or b""))
            except SealError as exc:
                return answers.snapshot_mismatch(str(exc), "seal", rid, session.id)
            except SnapshotMismatch as exc:
                return answers.snapshot_mismatch(str(exc), exc.what, rid, session.id)
        try:
            check(saved, session.spec)
        except SnapshotMismatch as exc:
            return answers.snapshot_mismatch(str(exc), exc.what, rid, session.id)
        return saved

    def _begin_restore(self, session: Session, peer: Peer, req: Restore, jobs: list[Call]) -> Any:
        error = self._unsaveable(session, req.id)
        if error is not None:
            return error
        if req.checkpoint is not None and req.snapshot is None and req.blob is None:
            if self.checkpoints is None:
                return answers.no_checkpoints(req.id, session.id)
            key = req.checkpoint
            holder = next((s for s in self.sessions if s.resume_key == key), None)
            left = holder is None or getattr(holder.owner, "closed", False)
            if not left and holder is not session:
                return answers.error(
                    ErrorCode.INVALID_ARGUMENT,
                    "a live session holds this resume key: close it first (two sessions "
                    "would write over each other's checkpoints)",
                    req.id,
                    session.id,
                )
            read = CheckpointCall(session, peer, req, key, ("read", self.checkpoints.read, (key,)))
            return self._make(read, jobs, self._limit(session.spec, req.call_timeout))
        saved = self._saved_for(session, peer, req)
        if type(saved) is Error:
            return saved
        call = RestoreCall(session.spec.mode, session, peer, req, saved)  # type: ignore[arg-type]
        return self._make(call, jobs, self._limit(session.spec, req.call_timeout))

    def _restored(self, call: RestoreCall, jobs: list[Call]) -> Response:
        session, req, saved = call.session, call.request, call.saved
        if call.error is not None:
            if session.phase is not Phase.FRESH:
                advance(session, Event.RESET)  # the env's state is unknown: a reset is needed
            session.observation = None
            return answers.env_error(call.error, req.id, session.id, "restore")
        spec = session.spec
        try:
            observation = (
                msgspec.msgpack.decode(saved.observation, type=spec.observation_type)
                if saved.observation
                else None
            )
            raw = call.peer.codec.raw(observation)
        except (TypeError, msgspec.DecodeError, msgspec.EncodeError) as exc:
            if session.phase is not Phase.FRESH:
                advance(session, Event.RESET)
            session.observation = None
            return answers.env_error(exc, req.id, session.id, "restore")
        advance(session, Event.RESUMED_ENDED if saved.ended else Event.RESUMED)
        if req.checkpoint is not None:  # the session goes on under the key it resumed
            session.resume_key = req.checkpoint
        session.task = saved.task
        session.observation = observation
        session.forked_from = saved.forked_from
        if session.spec.seats:  # the seats and their holders stay
            self.reset_seats(session, "the session was restored to a saved episode", "restore")
        self._resumed(session, saved.episode_id)
        return Restored(
            id=req.id,
            session=session.id,
            episode_id=saved.episode_id,
            step_count=saved.step_count,
            observation=raw,
            task=saved.task,
            forked_from=saved.forked_from,
        )

    def _resumed(self, session: Session, episode_id: str | None) -> None:
        """Tell `ecotone_episode_started` that `session` runs a saved episode from now on
        (a recorder starts a trajectory of its own for it; `seed` None)."""
        if self._on_episode is not None:
            self._on_episode(
                session_id=session.id,
                env=session.spec.name,
                episode_id=episode_id,
                seed=None,
                observation=session.observation,
            )

    # --- fork ---------------------------------------------------------------------------------

    def _begin_fork(self, session: Session, peer: Peer, req: Fork, jobs: list[Call]) -> Any:
        error = self._unsaveable(session, req.id)
        if error is not None:
            return error
        n = req.n
        if n < 1 or n > self.limits.max_sessions:
            return answers.error(
                ErrorCode.INVALID_ARGUMENT,
                f"fork makes 1 to {self.limits.max_sessions} sessions (max_sessions), not {n}",
                req.id,
                session.id,
            )
        owner = peer.owner
        claimed = 0
        try:
            for _ in range(n):
                self.sessions.reserve(
                    owner,
                    self.limits.max_sessions_per_connection,
                    self.limits.max_sessions_per_token,
                )
                claimed += 1
        except CapacityError as exc:
            for _ in range(claimed):
                self.sessions.release(owner)
            return answers.error(
                ErrorCode.CAPACITY,
                f"no room for {n} forked sessions: {exc}",
                req.id,
                session.id,
                active=exc.active,
                limit=exc.limit,
                asked=n,
            )
        episode_ids = [new_episode_id() for _ in range(n)]
        call = ForkCall(session.spec.mode, session, peer, req, episode_ids)
        return self._make(call, jobs, self._limit(session.spec, req.call_timeout))

    def release_fork(self, call: ForkCall) -> None:
        """Give back the slots a fork claimed and will not fill."""
        for _ in call.episode_ids:
            self.sessions.release(call.peer.owner)

    def _forked(self, call: ForkCall, jobs: list[Call]) -> Response:
        source, req, peer = call.session, call.request, call.peer
        if call.error is not None:
            self.release_fork(call)
            return answers.env_error(call.error, req.id, source.id, "fork")
        saved, made = call.value
        try:
            raw = peer.codec.raw(source.observation)
        except (TypeError, msgspec.EncodeError) as exc:
            raw, failed = None, exc
        if raw is None:
            self.release_fork(call)
            for env in made:
                self._dispose(env, jobs, source)
            return answers.env_error(failed, req.id, source.id, "fork")
        event = Event.RESUMED_ENDED if source.phase is Phase.ENDED else Event.RESUMED
        now = self.clock()
        ids: list[str] = []
        for env, episode_id in zip(made, call.episode_ids, strict=True):
            copy = self.sessions.add(source.spec, env, peer.owner, now)
            advance(copy, event)
            copy.task = source.task
            copy.observation = source.observation
            copy.forked_from = saved.episode_id
            self.resume_key(copy)
            self._resumed(copy, episode_id)
            ids.append(copy.id)
            self.opened_total += 1
            if self._on_opened is not None:
                self._on_opened(session_id=copy.id, env=source.spec.name)
            if peer.owner.closed:  # the peer left while the copies were made
                self._retire(copy, "disconnect", jobs, quiet=True)
        return Forked(
            id=req.id,
            session=source.id,
            sessions=ids,
            episode_ids=call.episode_ids,
            forked_from=saved.episode_id,
            step_count=saved.step_count,
            observation=raw,
            task=source.task,
            resume_keys=[
                s.resume_key or ""
                for s in (self.sessions.get(i, peer.owner) for i in ids)
                if s is not None
            ]
            if self.checkpoints is not None
            else [],
        )

    def _dispose(self, env: Any, jobs: list[Call], like: Session) -> None:
        """Close an env no session will hold, as its session's calls run."""
        dispose = DisposeCall(env, like.spec.mode)
        outcome = self._make(dispose, jobs, self._limit(like.spec))
        if isinstance(outcome, Call):
            jobs.append(outcome)

    # --- durable checkpoints ------------------------------------------------------------------

    def _checkpointed(self, call: CheckpointCall, jobs: list[Call]) -> Response | None:
        """A checkpoint file written (the durable snapshot is answered), read (now restored
        into the session), or removed (nobody waits)."""
        session, req = call.session, call.request
        if call.purpose == "delete":
            if call.error is not None and not isinstance(call.error, FileNotFoundError):
                log.error("could not remove the checkpoint of %s", session.id, exc_info=call.error)
            return None
        if call.purpose == "write":
            if call.error is not None:
                log.error("could not write the checkpoint of %s", session.id, exc_info=call.error)
                if call.peer is None:
                    session.stop_checkpoint = 0
                    return None
                return answers.error(
                    ErrorCode.INTERNAL,
                    f"the checkpoint could not be written: {type(call.error).__name__}: "
                    f"{call.error}",
                    req.id,
                    session.id,
                )
            if call.peer is None:
                return None
            return Snapshotted(id=req.id, session=session.id, durable=True, size=len(call.args[1]))
        if isinstance(call.error, FileNotFoundError):
            return answers.error(
                ErrorCode.UNKNOWN_SNAPSHOT,
                "no checkpoint is kept under this resume key (never written, removed when its "
                "session was closed, or in another checkpoint directory)",
                req.id,
                session.id,
            )
        if call.error is not None:
            return answers.error(
                ErrorCode.INTERNAL,
                f"the checkpoint could not be read: {type(call.error).__name__}: {call.error}",
                req.id,
                session.id,
            )
        try:
            saved = decode(self.seal.open(call.value, context=call.key.encode()))
            check(saved, session.spec)
        except SealError as exc:
            return answers.snapshot_mismatch(
                f"the checkpoint file is torn or foreign: {exc}", "seal", req.id, session.id
            )
        except SnapshotMismatch as exc:
            return answers.snapshot_mismatch(str(exc), exc.what, req.id, session.id)
        restore = RestoreCall(session.spec.mode, session, call.peer, req, saved)
        outcome = self._make(restore, jobs, self._limit(session.spec, req.call_timeout))
        if isinstance(outcome, Call):
            self._chain(session, outcome, jobs)
            return None
        return outcome

    def checkpoint_all(self) -> list[Call]:
        """Checkpoint every idle session that has an episode and a resume key (the server is
        stopping), but those its stop checkpointed already; the calls for the driver."""
        jobs: list[Call] = []
        for session in list(self.sessions):
            if self.resumable(session) and not session.busy and session.stop_checkpoint != 2:
                self.checkpoint_now(session, jobs)
        return jobs

    def resumable(self, session: Session) -> bool:
        """Whether a checkpoint of `session` could be resumed: the server keeps checkpoints,
        the session has a resume key, its env can be saved, and it has an episode."""
        return (
            self.checkpoints is not None
            and session.resume_key is not None
            and session.spec.snapshots is not None
            and session.phase in (Phase.RUNNING, Phase.ENDED)
        )

    def checkpoint_now(self, session: Session, jobs: list[Call]) -> None:
        """Start a checkpoint nobody asked for of the idle `session` (the server is stopping):
        the session is held until its file is in place."""
        req = Snapshot(id=0, session=session.id, durable=True)
        call = SnapshotCall(session.spec.mode, session, None, req)
        outcome = self._make(call, jobs, self._limit(session.spec))
        if isinstance(outcome, Call):
            session.active = outcome
            jobs.append(outcome)

    def forget_checkpoint(self, session: Session, jobs: list[Call]) -> None:
        """Remove a session's checkpoint file (its client closed it: nothing to resume)."""
        if self.checkpoints is None or session.resume_key is None:
            return
        key = session.resume_key
        jobs.append(
            CheckpointCall(session, None, None, key, ("delete", self.checkpoints.delete, (key,)))
        )

    # --- requests of no session ---------------------------------------------------------------

    def _export_snapshot(self, peer: Peer, req: ExportSnapshot) -> Response:
        saved = self.snapshots.get(self.snapshot_owner(peer), req.snapshot)
        if saved is None:
            return answers.unknown_snapshot(req.snapshot, req.id, None)
        return SnapshotExport(id=req.id, snapshot=req.snapshot, blob=self.seal.seal(encode(saved)))

    def _drop_snapshot(self, peer: Peer, req: DropSnapshot) -> Response:
        if not self.snapshots.drop(self.snapshot_owner(peer), req.snapshot):
            return answers.unknown_snapshot(req.snapshot, req.id, None)
        return SnapshotDropped(id=req.id, snapshot=req.snapshot)
