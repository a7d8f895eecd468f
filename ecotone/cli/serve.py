"""`ecotone serve` and `ecotone mcp`: one env's server in this process, until a signal.

`mcp` is `serve --transport mcp` with the `[mcp]` flags named without their `--mcp-` prefix:
what an MCP client's config runs. Both exit 0 when the server stops (a signal, or the
transport's end: stdio's stdin closed); what is wrong before the server starts (the config,
the env, the transport, the token, the TLS files) is raised, for `main` to answer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

import trio

from ecotone.kernel import Registry
from ecotone.kernel.config import ServerConfig, load
from ecotone.server.admission import is_loopback, resolve_token, tls_context
from ecotone.server.logs import configure as configure_logs
from ecotone.serving import Stopping, build_engine, serve, transport_for, web_url

# Past a lifeline's end the process exits within this many seconds even if an env call that
# cannot be cancelled holds the shutdown up.
HARD_EXIT_GRACE = 5.0
SIGNAL_EXIT_MARGIN = 3.0
"""Seconds past a signal's own deadline (`drain_timeout` + 2 x `shutdown_timeout`) after which
the process exits whatever still runs: more than the drain's last notices take (1 s), less
than the margin of the Deployment's grace period (`k8s_deployment.HARD_EXIT_GRACE`, 5 s), so
the process ends before the kubelet kills it."""


def _mcp_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    """The `[mcp]` flags, as `--actions` on `ecotone mcp` and `--mcp-actions` on `serve`."""
    parser.add_argument(
        f"{prefix}actions",
        dest="mcp_actions",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="offer the env's actions as MCP tools (default: when the env has no tools)",
    )
    parser.add_argument(
        f"{prefix}reset-tool",
        dest="mcp_reset_tool",
        action="store_true",
        default=None,
        help="offer a `reset` tool to the agent (default: resetting is the orchestrator's)",
    )
    parser.add_argument(
        f"{prefix}reveal-reward",
        dest="mcp_reveal_reward",
        action="store_true",
        default=None,
        help="show reward, done and truncated in MCP tool results (default: hidden)",
    )


def serve_arguments(p: argparse.ArgumentParser) -> None:
    """`serve`'s flags; each left out is None (or False), so the config's value stands."""
    p.add_argument("env", nargs="?", help="environment name (or `env` in the config)")
    p.add_argument("--transport", help="transport name (default: websocket)")
    p.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: 8000; 0 picks a free one)")
    p.add_argument("--config", help="config file (default: ./ecotone.toml if present)")
    p.add_argument("--max-sessions", type=int, help="open sessions allowed")
    p.add_argument(
        "--lease",
        type=float,
        help="seconds a session stays its client's with no request or keepalive from it (300)",
    )
    p.add_argument("--idle-timeout", type=float, help="deprecated: --lease")
    p.add_argument(
        "--drain-timeout",
        type=float,
        help="on SIGTERM, seconds running episodes get to end before the sessions left are "
        "checkpointed and closed; meanwhile no session is admitted (0)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        help="seconds the checkpoints, then the closes, may take when the server stops (10)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="require one of the tokens FILE lists, one a line for each holder (blank lines and "
        "# comments skipped; default: beyond loopback a token is made and printed with the URL; "
        "or set ECOTONE_AUTH_TOKEN)",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        default=None,
        help="require no token, even beyond loopback (anyone who reaches the port can run the "
        "env's code: only behind something else that authenticates)",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="serve over TLS with this certificate")
    p.add_argument("--tls-key", metavar="PEM", help="its private key (if not in --tls-cert)")
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines as text (default) or one JSON object each ([log] format)",
    )
    p.add_argument(
        "--tasks",
        action="append",
        metavar="[SPLIT=]FILE",
        help="serve the tasks in FILE (JSON Lines, JSON, Parquet) instead of the env's own; "
        "SPLIT= names the split (else the records' `split` field, or the file's stem); "
        "repeatable ([tasks] in the config)",
    )
    p.add_argument(
        "--rubric",
        metavar="MODULE:NAME",
        help="score every step with this rubric (ecotone.rubrics) instead of the env's reward",
    )
    p.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="keep sessions' checkpoints in DIR (on request, and for every session left at "
        "shutdown); a server started later on DIR resumes them ([snapshots] checkpoint_dir)",
    )
    p.add_argument(
        "--snapshot-key-file",
        metavar="FILE",
        help="seal exported snapshots and checkpoints with the key in FILE (`ecotone keygen`); "
        "servers that restore each other's share it (default: one of its own, kept in "
        "--checkpoint-dir when given)",
    )
    p.add_argument("--record", metavar="DIR", help="record every episode's trajectory under DIR")
    p.add_argument("--record-format", choices=["jsonl", "msgpack"], help="recording format (jsonl)")
    p.add_argument(
        "--web",
        action="store_true",
        default=None,
        help="also serve the web UI at /web (switches the default websocket transport to http, "
        "which serves WebSocket at / too)",
    )
    p.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run each session's env in a process of its own, forked from a warm parent, so a "
        "crash of env code (a segfault, os.abort(), os._exit()) costs that session an env_error, "
        'not the server (default: as the env class says, `isolation = "process"`)',
    )
    _mcp_options(p, prefix="--mcp-")
    p.add_argument(
        "--lifeline-fd",
        type=int,
        metavar="FD",
        # Internal, hidden from --help: the process provider's lifeline (the read end of a
        # pipe whose write end the launching process holds); at its end of file the server
        # exits, so it never outlives its launcher, however the launcher dies.
        help=argparse.SUPPRESS,
    )


def mcp_arguments(p: argparse.ArgumentParser) -> None:
    """`mcp`'s flags: the env, the config and the `[mcp]` flags, unprefixed."""
    p.add_argument("env", nargs="?", help="environment name (or `env` in the config)")
    p.add_argument("--config", help="config file (default: ./ecotone.toml if present)")
    _mcp_options(p, prefix="--")


def run_mcp(args: argparse.Namespace) -> int:
    """`ecotone mcp ENV`: `serve ENV --transport mcp`, every other `serve` flag at its default."""
    defaults = argparse.ArgumentParser(add_help=False)
    serve_arguments(defaults)
    serve_args = defaults.parse_args([])
    for name, value in vars(args).items():
        setattr(serve_args, name, value)
    serve_args.command = "serve"
    serve_args.transport = "mcp"
    return run_serve(serve_args)


def _task_files(given: list[str] | None) -> dict[str, str] | None:
    """`--tasks [SPLIT=]FILE` flags as the `[tasks]` table (split "" when not named).

    Raises ValueError when two flags name the same split."""
    if not given:
        return None
    files: dict[str, str] = {}
    for item in given:
        split, sep, path = item.partition("=")
        if not sep or "/" in split or split.endswith((".jsonl", ".json", ".parquet")):
            split, path = "", item
        if split in files:
            raise ValueError(f"--tasks names split {split or '(from the file)'!r} twice")
        files[split] = path
    return files


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as config overrides: None leaves the config file's (or the default) value."""
    return {
        "env": args.env,
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
        "limits": {
            "max_sessions": args.max_sessions,
            "lease": args.lease,
            "idle_timeout": args.idle_timeout,
            "shutdown_timeout": args.shutdown_timeout,
            "drain_timeout": args.drain_timeout,
        },
        "recording": {"dir": args.record, "format": args.record_format},
        "auth": {"token_file": args.token_file, "required": False if args.no_auth else None},
        "tls": {"cert": args.tls_cert, "key": args.tls_key},
        "snapshots": {"key_file": args.snapshot_key_file, "checkpoint_dir": args.checkpoint_dir},
        "log": {
            "format": args.log_format,
            "level": "info" if args.verbose else None,
        },
        "mcp": {
            "actions": args.mcp_actions,
            "reset_tool": args.mcp_reset_tool,
            "reveal_reward": args.mcp_reveal_reward,
        },
        "web": args.web,
        "isolate": args.isolate,
        "tasks": _task_files(args.tasks),
        "rubric": args.rubric,
    }


def run_serve(args: argparse.Namespace) -> int:
    """`ecotone serve`: checks everything it can before the event loop starts (so a mistake is
    an error message and exit 2, not a traceback), then serves until SIGINT or SIGTERM, the
    lifeline's end, or the transport's; returns 0."""
    overrides = _overrides(args)
    lifeline: int | None = args.lifeline_fd
    if lifeline is not None:
        try:
            os.set_blocking(lifeline, False)
        except OSError:
            raise ValueError(f"--lifeline-fd {lifeline} is not an open file descriptor") from None
    config = load(args.config, overrides=overrides)
    configure_logs(config.log.format, config.log.level)
    registry = Registry.discover()
    build_engine(config, registry)  # an unknown env or transport fails here, before the loop
    auth = config.auth
    resolve_token(auth.token, auth.token_file, auth.required, config.host)  # a bad token too
    tls_context(config.tls.cert, config.tls.key, config.transport)  # and unusable TLS files
    transport = transport_for(config, registry)
    if not getattr(transport, "listens", True):
        raise ValueError(f"transport {config.transport!r} cannot serve: {transport.description}")
    trio.run(_serve_until_stopped, config, registry, lifeline)
    return 0


def _exit_hard_after(seconds: float, why: str = "") -> None:
    """Exit the process with status 1 in `seconds`, whatever still runs (a daemon timer),
    saying `why` on stderr first."""
    hard_exit = threading.Timer(seconds, _exit_now, (why,))
    hard_exit.daemon = True
    hard_exit.start()


def _exit_now(why: str) -> None:
    """Say `why` on stderr (one write: no lock another thread may hold) and exit with 1."""
    try:
        if why:
            os.write(2, f"ecotone: {why}; exiting now\n".encode())
    finally:
        os._exit(1)


class _HardExit:
    """The last word on a signal: a hard exit armed by the signal's handler itself, not by the
    event loop. Env code that blocks the loop (an inline env's step that sleeps) keeps trio's
    receiver from ever seeing the signal, but a Python signal handler still runs in the main
    thread between two bytecodes (and a `time.sleep` or a blocking read is interrupted for
    it), so the deadline starts the moment the signal arrives and a timer thread ends the
    process past it, whatever holds the loop.

    Not covered: C code that holds the GIL and never returns to the interpreter (the handler
    cannot run); the kubelet's SIGKILL at the end of the grace period is the last word then.
    """

    def __init__(self, limits: Any) -> None:
        self.limits = limits
        self.armed = False

    def deadline(self, signum: int) -> float:
        """Seconds the shutdown after `signum` may take: SIGTERM drains (`drain_timeout`),
        SIGINT does not; then checkpoints and closes (`shutdown_timeout` each), and the
        margin."""
        drain = self.limits.drain_timeout if signum == signal.SIGTERM else 0.0
        return drain + 2 * self.limits.shutdown_timeout + SIGNAL_EXIT_MARGIN

    def arm(self, signum: int) -> None:
        """Start the countdown (once: a second signal does not push it back)."""
        if self.armed:
            return
        self.armed = True
        seconds = self.deadline(signum)
        name = signal.Signals(signum).name
        _exit_hard_after(
            seconds,
            f"{name} came {seconds:g}s ago and the shutdown has not ended (drain_timeout "
            f"{self.limits.drain_timeout:g}s + 2 x shutdown_timeout "
            f"{self.limits.shutdown_timeout:g}s + {SIGNAL_EXIT_MARGIN:g}s): env code holds "
            "the event loop or a call that cannot be cancelled",
        )

    def watch(self, signums: tuple[int, ...]) -> None:
        """Arm at the first of `signums`, in the handler itself, then hand the signal to the
        handler installed before (trio's receiver's: call this inside
        `trio.open_signal_receiver`, which puts back the handlers it replaced, and so
        removes these, when it ends)."""
        for signum in signums:
            before = signal.getsignal(signum)

            def handler(num: int, frame: Any, before: Any = before) -> None:
                self.arm(num)
                if callable(before):
                    before(num, frame)

            signal.signal(signum, handler)


async def _watch_lifeline(fd: int, scope: trio.CancelScope) -> None:
    """Cancel `scope` when `fd` (non-blocking) reaches end of file."""
    # The launcher holds the pipe's write end, so end of file means it is gone, however it
    # died (kill -9 included), whichever of its threads started this process.
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            if not os.read(fd, 512):
                break
        except BlockingIOError:
            pass
    print(
        "ecotone: lifeline closed (the launcher stopped or died), shutting down",
        file=sys.stderr,
        flush=True,
    )
    _exit_hard_after(
        HARD_EXIT_GRACE,
        f"the lifeline closed {HARD_EXIT_GRACE:g}s ago and the shutdown has not ended",
    )
    scope.cancel()


async def _serve_until_stopped(
    config: ServerConfig, registry: Registry, lifeline: int | None
) -> None:
    """Serve `config`, say where on stderr, and stop at the first SIGINT or SIGTERM, when the
    lifeline ends, or when the transport is done."""
    stopping = Stopping()
    async with trio.open_nursery() as nursery:

        async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await serve(config, registry=registry, stopping=stopping, task_status=task_status)
            nursery.cancel_scope.cancel()  # the transport is done (stdio: stdin closed)

        if lifeline is not None:
            nursery.start_soon(_watch_lifeline, lifeline, nursery.cancel_scope)
        url = await nursery.start(run)
        print(
            f"ecotone: serving {config.env!r} over {config.transport} at {url}",
            file=sys.stderr,
            flush=True,
        )
        if config.web:
            print(f"ecotone: web UI at {web_url(url)}", file=sys.stderr, flush=True)
        if not is_loopback(config.host) and config.auth.required is False:
            print(
                f"ecotone: WARNING: serving on {config.host} with no token: anyone who "
                "can reach this port can run this env's code",
                file=sys.stderr,
                flush=True,
            )
        hard_exit = _HardExit(config.limits)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            hard_exit.watch((signal.SIGINT, signal.SIGTERM))
            async for signum in signals:
                limits = config.limits
                drain = limits.drain_timeout if signum == signal.SIGTERM else 0.0
                print(
                    f"ecotone: {signal.Signals(signum).name}, shutting down"
                    + (f" (draining for {drain:g}s at most)" if drain else ""),
                    file=sys.stderr,
                    flush=True,
                )
                # Episodes get drain_timeout; the checkpoints, then the closes,
                # shutdown_timeout each; past that and a margin the process exits anyway,
                # whatever env code still holds on (armed by the handler already, when it ran).
                hard_exit.arm(signum)
                # SIGTERM (a pod's end): admit nothing new, let running episodes end, then
                # checkpoint the sessions left (with --checkpoint-dir) and tell their clients.
                await stopping.drain(wait=signum == signal.SIGTERM)
                nursery.cancel_scope.cancel()
                break
