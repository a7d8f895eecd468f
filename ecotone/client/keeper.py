"""The lease keeper: the clients renew the leases of what they hold, on their own.

A server reclaims a session (or a seat taken with `join`) that nothing renewed for its lease
(`[limits] lease`, 300 s by default: `ecotone.kernel.leases`). That is how the sessions of a
client that was killed, froze or was cut off come back. A live client may well sit idle
longer, a trainer between two rounds of rollouts, and expects its envs to be there after;
so the clients renew what they hold, as etcd's, ZooKeeper's and Kafka's clients keep their
sessions:

* One daemon thread per process (started with the first session held) wakes every third of
  the shortest lease held, and sends each server one `keepalive` naming every session and
  seat key this process holds there, on a connection of its own. So it never touches a
  connection a caller uses (from whichever thread or event loop), costs the request path
  nothing, and serves both faces alike. The server renews what the ids name and lists what
  it no longer knows, which the connections then forget.
* A frozen process freezes its keeper too, a cut-off one's keepalives never arrive, a killed
  one's connections end: the lease still finds each of them.
* Not kept: sessions of `inproc://` (the server runs in this process), of `stdio:` (the
  server is this process's child, and a second connection would start another) and of
  `openenv+` URLs (OpenEnv servers have no leases); connections opened with
  `keepalive=False`; and a session on a server that does not lease (`opened` without
  `lease`). A caller keeps those with `keepalive()`.
* The thread is one of the "sleepers" the busy-polling gate does not count
  (`ecotone.kernel.polling`): it wakes for a few milliseconds every lease / 3 seconds, so a
  blocking client still spins on its reads.

A keepalive that fails (the server gone, a timeout) is not retried until the next tick, on a
new connection; nothing is raised to anyone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any, Final, NamedTuple, Protocol

from ecotone.client._core import ClientCore
from ecotone.client.channels import SyncChannel, open_sync_channel
from ecotone.client.errors import EcotoneError
from ecotone.kernel import polling
from ecotone.specs import Hello, Keepalive, Kept, Response

log = logging.getLogger("ecotone.keeper")

CONNECT_TIMEOUT: Final = 10.0
"""Seconds the keeper's connection to a server has to open."""
MIN_PERIOD: Final = 0.05
"""Seconds between two ticks, at least."""
SKIPPED: Final = ("inproc:", "stdio:", "openenv+")
"""URLs whose sessions the keeper leaves alone (see the module's rules)."""


class Held(NamedTuple):
    """A lease a connection holds: its length, and (weakly) what holds it (a session's
    client: once it is dropped without being closed, the keeper no longer renews it, and the
    server reclaims the session after its lease)."""

    lease: float
    by: weakref.ref[Any]


def alive(held: dict[str, Held]) -> dict[str, float]:
    """The leases of `held` whose holders live, by name (copied first: the keeper's thread
    reads it while the connection's changes it)."""
    return {name: h.lease for name, h in list(held.items()) if h.by() is not None}


class Holder(Protocol):
    """A connection, as the keeper sees it (`AsyncExchange` and `Exchange` are)."""

    url: str
    token: str | None

    @property
    def closed(self) -> bool: ...

    def leases(self) -> tuple[dict[str, float], dict[str, float]]:
        """Its sessions and its seat keys, each with its lease's length."""
        ...

    def release(self, name: str) -> None:
        """Forget the session (or seat key) `name`: the server no longer knows it."""
        ...


def keeps(url: str) -> bool:
    """Whether the keeper renews the sessions of a connection to `url`."""
    return not url.startswith(SKIPPED)


class _Link:
    """The keeper's own connection to one server."""

    def __init__(self, url: str, token: str | None) -> None:
        self.core = ClientCore("json")
        self.channel: SyncChannel = open_sync_channel(url, "json", CONNECT_TIMEOUT, token)
        if token is not None and getattr(self.channel, "needs_hello", False):
            self.ask(Hello(id=self.core.next_id(), token=token), CONNECT_TIMEOUT)

    def ask(self, frame: Any, timeout: float) -> Response:
        deadline = time.monotonic() + timeout
        self.channel.send(self.core.encode(frame))
        while True:
            for message in self.channel.receive(deadline):
                answer = self.core.decode(message)
                if answer.id == frame.id:
                    return answer

    def close(self) -> None:
        try:
            self.channel.close()
        except (OSError, EcotoneError):  # pragma: no cover - closing a broken socket
            pass


class Keeper:
    """The process's lease keeper (see the module's rules): `watch` a connection that holds
    leased sessions, `forget` it when it closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()
        self._links: dict[tuple[str, str | None], _Link] = {}
        self._thread: threading.Thread | None = None
        self.sent = 0
        """Keepalives sent (what tests and the curious read)."""

    def watch(self, holder: Holder) -> None:
        """Renew `holder`'s leases from now on (a no-op for URLs the keeper skips)."""
        if not keeps(holder.url):
            return
        with self._lock:
            if holder in self._watched:
                return
            self._watched.add(holder)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ecotone-lease-keeper", daemon=True
                )
                polling.add_sleeper(self._thread)
                self._thread.start()
            self._wake.notify()  # a shorter lease may want an earlier tick

    def forget(self, holder: Holder) -> None:
        """Renew nothing of `holder` any more (it closed)."""
        with self._lock:
            self._watched.discard(holder)

    def period(self) -> float | None:
        """Seconds until the next tick: a third of the shortest lease held (None: none)."""
        shortest = None
        for holder in list(self._watched):
            if holder.closed:
                continue
            sessions, seats = holder.leases()
            for lease in (*sessions.values(), *seats.values()):
                if shortest is None or lease < shortest:
                    shortest = lease
        return None if shortest is None else max(MIN_PERIOD, shortest / 3)

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            period = self._next(last)
            if period is None:  # nothing held: let the servers go, wait for a watch
                self._close_links(set())
                with self._lock:
                    if self.period() is None:
                        self._wake.wait()
                last = time.monotonic()
                continue
            last = time.monotonic()
            try:
                self.tick(period)
            except Exception:  # pragma: no cover - a bug here must not end the thread
                log.exception("the lease keeper failed (it goes on)")

    def _next(self, last: float) -> float | None:
        """Wait until a period after `last` (the period as it stands: a watch may shorten
        it); the period, or None when nothing is held."""
        with self._lock:
            while True:
                period = self.period()
                if period is None:
                    return None
                wait = last + period - time.monotonic()
                if wait <= 0:
                    return period
                self._wake.wait(wait)

    def tick(self, timeout: float) -> None:
        """Send each server one keepalive for everything this process holds there (each
        answer within `timeout` seconds)."""
        with self._lock:
            holders = [h for h in self._watched if not h.closed]
        groups: dict[tuple[str, str | None], list[Any]] = {}
        for holder in holders:
            groups.setdefault((holder.url, holder.token), []).append(holder)
        for key, members in groups.items():
            self._renew(key, members, timeout)
        self._close_links(set(groups))

    def _renew(self, key: tuple[str, str | None], members: list[Any], timeout: float) -> None:
        sessions: list[str] = []
        seats: list[str] = []
        for holder in members:
            held, keys = holder.leases()
            sessions.extend(held)
            seats.extend(keys)
        if not sessions and not seats:
            return
        try:
            link = self._links.get(key)
            if link is None:
                link = self._links[key] = _Link(*key)
            answer = link.ask(
                Keepalive(id=link.core.next_id(), sessions=sessions, seats=seats), timeout
            )
        except (OSError, EcotoneError, TimeoutError) as exc:
            log.info("a keepalive to %s failed (%s); next time, on a new connection", key[0], exc)
            dropped = self._links.pop(key, None)
            if dropped is not None:
                dropped.close()
            return
        self.sent += 1
        if isinstance(answer, Kept) and answer.unknown:
            _released(members, answer.unknown)

    def _close_links(self, keep: set[tuple[str, str | None]]) -> None:
        for key in [k for k in self._links if k not in keep]:
            self._links.pop(key).close()

    def _forked(self) -> None:
        """In a child process: nothing is held, no thread runs (the parent's are its own)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._watched = weakref.WeakSet()
        self._links = {}
        self._thread = None


def _released(members: Iterable[Any], gone: list[str]) -> None:
    for holder in members:
        for name in gone:
            holder.release(name)


KEEPER: Final = Keeper()
"""The process's keeper."""

os.register_at_fork(after_in_child=KEEPER._forked)
