#!/usr/bin/env python3
"""Write src/views/flat/mapping/testdata/npy_headers.json: the bytes numpy writes before the data of a
.npy file, for the data types and shapes the flat view shows, as test vectors for
src/views/flat/mapping/npy.rs. Run with the suite's interpreter: .venv/bin/python scripts/gen_npy_headers.py"""

import io
import json
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

DESCRS = ["<u2", "|u1", "|b1", "<i8", "<f2", "<f4", "<c8", "<c16", "<M8[10ms]", "<m8[s]", "<M8[D]",
          "|S5", "<U3"]
SHAPES = [(), (0,), (5,), (2, 3), (20000, 20000), (1, 2, 3, 4, 5), (123456789012, 7)]


def header(descr: str, shape: tuple) -> bytes:
    d = {"descr": npformat.dtype_to_descr(np.dtype(descr)), "fortran_order": False, "shape": shape}
    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, d)
    return buf.getvalue()


def main() -> None:
    out = [{"descr": descr, "shape": list(shape), "header": header(descr, shape).hex()}
           for descr in DESCRS for shape in SHAPES]
    dest = Path(__file__).resolve().parents[1] / "src" / "views" / "flat" / "mapping" / "testdata" / "npy_headers.json"
    dest.write_text(json.dumps({"numpy": np.__version__, "vectors": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
