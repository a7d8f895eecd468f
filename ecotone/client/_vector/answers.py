"""What the answers mean: each response frame taken for the sub-envs it concerns, a batched
step's in bulk when it can be."""

from __future__ import annotations

import struct
import time
from typing import Any

import msgspec
import numpy as np

from ecotone.client._vector.failures import Failure
from ecotone.client._vector.frames import plain
from ecotone.client._vector.ledger import Ledger
from ecotone.client._vector.policy import AutoresetMode
from ecotone.client._vector.subenvs import FrameKind, InFlight, Link, Rows, Sub, Verb
from ecotone.client.errors import ServerError
from ecotone.client.results import StepResult
from ecotone.specs import (
    Error,
    ErrorCode,
    Opened,
    Response,
    StepColumnsResult,
    StepManyResult,
    Welcome,
)
from ecotone.specs.frames import ObservationFrame


def _rewards(rewards: list[Any]) -> np.ndarray:
    """Rewards as a float64 array, a missing (None) reward as 0.0 (`reward or 0.0`)."""
    # Packing floats into the array's buffer costs a third of `np.array(list)`; a None (or
    # anything `struct` will not take as a float) takes numpy's way, as it always did.
    array = np.empty(len(rewards), dtype=np.float64)
    try:
        struct.pack_into(f"{len(rewards)}d", array.data, 0, *rewards)
    except (struct.error, TypeError):
        return np.array([r or 0.0 for r in rewards], dtype=np.float64)
    return array


def _bools(flags: list[Any]) -> np.ndarray:
    """Flags as a bool array (truthiness, as `np.array(flags, dtype=bool)` of bools)."""
    array = np.empty(len(flags), dtype=np.bool_)
    struct.pack_into(f"{len(flags)}?", array.data, 0, *flags)
    return array


class Answers(Ledger):
    """What each answer means: `on_response` takes a link's response frame for the sub-envs
    its request concerns and completes their outcomes (or, for a batched step's usual
    answer, the tally's bulk rows), autoresetting under `same_step`."""

    def result(self, obs: Any) -> StepResult[Any]:
        """An observation (decoded by `typed_decoder`) as a StepResult."""
        if self._struct_flags and type(obs) is self._observation_target:
            return StepResult(
                observation=obs, reward=obs.reward, done=obs.done, truncated=obs.truncated
            )
        if isinstance(obs, msgspec.Raw):  # the typed decoder fell back to the generic one
            obs = self._codec.decode_as(obs, self._observation_target)
        if type(obs) is dict:
            return StepResult(
                observation=obs,
                reward=obs.get("reward"),
                done=bool(obs.get("done", False)),
                truncated=bool(obs.get("truncated", False)),
            )
        return StepResult(
            observation=obs,
            reward=getattr(obs, "reward", None),
            done=bool(getattr(obs, "done", False)),
            truncated=bool(getattr(obs, "truncated", False)),
        )

    def on_response(self, link: Link, response: Response) -> None:
        rid = response.id
        if rid is None:  # an error the server could not tie to a request: the oldest
            rid = next(iter(link.inflight), None)
            if rid is None:
                return
        request = link.inflight.pop(rid, None)
        if request is None:
            return
        link.unanswered -= 1
        kind = request.kind
        if kind is FrameKind.STEP_MANY:
            self._on_step_many(request, response)
        elif kind is FrameKind.CLOSE or kind is FrameKind.HELLO:
            if type(response) is Welcome:
                link.folds_resets = "step_many.reset" in response.features
                link.columns = "step_columns" in response.features
        elif isinstance(response, Error):
            failure = Failure.from_frame(response)
            self._fail(request.subs[0], failure, after_step=kind is FrameKind.STEP)
        elif kind is FrameKind.STEP:
            try:
                result = self.result(response.observation)  # type: ignore[union-attr]
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                sub = request.subs[0]
                self._fail(sub, Failure.mismatch(exc), after_step=True)
                return
            self._stepped(request.subs[0], result, request.started)
        elif kind is FrameKind.RESET:
            self._reset_done(request.subs[0], response.observation)  # type: ignore[union-attr]
        elif kind is FrameKind.OPEN:
            assert isinstance(response, Opened)
            self._opened(request.subs[0], response)

    def _on_step_many(self, request: InFlight, response: Response) -> None:
        if request.actions is not None and self._take_in_bulk(request, response):
            return  # the usual answer: in bulk, folded resets and all
        self.materialize(request)  # item by item: every sub-env waiting gets its outcome
        typed = self._typed
        kind = type(response)
        if kind is StepColumnsResult or (typed is not None and kind is typed.columns):
            response = self._by_items(response)
        if request.resets is not None:
            response = self._take_resets(request, response)
            if not request.subs:  # resets only: each has completed its outcome
                return
        if isinstance(response, Error):
            failure = Failure.from_frame(response)
            for sub in request.subs:
                self._fail(sub, failure, after_step=True)
            return
        result_of = self.result
        plain_path = self.recorder is None
        results = response.results  # type: ignore[union-attr]
        if len(results) != len(request.subs):
            self._fail_miscounted(request, len(results))
            return
        for sub, item in zip(request.subs, results, strict=True):
            if isinstance(item, Error):
                failure = Failure.from_frame(item)
                self._fail(sub, failure, after_step=True)
                continue
            try:
                result = result_of(item.observation)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                self._fail(sub, Failure.mismatch(exc), after_step=True)
                continue
            outcome = sub.outcome
            if plain_path and not (result.done or result.truncated) and outcome is not None:
                # the hot path: an ordinary step, nothing to record, nothing to reset
                outcome.step = result
                sub.obs = result.observation
                sub.busy = None
                sub.outcome = None
                tally = outcome.tally
                if tally is None:
                    self.ready.append(outcome)
                    self.ready_count += 1
                elif tally.settle(1):
                    self._sent_complete(tally)
            else:
                self._stepped(sub, result, request.started)

    def _fail_miscounted(self, request: InFlight, answered: int) -> None:
        """A batch answered with a number of items that is not its own: each of its sub-envs
        fails (`internal`), none is left waiting."""
        error = ServerError(
            ErrorCode.INTERNAL, f"step_many answered {answered} items for {len(request.subs)}"
        )
        failure = Failure.from_server(error)
        for sub in request.subs:
            if sub.busy is request:
                self._fail(sub, failure, after_step=True)
        request.subs = []
        request.actions = None

    def _by_items(self, response: Any) -> Response:
        """A `step_columns_result` as the `step_many_result` of the same items (typed where
        it is), for the paths that take an answer item by item."""
        errors = response.errors
        typed = self._typed
        if type(response) is StepColumnsResult or typed is None:
            return StepManyResult(
                id=response.id,
                results=[
                    errors.get(j) or ObservationFrame(session="", observation=obs)
                    for j, obs in enumerate(response.observations)
                ],
            )
        item = typed.item
        # A null no error explains (an env's step returned None) goes to `result` raw, as the
        # null of a step_many item (which did not decode) does: `result` judges it.
        null = self._codec.raw(None)
        return typed.many(
            id=response.id,
            results=[
                errors.get(j) or item(observation=null if obs is None else obs)
                for j, obs in enumerate(response.observations)
            ],
        )

    def _take_resets(self, request: InFlight, response: Response) -> Response:
        """Answer the reset items of a `step_many` (folded autoresets) and take them out of
        the request and its answer, which then go on as a step_many of steps only."""
        positions = request.resets
        assert positions is not None
        request.resets = None
        subs = request.subs
        resets = set(positions)
        keep = [j for j in range(len(subs)) if j not in resets]
        if isinstance(response, Error):
            failure = Failure.from_frame(response)
            for j in positions:
                self._fail(subs[j], failure)
        else:
            results: list[Any] = response.results  # type: ignore[union-attr]
            if len(results) != len(subs):  # a broken answer: every item of it fails
                self._fail_miscounted(request, len(results))
                return response
            else:
                for j in positions:
                    item = results[j]
                    if isinstance(item, Error):
                        self._fail(subs[j], Failure.from_frame(item))
                    else:
                        self._reset_done(subs[j], item.observation)
                response.results = [results[j] for j in keep]  # type: ignore[union-attr]
        request.subs = [subs[j] for j in keep]
        if request.actions is not None:
            request.actions = [request.actions[j] for j in keep]
        return response

    def _flags(
        self, observations: list[Any], resets: list[int] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any], bool] | None:
        """(rewards, terminated, truncated, metadata, whether any episode ended) of typed
        observations, as `result` would read them one by one, or None when their type has no
        flags to read in bulk. The positions in `resets` are folded autoresets: a new
        episode's first observation, reward 0.0 and no flags whatever it carries."""
        if self._struct_flags:
            rewards = [o.reward for o in observations]
            terminated = [o.done for o in observations]
            truncated = [o.truncated for o in observations]
            metadata = [o.metadata for o in observations]
        elif self._dict_obs:
            rewards = [o.get("reward") for o in observations]
            terminated = [o.get("done", False) for o in observations]
            truncated = [o.get("truncated", False) for o in observations]
            metadata = [o.get("metadata") for o in observations]
        else:
            return None
        for j in resets or ():
            rewards[j] = 0.0
            terminated[j] = truncated[j] = False
        ends = any(terminated) or any(truncated)  # on the lists: cheaper than numpy's any
        if not ends:  # the usual step: no flag to pack
            n = len(observations)
            return (
                _rewards(rewards),
                np.zeros(n, dtype=np.bool_),
                np.zeros(n, dtype=np.bool_),
                metadata,
                False,
            )
        return _rewards(rewards), _bools(terminated), _bools(truncated), metadata, True

    def _take_in_bulk(self, request: InFlight, response: Response) -> bool:
        """Take a bulk `step_many`'s answer as `Rows` of the call, if it is the usual one:
        typed observations only, no recorder. Sub-envs whose episode ended are marked for
        reset; under `same_step` they get outcomes and are reset within the call. Returns
        False, having changed nothing, when the answer needs the per-sub-env path."""
        typed = self._typed
        if self.recorder is not None or typed is None:
            return False
        subs = request.subs
        kind = type(response)
        if kind is typed.columns:
            if response.errors:  # type: ignore[union-attr]
                return False
            observations: list[Any] = response.observations  # type: ignore[union-attr]
        elif kind is typed.many:
            results: list[Any] = response.results  # type: ignore[union-attr]
            try:
                observations = [item.observation for item in results]
            except AttributeError:  # an error frame among the items
                return False
        else:
            return False
        if len(observations) != len(subs):
            return False  # a broken answer: the per-sub-env path reports it
        resets = request.resets
        try:
            flags = self._flags(observations, resets)
        except (AttributeError, TypeError, ValueError):
            return False  # a null observation, or a reward that is no number: judged per item
        if flags is None:
            return False
        rewards, terminated, truncated, metadata, ends = flags
        tally, actions = request.tally, request.actions
        assert tally is not None and actions is not None
        if resets is not None:  # folded autoresets: each sub-env's new episode has begun
            request.resets = None
            for j in resets:
                subs[j].needs_reset = False
        ended: list[int] = []
        if ends:
            ended = np.flatnonzero(terminated | truncated).tolist()
            if self.autoreset_mode is AutoresetMode.SAME_STEP:
                for j in ended:  # before their observation changes: it is the outcome's `before`
                    self._adopt(subs[j], actions[j], tally)
            else:
                for j in ended:
                    subs[j].needs_reset = True
                ended = []
        for sub, obs in zip(subs, observations, strict=True):
            sub.obs = obs
            sub.busy = None
        meta = metadata if any(metadata) else None
        tally.rows.append(Rows(subs, observations, rewards, terminated, truncated, meta))
        if tally.settle(len(subs) - len(ended)):
            self._sent_complete(tally)
        for j in ended:  # same_step: these finish once their reset is answered
            self._stepped(subs[j], self.result(observations[j]), request.started)
        return True

    def _stepped(self, sub: Sub, result: StepResult[Any], started: float) -> None:
        outcome = sub.outcome
        assert outcome is not None
        outcome.step = result
        sub.obs = result.observation
        sub.busy = None
        if self.recorder is not None:
            duration = time.perf_counter() - started
            self.recorder.stepped(sub.index, plain(outcome.action), result, duration)
        if result.done or result.truncated:
            sub.needs_reset = True
            if self.autoreset_mode is AutoresetMode.SAME_STEP:
                self._queue_reset(sub, None)
                return
        self._complete(sub)

    def _reset_done(self, sub: Sub, raw: Any) -> None:
        outcome = sub.outcome
        assert outcome is not None
        try:
            result = self.result(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self._fail(sub, Failure.mismatch(exc))
            return
        outcome.reset = result
        sub.obs = result.observation
        sub.needs_reset = False
        sub.busy = None
        if self.recorder is not None:
            self.recorder.started(sub.index, sub.session, outcome.seed, result.observation)
        self._complete(sub)

    def _opened(self, sub: Sub, response: Opened) -> None:
        outcome = sub.outcome
        assert outcome is not None
        sub.session = response.session
        sub.link.roster = None
        sub.resume_key = response.resume
        sub.conn = sub.link.conn
        sub.conn.hold(response.session, response.lease, self)  # held while the env lives
        if self.recorder is not None and self.env is None:
            self.recorder.env = response.env  # the server's default env: now we know its name
        sub.lost = None
        sub.needs_reset = True
        sub.busy = None
        if outcome.kind is Verb.RESTART:
            self._queue_reset(sub, outcome.seed, outcome.options)
            return
        self._complete(sub)
