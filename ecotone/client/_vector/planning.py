"""What to send: the frames of an open, a restart, a reset and a step, and the caller's
errors refused before any of them."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ecotone.client._vector.failures import Failure
from ecotone.client._vector.frames import RESET_ITEM, WireColumns, WireReset, WireStep, WireStepMany
from ecotone.client._vector.ledger import Ledger
from ecotone.client._vector.policy import AutoresetMode
from ecotone.client._vector.subenvs import (
    FrameKind,
    InFlight,
    Sub,
    SubOutcome,
    Tally,
    Verb,
    check_idle,
    session_gone,
    stale_sessions,
)
from ecotone.client.errors import ConnectionLost
from ecotone.specs import Close, Open, ResetArgs, Step


class Planning(Ledger):
    """What to send for each call: the frames queued on the links (`take_outbox` hands them
    to the I/O loop) and the outcomes the sub-envs wait with. The caller's mistakes are
    refused before anything is queued (`check_idle`, `check_steppable`)."""

    def plan_open(self, subs: Iterable[Sub], tally: Tally, kind: Verb = Verb.OPEN) -> None:
        """Open a session for each sub-env (closing its old one, if any, on a live link)."""
        for sub in subs:
            self._begin(sub, kind, tally)
            link = sub.link
            if not link.alive:
                down = link.down or ConnectionLost(f"not connected to {link.url}")
                self._fail(sub, Failure.lost(down))
                continue
            if session_gone(sub) is None:  # its old session, still open: close it
                assert sub.session is not None
                link.conn.release(sub.session)
                close = Close(id=link.conn.core.next_id(), session=sub.session)
                link.inflight[close.id] = InFlight(FrameKind.CLOSE, close, link, [], None)
                link.outbox.append(close)
            sub.session = None
            link.roster = None
            self._queue(
                FrameKind.OPEN, Open(id=link.conn.core.next_id(), env=self.env), link, [sub]
            )

    def plan_restart(
        self, subs: Iterable[Sub], seeds: list[int | None], options: dict[str, Any], tally: Tally
    ) -> None:
        subs = list(subs)
        self.check_idle(subs)
        self.plan_open(subs, tally, kind=Verb.RESTART)
        for sub, seed in zip(subs, seeds, strict=True):
            outcome = tally.outcomes[sub.index]
            outcome.seed = seed
            outcome.options = options

    def plan_reset(
        self,
        subs: Iterable[Sub],
        seeds: list[int | None],
        options: dict[str, Any],
        tally: Tally,
    ) -> None:
        for sub, seed in zip(subs, seeds, strict=True):
            self._begin(sub, Verb.RESET, tally)
            gone = session_gone(sub)
            if gone is not None:
                self._fail(sub, gone)
                continue
            self._queue_reset(sub, seed, options)

    def check_idle(self, subs: Iterable[Sub]) -> None:
        """Refuse, before any I/O, to reset or restart sub-envs with a request in flight.

        Raises:
            ValueError: naming the first of them.
        """
        check_idle(subs)

    def check_steppable(self, subs: Sequence[Sub]) -> None:
        """Refuse, before any I/O, what is a bug in the caller rather than a failure.

        Raises:
            ValueError: a sub-env has a request in flight; or, under `disabled` autoreset,
                one's episode is over (and its session is not lost: `restart` it).
        """
        if self.sending or any(link.inflight for link in self.links):
            check_idle(subs)  # else none is: a sub-env is busy only with a request in flight
        if self.autoreset_mode is not AutoresetMode.DISABLED:
            return
        for sub in subs:
            if sub.needs_reset and sub.lost is None:
                raise ValueError(
                    f"sub-env {sub.index}'s episode is over (autoreset_mode='disabled'): reset "
                    "it first, e.g. reset(options={'reset_mask': terminated | truncated})"
                )

    def plan_step(
        self,
        actions: Sequence[Any],
        subs: Sequence[Sub],
        tally: Tally | None,
        *,
        batched: bool = False,
    ) -> None:
        """Queue one step (or autoreset) per sub-env: with a `tally`, a `step_many` frame per
        link; without (`send`), a `step` frame per sub-env so each answers on its own, or
        (`batched`) a `step_many` per link whose sub-envs answer together.

        An action that cannot be encoded raises TypeError before anything of a batched step
        is queued."""
        if len(actions) != len(subs):
            raise ValueError(f"{len(actions)} actions given for {len(subs)} sub-envs")
        if tally is None and batched:
            self._plan_sent_batch(actions, subs)
            return
        if tally is None:
            for sub, action in zip(subs, actions, strict=True):
                outcome = self._begin(sub, Verb.STEP, None)
                outcome.action = action
                if self._step_later(sub, outcome):
                    continue
                link = sub.link
                assert sub.session is not None  # `_step_later` said it can be stepped
                raw = msgspec.Raw(self._action_bytes(action))
                step = Step(id=link.conn.core.next_id(), session=sub.session, action=raw)
                self._queue(FrameKind.STEP, step, link, [sub])
            return
        self._plan_batch(actions, subs, tally)

    def _action_bytes(self, action: Any) -> bytes:
        encode = self._encode_action
        assert encode is not None  # attach() came first: there is no session before it
        return encode(action)

    def _step_later(self, sub: Sub, outcome: SubOutcome) -> bool:
        """For a sub-env that cannot be stepped as it is: fail it (its session is gone) or
        queue its reset instead (next_step autoreset, or an episode that was lost). Returns
        False when it can be stepped after all."""
        gone = session_gone(sub)
        if gone is not None:
            self._fail(sub, gone)
            return True
        if sub.needs_reset:  # next_step autoreset (or a failed episode): reset, not step
            outcome.action = None
            self._queue_reset(sub, None)
            return True
        return False

    def _group(
        self, actions: Sequence[Any], subs: Sequence[Sub], alive: list[bool]
    ) -> tuple[dict[int, tuple[list[Sub], list[Any]]], list[tuple[Sub, Any]], list[Sub]]:
        """The sub-envs that go into a `step_many`, per link (with `RESET_ITEM` for those whose
        autoreset rides in it); the others with their actions (a reset frame instead, or a
        failure); and those whose autoreset rides along. `later` keeps the order of `subs`:
        it is the order of their reset frames, and of `ready` for `send`."""
        links = self.links
        by_link: dict[int, list[Sub]] = {}
        for sub in subs:
            bucket = by_link.get(sub.link.index)
            if bucket is None:
                bucket = by_link[sub.link.index] = []
            bucket.append(sub)
        stale: set[int] = set()  # sub-envs whose session cannot be stepped as it is
        for index, bucket in by_link.items():
            gone = stale_sessions(bucket, links[index].conn) if alive[index] else bucket
            stale.update(sub.index for sub in gone)
        groups: dict[int, tuple[list[Sub], list[Any]]] = {}
        later: list[tuple[Sub, Any]] = []
        folded: list[Sub] = []
        for sub, action in zip(subs, actions, strict=True):
            if sub.needs_reset or sub.index in stale:
                if sub.index in stale or not sub.link.folds_resets:
                    later.append((sub, action))  # a reset frame instead, or a failure
                    continue
                folded.append(sub)  # its reset rides in the link's step_many
                action = RESET_ITEM
            group = groups.get(sub.link.index)
            if group is None:
                group = groups[sub.link.index] = ([], [])
            group[0].append(sub)
            group[1].append(action)
        return groups, later, folded

    def _encode(
        self, groups: dict[int, tuple[list[Sub], list[Any]]], folded: bool
    ) -> list[tuple[int, list[Sub], list[Any], list[int] | None, WireColumns | WireStepMany]]:
        """Each group's frame, its items encoded (an action that cannot be encoded raises
        here, before anything is queued; the frame's id is set when it is queued): (link
        index, sub-envs, actions with None for the resets, the resets' positions or None,
        the frame). A `step_columns` where the link's server takes it, else a `step_many`.
        `folded`: some items may be resets."""
        args = ResetArgs(options=self.reset_options) if folded else None
        encoded = []
        links = self.links
        for index, (group_subs, group_actions) in groups.items():
            resets = (
                [j for j, action in enumerate(group_actions) if action is RESET_ITEM]
                if folded
                else None
            )
            if resets:
                group_actions = [None if a is RESET_ITEM else a for a in group_actions]
            frame: WireColumns | WireStepMany
            if links[index].columns:
                frame = WireColumns(
                    id=0,
                    sessions=[sub.session for sub in group_subs],  # type: ignore[misc]
                    actions=msgspec.Raw(self._action_bytes(group_actions)),
                    resets=resets or [],
                    reset=args if resets else None,
                )
            else:
                at_reset = set(resets) if resets else None
                steps = [
                    WireStep(sub.session, action)  # type: ignore[arg-type]
                    if at_reset is None or j not in at_reset
                    else WireReset(sub.session, args)  # type: ignore[arg-type]
                    for j, (sub, action) in enumerate(zip(group_subs, group_actions, strict=True))
                ]
                frame = WireStepMany(id=0, steps=msgspec.Raw(self._action_bytes(steps)))
            encoded.append((index, group_subs, group_actions, resets or None, frame))
        return encoded

    def _plan_columns(self, actions: Sequence[Any], tally: Tally) -> bool:
        """`plan_step` of every sub-env in the steady state, by columns: every link up and
        folding resets, every session open on it. One `step_columns` (or `step_many`) per
        link of its sub-envs in index order, the folded autoresets' positions found in one
        pass, no per-sub-env outcome (the answer is taken in bulk, or the outcomes made when
        it cannot be: `materialize`). Returns False, having queued nothing, when the steady
        state does not hold; an action that cannot be encoded raises TypeError first."""
        plans = []
        for link in self.links:
            members = link.members
            if not members:
                continue
            conn = link.conn
            if conn is None or conn.closed:
                return False
            roster = link.roster
            if roster is None:
                found = [s.session for s in members if s.lost is None and s.conn is conn]
                if len(found) != len(members) or None in found:
                    return False  # a session lost, reopening or on an earlier connection
                roster = link.roster = typing.cast(list[str], found)
            sessions = roster
            stride = link.stride
            if stride is not None and type(actions) is list:
                group_actions = actions[stride]
            else:
                group_actions = [actions[i] for i in link.positions]
            resets = [j for j, s in enumerate(members) if s.needs_reset]
            if resets and not link.folds_resets:
                return False  # their resets go as frames of their own
            for j in resets:
                group_actions[j] = None
            frame: WireColumns | WireStepMany
            args = ResetArgs(options=self.reset_options) if resets else None
            if link.columns:
                frame = WireColumns(
                    id=0,
                    sessions=sessions,
                    actions=msgspec.Raw(self._action_bytes(group_actions)),
                    resets=resets,
                    reset=args,
                )
            else:
                at_reset = set(resets)
                steps = [
                    WireReset(session, args) if j in at_reset else WireStep(session, action)  # type: ignore[arg-type]
                    for j, (session, action) in enumerate(zip(sessions, group_actions, strict=True))
                ]
                frame = WireStepMany(id=0, steps=msgspec.Raw(self._action_bytes(steps)))
            plans.append((link, group_actions, resets, frame))
        tally.open += self.num_envs
        for link, group_actions, resets, frame in plans:
            frame.id = link.conn.core.next_id()
            request = self._queue(FrameKind.STEP_MANY, frame, link, link.members)
            request.tally = tally
            request.resets = resets or None
            request.actions = group_actions
        return True

    def _plan_batch(self, actions: Sequence[Any], subs: Sequence[Sub], tally: Tally) -> None:
        """`plan_step` with a call: the sub-envs ready to step go into one `step_many` per
        link, without outcomes (`InFlight.actions` keeps their actions, None for a folded
        autoreset); the others get theirs now (a reset instead, or a failure)."""
        every = subs is self.subs or list(subs) == self.subs  # all of them, in index order
        if every and self._plan_columns(actions, tally):
            return
        links = self.links
        groups, later, folded = self._group(actions, subs, [link.alive for link in links])
        encoded = self._encode(groups, bool(folded))
        tally.open += len(subs)  # each sub-env's outcome (or bulk row) completes it once
        for sub, action in later:
            outcome = SubOutcome(sub.index, Verb.STEP, tally, sub.obs)
            outcome.action = action
            sub.outcome = outcome
            tally.outcomes[sub.index] = outcome
            handled = self._step_later(sub, outcome)
            assert handled, f"sub-env {sub.index} is neither ready to step nor to reset"
        for index, group_subs, group_actions, resets, frame in encoded:
            link = links[index]
            frame.id = link.conn.core.next_id()
            request = self._queue(FrameKind.STEP_MANY, frame, link, group_subs)
            request.tally = tally
            request.resets = resets
            request.actions = group_actions

    def _plan_sent_batch(self, actions: Sequence[Any], subs: Sequence[Sub]) -> None:
        """`send(batched=True)`: a `step_many` per link of the sub-envs ready to step (and of
        those whose autoreset can ride in it), each with a tally of its own (`Tally.order`),
        answered in bulk like a blocking step's; the call reaches `ready` whole once all of
        its sub-envs have their results."""
        groups, later, folded = self._group(actions, subs, [link.alive for link in self.links])
        encoded = self._encode(groups, bool(folded))
        for sub, action in later:
            outcome = self._begin(sub, Verb.STEP, None)
            outcome.action = action
            handled = self._step_later(sub, outcome)
            assert handled, f"sub-env {sub.index} is neither ready to step nor to reset"
        for index, group_subs, group_actions, resets, frame in encoded:
            tally = Tally([sub.index for sub in group_subs])
            tally.open = len(group_subs)
            self.sending.append(tally)
            for sub in group_subs:
                sub.sent = tally
            link = self.links[index]
            frame.id = link.conn.core.next_id()
            request = self._queue(FrameKind.STEP_MANY, frame, link, group_subs)
            request.tally = tally
            request.resets = resets
            request.actions = group_actions
