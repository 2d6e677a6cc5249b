//! The project venv's Python (scripts/setup.sh makes it: zarr-python, tensorstore, moto) for
//! writing test data and reading through mounts, and small file-tree helpers those tests share.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

/// Run `script` (`python -c`) with `args`; panics with its output when it fails.
pub fn run_python(script: &str, args: &[&Path]) {
    let out = Command::new(venv_python()).arg("-c").arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file below `root` with its bytes, as (path relative to root, bytes).
pub fn files_under(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// A zip written by zarr-python's ZipStore: `big` (2048x2048 float32, 16 MiB, sharded,
/// uncompressed) and `small` (40x30 int32 arange, sharded), for by-range reading tests.
pub fn write_zip_sample(archive: &Path) {
    run_python(
        "import sys, zarr, numpy as np\n\
         s = zarr.storage.ZipStore(sys.argv[1], mode='w')\n\
         g = zarr.open_group(s, mode='w')\n\
         big = g.create_array('big', shape=(2048, 2048), chunks=(256, 256), shards=(1024, 1024), dtype='float32', compressors=None)\n\
         big[:] = np.random.default_rng(0).standard_normal((2048, 2048), dtype='float32')\n\
         small = g.create_array('small', shape=(40, 30), chunks=(5, 6), shards=(20, 12), dtype='int32')\n\
         small[:] = np.arange(1200, dtype='int32').reshape(40, 30)\n\
         s.close()\n",
        &[archive],
    );
}
