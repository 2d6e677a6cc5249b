"""Regenerate the bundled sample store examples/sample.zarr (run with the project venv:
`.venv/bin/python scripts/make_sample.py`). Small on purpose: it is committed."""

import shutil
import sys
from pathlib import Path

import numpy as np
import zarr

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "examples" / "sample.zarr")
shutil.rmtree(out, ignore_errors=True)
root = zarr.open_group(str(out), mode="w", attributes={"description": "zarr-mount sample store"})
img = root.create_group("images", attributes={"kind": "demo"})
# A sharded array: 2x2 shards of 4x4 inner chunks (16x16 each), zstd-compressed inner chunks.
temp = img.create_array(
    "temperature", shape=(60, 50), chunks=(16, 16), shards=(32, 32), dtype="float32",
    fill_value=0.0, compressors=zarr.codecs.ZstdCodec(level=3), dimension_names=["y", "x"],
    attributes={"units": "degC"},
)
y, x = np.mgrid[0:60, 0:50]
temp[:] = (20 + 5 * np.sin(y / 9.0) * np.cos(x / 7.0)).astype("float32")
temp[0:16, 0:16] = 0.0  # left at the fill value: that inner chunk is absent
# An unsharded array next to it, passed through as is.
counts = root.create_array("counts", shape=(10,), chunks=(5,), dtype="int64")
counts[:] = np.arange(10)
zarr.consolidate_metadata(str(out))
print(f"wrote {out}")
