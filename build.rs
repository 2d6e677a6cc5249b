//! Build script: what `--version` says of the build (ZARR_MOUNT_BUILD): the git commit of a
//! release build ("commit unknown" outside a git tree: a crate tarball, an sdist), "debug
//! build" otherwise. Debug builds leave the commit out so that a commit does not rebuild the
//! crate during development.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        println!("cargo:rustc-env=ZARR_MOUNT_BUILD=debug build");
        return;
    }
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ZARR_MOUNT_BUILD=commit {commit}");
    // HEAD moves on a checkout; its reflog on every commit (in a worktree both live in the
    // worktree's own git directory, which --git-path finds).
    for file in ["HEAD", "logs/HEAD"] {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", file]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
