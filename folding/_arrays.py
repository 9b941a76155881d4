"""Small array helpers shared by the model and the solvers."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["unique_sorted"]


def unique_sorted(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``np.unique`` of an integer array, by sorting.

    The same sorted distinct values; numpy 2's hashing ``np.unique`` is two orders of
    magnitude slower on arrays whose values are mostly distinct (a level array's
    units: 160 ms against 1 ms at 75,000 leaves).
    """
    arr = np.sort(np.asarray(values, dtype=np.int64), axis=None)
    if arr.size < 2:
        return arr
    keep = np.empty(arr.size, dtype=np.bool_)
    keep[0] = True
    np.not_equal(arr[1:], arr[:-1], out=keep[1:])
    return arr[keep]
