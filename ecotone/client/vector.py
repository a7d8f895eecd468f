"""`ecotone.VectorEnv` and `ecotone.AsyncVectorEnv`: N remote sub-envs stepped as one.

The code is written once (`ecotone/client/_async/vector.py`, with the blocking face generated
from it) around the sans-IO `VectorCore` (`_vector/`); this module is their public face.
Needs numpy (`pip install ecotone[gymnasium]` brings it); `import ecotone` does not.
"""

from ecotone.client._async.vector import AsyncVectorEnv
from ecotone.client._sync.vector import VectorEnv
from ecotone.client._vector.batching import add_info, seeds_for, split_actions, stack
from ecotone.client._vector.failures import (
    EpisodeLost,
    Failure,
    FailureCode,
    ObservationMismatch,
    SubEnvError,
    raise_failures,
)
from ecotone.client._vector.policy import AutoresetMode, ErrorPolicy
from ecotone.client._vector.subenvs import StepBatch, pipelines

__all__ = [
    "AsyncVectorEnv",
    "AutoresetMode",
    "EpisodeLost",
    "ErrorPolicy",
    "Failure",
    "FailureCode",
    "ObservationMismatch",
    "StepBatch",
    "SubEnvError",
    "VectorEnv",
    "add_info",
    "pipelines",
    "raise_failures",
    "seeds_for",
    "split_actions",
    "stack",
]
