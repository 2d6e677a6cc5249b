//! Build script: the git commit for `--version` (ZARR_MOUNT_COMMIT), "unknown" outside a git
//! tree (a crate tarball, an sdist).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ZARR_MOUNT_COMMIT={commit}");
    // HEAD moves on a checkout; its reflog on every commit (in a worktree both live in the
    // worktree's own git directory, which --git-path finds).
    for file in ["HEAD", "logs/HEAD"] {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", file]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
