"""Running the suite: `run(...)` for a report, `ConformanceSuite` for pytest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Unpack

from ecotone.conformance.checks import CHECKS
from ecotone.conformance.registry import PROTOCOL_CHECKS, check_named
from ecotone.conformance.report import Report, Status
from ecotone.conformance.runner import Runner, SettingKnobs, Settings
from ecotone.conformance.target import open_target
from ecotone.kernel import EnvSpec, Registry


def run(
    env: str | type | EnvSpec | None = None,
    *,
    url: str | None = None,
    registry: Registry | None = None,
    checks: Iterable[str] | None = None,
    protocol: bool | None = None,
    **knobs: Unpack[SettingKnobs],
) -> Report:
    """Run the checks (those named, or by default the env's checks, and the protocol's when
    `protocol` is true: by default with a `url`) against `env` in process or the server at
    `url`. `knobs` are `Settings`' fields (seeds, steps, max_episode_steps, reset_options,
    timeout), their defaults where left out.

    Raises:
        TargetError: the env or server cannot be had (see `open_target`).
        TypeError: a knob that is not a setting.
        ValueError: no seeds, or fewer than one step.
    """
    settings = Settings.of(knobs, "run()")
    target = open_target(env, url=url, registry=registry, timeout=settings.timeout)
    runner = Runner(target, settings)
    try:
        return runner.report(checks, protocol)
    finally:
        runner.close()


class ConformanceSuite:
    """Subclass in your test suite to get one pytest test per check:

        from ecotone.conformance import ConformanceSuite

        class TestMyEnv(ConformanceSuite):
            env = "myenv"                  # an installed env's name, or the env class itself
            # url = "ws://127.0.0.1:8000"  # or check a running server
            reset_options = {"max_steps": 20}

    Knobs (class attributes): `env`, `url`, `registry` (for `env` names not installed through
    entry points), `seeds`, `steps`, `max_episode_steps`, `reset_options`, `timeout`, and
    `protocol` (add a test per protocol check: by default when `url` is set). A failed
    check fails its test with the same "expected ... / seen ..." line `ecotone validate`
    prints; a check that cannot apply is skipped with its reason.

    The base class and subclasses that set neither `env` nor `url` are not collected.
    """

    __test__: ClassVar[bool] = False
    env: ClassVar[str | type | None] = None
    url: ClassVar[str | None] = None
    registry: ClassVar[Registry | None] = None
    seeds: ClassVar[Sequence[int]] = (0, 1, 2)
    steps: ClassVar[int] = 10
    max_episode_steps: ClassVar[int] = 500
    reset_options: ClassVar[Mapping[str, Any]] = {}
    timeout: ClassVar[float] = 30.0
    protocol: ClassVar[bool | None] = None

    _runner: ClassVar[Runner | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__test__" not in cls.__dict__:
            cls.__test__ = cls.env is not None or cls.url is not None
        protocol = cls.url is not None if cls.protocol is None else cls.protocol
        if protocol:
            for name in PROTOCOL_CHECKS:
                if not hasattr(cls, f"test_{name}"):
                    setattr(cls, f"test_{name}", _test(name))

    @classmethod
    def setup_class(cls) -> None:
        settings = Settings(
            seeds=cls.seeds,
            steps=cls.steps,
            max_episode_steps=cls.max_episode_steps,
            reset_options=dict(cls.reset_options),
            timeout=cls.timeout,
        )
        target = open_target(cls.env, url=cls.url, registry=cls.registry, timeout=settings.timeout)
        cls._runner = Runner(target, settings)

    @classmethod
    def teardown_class(cls) -> None:
        if cls._runner is not None:
            cls._runner.close()
            cls._runner = None

    def conformance(self, name: str) -> None:
        """Run check `name` (once per class) and turn its result into pytest's."""
        import pytest  # only when tests run: ecotone does not depend on pytest

        runner = type(self)._runner
        assert runner is not None, "setup_class did not run"
        result = runner.run(name)
        if result.status is Status.FAIL:
            pytest.fail(f"{name}: {result.message}", pytrace=False)
        if result.status is Status.SKIP:
            pytest.skip(f"{name}: {result.reason}")


def _test(name: str) -> Callable[[ConformanceSuite], None]:
    def test(self: ConformanceSuite) -> None:
        self.conformance(name)

    test.__name__ = test.__qualname__ = f"test_{name}"
    test.__doc__ = check_named(name).title
    return test


for _name in CHECKS:
    setattr(ConformanceSuite, f"test_{_name}", _test(_name))
