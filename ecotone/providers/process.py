"""The `process` provider: `ecotone serve` as a local subprocess, optionally in a bubblewrap
sandbox.

    with ecotone.launch("counter", provider="process", transport="unix", sandbox=True) as env:
        env.reset(seed=0)

The rules it keeps, beyond the provider contract (`ecotone.providers.contract`):

- Each server gets a private folder, `$TMPDIR/ecotone-process-*/`, that holds its
  output (`server.log`: stdout and stderr in one file, so no pipe can fill and block the
  server), its unix socket (`sock/server.sock`), and what `gc()` reads: `owner` (the owner
  label of the launching process), `labels.json`, `processes` (the owner labels of the
  processes started, so `gc` kills only those very processes, never a reused pid) and
  `group` (the server's process group id and a random token, see below). `stop()` removes
  the folder; the log's tail stays readable through `logs()` afterwards.
- Helpers an env starts (in the server's process group, since the server runs in a session
  of its own) outlive a server that ends on its lifeline. So the server's environment holds
  `ECOTONE_SERVER_TOKEN`, a random token its helpers inherit, and `gc()` kills, for an owner
  that is gone, the processes of that group (or session) that carry that very token: never
  a process that merely got a reused group id.
- The command is `python -m ecotone serve --transport T --host H --port 0 ... -- ENV`, run
  with this process's Python and working directory (so `./ecotone.toml` and local modules
  are seen as `ecotone serve` run here would see them), and this process's environment plus
  `spec.environment` plus `spec.secrets`. Secrets travel only in the environment, never on
  the command line.
- A server on a network transport requires a token (on 127.0.0.1 every local user reaches
  its port): the server makes it and prints it in its URL (`?token=`), which becomes
  `handle.url`; a token in `spec.secrets` (`ECOTONE_AUTH_TOKEN`) is used instead.
- The port: the server binds port 0 itself and prints the address the kernel gave it
  (`ecotone: serving 'ENV' over T at URL`); the provider reads it from the log. A port
  picked here and handed down would be free when picked and maybe taken when bound (by
  another process, or by a concurrent start): the server's own bind has no such race.
- No orphans. The server inherits the read end of a pipe (`ecotone serve --lifeline-fd`)
  whose write end only this process holds; when this process dies, however it dies (kill -9
  included), the kernel closes that end and the server shuts down (and exits within 5 s
  even if an env call cannot be cancelled). Not `prctl(PR_SET_PDEATHSIG)`, nor bubblewrap's
  `--die-with-parent`, which rests on it: the parent-death signal fires when the *thread*
  that forked the child exits, and trio forks in a cached worker thread that exits after 10 s
  idle: a `--die-with-parent` sandbox started under trio is killed 10 s later, measured. The
  pipe does not care which thread started the server, nor about the sandbox's pid namespace.
  A launcher that forks without exec hands the write end to its child too: the server then
  lives until both are gone.
- `stop()` sends SIGTERM to the server's process group (the server runs in its own session,
  so any helper processes an env started go too; in a sandbox, the sandbox's), closes the
  lifeline, waits `timeout`, then SIGKILLs what is left, the sandbox's whole pid namespace
  included.
- `sandbox=True` runs the server under bubblewrap: `--ro-bind / /` (a read-only root),
  `--dev /dev --proc /proc`, `--tmpfs /tmp` (its own, empty /tmp: the host's is hidden, except
  that the interpreter, its import path and the working directory, where they live under
  /tmp, are mounted back read-only), `--unshare-all` (own pid, ipc, uts, cgroup,
  user and network namespaces), `--new-session` (no terminal to inject input into). With
  the `unix` transport the network stays unshared (only its own `lo`) and only the socket's
  folder is mounted writable; the TCP transports (`websocket`, `http`, `tcp`) need
  `--share-net`, since a port in an unshared namespace cannot be reached from here, and then
  the server has the host's network. Everything the server starts dies with it (the pid
  namespace ends with its first process). No bubblewrap: `EngineUnavailable`.
- Options: `sandbox` (bool, default False); `host` (the address a TCP transport binds,
  default 127.0.0.1: the ray provider binds a node's address). Any other option, or an
  `image`, is a ValueError that names it, as is what `check_spec` refuses.
- Resources are not enforced: `memory_mb`, `cpus` and `pids` need cgroups, which only the
  container providers set up. The rlimits at hand do not fit: RLIMIT_AS counts address space
  that Python, numpy and thread stacks reserve but never use, so a 1 GiB cap breaks healthy
  envs; RLIMIT_NPROC counts every process of the user (and not at all for root). A spec
  that asks for other than the default limits gets a warning in the log, not a fake limit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets as secrets_module
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, final

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from ecotone.kernel.config import TOKEN_VARIABLE as AUTH_TOKEN_VARIABLE
from ecotone.kernel.config import with_token
from ecotone.providers.contract import (
    EngineUnavailable,
    LaunchSpec,
    ReadinessTimeout,
    Resources,
    StartFailed,
    check_spec,
    last_lines,
)
from ecotone.providers.owner import (
    label_pid,
    labels_for,
    owner_alive,
    owner_label,
    running_here,
)
from ecotone.providers.ready import wait_ready
from ecotone.specs.hookspecs import hookimpl

log = logging.getLogger("ecotone.providers.process")

FOLDER_PREFIX = "ecotone-process-"
LOG_NAME = "server.log"
SOCKET_NAME = "server.sock"
OPTIONS = ("sandbox", "host")
KILL_WAIT = 5.0
"""Seconds to wait for the server to go after SIGKILL (it cannot refuse; this bounds a
process stuck in the kernel)."""
FAILURE_TAIL = 40
"""Lines of output quoted by StartFailed and ReadinessTimeout."""
KEPT_LOG_BYTES = 1 << 20
"""How much of the log `logs()` still returns once `stop()` removed the folder."""
TOKEN_VARIABLE = "ECOTONE_SERVER_TOKEN"
"""In the server's environment, inherited by its helpers: what `gc` recognises them by."""

_SERVING = re.compile(r"^ecotone: serving .* over (\S+) at (\S+)$")


def _options(spec: LaunchSpec) -> bool:
    """The `sandbox` flag; any other option is a ValueError naming it, as is what
    `check_spec` refuses."""
    check_spec(spec)
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"the process provider has no option {unknown[0]!r} (options: {', '.join(OPTIONS)})"
        )
    sandbox = spec.options.get("sandbox", False)
    if not isinstance(sandbox, bool):
        raise ValueError(f"option 'sandbox' must be true or false, got {sandbox!r}")
    if spec.image is not None:
        raise ValueError(
            f"the process provider runs no image (image={spec.image!r}): "
            "use the podman or docker provider"
        )
    host = spec.options.get("host", "127.0.0.1")
    on_unix = spec.transport == "unix" and "host" in spec.options
    if not isinstance(host, str) or not host or on_unix:
        raise ValueError(
            f"option 'host' must be the address a TCP transport binds, got {host!r}"
            + (" (the unix transport binds no address)" if spec.transport == "unix" else "")
        )
    return sandbox


def serve_command(spec: LaunchSpec, host: str, lifeline_fd: int) -> list[str]:
    """`python -m ecotone serve ...` for `spec` (no secret on it, ever)."""
    command = [sys.executable, "-m", "ecotone", "serve", "--transport", spec.transport]
    command += ["--host", host, "--port", "0", "--lifeline-fd", str(lifeline_fd)]
    if spec.max_sessions is not None:
        command += ["--max-sessions", str(spec.max_sessions)]
    return [*command, "--", spec.env]


def _needed_under_tmp() -> list[str]:
    """What the server needs that the sandbox's own /tmp would hide: this interpreter, its
    import path and the working directory, where they live under /tmp (a clone in /tmp with
    its venv, as CI has it). The outermost of nested paths only."""
    wanted = {sys.prefix, os.path.dirname(sys.executable), os.getcwd(), *sys.path}
    under = sorted(
        {os.path.realpath(p) for p in wanted if p and os.path.exists(p)}
        | {p for p in wanted if p and os.path.exists(p)},
    )
    # /tmp itself (a script run from /tmp has it on sys.path) is not bound: the server needs
    # its packages, not the launcher's scratch files, and keeps its own empty /tmp.
    under = [p for p in under if p.startswith("/tmp/")]
    kept: list[str] = []
    for path in under:  # sorted: a parent comes before its children
        if not any(path.startswith(parent + "/") for parent in kept):
            kept.append(path)
    return kept


def sandbox_command(bwrap: str, transport: str, socket_dir: Path, info_fd: int) -> list[str]:
    """The bubblewrap prefix (see the module docstring for why each flag)."""
    command = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    command += ["--tmpfs", "/tmp"]  # before any bind below /tmp, which it would hide
    for path in _needed_under_tmp():  # a venv or checkout under /tmp stays visible, read-only
        command += ["--ro-bind", path, path]
    command += ["--unshare-all", "--new-session", "--info-fd", str(info_fd)]
    if transport == "unix":
        command += ["--bind", str(socket_dir), str(socket_dir)]
    else:
        command += ["--share-net"]
    return [*command, "--"]


def _server_environment(spec: LaunchSpec, token: str) -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONUNBUFFERED"] = "1"  # so logs() shows what the env printed, when it did
    environment.update(spec.environment)
    environment.update(spec.secrets)
    environment[TOKEN_VARIABLE] = token
    if spec.transport != "unix" and not environment.get(AUTH_TOKEN_VARIABLE):
        # On 127.0.0.1 every local user reaches the port: the server makes a token and
        # prints it in the URL the provider reads back (a unix socket's folder is private).
        environment["ECOTONE_AUTH_REQUIRED"] = "true"
    return environment


def _authenticated_url(url: str, spec: LaunchSpec) -> str:
    """The announced URL, carrying the token the spec gave the server (a server prints only
    a token it made itself)."""
    given = spec.secrets.get(AUTH_TOKEN_VARIABLE) or spec.environment.get(AUTH_TOKEN_VARIABLE)
    if given and spec.transport != "unix" and "token=" not in url:
        return with_token(url, given)
    return url


def _read_tail(path: Path, max_bytes: int) -> str:
    """The last `max_bytes` of a file ("" when it is gone)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    if size > max_bytes:
        data = data.split(b"\n", 1)[-1]  # drop the partial first line
    return data.decode("utf-8", "replace")


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@final
class ProcessServer:
    """A server the process provider started (a `ServerHandle`).

    `pid` is the process started here: the server itself, or bubblewrap with `sandbox`."""

    provider = "process"

    def __init__(
        self,
        *,
        env: str,
        process: anyio.abc.Process,
        folder: Path,
        lifeline: int,
        sandboxed: bool,
    ) -> None:
        self.env = env
        self.url = ""
        self.pid = process.pid
        self.id = str(process.pid)
        self.folder = folder
        self.sandboxed = sandboxed
        self._process = process
        self._lifeline: int | None = lifeline
        self._sandbox_pid: int | None = None
        """The sandbox's first process (bubblewrap's init, host pid): its process group holds
        the server; SIGKILL to it ends the whole pid namespace."""
        self._sandbox_label: str | None = None
        self._log_path = folder / LOG_NAME
        self._log_offset = 0
        self._log_partial = b""
        self._kept_log = ""
        self._stop_lock = anyio.Lock()
        self._stopped = False

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else f"pid {self.pid}"
        return f"<ProcessServer {self.env!r} at {self.url or '(starting)'} {state}>"

    def _set_sandbox_pid(self, pid: int | None) -> None:
        self._sandbox_pid = pid
        self._sandbox_label = owner_label(pid) if pid is not None else None

    # --- the ServerHandle face ---

    async def logs(self, tail: int | None = 200) -> str:
        """What the server printed (stdout and stderr), its last `tail` lines (None: all of
        it; after `stop()`, of its last MiB)."""
        if self._stopped:
            return last_lines(self._kept_log, tail)
        window = 1 << 62 if tail is None else max(KEPT_LOG_BYTES, tail * 1024)
        text = await anyio.to_thread.run_sync(_read_tail, self._log_path, window)
        return last_lines(text, tail)

    async def alive(self) -> bool:
        """Whether the server is still running."""
        await anyio.lowlevel.checkpoint()  # asyncio records an exit from its loop
        return self._process.returncode is None

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; remove the folder. Safe to call again."""
        async with self._stop_lock:
            if self._stopped:
                return
            with anyio.CancelScope(shield=True):  # half a stop would leave things behind
                try:
                    await self._terminate(timeout)
                finally:
                    self._remove_folder()
                    self._stopped = True

    # --- start ---

    async def _wait_started(self, spec: LaunchSpec, deadline: float) -> None:
        """Until the server answers at its URL; StartFailed or ReadinessTimeout otherwise."""
        url = await self._announced_url(spec, deadline)
        try:
            answered = await wait_ready(url, deadline, alive=self.alive)
        except TimeoutError as exc:
            raise await self._timeout(spec, str(exc)) from None
        if not answered:
            raise await self._exited(spec)
        self.url = _authenticated_url(url, spec)

    async def _announced_url(self, spec: LaunchSpec, deadline: float) -> str:
        """The URL from the server's `ecotone: serving ...` line, read off its log (every
        5-20 ms: a read of a small file, and each later look costs the caller's start)."""
        delay = 0.005
        while True:
            url = self._scan_log()
            if url is not None:
                return url
            if not await self.alive():
                raise await self._exited(spec)
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                raise await self._timeout(spec, "it did not announce its address")
            await anyio.sleep(min(delay, remaining))
            delay = min(delay * 1.5, 0.02)

    def _scan_log(self) -> str | None:
        try:
            with open(self._log_path, "rb") as f:
                f.seek(self._log_offset)
                data = f.read(1 << 20)
        except OSError:
            return None
        self._log_offset += len(data)
        lines = (self._log_partial + data).split(b"\n")
        self._log_partial = lines.pop()
        for line in lines:
            match = _SERVING.match(line.decode("utf-8", "replace").rstrip())
            if match is not None:
                return match.group(2)
        return None

    async def _exited(self, spec: LaunchSpec) -> StartFailed:
        with anyio.move_on_after(KILL_WAIT):
            await self._process.wait()
        code = self._process.returncode
        return StartFailed(
            f"`ecotone serve {spec.env}` ({self._kind()}) exited with code {code} during start",
            logs=await self.logs(FAILURE_TAIL),
            exit_code=code,
        )

    async def _timeout(self, spec: LaunchSpec, why: str) -> ReadinessTimeout:
        return ReadinessTimeout(
            f"`ecotone serve {spec.env}` ({self._kind()}) was not ready within "
            f"{spec.ready_timeout:g}s ({why}); it has been killed",
            logs=await self.logs(FAILURE_TAIL),
        )

    def _kind(self) -> str:
        return f"{'sandboxed ' if self.sandboxed else ''}pid {self.pid}"

    # --- stop ---

    def _signal(self, signum: int) -> None:
        """Send `signum` to the server's process group. In a sandbox, that is the group of
        bubblewrap's init (which ignores it: the server exits, and init and bubblewrap follow);
        SIGKILL also goes to init itself, which takes the whole pid namespace down."""
        if self._sandbox_pid is not None and self._sandbox_label is not None:
            if running_here(self._sandbox_label):  # still that process, not a reused pid
                _signal_group(self._sandbox_pid, signum)
                if signum == signal.SIGKILL:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self._sandbox_pid, signal.SIGKILL)
            if signum != signal.SIGKILL:
                return
        _signal_group(self.pid, signum)

    def _close_lifeline(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None

    async def _terminate(self, timeout: float) -> None:
        if self._process.returncode is None:
            self._signal(signal.SIGTERM)
            self._close_lifeline()  # the server reads this as "shut down" too
            with anyio.move_on_after(timeout):
                await self._process.wait()
        await self._kill()

    async def _kill(self) -> None:
        """SIGKILL whatever is left, reap the server, close the lifeline."""
        if self._process.returncode is None:
            self._signal(signal.SIGKILL)
        with anyio.move_on_after(KILL_WAIT):
            await self._process.wait()
            # bubblewrap leaves as soon as its init reports the server's exit; init follows
            # once its last child is gone. SIGKILL to init ends what is left in the sandbox.
            while self._sandbox_pid is not None and self._sandbox_label is not None:
                if not running_here(self._sandbox_label):
                    break
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._sandbox_pid, signal.SIGKILL)
                await anyio.sleep(0.005)
        # Helpers the env started in the server's group, if the server left without them.
        _signal_group(self.pid, signal.SIGKILL)
        self._close_lifeline()

    def _remove_folder(self) -> None:
        self._kept_log = _read_tail(self._log_path, KEPT_LOG_BYTES)
        shutil.rmtree(self.folder, ignore_errors=True)


async def _sandbox_pid(info_fd: int, deadline: float) -> int | None:
    """The host pid of the sandbox's first process, from bubblewrap's `--info-fd` JSON
    (written right after the sandbox is created, then closed). None if bubblewrap failed."""
    os.set_blocking(info_fd, False)
    data = b""
    with anyio.move_on_after(max(deadline - anyio.current_time(), 0.5)):
        while True:
            try:
                chunk = os.read(info_fd, 4096)
            except BlockingIOError:
                await anyio.wait_readable(info_fd)
                continue
            if not chunk:
                break
            data += chunk
    try:
        pid = json.loads(data)["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) else None


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@final
class ProcessProvider:
    """Runs `ecotone serve` as a local subprocess; `sandbox=True` puts it in bubblewrap."""

    name = "process"
    description = "`ecotone serve` as a local subprocess (option sandbox: in bubblewrap)"

    def __repr__(self) -> str:
        return "<ProcessProvider>"

    async def start(self, spec: LaunchSpec) -> ProcessServer:
        """Start `ecotone serve` for `spec`; return once it answers at its URL."""
        sandbox = _options(spec)
        bwrap = shutil.which("bwrap") if sandbox else None
        if sandbox and bwrap is None:
            raise EngineUnavailable(
                "the process provider's sandbox needs bubblewrap (the `bwrap` command), which "
                "is not installed (apt-get install bubblewrap, dnf install bubblewrap)"
            )
        if spec.resources != Resources():
            log.warning(
                "the process provider enforces no resource limits (asked for %s): use the "
                "podman or docker provider for limits",
                spec.resources,
            )
        deadline = anyio.current_time() + spec.ready_timeout
        folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        try:
            server = await self._spawn(spec, folder, bwrap, deadline)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        try:
            await server._wait_started(spec, deadline)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await server._kill()
                server._remove_folder()
                server._stopped = True
            raise
        return server

    async def _spawn(
        self, spec: LaunchSpec, folder: Path, bwrap: str | None, deadline: float
    ) -> ProcessServer:
        labels = labels_for(spec.env, dict(spec.labels))
        _write(folder / "owner", owner_label() + "\n")
        _write(folder / "labels.json", json.dumps(labels, indent=2) + "\n")
        socket_dir = folder / "sock"
        if spec.transport == "unix":
            socket_dir.mkdir(mode=0o700)
        tcp_host = str(spec.options.get("host", "127.0.0.1"))
        host = str(socket_dir / SOCKET_NAME) if spec.transport == "unix" else tcp_host

        token = secrets_module.token_hex(16)
        lifeline_read, lifeline_write = os.pipe()
        info_read = info_write = None
        log_fd = os.open(folder / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            command = serve_command(spec, host, lifeline_read)
            pass_fds = [lifeline_read]
            if bwrap is not None:
                info_read, info_write = os.pipe()
                pass_fds.append(info_write)
                command = sandbox_command(bwrap, spec.transport, socket_dir, info_write) + command
            try:
                process = await anyio.open_process(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=subprocess.STDOUT,
                    env=_server_environment(spec, token),
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
            except OSError as exc:
                raise StartFailed(f"could not run {command[0]}: {exc}") from exc
        except BaseException:
            os.close(lifeline_write)
            if info_read is not None:
                os.close(info_read)
            raise
        finally:
            os.close(lifeline_read)
            os.close(log_fd)
            if info_write is not None:
                os.close(info_write)

        # Its own session: its process group's id is its pid.
        _write(folder / "group", f"{process.pid} {token}\n")
        server = ProcessServer(
            env=spec.env,
            process=process,
            folder=folder,
            lifeline=lifeline_write,
            sandboxed=bwrap is not None,
        )
        try:
            if info_read is not None:
                with anyio.CancelScope(shield=True):  # without it, the sandbox could not be ended
                    server._set_sandbox_pid(await _sandbox_pid(info_read, deadline))
            pids = [server.pid] + ([server._sandbox_pid] if server._sandbox_pid else [])
            _write(folder / "processes", "".join(owner_label(pid) + "\n" for pid in pids))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await server._kill()
            raise
        finally:
            if info_read is not None:
                os.close(info_read)
        return server

    async def gc(self) -> list[str]:
        """Remove the folders (and kill the processes, if any still run) that servers of
        owners who are gone left in the temporary folder."""
        return await anyio.to_thread.run_sync(collect_garbage)


def _helpers(group: int, token: str) -> list[int]:
    """The processes of process group (or session) `group` whose environment holds `token`
    (as TOKEN_VARIABLE): what a server started, even after the server itself is gone. A
    process that only got a reused group id lacks the token."""
    wanted = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            if group not in (int(fields[2]), int(fields[3])):  # pgrp, session
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if wanted in environ:
            found.append(int(entry))
    return found


def collect_garbage(root: str | None = None) -> list[str]:
    """`gc()` without the event loop: `root` is where to look (default: the temp folder)."""
    removed = []
    for folder in sorted(Path(root or tempfile.gettempdir()).glob(FOLDER_PREFIX + "*")):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            owner = (folder / "owner").read_text().strip()
        except OSError:
            continue  # being created (no owner yet), or not ours to read
        if owner_alive(owner):
            continue
        killed = []
        try:
            labels = (folder / "processes").read_text().split()
        except OSError:
            labels = []
        for label in labels:
            if running_here(label):  # that very process still runs (not a reused pid)
                pid = label_pid(label) or 0
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        try:
            group, token = (folder / "group").read_text().split()
            valid = int(group) > 0 and len(token) >= 32
            helpers = _helpers(int(group), token) if valid else []
        except (OSError, ValueError):
            helpers = []
        for pid in sorted(set(helpers) - set(killed)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        try:
            env = json.loads((folder / "labels.json").read_text()).get("ecotone.env", "?")
        except (OSError, ValueError, AttributeError):
            env = "?"
        shutil.rmtree(folder, ignore_errors=True)
        what = f"folder {folder} (env {env!r}, owner {owner} is gone)"
        removed.append(what + (f"; killed pid {', '.join(map(str, killed))}" if killed else ""))
    return removed


@hookimpl
def ecotone_providers() -> Mapping[str, Any]:
    return {"process": ProcessProvider()}
