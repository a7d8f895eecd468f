"""TRL on ecotone envs: `environment_factory(url_or_env)` for `GRPOTrainer`.

Needs no TRL import itself (TRL reads the class it returns): see `ecotone.trl.factory` and
docs/llm-training.md.
"""

from ecotone.trl.factory import RESET_KEYS, environment_factory, observation_text

__all__ = ["RESET_KEYS", "environment_factory", "observation_text"]
