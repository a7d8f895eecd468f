# unasync: the source of ecotone/client/_sync/vector_resuming.py
"""Sub-envs that outlive their servers: what a vector env opened with `resume=True` does when a
server goes, written once for both faces.

The source is ecotone/client/_async/vector_resuming.py; scripts/unasync.py generates the
blocking face. It is `ecotone/client/_async/resuming.py`'s rule for a whole vector env: every
sub-env's session gets a resume key from a server that keeps checkpoints (`serve
--checkpoint-dir DIR`), and the vector env keeps each sub-env's `Trail` (its key, its
episode's seed, the actions since the last checkpoint it knows of). It asks for a checkpoint of
each episode at its start and every `checkpoint_every` steps. When a `step` or `reset` finds a
server gone (its connection dropped) or going (`shutting_down`: it drains, then checkpoints
what is left):

1. the sub-envs still open on a going server are checkpointed there first;
2. the vector env reconnects to the same URL (the same server restarted on its directory, or
   another replica sharing the directory and the snapshot key, behind the same Service),
   retrying until `resume_timeout` passes, and opens a session for each sub-env of that URL;
3. each one restores its last checkpoint and steps again the logged actions the checkpoint
   does not hold (with none, a seeded episode is reset and replayed from its start; any other
   is lost, and reported so at its next step); a sub-env whose episode had ended gets a fresh
   session, reset as its autoreset says;
4. the sub-envs whose part of the call failed make it again; one whose step the checkpoint
   already holds (the answer was lost with the server) takes the restored observation as its
   answer, and is not stepped twice.

For envs whose episodes are deterministic given their state (the conformance suite's
`snapshots` check), each resumed episode is then step for step what it would have been. `send`
and `recv` do not resume: their sub-envs report a lost episode as without `resume`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ecotone.client._async.resuming import close_quietly, gave_up, retry_pause
from ecotone.client._vector.failures import Failure, FailureCode
from ecotone.client._vector.subenvs import Link, Sub, SubOutcome, Tally, Verb
from ecotone.client._vector.trails import Trails, gone
from ecotone.client.errors import ConnectionLost, ServerError
from ecotone.client.results import StepResult
from ecotone.specs import ErrorCode, Reset, Restore, Restored, Snapshot, Step
from ecotone.specs import Snapshotted as Saved

log = logging.getLogger("ecotone.client")


class VectorResumer:
    """What a vector env opened with `resume=True` keeps, and the calls that resume.

    Args:
        trails: Every sub-env's trail.
        resume_timeout: Seconds to keep trying to reach a server again.
    """

    def __init__(self, trails: Trails, resume_timeout: float) -> None:
        self.trails = trails
        self.timeout = resume_timeout

    # --- the calls, made so that a server that goes is resumed -----------------------------------

    async def step(self, venv: Any, actions: Sequence[Any]) -> Any:
        """`venv.step(actions)`, resuming the sub-envs of a server that went.

        Args:
            venv: The vector env.
            actions: One action per sub-env, split.

        Returns:
            What `step` returns.
        """
        core = venv._core
        subs: list[Sub] = list(core.subs)
        tally = Tally()
        chosen, acts = subs, list(actions)
        deadline = time.monotonic() + self.timeout
        while True:
            resets = [sub.needs_reset for sub in chosen]
            part = Tally()
            core.plan_step(acts, chosen, part)
            await venv._run(part, venv._deadline())
            tally.outcomes.update(part.outcomes)
            tally.rows.extend(part.rows)
            again = self.trails.record(part, chosen, acts, resets)
            if not again:
                break
            held = await self._move(venv, again, deadline)
            for index in again:
                del tally.outcomes[index]
            for index, result in held.items():
                tally.outcomes[index] = self._answered(core, tally, index, actions[index], result)
            chosen = [subs[i] for i in again if i not in held]
            acts = [actions[sub.index] for sub in chosen]
            if not chosen:
                break
        await self.checkpoint(venv)
        return core.step_all_result(tally)

    async def reset(
        self, venv: Any, subs: list[Sub], seeds: list[int | None], options: dict[str, Any]
    ) -> Any:
        """`venv.reset(...)` of `subs`, resuming the other sub-envs of a server that went.

        Args:
            venv: The vector env.
            subs: The sub-envs to reset.
            seeds: Their seeds.
            options: The reset options.

        Returns:
            What `reset` returns.
        """
        core = venv._core
        tally = Tally()
        chosen, chosen_seeds = subs, seeds
        deadline = time.monotonic() + self.timeout
        while True:
            part = Tally()
            core.plan_reset(chosen, chosen_seeds, options, part)
            await venv._run(part, venv._deadline())
            tally.outcomes.update(part.outcomes)
            again = self.trails.record(part, chosen, None, [True] * len(chosen), chosen_seeds)
            if not again:
                break
            for index in again:  # nothing of theirs to restore: they are reset again
                self.trails.of[index].lose()
                del tally.outcomes[index]
            await self._move(venv, again, deadline)
            by_index = dict(zip((sub.index for sub in subs), seeds, strict=True))
            chosen = [core.subs[i] for i in again]
            chosen_seeds = [by_index[i] for i in again]
        await self.checkpoint(venv)
        return core.check(tally.outcomes.values(), core.reset_result(tally, core.num_envs))

    async def started(self, venv: Any, subs: Iterable[Sub], seeds: Sequence[int | None]) -> None:
        """Sub-envs were restarted (new sessions, reset): take their keys, checkpoint them.

        Args:
            venv: The vector env.
            subs: The restarted sub-envs.
            seeds: Their seeds.
        """
        for sub, seed in zip(subs, seeds, strict=True):
            trail = self.trails.of[sub.index]
            trail.key = sub.resume_key
            if sub.needs_reset:  # the restart failed: nothing to resume
                trail.lose()
            else:
                trail.begin(seed, replayable=seed is not None)
        await self.checkpoint(venv)

    async def forked(self, venv: Any, moved: dict[int, Restored]) -> None:
        """Sub-envs took another episode (`fork`): resume that one from now on.

        Args:
            venv: The vector env.
            moved: Each sub-env's index mapped to its `restored` answer.
        """
        for index, answer in moved.items():
            self.trails.of[index].moved(answer.step_count, answer.episode_id)
        await self.checkpoint(venv)

    async def checkpoint(self, venv: Any, subs: Iterable[Sub] | None = None) -> None:
        """Ask for a checkpoint of every sub-env's episode that is due one (at its start, then
        every `checkpoint_every` steps), or of each of `subs`' (a server going: where they
        stand). One that cannot be written is logged and the episode goes on (a resume then
        replays more, or restores the checkpoint a stopping server writes itself); an env that
        cannot be saved stops the asking."""
        trails = self.trails
        if not trails.savable:
            return
        for sub in venv._core.subs if subs is None else subs:
            trail = trails.of[sub.index]
            if subs is None and not trail.due(trails.every):
                continue
            if not trail.running or sub.session is None or sub.lost is not None:
                continue
            conn = sub.conn
            frame = Snapshot(id=conn.core.next_id(), session=sub.session, durable=True)
            try:
                answer = conn.core.check(await conn.request(frame, venv._core.step_timeout))
            except (ConnectionLost, TimeoutError):
                return  # the next call finds the server gone, and resumes from the one before
            except ServerError as exc:
                if exc.code == ErrorCode.UNSUPPORTED:
                    trails.savable = False  # resumes replay seeded episodes from their reset
                    return
                log.warning("no checkpoint of sub-env %d: %s", sub.index, exc)
                continue
            assert isinstance(answer, Saved), answer
            trail.saved(answer.episode_id)

    # --- resuming -------------------------------------------------------------------------------

    def _answered(
        self, core: Any, tally: Tally, index: int, action: Any, result: StepResult[Any]
    ) -> SubOutcome:
        """The outcome of a step the restored checkpoint already holds."""
        sub = core.subs[index]
        outcome = SubOutcome(index, Verb.STEP, tally, result.observation)
        outcome.action, outcome.step = action, result
        trail = self.trails.of[index]
        trail.stepped(action)
        trail.saved(trail.episode_id)
        if result.done or result.truncated:
            sub.needs_reset = True  # under same_step too: reset at its next step
            trail.lose()
        return outcome

    async def _move(self, venv: Any, failed: list[int], deadline: float) -> dict[int, Any]:
        """Move every sub-env of the servers of `failed` to new connections, each restored to
        where its trail stands. Returns the answers of `failed`'s steps that the restored
        checkpoints hold."""
        core = venv._core
        links: dict[int, Link] = {}
        for index in failed:
            link = core.subs[index].link
            links[link.index] = link
        held: dict[int, Any] = {}
        for link in links.values():
            subs = [sub for sub in core.subs if sub.link is link]
            old = link.conn
            if old is not None and not old.closed:  # going, not gone: save what it holds
                await self.checkpoint(venv, subs)
            await self._reopen(venv, link, subs, deadline)
            for sub in subs:
                answer = await self._restore(venv, sub, sub.index in failed)
                if answer is not None:
                    held[sub.index] = answer
            self.trails.resumes += 1
            if old is not None and old is not link.conn:
                await close_quietly(old)
        return held

    async def _reopen(self, venv: Any, link: Link, subs: list[Sub], deadline: float) -> None:
        """A new connection for `link` and a session for each of `subs` on it, retried until
        `deadline` while nothing answers at its URL or what answers is stopping."""
        core = venv._core
        tries = 0
        while True:
            error: BaseException
            try:
                conn = await venv._connect(link)
            except (ConnectionLost, OSError) as exc:
                error = exc
            else:
                core.attach(link, conn)
                tally = Tally()
                core.plan_open(subs, tally)
                await venv._run(tally, venv._deadline())
                failures = [o.failure for o in tally.outcomes.values() if o.failure is not None]
                if not failures:
                    return
                stopping = [f for f in failures if not gone(f)]
                if stopping:
                    raise stopping[0].error
                error = failures[0].error
                await close_quietly(conn)
            if time.monotonic() >= deadline:
                raise gave_up(link.url, "the sub-envs", self.timeout, error) from error
            await retry_pause(tries)
            tries += 1

    async def _restore(self, venv: Any, sub: Sub, inflight: bool) -> StepResult[Any] | None:
        """Put `sub`'s new session where its trail stands; the answer of its step in flight
        when the checkpoint holds it."""
        trail = self.trails.of[sub.index]
        if not trail.running:
            trail.key = sub.resume_key  # a fresh session: reset as its autoreset says
            sub.needs_reset = True
            return None
        conn, core = sub.conn, venv._core
        assert sub.session is not None
        at: int | None = None
        if trail.key is not None:
            frame = Restore(id=conn.core.next_id(), session=sub.session, checkpoint=trail.key)
            try:
                answer = conn.core.check(await conn.request(frame, core.step_timeout))
            except ServerError as exc:
                if exc.code != ErrorCode.UNKNOWN_SNAPSHOT:
                    raise
                log.warning("sub-env %d: %s", sub.index, exc)
            else:
                assert isinstance(answer, Restored), answer
                if trail.holds(answer.episode_id):
                    at, trail.episode_id = answer.step_count, answer.episode_id
                    result = core.result(answer.observation)
                    self._landed(sub, result)
                    if at == trail.steps + 1 and inflight:  # it holds the step in flight
                        return result
        if at is None:  # no checkpoint of this episode: replay it from its reset, if it can be
            trail.key = sub.resume_key
            if not trail.replayable:
                self._lost(sub, "no checkpoint of its episode, which was not seeded")
                return None
            reset = Reset(
                id=conn.core.next_id(),
                session=sub.session,
                seed=trail.seed,
                options=dict(core.reset_options),
            )
            answer = conn.core.check(await conn.request(reset, core.step_timeout))
            self._landed(sub, core.result(answer.observation))
            at = 0
        try:
            actions = trail.replay(at)
        except LookupError as exc:
            self._lost(sub, f"the checkpoint holds step {at}, the trail {trail.steps}: {exc}")
            return None
        for action in actions:
            raw = msgspec.Raw(core._action_bytes(action))
            step = Step(id=conn.core.next_id(), session=sub.session, action=raw)
            answer = conn.core.check(await conn.request(step, core.step_timeout))
            self._landed(sub, core.result(answer.observation))
        trail.checkpointed = None  # write it again on this server
        return None

    def _landed(self, sub: Sub, result: StepResult[Any]) -> None:
        sub.obs = result.observation
        sub.needs_reset = result.done or result.truncated

    def _lost(self, sub: Sub, why: str) -> None:
        """`sub`'s episode cannot be resumed: its next call says so (`restart` it)."""
        log.warning("sub-env %d cannot be resumed: %s", sub.index, why)
        error = ConnectionLost(f"sub-env {sub.index} cannot be resumed: {why}")
        sub.lost = Failure(FailureCode.NOT_RESUMED, error, ends_episode=True, session_lost=True)
        sub.link.roster = None
        self.trails.of[sub.index].lose()
