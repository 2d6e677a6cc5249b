//! Real mounts for integration tests: start the binary in the foreground, wait until the
//! kernel lists the mount, and always unmount and reap it on drop (also when a test panics).
//! `zfs` holds the helpers of tests that drive `ZarrFs` without FUSE.

pub mod python;
pub mod s3;
pub mod soak;
pub mod zfs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_zarr-mount");

/// How far `Mount::advance_clock` moves a test daemon's clock: past any metadata TTL a test
/// sets (the object-store default is 60 s).
pub const CLOCK_STEP_SECS: &str = "3600";
/// What a daemon logs when its test clock has moved (src/clock.rs).
const CLOCK_ADVANCED: &str = "test clock advanced";

/// Whether a test server that cannot be installed or started fails the test (CI=true, as CI
/// sets it, or ZM_REQUIRE_SERVERS=1) instead of skipping it.
pub fn servers_required() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| v == "1" || v == "true");
    set("CI") || set("ZM_REQUIRE_SERVERS")
}

/// A test server (`server`: moto, s3s-fs, nginx, an emulator) could not be had, for `why`.
/// Where servers are required this fails the test with that reason; elsewhere the test is
/// skipped, and the skip is appended to the file named by ZM_SKIP_LOG (scripts/test.sh counts
/// them at the end of the run). Callers return right after.
pub fn server_unavailable(server: &str, why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    if servers_required() {
        panic!(
            "{server} {why}, and test servers are required here (CI=true or ZM_REQUIRE_SERVERS=1)"
        );
    }
    eprintln!("SKIPPED: {server} {why}; {test} not run");
    if let Some(path) = std::env::var_os("ZM_SKIP_LOG") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(f, "{server}\t{test}").unwrap();
    }
}

pub fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1).is_some_and(|m| m.replace("\\040", " ") == want))
}

/// Start the binary in the foreground on `mnt` (canonicalized) with its log in `<mnt>.log`
/// (debug level). Returns the child, the mount point and the log path; waiting for the mount
/// is the caller's (a service test watches readiness its own way).
pub fn spawn_daemon(
    source: &std::ffi::OsStr,
    mnt: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Child, PathBuf, PathBuf) {
    spawn(source, mnt, args, envs, false)
}

/// `spawn_daemon`; `clean`: the daemon inherits no environment but PATH, and gets no RUST_LOG
/// (it logs at the level of its -v flags).
fn spawn(
    source: &std::ffi::OsStr,
    mnt: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
    clean: bool,
) -> (Child, PathBuf, PathBuf) {
    let mnt = mnt.canonicalize().unwrap();
    let log = mnt.with_extension("log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut command = Command::new(BIN);
    if clean {
        command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    } else {
        command.env("RUST_LOG", "zarr_mount=debug");
    }
    let child = command
        .arg(source)
        .arg(&mnt)
        .arg("--foreground")
        .args(args)
        // `Mount::advance_clock` steps the daemon's clock past every TTL the tests use.
        .env("ZM_TEST_CLOCK_STEP", CLOCK_STEP_SECS)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .expect("start zarr-mount");
    (child, mnt, log)
}

pub struct Mount {
    pub child: Option<Child>,
    pub mnt: PathBuf,
    pub log: PathBuf,
}

impl Mount {
    /// Mount `source` on `mnt` (created if missing) with extra arguments.
    pub fn start(source: &Path, mnt: &Path, args: &[&str]) -> Mount {
        Self::start_with(source.to_str().expect("UTF-8 source path"), mnt, args, &[])
    }

    /// Like `start`, for a SOURCE that is not a path (`s3://bucket/prefix`), with extra
    /// environment variables for the daemon.
    pub fn start_with(source: &str, mnt: &Path, args: &[&str], envs: &[(&str, &str)]) -> Mount {
        Self::start_as(source, mnt, args, envs, false)
    }

    /// Like `start_with`, with a daemon that inherits no environment but PATH: exactly `envs`
    /// (credential tests: no AWS_* variable, HOME where the test says). No RUST_LOG either: the
    /// daemon logs at the level of its -v flags.
    pub fn start_clean(source: &str, mnt: &Path, args: &[&str], envs: &[(&str, &str)]) -> Mount {
        Self::start_as(source, mnt, args, envs, true)
    }

    fn start_as(
        source: &str,
        mnt: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        clean: bool,
    ) -> Mount {
        std::fs::create_dir_all(mnt).unwrap();
        let (child, mnt, log) = spawn(source.as_ref(), mnt, args, envs, clean);
        let mut m = Mount { child: Some(child), mnt, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&m.mnt) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("zarr-mount exited early ({status}):\n{}", m.log_text());
            }
            assert!(Instant::now() < deadline, "mount did not appear:\n{}", m.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Move the daemon's clock past every metadata TTL (SIGUSR2, see src/clock.rs) and wait
    /// until it says so: what it cached before is then stale, as after the TTL has passed. The
    /// kernel's own entry and attribute caches keep their real timeouts.
    pub fn advance_clock(&self) {
        let seen = || self.log_text().matches(CLOCK_ADVANCED).count();
        let before = seen();
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen() == before {
            assert!(Instant::now() < deadline, "the clock did not move:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("already stopped");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                force_unmount(&self.mnt);
                panic!("zarr-mount did not exit on SIGTERM:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn force_unmount(mnt: &Path) {
    if is_mounted(mnt) {
        let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(mnt).status();
    }
    if is_mounted(mnt) {
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        force_unmount(&self.mnt);
    }
}

/// Peak resident set of process `pid` (VmHWM of /proc/PID/status), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in status");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A fresh temp dir with `src/` and `mnt/` inside.
/// The names in directory `dir`, sorted.
pub fn sorted_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    (tmp, src, mnt)
}

/// The value of the series `name` (with its labels) from the metrics endpoint.
pub fn metric(port: u16, name: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let prefix = format!("{name} ");
    raw.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}
