"""`python -m tests.serve_with_test_envs serve ENV ...`: the `ecotone` command, with the test
suite's env plugins registered as if they were installed (for tests that need a real
`ecotone serve` process, signals and all)."""

from __future__ import annotations

import sys

from ecotone import cli
from ecotone.kernel import Registry
from tests import envs, hostile_envs

_discover = Registry.discover


def _with_test_envs() -> Registry:
    registry = _discover()
    registry.register(envs, "ecotone-tests")
    registry.register(hostile_envs, "ecotone-hostile-tests")
    return registry


Registry.discover = staticmethod(_with_test_envs)  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
