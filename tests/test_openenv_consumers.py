"""Consumers of OpenEnv servers against ecotone, as their users run them: verifiers' OpenEnv
taskset (verifiers 0.4, in its own venv: VERIFIERS_PYTHON; see tests/verifiers/) plays wordle
rollouts through its own code path (openenv's client over `/ws`, `GET /schema`) with a
scripted player instead of a model, in both of ecotone's invalid-action modes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ecotone.kernel.config import OpenEnvConfig
from tests.conftest import run_server

DRIVER = Path(__file__).parent / "verifiers" / "vf_driver.py"
VARIABLE = "VERIFIERS_PYTHON"


@pytest.fixture(scope="session")
def verifiers_python() -> str:
    path = os.environ.get(VARIABLE, "")
    if not path:
        reason = f"{VARIABLE} is not set (`make pytest` sets it to .venv-vf/bin/python)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


@pytest.mark.parametrize("mode", ["observation", "error"])
def test_verifiers_openenv_taskset_plays_rollouts_against_ecotone(
    verifiers_python: str, mode: str, tmp_path: Path
) -> None:
    with run_server("wordle", openenv=OpenEnvConfig(invalid_action=mode)) as server:
        base = "http://" + server.url.split("://", 1)[1]
        done = subprocess.run(
            [verifiers_python, str(DRIVER), base, "--invalid-action", mode],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "HOME": str(tmp_path)},  # verifiers writes its caches there
        )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["verifiers"] == "0.4.0"
    clean, invalid = report["scenarios"]
    # the dataset row's reset ({"task": "crane"}) reached the server, and the word was found
    assert clean["final_reward"] == pytest.approx(1.7)
    assert [t["sent"]["data"] for t in clean["env_turns"]] == [
        {"task": "crane"},
        {"guess": "slate"},
        {"guess": "crane"},
    ]
    if mode == "observation":  # the refused word comes back to the model; the rollout goes on
        assert invalid["episode_ok"] and invalid["final_reward"] == pytest.approx(1.7)
        assert invalid["env_turns"][1]["observation"]["error"].startswith("invalid action")
    else:  # OpenEnv's VALIDATION_ERROR: openenv's client raises, verifiers fails the episode
        assert not invalid["episode_ok"]
        assert any("VALIDATION_ERROR" in e for e in invalid["episode_errors"])


NEMO_DRIVER = Path(__file__).parent / "nemo" / "nemo_driver.py"


@pytest.fixture(scope="session")
def nemo_python() -> str:
    path = os.environ.get("NEMO_PYTHON", "")
    if not path:
        reason = "NEMO_PYTHON is not set (`make pytest` sets it where Python 3.12 is found)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


@pytest.mark.parametrize("mode", ["observation", "error"])
def test_nemo_gyms_openenv_resources_server_plays_against_ecotone(
    nemo_python: str, mode: str, tmp_path: Path
) -> None:
    """NeMo Gym's own OpenEnv resources server and agent (0.4, unmodified) over a shim
    `Environment` that forwards to the ecotone server with openenv's client (NeMo Gym's
    adapter runs envs in process: it has no client for a server), with a scripted model
    speaking OpenAI's Responses API. A refused word reaches the model either way: as an
    observation, or as NeMo Gym's `{"error": ..., "result": null}` tool output."""
    with run_server("wordle", openenv=OpenEnvConfig(invalid_action=mode)) as server:
        base = "http://" + server.url.split("://", 1)[1]
        done = subprocess.run(
            [nemo_python, str(NEMO_DRIVER), base, "--invalid-action", mode],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "HOME": str(tmp_path)},
        )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["nemo_gym"] == "0.4.0"
    assert [t["called"] for t in report["turns"]] == [
        {"guess": "zzzzz"},
        {"guess": "slate"},
        {"guess": "crane"},
    ]
    assert report["verify_reward"] == pytest.approx(1.7)
