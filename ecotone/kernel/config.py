"""Server configuration: `ecotone.toml`, overridden by environment variables, overridden by
command-line flags. Structured with cattrs, so a wrong key or type is an error naming it.

    # ecotone.toml
    env = "counter"
    transport = "websocket"
    host = "127.0.0.1"
    port = 8000
    web = false            # true: also serve the web UI at /web (implies the http transport)
    isolate = true         # each session's env in a process of its own (default: as the env says)

    [limits]               # every limit: ecotone/kernel/limits.py
    max_sessions = 1024
    lease = 300.0          # seconds a session stays its client's with nothing from it
    max_frame_bytes = 4194304
    ping_interval = 20.0
    ping_timeout = 20.0

    [auth]                 # bearer token: required by default beyond loopback
    token_file = "/run/secrets/ecotone-tokens"  # one token per holder, or token = "..."

    [access]               # browsers: Origins allowed besides the server's own, Host names
    origins = ["https://lab.example"]
    hosts = ["envs.lab.example"]

    [mcp]                  # the MCP face: actions as tools, a reset tool, rewards shown
    actions = true
    reset_tool = false
    reveal_reward = false

    [tls]                  # wss://, https://, tcp+tls:// (PEM files)
    cert = "/etc/ecotone/cert.pem"
    key = "/etc/ecotone/key.pem"

    [openenv]              # OpenEnv's routes
    invalid_action = "observation"   # or "error" (the default: OpenEnv's VALIDATION_ERROR)

    [metrics]              # GET /metrics (Prometheus)
    step_latency = false   # histograms of step and other call durations (a hook per call)

    [log]
    format = "json"        # or "text"; one JSON object per line
    level = "info"         # session events are info

    [snapshots]            # snapshots and checkpoints (docs/snapshots.md)
    key_file = "/run/secrets/ecotone-snapshot-key"   # shared by replicas that resume each other
    checkpoint_dir = "/var/lib/ecotone/checkpoints"  # sessions resumable after a restart

    [recording]            # trajectory recording, off unless dir is set
    dir = "runs/traj"
    format = "jsonl"       # or "msgpack"

    [launch]               # how `ecotone launch` starts a server (ecotone.launcher.config)
    provider = "process"   # or "podman", "docker", or a plugin's
    transport = "websocket"
    image = "localhost/ecotone-counter:latest"   # containers; default: what `ecotone build` names
    ready_timeout = 60.0
    [launch.resources]
    memory_mb = 1024
    cpus = 1.0
    pids = 256
    [launch.options]       # provider-specific: sandbox = true (process), user = "1000:1000"...

Environment variables: `ECOTONE_ENV`, `ECOTONE_TRANSPORT`, `ECOTONE_HOST`, `ECOTONE_PORT`,
`ECOTONE_WEB`, `ECOTONE_ISOLATE` (`true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`), and
`ECOTONE_LIMITS_<NAME>` for each limit (`ECOTONE_LIMITS_MAX_SESSIONS=64`),
`ECOTONE_RECORDING_DIR`, `ECOTONE_RECORDING_FORMAT`, `ECOTONE_AUTH_TOKEN`,
`ECOTONE_AUTH_TOKEN_FILE`, `ECOTONE_AUTH_REQUIRED`, `ECOTONE_MCP_<NAME>`,
`ECOTONE_METRICS_STEP_LATENCY`, `ECOTONE_LOG_FORMAT`, `ECOTONE_LOG_LEVEL`,
`ECOTONE_TLS_CERT`, `ECOTONE_TLS_KEY`, `ECOTONE_OPENENV_INVALID_ACTION` and
`ECOTONE_SNAPSHOTS_<NAME>` (`ECOTONE_SNAPSHOTS_KEY_FILE`, `..._CHECKPOINT_DIR`). The value `none`
clears an optional limit. An unknown `ECOTONE_LIMITS_*` variable, or one a letter or two away
from a known name (`ECOTONE_PROT`), is an error; other `ECOTONE_*` names are left to plugins
(e.g. `ECOTONE_CODING_SANDBOX`).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import attrs
import cattrs
from cattrs.v import format_exception

from ecotone.kernel.limits import Limits, lease_from_alias

ENV_PREFIX = "ECOTONE_"
T = TypeVar("T")


class ConfigError(ValueError):
    """The configuration is wrong; the message names the key and the source."""


def _format(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ("jsonl", "msgpack"):
        raise ValueError(f"{attribute.name} must be 'jsonl' or 'msgpack', got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class RecordingConfig:
    """Server-side trajectory recording (ecotone.recording): off unless `dir` is set."""

    dir: str | None = None
    """Where episodes are written, one file per episode under DIR/ENV/."""
    format: str = attrs.field(default="jsonl", validator=_format)
    """`jsonl` (JSON Lines) or `msgpack`."""


@attrs.frozen(slots=True, kw_only=True)
class AuthConfig:
    """Bearer-token authentication (`[auth]`): every request, on every transport but stdio
    and inproc, must carry the token (HTTP `Authorization: Bearer`, `?token=` in the URL, the
    web UI's cookie, or `hello`'s `token` on tcp/unix)."""

    token: str | None = None
    token_file: str | None = None
    """A file holding the tokens, one per line (blank lines and `#` comments skipped), one
    for each holder: any one admits, and `limits.max_sessions_per_token` counts each
    holder's sessions together; `ECOTONE_AUTH_TOKEN_FILE`."""
    required: bool | None = None
    """None (the default): required when the server binds beyond loopback, where a token is
    made and printed if none is given."""


TOKEN_VARIABLE = "ECOTONE_AUTH_TOKEN"
"""The variable a server reads its token from (what launchers hand a server they start)."""


def with_token(url: str, token: str) -> str:
    """`url` carrying `?token=`: how a server's URL is shown when it needs a token, so that
    the URL works as it is (the clients take the token out and send it in a header)."""
    return f"{url}{'&' if '?' in url else '?'}token={quote(token, safe='')}"


@attrs.frozen(slots=True, kw_only=True)
class AccessConfig:
    """Who may talk to the server from a browser (`[access]`): the defences against web pages
    (a page's socket or form aimed at a local server) and DNS rebinding."""

    origins: list[str] = attrs.field(factory=list)
    """Origins allowed besides the server's own (`"https://lab.example:8443"`; `"*"` for
    any). A request with another `Origin` header is refused 403; one without is not a
    browser's."""
    hosts: list[str] | None = None
    """Host names the `Host` header may carry (port ignored; `"*"` for any). None: the
    loopback names when bound to loopback, any otherwise (where a token is required)."""


@attrs.frozen(slots=True, kw_only=True)
class McpConfig:
    """The MCP face (`[mcp]`): what an agent reaching an env over MCP may do and see."""

    actions: bool | None = None
    """Offer the env's actions as tools (one per action variant, or `step`). None: as the
    env class says (`mcp_actions`), else yes for an env without tools of its own."""
    reset_tool: bool = False
    """Offer a `reset` tool. Off: resetting is the orchestrator's (or happens once, when an
    MCP connection that brought no shared session starts)."""
    reveal_reward: bool = False
    """Show `reward`, `done` and `truncated` in tool results (hidden by default: they are
    the orchestrator's)."""


@attrs.frozen(slots=True, kw_only=True)
class TlsConfig:
    """TLS for the transports over TCP (`[tls]`): websocket becomes wss://, http https://,
    tcp tcp+tls://. Both files are PEM; `key` may be left out when `cert` holds it too."""

    cert: str | None = None
    key: str | None = None


@attrs.frozen(slots=True, kw_only=True)
class OpenEnvConfig:
    """OpenEnv's routes (`[openenv]`)."""

    invalid_action: str = attrs.field(
        default="error", validator=attrs.validators.in_(("error", "observation"))
    )
    """`error`: an action the env refuses is OpenEnv's VALIDATION_ERROR on `/ws` (its client
    raises) and a 422 over HTTP. `observation`: an observation instead, with `error`,
    `field` and `details`, reward 0 and the episode going on, for consumers that show the
    model observations but end a rollout on an error."""


@attrs.frozen(slots=True, kw_only=True)
class MetricsConfig:
    """`GET /metrics` (`[metrics]`): Prometheus' text format, on the http and websocket
    transports, behind the same admission as every route."""

    step_latency: bool = False
    """Measure each env call's duration: a histogram of steps per env, and one per env and
    op of every other call (open, reset, state, close, tools, render). Off by default: it
    costs a hook call per step and turns off the `step_many` fast path."""


@attrs.frozen(slots=True, kw_only=True)
class LogConfig:
    """How the server logs (`[log]`), on stderr."""

    format: str = attrs.field(default="text", validator=attrs.validators.in_(("text", "json")))
    """`text`, or `json`: one JSON object per line, each session event with its fields
    (`event`, `session`, `env`, `reason`, `episode_id`, `seed`)."""
    level: str = attrs.field(
        default="warning", validator=attrs.validators.in_(("debug", "info", "warning", "error"))
    )
    """The least severe level logged; session events are `info`."""


@attrs.frozen(slots=True, kw_only=True)
class SnapshotConfig:
    """Snapshots and durable checkpoints (`[snapshots]`; docs/snapshots.md)."""

    key_file: str | None = None
    """The key that seals exported snapshots and checkpoints: 32 bytes (64 hex digits) in a
    file only its owner may read (`ecotone keygen FILE` makes one). Servers that restore
    each other's snapshots share it. None: one made at start (or, with `checkpoint_dir`,
    kept there), so exports restore on this server only."""
    checkpoint_dir: str | None = None
    """Where sessions' checkpoints are written (sealed, atomically), one file per session
    under its resume key: on request (`snapshot` with `durable`: a client connected with
    `resume=True` asks every `checkpoint_every` steps) and for every session left when the
    server stops. A server started on the same directory resumes them
    (`ecotone.connect(..., resume=True)`). None: no checkpoints."""


@attrs.frozen(slots=True, kw_only=True)
class ServerConfig:
    """Everything `ecotone serve` needs."""

    env: str | None = None
    transport: str = "websocket"
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8000)
    limits: Limits = attrs.field(factory=Limits)
    recording: RecordingConfig = attrs.field(factory=RecordingConfig)
    auth: AuthConfig = attrs.field(factory=AuthConfig)
    access: AccessConfig = attrs.field(factory=AccessConfig)
    mcp: McpConfig = attrs.field(factory=McpConfig)
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)
    tls: TlsConfig = attrs.field(factory=TlsConfig)
    openenv: OpenEnvConfig = attrs.field(factory=OpenEnvConfig)
    log: LogConfig = attrs.field(factory=LogConfig)
    snapshots: SnapshotConfig = attrs.field(factory=SnapshotConfig)
    rubric: str | None = None
    """`MODULE:NAME` of a rubric (`ecotone.rubrics`) to score every step with, in place of
    the env's own."""
    tasks: dict[str, str] = attrs.field(factory=dict)
    """`[tasks]`: task files to serve instead of the env's own tasks, split name -> path
    (JSON Lines, JSON, Parquet); under the split name "" a file whose records name their
    split (or whose stem does)."""
    launch: dict[str, Any] = attrs.field(factory=dict)
    """The `[launch]` table as read: `ecotone.launcher.config.launch_config` structures it
    (the kernel knows nothing of providers)."""
    web: bool = False
    """Serve the web UI at `/web`. The page speaks HTTP, so with the default `websocket`
    transport this switches to `http`, which serves ecotone's WebSocket at `/` as well."""
    isolate: bool | None = None
    """Run each session's env in a process of its own, forked from a warm parent, so that a
    crash of env code (a segfault, `os.abort()`, `os._exit()`) is that session's
    `env_error`, not the server's end (`ecotone.server.isolation`). None (the default): as
    the env class says (`isolation = "process"`); false: never, whatever it says."""

    def __attrs_post_init__(self) -> None:
        if self.web and self.transport == "websocket":
            object.__setattr__(self, "transport", "http")

    @port.validator
    def _port(self, _: attrs.Attribute[int], value: int) -> None:
        if not 0 <= value <= 65535:
            raise ValueError(f"port must be 0..65535, got {value}")


_BOOLEANS = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def structure_float(value: Any, _: type) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)

    def structure_int(value: Any, _: type) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError(f"expected an integer, got {value!r}")
        if not isinstance(value, int | float | str):
            raise TypeError(f"expected an integer, got {value!r}")
        return int(value)

    def structure_str(value: Any, _: type) -> str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value

    def structure_bool(value: Any, _: type) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOLEANS:
            return _BOOLEANS[value.strip().lower()]
        raise TypeError(f"expected true or false, got {value!r}")

    conv.register_structure_hook(bool, structure_bool)
    conv.register_structure_hook(float, structure_float)
    conv.register_structure_hook(int, structure_int)
    conv.register_structure_hook(str, structure_str)
    return conv


_CONVERTER = _converter()


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


_TOP_KEYS = ("env", "transport", "host", "port", "web", "isolate", "rubric", "config")
_TABLES = (
    "limits",
    "recording",
    "auth",
    "mcp",
    "metrics",
    "log",
    "tls",
    "openenv",
    "snapshots",
)
"""The tables set by `ECOTONE_<TABLE>_<NAME>` variables and by flags (`[access]` takes
lists: the config file only)."""


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower()
        parsed: Any = None if value.lower() == "none" else value
        table = next((t for t in _TABLES if key.startswith(f"{t}_")), None)
        if table is not None:
            data.setdefault(table, {})[key[len(table) + 1 :]] = parsed
        elif key in ("env", "transport", "host", "port", "web", "isolate", "rubric"):
            data[key] = parsed
        elif key == "config" or not difflib.get_close_matches(key, _TOP_KEYS, n=1, cutoff=0.75):
            continue  # not ours: plugins keep their own ECOTONE_<PLUGIN>_... variables
        else:  # a near miss of one of ours (ECOTONE_PROT): surely a typo
            tables = ", ".join(f"ECOTONE_{t.upper()}_<name>" for t in _TABLES)
            raise ConfigError(
                f"unknown environment variable {name}: ecotone reads ECOTONE_ENV, "
                "ECOTONE_TRANSPORT, ECOTONE_HOST, ECOTONE_PORT, ECOTONE_WEB, ECOTONE_ISOLATE, "
                "ECOTONE_RUBRIC, "
                f"ECOTONE_CONFIG and {tables}"
            )
    return data


_EXTRA_KEYS = re.compile(r"^extra fields found \((?P<keys>[^)]*)\) @ (?P<path>.*)$")


def _describe(exc: BaseException, type_: type | None) -> str:
    """cattrs' description, except that a validator's message (`max_sessions must be > 0`)
    is kept rather than reduced to `invalid value`."""
    if isinstance(exc, ValueError) and type_ is None and str(exc):
        return str(exc)
    return format_exception(exc, type_)


def _name_extra_keys(problem: str) -> str:
    """`extra fields found (max_sesions) @ limits` -> `unknown key limits.max_sesions`."""
    match = _EXTRA_KEYS.match(problem)
    if match is None:
        return problem
    prefix = "" if match["path"] == "$" else match["path"] + "."
    keys = ", ".join(prefix + key for key in match["keys"].split(", "))
    return f"unknown key {keys}"


def structure_as(data: Mapping[str, Any], type_: type[T], source: str, path: str = "") -> T:
    """Build an attrs config record of `type_` from plain data; errors name the key
    (`limits.max_sessions`), prefixed with `path` (`launch`) for a table read on its own."""
    root = f"$.{path}" if path else "$"
    try:
        return _CONVERTER.structure(dict(data), type_)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(
            _name_extra_keys(msg.replace("$.", "", 1))
            for msg in cattrs.transform_error(exc, path=root, format_exception=_describe)
        )
        raise ConfigError(f"invalid {source}: {problems}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {source}: {exc}") from None


def structure(data: Mapping[str, Any], source: str = "configuration") -> ServerConfig:
    """Build a ServerConfig from plain data; errors name the key (`limits.max_sessions`)."""
    return structure_as(_renamed(data, source), ServerConfig, source)


def _renamed(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`data` with `limits.idle_timeout` (deprecated) given as `limits.lease`, warning once."""
    limits = data.get("limits")
    if not isinstance(limits, Mapping) or "idle_timeout" not in limits:
        return dict(data)
    try:
        return {**data, "limits": lease_from_alias(dict(limits), "limits.")}
    except ValueError as exc:
        raise ConfigError(f"invalid {source}: {exc}") from None


def load(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """File, then environment variables, then `overrides` (CLI flags; None values ignored).

    Without `path`, `$ECOTONE_CONFIG` or `./ecotone.toml` is read when it exists.
    """
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    source = "configuration"
    if path is None:
        path = environ.get("ECOTONE_CONFIG") or (
            "ecotone.toml" if Path("ecotone.toml").is_file() else None
        )
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        source = f"config (file {path}, environment, flags)"
        data = _renamed(data, f"config file {path}")
    data = _merge(data, _renamed(_from_environ(environ), "environment"))
    if overrides:
        flat = {k: v for k, v in overrides.items() if v is not None and k not in _TABLES}
        data = _merge(data, flat)
        for table in _TABLES:
            given = {k: v for k, v in (overrides.get(table) or {}).items() if v is not None}
            if given:
                data = _merge(data, _renamed({table: given}, "flags"))
    return structure(data, source)
