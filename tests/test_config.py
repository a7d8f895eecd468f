"""Server configuration: ecotone.toml, then ECOTONE_* variables, then command-line flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from ecotone.kernel import Limits
from ecotone.kernel.config import ConfigError, ServerConfig, load, structure

FULL_TOML = """\
env = "echo"
transport = "websocket"
host = "0.0.0.0"
port = 9100

[limits]
max_sessions = 12
lease = 30.5
max_frame_bytes = 65536
ping_interval = 5
ping_timeout = 7.5
"""


def write(tmp_path: Path, text: str, name: str = "ecotone.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_without_any_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load(environ={}) == ServerConfig()
    assert ServerConfig() == ServerConfig(
        env=None, transport="websocket", host="127.0.0.1", port=8000, limits=Limits()
    )


def test_a_toml_file_sets_every_field(tmp_path: Path) -> None:
    config = load(write(tmp_path, FULL_TOML), environ={})
    assert config == ServerConfig(
        env="echo",
        transport="websocket",
        host="0.0.0.0",
        port=9100,
        limits=Limits(
            max_sessions=12,
            lease=30.5,
            max_frame_bytes=65536,
            ping_interval=5.0,
            ping_timeout=7.5,
        ),
    )
    assert isinstance(config.limits.ping_interval, float)


def test_ecotone_toml_in_the_working_directory_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, 'env = "counter"\nport = 9001\n')
    monkeypatch.chdir(tmp_path)
    config = load(environ={})
    assert (config.env, config.port) == ("counter", 9001)


def test_ecotone_config_names_the_file_to_read(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 9002\n", "elsewhere.toml")
    assert load(environ={"ECOTONE_CONFIG": str(path)}).port == 9002


def test_environment_variables_override_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL_TOML)
    environ = {
        "ECOTONE_ENV": "counter",
        "ECOTONE_PORT": "9200",
        "ECOTONE_LIMITS_MAX_SESSIONS": "64",
        "ECOTONE_LIMITS_LEASE": "none",
        "PATH": "/usr/bin",  # not ours: ignored
    }
    config = load(path, environ=environ)
    assert (config.env, config.port, config.host) == ("counter", 9200, "0.0.0.0")
    assert config.limits.max_sessions == 64
    assert config.limits.lease is None
    assert config.limits.max_frame_bytes == 65536  # untouched by the environment


def test_flags_override_the_environment_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL_TOML)
    config = load(
        path,
        environ={"ECOTONE_PORT": "9200", "ECOTONE_LIMITS_MAX_SESSIONS": "64"},
        overrides={
            "env": "counter",
            "port": 0,
            "host": None,  # a flag not given: ignored
            "limits": {"max_sessions": 3, "lease": None},
        },
    )
    assert (config.env, config.port, config.host) == ("counter", 0, "0.0.0.0")
    assert (config.limits.max_sessions, config.limits.lease) == (3, 30.5)


def test_idle_timeout_still_works_as_the_lease_and_says_it_is_deprecated(tmp_path: Path) -> None:
    deprecated = r"`idle_timeout` is deprecated: it is now the session lease, `lease` in \[limits\]"
    with pytest.warns(FutureWarning, match=deprecated):
        assert load(write(tmp_path, "[limits]\nidle_timeout = 12\n"), environ={}).limits.lease == 12
    with pytest.warns(FutureWarning, match=deprecated):
        config = load(environ={"ECOTONE_LIMITS_IDLE_TIMEOUT": "none", "ECOTONE_CONFIG": ""})
    assert config.limits.lease is None
    with pytest.warns(FutureWarning, match=deprecated):  # `ecotone serve --idle-timeout 7`
        config = load(environ={"ECOTONE_CONFIG": ""}, overrides={"limits": {"idle_timeout": 7}})
    assert config.limits.lease == 7
    with pytest.warns(FutureWarning, match=deprecated):
        limits = Limits(idle_timeout=3.0)  # type: ignore[call-arg]
    assert limits == Limits(lease=3.0)
    assert limits.idle_timeout == 3.0  # read under its old name, too
    # the flag wins over the file, whichever name each uses
    path = write(tmp_path, "[limits]\nlease = 30\n")
    with pytest.warns(FutureWarning):
        config = load(path, environ={}, overrides={"limits": {"idle_timeout": 5}})
    assert config.limits.lease == 5


def test_lease_and_idle_timeout_that_differ_in_one_place_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[limits]\nlease = 30\nidle_timeout = 5\n")
    with pytest.raises(ConfigError, match=r"both limits\.lease .* limits\.idle_timeout"):
        load(path, environ={})
    with pytest.raises(ValueError, match="both lease"):
        Limits(lease=1.0, idle_timeout=2.0)  # type: ignore[call-arg]


def test_a_misspelt_limit_is_an_error_naming_the_dotted_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[limits]\nmax_sesions = 5\n")
    with pytest.raises(ConfigError, match=r"limits\.max_sesions"):
        load(path, environ={})


def test_a_misspelt_top_level_key_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key prot"):
        load(write(tmp_path, "prot = 80\n"), environ={})


def test_a_misspelt_limit_in_the_environment_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"limits\.max_sesions"):
        load(environ={"ECOTONE_LIMITS_MAX_SESIONS": "4", "ECOTONE_CONFIG": ""})


def test_an_unknown_ecotone_variable_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="ECOTONE_PROT"):
        load(environ={"ECOTONE_PROT": "80"})


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('port = "eighty"\n', "port"),
        ("port = 80.5\n", "port"),
        ("port = true\n", "port"),
        ("env = 3\n", "env"),
        ('[limits]\nmax_sessions = "many"\n', "limits.max_sessions"),
        ('[limits]\nping_timeout = "soon"\n', "limits.ping_timeout"),
        ("[limits]\nlease = false\n", "limits.lease"),
    ],
)
def test_a_value_of_the_wrong_type_is_an_error_naming_the_key(
    tmp_path: Path, toml: str, key: str
) -> None:
    with pytest.raises(ConfigError) as wrong:
        load(write(tmp_path, toml), environ={})
    assert f"@ {key}" in str(wrong.value)
    assert str(tmp_path) in str(wrong.value)  # and the file it came from


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"port": 70000}, "port must be 0..65535"),
        ({"limits": {"max_sessions": 0}}, "max_sessions must be > 0"),
        ({"limits": {"ping_timeout": -1}}, "ping_timeout must be > 0"),
    ],
)
def test_out_of_range_values_are_errors_naming_the_field(data: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        structure(data)


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=f"{missing} does not exist"):
        load(missing, environ={})


def test_a_file_that_is_not_toml_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "port = = 3\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load(path, environ={})


def test_plugin_variables_under_the_prefix_are_left_alone() -> None:
    config = load(environ={"ECOTONE_CODING_SANDBOX": "bwrap", "ECOTONE_PORT": "9300"})
    assert config.port == 9300
