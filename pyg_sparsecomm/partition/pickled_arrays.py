"""How the partitioners' statistics pickle their NumPy arrays: as plain Python numbers.

``CommStats`` and ``HeteroCommStats`` travel with a partitioned graph: in a dataset's processed file
(a ``pre_transform``), which PyG loads with ``torch.load(weights_only=True)`` (no NumPy globals), and
as an argument of ``torch.multiprocessing``/``mp.spawn``.  A tensor made while pickling dies with the
pickling call, and ``torch.multiprocessing`` shares a tensor argument by a file descriptor that must
outlive it (a partitioned ``Data`` passed to ``mp.spawn`` failed with ``unable to resize file``), so
an array travels as ``(dtype, shape, values)``; files written before 0.4 hold tensors, also read.
"""
from typing import Any

import numpy as np
from torch import Tensor


def plain_array(value: Any) -> Any:
    """``(dtype, shape, flat values)`` of a NumPy array (anything else unchanged)."""
    if isinstance(value, np.ndarray):
        return str(value.dtype), tuple(value.shape), value.reshape(-1).tolist()
    return value


def numpy_array(value: Any) -> Any:
    """The array of :func:`plain_array`'s triple or of a tensor (anything else unchanged)."""
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], str):
        dtype, shape, flat = value
        return np.asarray(flat, dtype=dtype).reshape(shape)
    return value
