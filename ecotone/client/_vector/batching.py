"""Gymnasium's conventions for batches, with no core: actions split per sub-env, seeds per
sub-env, infos batched, a field stacked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ecotone.client.results import StepResult


def metadata_of(result: StepResult[Any]) -> dict[str, Any]:
    obs = result.observation
    meta = obs.get("metadata") if isinstance(obs, dict) else getattr(obs, "metadata", None)
    return dict(meta) if meta else {}


def add_info(infos: dict[str, Any], info: dict[str, Any], i: int, n: int) -> dict[str, Any]:
    """Gymnasium's `VectorEnv._add_info`: `info` of sub-env `i` into the batched `infos`."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get("final_obs")
            if array is None:
                array = np.full(n, fill_value=None, dtype=object)
            array[i] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, i, n)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or issubclass(type(value), np.number):
                    array = np.zeros(n, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, fill_value=None, dtype=object)
            array[i] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[i] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


def split_actions(actions: Any, n: int) -> list[Any]:
    """N per-env actions from a sequence (or an array, along its first axis), or from a dict
    of per-field arrays (`{"delta": np.array([...])}` -> one dict per sub-env). numpy arrays
    become plain values here, in one `tolist` each (what the wire carries anyway), rather
    than one numpy scalar per sub-env for the encoder to convert item by item."""
    if isinstance(actions, dict):
        keys = list(actions)
        if not keys:
            return [{} for _ in range(n)]
        columns = [_column(actions[k], k, n) for k in keys]
        if len(keys) == 1:
            key = keys[0]
            return [{key: value} for value in columns[0]]
        return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
    out = actions.tolist() if isinstance(actions, np.ndarray) and actions.ndim else list(actions)
    if len(out) != n:
        raise ValueError(f"{len(out)} actions given for {n} sub-envs")
    return out


def _column(values: Any, field: str, n: int) -> list[Any]:
    """The first `n` values of one field of a dict of per-field arrays, as a list."""
    if isinstance(values, Mapping):  # its keys are not values; nested dicts are not split
        raise ValueError(
            f"action field {field!r} is a mapping, not one value per sub-env: "
            "give a list of actions, one per sub-env"
        )
    try:
        column = values.tolist() if isinstance(values, np.ndarray) else list(values)
    except TypeError:
        column = None
    if not isinstance(column, list):  # a scalar (a 0-d array's `tolist` is one too)
        raise ValueError(f"action field {field!r} is not one value per sub-env: {values!r}")
    if len(column) < n:
        raise ValueError(f"action field {field!r} has {len(column)} values for {n} sub-envs")
    return column[:n] if len(column) > n else column


def seeds_for(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Gymnasium's convention: an int gives sub-env i `seed + i`; a list gives each its own."""
    if seed is None:
        return [None] * n
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(n)]
    seeds = [None if s is None else int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds given for {n} sub-envs")
    return seeds


def stack(observations: Sequence[Any], field: str, dtype: Any = None) -> np.ndarray:
    """One field of every observation as a numpy array (`stack(obs, "count")`): dicts and
    typed observations alike."""
    if observations and isinstance(observations[0], dict):
        return np.asarray([o[field] for o in observations], dtype=dtype)
    return np.asarray([getattr(o, field) for o in observations], dtype=dtype)
