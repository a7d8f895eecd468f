"""Comparing what Gymnasium-style code returns: nested tuples and dicts of numpy arrays."""

from __future__ import annotations

import numpy as np


def same(a: object, b: object, where: str = "") -> None:
    """Equal values of the same types, arrays by dtype, shape and content (NaN equal to NaN),
    tuples item by item and dicts key by key; `where` names the place in the assertion."""
    assert type(a) is type(b), where
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        assert a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)  # NaN where both have NaN
    else:
        assert a == b, where
