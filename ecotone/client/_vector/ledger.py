"""The vector core's state and the primitives every part of it shares: queueing a request,
beginning a sub-env's outcome, failing and completing it, the error policy."""

from __future__ import annotations

import collections
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ecotone.client._core import EnvTypes
from ecotone.client._vector.failures import Failure, raise_failures
from ecotone.client._vector.frames import TypedAnswers
from ecotone.client._vector.policy import AutoresetMode, ErrorPolicy, Policy
from ecotone.client._vector.subenvs import (
    FrameKind,
    InFlight,
    Link,
    Sub,
    SubOutcome,
    Tally,
    Verb,
    check_idle,
)
from ecotone.recording import ClientRecorder
from ecotone.specs import Reset, Response


class Ledger:
    """Sub-envs spread over links, and what every part of the core does to them."""

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        *,
        env: str | None,
        types: EnvTypes,
        policy: Policy,
        recorder: ClientRecorder | None = None,
    ) -> None:
        """`num_envs` sub-envs of `env` (None: each server's default) spread round robin over
        `urls` (the sub-envs of one URL share a link), under `policy`; `recorder` records
        their episodes.

        Raises:
            ValueError: no URL, or fewer than one sub-env.
        """
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ValueError("no server URL given")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, not {num_envs}")
        self.env = env
        self.types = types
        # The policy's fields, flat: the hot paths read them as plain attributes.
        self.autoreset_mode = policy.autoreset_mode
        self.errors = policy.errors
        self.reset_options = policy.reset_options
        self.step_timeout = policy.step_timeout
        by_url: dict[str, Link] = {}
        for url in url_list:
            if url not in by_url:
                by_url[url] = Link(len(by_url), url)
        self.links = list(by_url.values())
        self.subs = [Sub(i, by_url[url_list[i % len(url_list)]]) for i in range(num_envs)]
        for sub in self.subs:
            sub.link.members.append(sub)
            sub.link.positions.append(sub.index)
        for link in self.links:
            span = slice(link.index, num_envs, len(self.links))
            if link.positions == list(range(num_envs))[span]:
                link.stride = span
        self.num_envs = num_envs
        self._observation_target: Any = types.observation or dict[str, Any]
        fields = getattr(types.observation, "__struct_fields__", ())
        self._struct_flags = {"reward", "done", "truncated"} <= set(fields)
        """The observation type is a Struct with the flags (an ecotone.Observation): read them
        directly."""
        self._dict_obs = (
            typing.get_origin(self._observation_target) or self._observation_target
        ) is dict
        """Observations decode into dicts: read the flags with `get`."""
        self._codec: Any = None
        self._decode_frame: Callable[[bytes | str], Response] | None = None
        self._typed: TypedAnswers | None = None  # the typed decoder and its answers' types
        self._encode_action: Callable[[Any], bytes] | None = None
        """Encodes actions (one, or a step_many's list of `WireStep`), numpy values as plain."""
        self.ready: collections.deque[SubOutcome | Tally] = collections.deque()
        """Results of `send`-started work, in the order they completed, for `recv`: a sub-env's
        outcome, or a batched send's complete tally."""
        self.ready_count = 0
        """Sub-envs in `ready`."""
        self.sending: list[Tally] = []
        """Batched sends not complete yet."""
        self.recorder = recorder

    def _deadline(self) -> float | None:
        return None if self.step_timeout is None else time.monotonic() + self.step_timeout

    def _queue(self, kind: FrameKind, frame: Any, link: Link, subs: list[Sub]) -> InFlight:
        request = InFlight(kind, frame, link, subs, self._deadline())
        link.inflight[frame.id] = request
        link.outbox.append(frame)
        for sub in subs:
            sub.busy = request
        return request

    def _begin(self, sub: Sub, kind: Verb, tally: Tally | None) -> SubOutcome:
        """A new outcome of `sub` for `tally` (None: a `send`'s, for `ready`).

        Raises:
            ValueError: `sub` is `in_flight` (the faces check before planning anything;
                this is the last guard).
        """
        check_idle((sub,))
        outcome = SubOutcome(sub.index, kind, tally, sub.obs)
        sub.outcome = outcome
        if tally is not None:
            tally.outcomes[sub.index] = outcome
            tally.open += 1
        return outcome

    def _queue_reset(
        self, sub: Sub, seed: int | None, options: dict[str, Any] | None = None
    ) -> None:
        link = sub.link
        assert sub.session is not None and sub.outcome is not None
        sub.outcome.seed = seed
        frame = Reset(
            id=link.conn.core.next_id(),
            session=sub.session,
            seed=seed,
            options=self.reset_options if options is None else options,
        )
        self._queue(FrameKind.RESET, frame, link, [sub])

    def _adopt(self, sub: Sub, action: Any, tally: Tally | None) -> SubOutcome:
        """The outcome of a sub-env stepped in a bulk `step_many`, made when it needs one."""
        outcome = SubOutcome(sub.index, Verb.STEP, tally, sub.obs)
        outcome.action = action
        sub.outcome = outcome
        if tally is not None:
            tally.outcomes[sub.index] = outcome
        return outcome

    def materialize(self, request: InFlight) -> None:
        """Give the sub-envs of a bulk `step_many` still waiting for it their outcomes (before
        they fail, or take the per-sub-env path for its answer)."""
        actions = request.actions
        if actions is None:
            return
        request.actions = None
        for sub, action in zip(request.subs, actions, strict=True):
            if sub.busy is request and sub.outcome is None:
                self._adopt(sub, action, request.tally)

    def take_outbox(self, link: Link) -> list[Any]:
        """Frames to send on `link` now (HTTP links: one at a time)."""
        outbox = link.outbox
        if not outbox:
            return []
        if link.pipelines:
            frames = list(outbox)
            outbox.clear()
        elif link.unanswered == 0:
            frames = [outbox.popleft()]
        else:
            return []
        link.unanswered += len(frames)
        return frames

    def _fail(self, sub: Sub, failure: Failure, *, after_step: bool = False) -> None:
        """`after_step`: the failed request was the sub-env's step (not a reset)."""
        outcome = sub.outcome
        assert outcome is not None
        if outcome.failure is None:
            outcome.failure = failure
        sub.busy = None
        if failure.session_lost:
            sub.lost = failure
            sub.link.roster = None
        if failure.ends_episode:
            sub.needs_reset = True
            if self.recorder is not None:
                self.recorder.ended(sub.index, "lost", f"[{failure.code}] {failure.error}")
            if (
                after_step
                and self.autoreset_mode is AutoresetMode.SAME_STEP
                and not failure.session_lost
                and sub.link.alive
            ):
                self._queue_reset(sub, None)  # a lost episode ends like a truncated one
                return
        self._complete(sub)

    def _complete(self, sub: Sub) -> None:
        outcome = sub.outcome
        assert outcome is not None
        sub.outcome = None
        tally = outcome.tally
        if tally is None:
            self.ready.append(outcome)
            self.ready_count += 1
        elif tally.settle(1):
            self._sent_complete(tally)

    def _sent_complete(self, tally: Tally) -> None:
        """A batched send has all its results: to `ready`, whole."""
        assert tally.order is not None
        self.sending.remove(tally)
        for index in tally.order:
            self.subs[index].sent = None
        self.ready.append(tally)
        self.ready_count += len(tally.order)

    def next_deadline(self) -> float | None:
        deadlines = [
            r.deadline for link in self.links for r in link.inflight.values() if r.deadline
        ]
        return min(deadlines) if deadlines else None

    def failures(self, outcomes: Iterable[SubOutcome]) -> dict[int, Failure]:
        return {o.index: o.failure for o in outcomes if o.failure is not None}

    def check(self, outcomes: Iterable[SubOutcome], result: Any) -> Any:
        """Apply the error policy: with `raise`, any failure raises (the result attached)."""
        if self.errors is ErrorPolicy.RAISE:
            raise_failures(self.failures(outcomes), result)
        return result

    def close_recording(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
