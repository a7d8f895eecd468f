# unasync: the source of ecotone/client/_sync/snapshots.py
"""A session's snapshots, restores and forks: the client's side, written once.

The source is ecotone/client/_async/snapshots.py; scripts/unasync.py generates the blocking
face, ecotone/client/_sync/snapshots.py, from it. `SessionSnapshots` is a part of the session
client (`AsyncEnvClient` here): it reads the session's `connection`, `session_id`, `env` and
`types`, and makes forks' clients of the session client's own class.
"""

from __future__ import annotations

from typing import Any, Self

from ecotone.client._core import EnvTypes
from ecotone.client.results import Resumed, SnapshotInfo
from ecotone.specs import (
    DropSnapshot,
    ExportSnapshot,
    Fork,
    Forked,
    Restore,
    Restored,
    Snapshot,
    SnapshotDropped,
    SnapshotExport,
    Snapshotted,
)


class SessionSnapshots:
    """Snapshot, restore and fork a session's episode (see docs/snapshots.md)."""

    connection: Any
    """The session's `AsyncConnection`."""
    session_id: str
    env: str
    types: EnvTypes

    async def snapshot(
        self, *, timeout: float | None = None, call_timeout: float | None = None
    ) -> SnapshotInfo:
        """Save the episode where it stands, on the server.

        The snapshot holds the env's whole state (its random generators included), the
        episode's id, step count, task, last observation and a rubric's running state. It is
        kept for this client's token (or, on a server without tokens, this connection, and
        goes with it), within the server's `[limits]` on snapshots.

        Args:
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server.

        Returns:
            The snapshot's id and size, and the episode it saved.

        Raises:
            ServerError: `unsupported` (the env cannot be saved; the message says why),
                `reset_required` (no episode yet), `capacity` (the store is full: details
                name the `scope`), `unknown_session`, `forbidden` (a guest's request).
            EnvError: The env raised while saving itself.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        frame = Snapshot(id=core.next_id(), session=self.session_id, call_timeout=call_timeout)
        answer = core.check(await self.connection.request(frame, timeout))
        assert isinstance(answer, Snapshotted), answer
        return SnapshotInfo(
            id=answer.snapshot,
            size=answer.size,
            episode_id=answer.episode_id,
            step_count=answer.step_count,
        )

    async def restore(
        self,
        snapshot: str | SnapshotInfo | bytes,
        *,
        timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> Resumed[Any]:
        """Put a saved episode into this session, abandoning the one it runs.

        Args:
            snapshot: A snapshot of this server (its id, or what `snapshot()` returned), or
                the bytes `export_snapshot` gave (from this server, or another with the same
                snapshot key).
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server.

        Returns:
            Where the episode stands: its last observation (`result`), id and step count.

        Raises:
            ServerError: `unknown_snapshot`, `snapshot_mismatch` (another env, version or
                State schema, or bytes the server's key did not seal: the session is left as
                it was), `unsupported`, `unknown_session`, `forbidden`.
            EnvError: The env raised while loading the state; the session needs a reset.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        if isinstance(snapshot, bytes | bytearray | memoryview):
            frame = Restore(
                id=core.next_id(),
                session=self.session_id,
                blob=bytes(snapshot),
                call_timeout=call_timeout,
            )
        else:
            sid = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
            frame = Restore(
                id=core.next_id(), session=self.session_id, snapshot=sid, call_timeout=call_timeout
            )
        answer = core.check(await self.connection.request(frame, timeout))
        assert isinstance(answer, Restored), answer
        resumed = Resumed(
            result=core.observation(answer.observation, self.types, answer.task),
            episode_id=answer.episode_id,
            step_count=answer.step_count,
            forked_from=answer.forked_from,
        )
        resumer = getattr(self, "_resumer", None)
        if resumer is not None:  # connected with resume=True: this is the episode to resume
            await resumer.moved(self, resumed, timeout)
        return resumed

    async def fork(
        self, n: int = 1, *, timeout: float | None = None, call_timeout: float | None = None
    ) -> list[Self]:
        """Make `n` new sessions holding copies of this episode where it stands.

        One round trip. Each copy goes on on its own, with a new episode id that names this
        one (`forked_from` in its `state`'s answer to `restore`, and on the server); they are
        sessions of this connection, each closed on its own (closing one leaves the
        connection open). All or none: if they do not all fit, none is made.

        Args:
            n: How many copies.
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server.

        Returns:
            A client per copy, of this client's class.

        Raises:
            ServerError: `capacity` (not room for `n` more sessions), `unsupported`,
                `reset_required`, `invalid_argument` (`n` out of range), `unknown_session`,
                `forbidden`.
            EnvError: The env raised while saving or loading; no copy was made.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        frame = Fork(id=core.next_id(), session=self.session_id, n=n, call_timeout=call_timeout)
        answer = core.check(await self.connection.request(frame, timeout))
        assert isinstance(answer, Forked), answer
        kind = type(self)
        forks = [kind(self.connection, sid, self.env, self.types) for sid in answer.sessions]  # type: ignore[call-arg]
        lease = self.connection.leases()[0].get(self.session_id)
        for fork in forks:  # leased as this one is
            self.connection.hold(fork.session_id, lease, fork)
        return forks

    async def export_snapshot(
        self, snapshot: str | SnapshotInfo, *, timeout: float | None = None
    ) -> bytes:
        """A snapshot of this server, as sealed bytes another server can restore.

        Sealed with the server's snapshot key (`--snapshot-key-file`): nobody can read or
        alter them, and only a server with the same key restores them.

        Args:
            snapshot: Its id, or what `snapshot()` returned.
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The sealed bytes.

        Raises:
            ServerError: `unknown_snapshot`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        sid = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        answer = core.check(
            await self.connection.request(ExportSnapshot(id=core.next_id(), snapshot=sid), timeout)
        )
        assert isinstance(answer, SnapshotExport), answer
        return answer.blob

    async def drop_snapshot(
        self,
        snapshot: str | SnapshotInfo,
        *,
        timeout: float | None = None,
    ) -> None:
        """Forget a snapshot of this server, freeing its room in the store.

        Args:
            snapshot: Its id, or what `snapshot()` returned.
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Raises:
            ServerError: `unknown_snapshot`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        sid = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        answer = core.check(
            await self.connection.request(DropSnapshot(id=core.next_id(), snapshot=sid), timeout)
        )
        assert isinstance(answer, SnapshotDropped), answer
