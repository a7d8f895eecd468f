"""How the `ecotone` command ends on an error: one line on stderr, `ecotone: error: ...`, and
an exit status by kind.

- 2, a usage error: what was asked cannot be done as asked. A flag or an argument argparse
  refuses (`UsageError`), a value a command refuses (ValueError and its kin: a config key,
  an env's refusal of a `--action`, a policy or rubric that cannot be loaded), a name
  nothing answers to (an env, a transport, a provider: `LookupError`), a file that cannot
  be read or written (an OSError naming a file).
- 1, a failure: what was asked went wrong at run time (a server's, a connection's, a
  provider's or an engine's error), and anything else, named by its type.
- 130 for Ctrl-C; 141 when stdout is closed before the output is written (a reader such as
  `head` that has seen enough), without a word, as a program killed by SIGPIPE.

The message is the exception's own, its lines joined into one; `-v` adds the traceback. An
exception group of one exception (a nursery's) is that exception; a wrapper that says
nothing more than its cause (`server failed to start: ...`) is reported as the cause.
"""

from __future__ import annotations

import os
import sys
import traceback

from ecotone.client.errors import EcotoneError, InvalidActionError
from ecotone.providers.contract import ProviderError

USAGE = 2
FAILURE = 1
INTERRUPTED = 130
BROKEN_PIPE = 141


class UsageError(Exception):
    """A command line argparse refuses (an unknown flag, a value of the wrong type, a missing
    argument), or a command's own check of its flags."""


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit finds no closed
    pipe (which would print a warning)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def unwrap(exc: BaseException) -> BaseException:
    """The exception to report: a group of one, the one inside (recursively); a RuntimeError
    raised from a cause, the cause when it is the user's mistake or a group (a server that
    failed to start because its env is unknown)."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        elif (
            type(exc) is RuntimeError
            and exc.__cause__ is not None
            and (isinstance(exc.__cause__, BaseExceptionGroup) or status(exc.__cause__) == USAGE)
        ):
            exc = exc.__cause__
        else:
            return exc


def status(exc: BaseException) -> int:
    """The exit status for `exc` (see the module)."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        return BROKEN_PIPE
    if isinstance(exc, UsageError | InvalidActionError):
        return USAGE
    if isinstance(exc, EcotoneError | ProviderError):
        return FAILURE
    if isinstance(exc, ValueError | LookupError | TypeError):
        return USAGE
    if isinstance(exc, OSError) and exc.filename is not None:
        return USAGE
    return FAILURE


def one_line(exc: BaseException) -> str:
    """`exc`'s message on one line (its lines joined with ` | `), with its type's name in
    front when the type is not one of ecotone's or Python's usual errors."""
    message = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        message = f"{exc.filename}: {exc.strerror}"
    plain = UsageError | EcotoneError | ProviderError | ValueError | LookupError | OSError
    if not isinstance(exc, plain) or not message:
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return message


def report(exc: BaseException, verbose: bool) -> int:
    """Say `exc` on stderr as the module says, and return the exit status."""
    inner = unwrap(exc)
    code = status(inner)
    if code == BROKEN_PIPE:
        silence_stdout()
        return code
    if code == INTERRUPTED:
        return code
    if isinstance(inner, SystemExit):
        return inner.code if isinstance(inner.code, int) else FAILURE
    try:
        if verbose and not isinstance(inner, UsageError):  # argparse's: nothing to trace
            traceback.print_exception(exc, file=sys.stderr)
        hint = "" if verbose or code == USAGE else " (-v for the traceback)"
        print(f"ecotone: error: {one_line(inner)}{hint}", file=sys.stderr, flush=True)
    except OSError:
        pass  # no stderr to say it on
    return code
