"""The links' lifetime: a connection attached, lost, or silent past a deadline, and a call
that was given up."""

from __future__ import annotations

import time
from typing import Any

from ecotone.client._vector.failures import Failure
from ecotone.client._vector.frames import codec_module, plain_hook, typed_decoder
from ecotone.client._vector.ledger import Ledger
from ecotone.client._vector.subenvs import FrameKind, InFlight, Link, Tally
from ecotone.client.errors import ConnectionLost
from ecotone.specs import Hello


class Links(Ledger):
    """A link's connection attached (`attach`) or lost (`on_link_lost`), its requests past
    their deadline (`expire`) or given up by their caller (`cancel`): the sub-envs waiting on
    them fail, their episodes lost."""

    def on_link_lost(self, link: Link, exc: BaseException) -> None:
        """The link's connection dropped: every request on it fails, every session on it is
        gone."""
        lost = exc if isinstance(exc, ConnectionLost) else ConnectionLost(str(exc))
        link.down = lost
        failure = Failure.lost(lost)
        requests = list(link.inflight.values())
        link.inflight.clear()
        link.outbox.clear()
        link.unanswered = 0
        dead = link.conn
        link.roster = None
        for sub in self.subs:
            if sub.link is link and sub.conn is dead and sub.lost is None:
                sub.lost = failure
        for request in requests:
            self.materialize(request)
            for sub in request.subs:
                if sub.busy is request:
                    self._fail(sub, failure)

    def expire(
        self, link: Link, now: float, tally: Tally | None = None, *, cancelled: bool = False
    ) -> list[Any]:
        """Fail the requests on `link` past their deadline (and all of `tally`'s, if given);
        return the ids to abandon on the connection. `cancelled`: the caller of `tally` was
        cancelled (only its requests go; their sub-envs' episodes are lost)."""

        def due(request: InFlight) -> bool:
            if tally is not None and request.serves(tally):
                return True
            return not cancelled and request.deadline is not None and request.deadline <= now

        expired = [(rid, r) for rid, r in link.inflight.items() if due(r)]
        abandoned: list[Any] = []
        for rid, request in expired:
            del link.inflight[rid]
            try:
                link.outbox.remove(request.frame)
            except ValueError:
                abandoned.append(rid)  # sent: its late answer must be dropped
                link.unanswered -= 1
            self.materialize(request)
            for sub in request.subs:
                if sub.busy is not request:
                    continue
                if cancelled:
                    what = f"the call was cancelled before its {request.kind} was answered"
                else:
                    what = f"no answer to {request.kind} within {self.step_timeout}s"
                error = TimeoutError(f"sub-env {sub.index}: {what}")
                self._fail(sub, Failure.cancelled(error) if cancelled else Failure.timed_out(error))
        return abandoned

    def cancel(self, tally: Tally) -> list[tuple[Link, Any]]:
        """`tally`'s caller gave up (cancelled, interrupted): its sub-envs' outcomes are
        unknown, so their episodes are lost. Returns (link, id) pairs to abandon."""
        now = time.monotonic()
        return [
            (link, rid)
            for link in self.links
            for rid in self.expire(link, now, tally, cancelled=True)
        ]

    def attach(self, link: Link, conn: Any) -> None:
        """A (new) connection for `link`; sessions on its old one are gone."""
        codec = conn.core.codec
        if self._codec is None:
            self._codec = codec
            self._typed = typed_decoder(codec, self._observation_target)
            self._decode_frame = self._typed.decode
            module = codec_module(codec)
            self._encode_action = module.Encoder(enc_hook=plain_hook).encode
        conn.decode = self._decode_frame
        old = link.conn
        if old is not None and (link.inflight or link.outbox):
            # A connection that died unnoticed: what was asked on it fails, as if noticed.
            self.on_link_lost(link, ConnectionLost(f"reconnected to {link.url}"))
        link.conn = conn
        link.roster = None
        link.down = None
        link.inflight.clear()
        link.outbox.clear()
        link.unanswered = 0
        link.folds_resets = link.columns = False
        # Learn what the server can do (answered before any session is open to step).
        self._queue(FrameKind.HELLO, Hello(id=conn.core.next_id()), link, [])
        if old is not None:
            for sub in self.subs:
                if sub.link is link and sub.conn is old and sub.lost is None:
                    sub.lost = Failure.lost(ConnectionLost(f"reconnected to {link.url}"))
