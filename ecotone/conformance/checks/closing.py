"""Closing a session: twice, and what its id means after."""

from __future__ import annotations

import contextlib
import random
from typing import Any

from ecotone.client.errors import EcotoneError
from ecotone.conformance.expect import answer, error_text, expect, fail
from ecotone.conformance.registry import check
from ecotone.conformance.runner import Runner
from ecotone.specs import Close, Error, ErrorCode, GetState, Reset, Step

_OPENENV_CLOSE = (
    "ecotone's OpenEnv adapter answers a closed session itself (it drops the socket): the "
    "server's side of close cannot be observed"
)


def _close_twice_on_the_wire(r: Runner) -> tuple[Any | None, int]:
    """Open a session, step it, and send two close frames for it. Returns the env instance
    behind it (None when it is remote) and the target's error mark from before the closes.

    Raises:
        CheckFailed: the first close is refused, or the second is not unknown_session.
    """
    client = r.open()
    sid = client.session_id
    closed = False
    try:
        r.reset(client, seed=r.seed)
        r.step_sampled(client, random.Random(r.seed), "step 1")
        instance = r.target.instance(client)
        mark = r.target.error_mark()
        first = r.request(Close(id=r.next_id(), session=sid))
        closed = True
        expect(not isinstance(first, Error), "the first close", "a closed frame", answer(first))
        second = r.request(Close(id=r.next_id(), session=sid))
        expect(
            isinstance(second, Error) and second.code == ErrorCode.UNKNOWN_SESSION,
            "the second close of the same session",
            "an unknown_session error",
            answer(second),
        )
    finally:
        if not closed:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.close()
    return instance, mark


@check("close_idempotent", openenv_skip=_OPENENV_CLOSE, seated=False)
def check_close_idempotent(r: Runner) -> str | None:
    """closing a session twice: the second close is unknown_session on the wire and a no-op through
    EnvClient.close(); the env's close() may be called again

    Raises:
        CheckFailed: the first close is refused; the second is not unknown_session; the env's
            close() raised when the kernel called it, or when called again on the instance.
        CheckSkipped: no action the env accepts could be drawn.
    """
    instance, mark = _close_twice_on_the_wire(r)
    logged = r.target.errors_since(mark)
    expect(not logged, "env.close() called by the kernel", "no exception", "; ".join(logged))
    if instance is not None:
        r.doing = "calling close() a second time on the env instance"
        try:
            r.target.close_instance(instance)
        except Exception as exc:
            fail(
                "env.close() called a second time on the same instance",
                "no exception (close must be idempotent)",
                error_text(exc),
            )
    other = r.open()
    r.reset(other, seed=r.seed)
    r.doing = "EnvClient.close()"
    other.close()
    r.doing = "EnvClient.close() a second time"
    other.close()
    return None if instance is not None else "wire level only: the env instance is remote"


@check("close_releases_session", openenv_skip=_OPENENV_CLOSE, seated=False)
def check_close_releases_session(r: Runner) -> None:
    """after close, reset, step and state on the session are unknown_session

    Raises:
        CheckFailed: a reset, a step or a state request on the closed session is not answered with
            unknown_session.
        CheckSkipped: no action the env accepts could be drawn.
    """
    client = r.open()
    sid = client.session_id
    try:
        r.reset(client, seed=r.seed)
        action, _ = r.step_sampled(client, random.Random(r.seed), "step 1")
    except BaseException:
        with contextlib.suppress(EcotoneError, TimeoutError):
            client.close()
        raise
    r.doing = "EnvClient.close()"
    client.close()
    core = r.target.connection.core
    for label, frame in (
        ("reset", Reset(id=r.next_id(), session=sid, seed=r.seed)),
        ("step", Step(id=r.next_id(), session=sid, action=core.raw(action))),
        ("state", GetState(id=r.next_id(), session=sid)),
    ):
        response = r.request(frame)
        expect(
            isinstance(response, Error) and response.code == ErrorCode.UNKNOWN_SESSION,
            f"{label} on the closed session",
            "an unknown_session error",
            answer(response),
        )
