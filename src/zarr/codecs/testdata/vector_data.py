"""The array contents the vector generators (make_vectors.py for zarr-python 3,
make_v2_vectors.py for zarr-python 2) write: deterministic, with smooth runs for
the compressors and full-range values for the decoders."""

import numpy as np


def data(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    dt = np.dtype(dtype).newbyteorder("=")  # generate natively; zarr stores as asked
    if dt.kind == "b":
        a = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        # smooth-ish data so compressors have something to do, plus full-range values
        a = (np.arange(n) * 37 + info.min // 2).astype(dt)
        a[::7] = rng.integers(info.min, info.max, len(a[::7]), dtype=dt, endpoint=True)
    elif dt.kind == "c":
        a = (np.linspace(-10, 10, n) + 1j * rng.standard_normal(n)).astype(dt)
    else:
        a = (np.linspace(-1000, 1000, n) + rng.standard_normal(n)).astype(dt)
    return a.reshape(shape)
