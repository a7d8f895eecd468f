"""Env servers the benchmark scripts start: each on a free loopback port, returned once it
accepts connections."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Mapping


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    cmd: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Run the server command `cmd` with `--port` and a free port added (and `env` added to
    this process's environment), and return it with its WebSocket URL once it accepts a
    connection. SystemExit naming the command if it exits first (with what it wrote on
    stderr) or does not listen within `timeout` seconds."""
    port = free_port()
    argv = [*cmd, "--port", str(port)]
    proc = subprocess.Popen(
        argv,
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            why = proc.stderr.read().decode() if proc.stderr else ""
            raise SystemExit(f"`{' '.join(argv)}` exited: {why}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"ws://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"`{' '.join(argv)}` did not start")
