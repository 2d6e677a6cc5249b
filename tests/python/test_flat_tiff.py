"""Issue 41: the TIFFs of `--view flat`. Every array of 2 or more dimensions with an image type
shows as `NAME.tif` (one page per plane, one tile per chunk, or strips when the chunk's last two
sides are not multiples of 16), and tifffile reads it equal to zarr-python's read of the
original; GDAL, libtiff's `tiffinfo -D` and Pillow open them; a 5-d OME image is an ImageJ
hyperstack; an OME-Zarr 0.5 image written by ngff-zarr shows as `IMAGE.ome.tif`, one series whose
3 pyramid levels equal the Zarr levels, with OME-XML that ome-types parses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from zm_harness import fixture_array_paths, require_tool, run_generator
from zm_readers import entry_for, zp_read

pytestmark = pytest.mark.mount

ARRAYS = fixture_array_paths()
IMAGE_KINDS = {("u", 1), ("u", 2), ("u", 4), ("u", 8), ("i", 1), ("i", 2), ("i", 4), ("i", 8),
               ("f", 4), ("f", 8)}
# ImageJ's hyperstack order, slowest first, and the types it holds.
IMAGEJ_AXES = "tzc"
IMAGEJ_TYPES = {np.dtype("u1"), np.dtype("u2"), np.dtype("f4")}


def is_image(a) -> bool:
    return a.ndim >= 2 and (a.dtype.kind, a.dtype.itemsize) in IMAGE_KINDS


def dimension_names(a: zarr.Array) -> list[str] | None:
    if a.metadata.zarr_format == 3:
        names = a.metadata.dimension_names
    else:
        names = a.attrs.get("_ARRAY_DIMENSIONS")
    return list(names) if names and all(names) else None


def page_order(a: zarr.Array) -> list[tuple[int, ...]]:
    """The planes in the order the .tif holds them: ImageJ's (channel fastest, then z, then t)
    when the dimension names make the array a hyperstack of a type ImageJ holds, else C order."""
    lead = a.shape[:-2]
    names = dimension_names(a)
    c_order = list(np.ndindex(*lead))
    if not lead or names is None or a.dtype not in IMAGEJ_TYPES:
        return c_order
    lower = [n.lower() for n in names]
    if lower[-2:] != ["y", "x"] or len(set(lower[:-2])) != len(lead) \
            or not set(lower[:-2]) <= set(IMAGEJ_AXES):
        return c_order
    slowest_first = sorted(range(len(lead)), key=lambda d: IMAGEJ_AXES.index(lower[d]))
    return sorted(c_order, key=lambda i: tuple(i[d] for d in slowest_first))


def check_tif(tif: Path, z: zarr.Array, want: np.ndarray) -> str:
    """Pages equal the array's planes in the file's page order; blocks as the chunks say."""
    chunks = z.chunks
    with tifffile.TiffFile(tif) as f:
        pages = [p.asarray() for p in f.pages]
        first = f.pages.first
        tiled = all(n % 16 == 0 for n in chunks[-2:])
        assert first.is_tiled == tiled, f"{tif}: tiled {first.is_tiled}, chunks {chunks}"
        if tiled:
            assert (first.tilelength, first.tilewidth) == tuple(chunks[-2:])
        else:
            assert first.rowsperstrip == min(chunks[-2], want.shape[-2])
        assert not f.is_bigtiff
    order = page_order(z)
    assert len(pages) == len(order), f"{tif}: {len(pages)} pages"
    for page, index in zip(pages, order):
        plane = want[index]
        assert page.dtype == plane.dtype.newbyteorder("<") or page.dtype == plane.dtype
        assert np.array_equal(page, plane, equal_nan=True), f"{tif}: page {index} differs"
    return "tiles" if tiled else "strips"


def test_every_tif_reads_equal(fixtures_dir, manifest, mount_factory):
    m = mount_factory(fixtures_dir, view="flat")
    seen = {"tiles": 0, "strips": 0}
    for path in ARRAYS:
        z = zarr.open_array(str(fixtures_dir / path), mode="r")
        tif = m.path / f"{path}.tif"
        decodable = not entry_for(manifest, path)["decoded_passthrough"]
        if not (is_image(z) and decodable and (m.path / f"{path}.npy").exists()):
            assert not tif.exists(), f"{path}: a {z.dtype}{z.shape} array has a .tif"
            continue
        seen[check_tif(tif, z, zp_read(fixtures_dir, path))] += 1
    assert seen["tiles"] > 0 and seen["strips"] > 0, seen


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """2-d arrays for the other readers: uint8 in 16 x 32 tiles, uint16 in 10 x 7 chunks (strips),
    and an int16 with a ragged edge."""
    root = tmp_path_factory.mktemp("tif-images")
    g = zarr.open_group(str(root / "images.zarr"), mode="w")
    rng = np.random.default_rng(41)
    data = {
        "u8": (rng.integers(0, 255, (70, 90), dtype=np.uint8), (16, 32)),
        "u16": (rng.integers(0, 65535, (45, 37), dtype=np.uint16), (10, 7)),
        "i16": (rng.integers(-3000, 3000, (33, 50), dtype=np.int16), (32, 16)),
    }
    for name, (a, chunks) in data.items():
        g.create_array(name, data=a, chunks=chunks)
    return root


def test_other_readers_open_2d_tifs(images, mount_factory, tmp_path):
    m = mount_factory(images, view="flat")
    base = m.path / "images.zarr"
    tiffinfo, gdalinfo, gdal_translate = require_tool("tiffinfo"), require_tool("gdalinfo"), require_tool("gdal_translate")
    from PIL import Image

    for name in ("u8", "u16", "i16"):
        tif = base / f"{name}.tif"
        want = zarr.open_array(str(images / "images.zarr" / name), mode="r")[...]
        # libtiff reads every block without complaint.
        res = subprocess.run([tiffinfo, "-D", str(tif)], capture_output=True, text=True)
        assert res.returncode == 0 and "error" not in (res.stdout + res.stderr).lower(), res
        # GDAL: the size, then a copy whose pixels equal the array.
        res = subprocess.run([gdalinfo, str(tif)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert f"Size is {want.shape[1]}, {want.shape[0]}" in res.stdout
        out = tmp_path / f"gdal-{name}.tif"
        res = subprocess.run([gdal_translate, "-q", "-of", "GTiff", str(tif), str(out)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert np.array_equal(tifffile.imread(out), want), f"{name}: GDAL's copy differs"
    # Pillow opens 8- and 16-bit grayscale.
    for name, mode in (("u8", "L"), ("u16", "I;16")):
        want = zarr.open_array(str(images / "images.zarr" / name), mode="r")[...]
        with Image.open(base / f"{name}.tif") as im:
            assert im.mode == mode
            assert np.array_equal(np.asarray(im), want), f"{name}: Pillow reads other pixels"


@pytest.fixture(scope="module")
def ome_fixtures(tmp_path_factory) -> Path:
    return run_generator("gen_ome_fixtures.py", tmp_path_factory.mktemp("ome"))


def test_5d_ome_image_is_an_imagej_hyperstack(ome_fixtures, mount_factory):
    m = mount_factory(ome_fixtures / "ngff-zarr", view="flat")
    level = "tczyx.ome.zarr/scale0/image"
    z = zarr.open_array(str(ome_fixtures / "ngff-zarr" / level), mode="r")
    t, c, zs = z.shape[:3]
    with tifffile.TiffFile(m.path / f"{level}.tif") as f:
        meta = f.imagej_metadata
        assert meta is not None
        assert (meta["frames"], meta["channels"], meta["slices"]) == (t, c, zs)
        assert meta["images"] == t * c * zs and meta["hyperstack"] is True
        assert f.series[0].axes == "TZCYX"
        got = f.series[0].asarray()
    assert np.array_equal(got, z[...].transpose(0, 2, 1, 3, 4))


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory) -> Path:
    """An OME-Zarr 0.5 c,y,x image of 3 levels written by ngff-zarr, with channel labels."""
    import ngff_zarr as nz

    root = tmp_path_factory.mktemp("pyramid")
    y, x = np.indices((128, 96))
    data = np.stack([(y * 3 + x) % 1000, (y * x) % 977]).astype(np.uint16)
    image = nz.to_ngff_image(data, dims=["c", "y", "x"], scale={"y": 0.25, "x": 0.5},
                             axes_units={"y": "micrometer", "x": "micrometer"}, name="cells")
    ms = nz.to_multiscales(image, scale_factors=[{"y": 2, "x": 2}, {"y": 4, "x": 4}],
                           chunks=(1, 32, 32), method=nz.Methods.DASK_BIN_SHRINK)
    nz.to_ome_zarr(str(root / "cells.ome.zarr"), ms, version="0.5")
    g = zarr.open_group(str(root / "cells.ome.zarr"), mode="r+")
    ome = dict(g.attrs["ome"])
    ome["omero"] = {"channels": [{"label": "DAPI"}, {"label": "GFP"}]}
    g.attrs["ome"] = ome
    return root


def test_ome_zarr_image_as_ome_tiff(pyramid, mount_factory):
    from ome_types import from_xml

    m = mount_factory(pyramid, view="flat")
    g = zarr.open_group(str(pyramid / "cells.ome.zarr"), mode="r")
    datasets = g.attrs["ome"]["multiscales"][0]["datasets"]
    levels = [g[d["path"]][...] for d in datasets]
    assert len(levels) == 3
    with tifffile.TiffFile(m.path / "cells.ome.zarr.ome.tif") as f:
        assert f.is_ome and len(f.series) == 1
        series = f.series[0]
        assert len(series.levels) == 3
        for i, (level, want) in enumerate(zip(series.levels, levels)):
            assert level.shape == want.shape, f"level {i}"
            assert np.array_equal(level.asarray(), want), f"level {i} differs"
        ome = from_xml(f.ome_metadata)
    pixels = ome.images[0].pixels
    assert (pixels.size_x, pixels.size_y, pixels.size_c, pixels.size_z, pixels.size_t) \
        == (96, 128, 2, 1, 1)
    assert pixels.type.value == "uint16"
    assert (pixels.physical_size_x, pixels.physical_size_y) == (0.5, 0.25)
    assert pixels.physical_size_x_unit.value == "µm"
    assert [ch.name for ch in pixels.channels] == ["DAPI", "GFP"]
