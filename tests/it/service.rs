//! Running as a service: the systemd unit, sd_notify readiness, signals, the fstab helper,
//! install/uninstall scripts and the stats line.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{dirs, force_unmount, is_mounted, BIN};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn root(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

// ---------------------------------------------------------------- systemd unit

#[test]
fn systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root("systemd/zarr-mount@.service")).unwrap();
    // Anything that gives the service its own mount namespace would hide the mount.
    for bad in [
        "PrivateMounts",
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "ReadWritePaths",
        "ReadOnlyPaths",
        "InaccessiblePaths",
        "BindPaths",
        "TemporaryFileSystem",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectControlGroups",
        "MountFlags",
    ] {
        assert!(
            !unit.lines().any(|l| l.trim_start().starts_with(&format!("{bad}="))),
            "{bad}= implies a private mount namespace"
        );
    }
    for want in [
        "Type=notify",
        "EnvironmentFile=/etc/zarr-mount/%i.env",
        "DeviceAllow=/dev/fuse rw",
        "--foreground",
    ] {
        assert!(unit.contains(want), "unit lacks {want}");
    }
    // Credentials come from the env file, never from the command line.
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(!exec.to_lowercase().contains("secret") && !exec.contains("AWS_"), "{exec}");
    analyze_verify(&unit, "zarr-mount@test.service");
}

#[test]
fn serve_unit_verifies() {
    let unit = std::fs::read_to_string(root("systemd/zarr-mount-serve@.service")).unwrap();
    for want in [
        "Type=notify",
        "EnvironmentFile=/etc/zarr-mount/%i-serve.env",
        "ExecStart=/usr/local/bin/zarr-mount serve ",
        "DynamicUser=yes",
        "RestartPreventExitStatus=2",
    ] {
        assert!(unit.contains(want), "serve unit lacks {want}");
    }
    // No FUSE device: the server never mounts.
    assert!(!unit.contains("/dev/fuse"), "the serve unit asks for /dev/fuse");
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(!exec.to_lowercase().contains("secret") && !exec.contains("AWS_"), "{exec}");
    analyze_verify(&unit, "zarr-mount-serve@test.service");
}

/// `systemd-analyze verify` of an instance NAME of the template `unit`, with ExecStart
/// pointing at the binary just built (verify checks that the executable exists).
fn analyze_verify(unit: &str, name: &str) {
    let Ok(which) = Command::new("sh").args(["-c", "command -v systemd-analyze"]).output() else {
        eprintln!("SKIP systemd-analyze verify of {name}: no sh");
        return;
    };
    if !which.status.success() {
        eprintln!("SKIP systemd-analyze verify: systemd-analyze is not installed (apt-get install systemd)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let inst = tmp.path().join(name);
    std::fs::write(&inst, unit.replace("/usr/local/bin/zarr-mount", BIN)).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&inst).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify of {name} failed:\n{stderr}");
    // Unknown keys and bad values are warnings with exit 0: treat any line about our unit as
    // a failure.
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains(name)).collect();
    assert!(ours.is_empty(), "systemd-analyze verify complained:\n{}", ours.join("\n"));
}

// ---------------------------------------------------------------- sd_notify

struct Daemon {
    child: Option<Child>,
    mnt: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(src: &Path, mnt: &Path, args: &[&str], notify_socket: &str) -> Daemon {
        Self::start_env(src, mnt, args, notify_socket, &[])
    }

    fn start_env(
        src: &Path,
        mnt: &Path,
        args: &[&str],
        notify_socket: &str,
        envs: &[(&str, &str)],
    ) -> Daemon {
        let envs: Vec<(&str, &str)> =
            [("NOTIFY_SOCKET", notify_socket)].into_iter().chain(envs.iter().copied()).collect();
        let (child, mnt, log) = common::spawn_daemon(src.as_os_str(), mnt, args, &envs);
        Daemon { child: Some(child), mnt, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.as_ref().unwrap().id() as i32, sig) };
    }

    /// Wait (up to 20 s) until the mount is live; fails with the log if the daemon exits.
    fn wait_mounted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&self.mnt) {
            assert!(self.running() && Instant::now() < deadline, "{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn running(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_none()
    }

    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.child = None;
                return s;
            }
            assert!(Instant::now() < deadline, "daemon did not exit:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        force_unmount(&self.mnt);
    }
}

/// Receive notification datagrams until one contains `want` (or panic after a timeout). For
/// each datagram, `check` runs at the moment it arrives.
fn recv_until(sock: &UnixDatagram, want: &str, got: &mut Vec<String>, check: impl FnMut(&str)) {
    recv_until_msg(sock, |m| m.lines().any(|l| l == want), want, got, check)
}

fn recv_until_msg(
    sock: &UnixDatagram,
    done: impl Fn(&str) -> bool,
    want: &str,
    got: &mut Vec<String>,
    mut check: impl FnMut(&str),
) {
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = vec![0u8; 4096];
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).to_string();
                check(&msg);
                got.push(msg.clone());
                if done(&msg) {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("recv: {e}"),
        }
        assert!(Instant::now() < deadline, "no {want} among {got:?}");
    }
}

#[test]
fn notify_ready_after_mount_status_sighup_and_stopping() {
    let (tmp, src, mnt) = dirs();
    std::fs::write(src.join("hello.txt"), b"hi").unwrap();
    let sock_path = tmp.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let mut d = Daemon::start(&src, &mnt, &["--view", "raw"], sock_path.to_str().unwrap());
    let mnt = d.mnt.clone();

    let mut got = Vec::new();
    let mut mounted_at_ready = None;
    recv_until(&sock, "READY=1", &mut got, |msg| {
        if msg.lines().any(|l| l == "READY=1") {
            mounted_at_ready = Some(is_mounted(&mnt));
        }
    });
    assert_eq!(mounted_at_ready, Some(true), "READY=1 before the mount was live: {got:?}");
    let all = got.join("\n");
    let status = all.lines().find(|l| l.starts_with("STATUS=")).expect("a STATUS= line");
    assert!(status.contains("mounted") && status.contains(mnt.to_str().unwrap()), "{status}");
    assert!(all.contains(&format!("MAINPID={}", d.child.as_ref().unwrap().id())), "{all}");
    assert_eq!(std::fs::read(mnt.join("hello.txt")).unwrap(), b"hi");

    // SIGHUP is logged and ignored.
    d.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !d.log_text().contains("SIGHUP ignored") {
        assert!(d.running(), "SIGHUP killed the daemon:\n{}", d.log_text());
        assert!(Instant::now() < deadline, "SIGHUP not logged:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(d.running(), "SIGHUP killed the daemon:\n{}", d.log_text());
    assert!(is_mounted(&mnt));
    assert!(
        d.log_text().contains("SIGHUP ignored: restart the service to change settings"),
        "{}",
        d.log_text()
    );

    // A write pending at SIGTERM is flushed; STOPPING=1 goes out; the mount goes; exit 0.
    use std::io::Write;
    let mut f = std::fs::File::create(mnt.join("pending.txt")).unwrap();
    f.write_all(b"flushed at stop").unwrap();
    d.signal(libc::SIGTERM);
    let mut stop_msgs = Vec::new();
    recv_until(&sock, "STOPPING=1", &mut stop_msgs, |_| {});
    let status = d.wait(Duration::from_secs(15));
    drop(f);
    assert!(status.success(), "exit {status}:\n{}", d.log_text());
    assert!(!is_mounted(&mnt), "still mounted after SIGTERM");
    assert_eq!(std::fs::read(src.join("pending.txt")).unwrap(), b"flushed at stop");
}

#[test]
fn notify_abstract_socket_and_stopping_on_external_unmount() {
    use std::os::linux::net::SocketAddrExt;
    let (_tmp, src, mnt) = dirs();
    let name = format!("zarr-mount-test-{}-{:?}", std::process::id(), Instant::now());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    // WatchdogSec=: WATCHDOG=1 at half the interval.
    let mut d =
        Daemon::start_env(&src, &mnt, &[], &format!("@{name}"), &[("WATCHDOG_USEC", "400000")]);
    let mnt = d.mnt.clone();
    let mut got = Vec::new();
    let mut ok = None;
    recv_until(&sock, "READY=1", &mut got, |m| {
        if m.contains("READY=1") {
            ok = Some(is_mounted(&mnt))
        }
    });
    assert_eq!(ok, Some(true));
    recv_until(&sock, "WATCHDOG=1", &mut got, |_| {});
    recv_until(&sock, "WATCHDOG=1", &mut got, |_| {});
    assert!(Command::new("fusermount3").arg("-u").arg(&mnt).status().unwrap().success());
    recv_until(&sock, "STOPPING=1", &mut got, |_| {});
    assert!(d.wait(Duration::from_secs(15)).success(), "{}", d.log_text());
}

#[test]
fn without_notify_socket_nothing_changes() {
    // NOTIFY_SOCKET unset (or empty): no-op; the mount works as always.
    let (_tmp, src, mnt) = dirs();
    let mut d = Daemon::start(&src, &mnt, &[], "");
    d.wait_mounted();
    d.signal(libc::SIGTERM);
    assert!(d.wait(Duration::from_secs(15)).success());
}

// ---------------------------------------------------------------- stats

#[test]
fn stats_interval_logs_counters() {
    let (tmp, src, mnt) = dirs();
    std::fs::write(src.join("data.bin"), vec![1u8; 5000]).unwrap();
    let sock_path = tmp.path().join("n.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let mut d = Daemon::start(
        &src,
        &mnt,
        &["--view", "raw", "--stats-interval", "1"],
        sock_path.to_str().unwrap(),
    );
    let mut got = Vec::new();
    recv_until(&sock, "READY=1", &mut got, |_| {});
    assert_eq!(std::fs::read(d.mnt.join("data.bin")).unwrap().len(), 5000);
    std::fs::write(d.mnt.join("new.bin"), vec![2u8; 300]).unwrap();
    let _ = std::fs::read(d.mnt.join("missing"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = d.log_text();
        if let Some(l) =
            log.lines().rev().find(|l| l.contains(" stats ") && l.contains("bytes_written=300"))
        {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "no stats line:\n{log}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("bytes_read=5000"), "{line}");
    assert!(
        line.contains("ops=\"lookup=") && line.contains(" read=") && line.contains(" write="),
        "{line}"
    );
    assert!(
        line.contains("errors=0") && !line.contains("not_found=0"),
        "ENOENT is counted apart: {line}"
    );
    // The same summary goes to systemd's STATUS=.
    recv_until_msg(
        &sock,
        |m| m.contains("STATUS=") && m.contains("300 bytes written"),
        "a stats STATUS=",
        &mut got,
        |_| {},
    );
    d.signal(libc::SIGTERM);
    assert!(d.wait(Duration::from_secs(15)).success());
}

// ---------------------------------------------------------------- fstab

#[test]
fn fstab_helper_mounts_read_only() {
    let (_tmp, src, mnt) = dirs();
    std::fs::write(src.join("a.txt"), b"via fstab").unwrap();
    let out = Command::new(root("scripts/mount.zarr-mount"))
        .arg(&src)
        .arg(&mnt)
        .args(["-o", "ro,view=raw,_netdev,noauto,x-systemd.automount"])
        .env("ZARR_MOUNT_BIN", BIN)
        .output()
        .unwrap();
    assert!(out.status.success(), "helper failed: {}", String::from_utf8_lossy(&out.stderr));
    // The helper returns once the mount is live (the daemon forked and reported readiness).
    let mnt = mnt.canonicalize().unwrap();
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            force_unmount(self.0);
        }
    }
    let _guard = Unmount(&mnt);
    assert!(is_mounted(&mnt));
    assert_eq!(std::fs::read(mnt.join("a.txt")).unwrap(), b"via fstab");
    let err = std::fs::write(mnt.join("b.txt"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts.lines().find(|l| l.split(' ').nth(1) == Some(mnt.to_str().unwrap())).unwrap();
    assert!(line.split(' ').nth(3).unwrap().split(',').any(|o| o == "ro"), "{line}");
    assert!(Command::new("fusermount3").arg("-u").arg(&mnt).status().unwrap().success());
    assert!(!is_mounted(&mnt));
}

#[test]
fn fstab_helper_fake_flag_and_bad_options() {
    let (_tmp, src, mnt) = dirs();
    // -f (fake): parse, do not mount.
    let st = Command::new(root("scripts/mount.zarr-mount"))
        .arg(&src)
        .arg(&mnt)
        .args(["-f", "-o", "ro"])
        .env("ZARR_MOUNT_BIN", BIN)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!is_mounted(&mnt.canonicalize().unwrap()));
    // An unknown bare option is refused with exit 2, before mounting.
    let out = Command::new(root("scripts/mount.zarr-mount"))
        .arg(&src)
        .arg(&mnt)
        .args(["-o", "ro,frobnicate"])
        .env("ZARR_MOUNT_BIN", BIN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("frobnicate"));
}

/// `mount -a` twice over an fstab of a local and an S3 line: both mount as type
/// fuse.zarr-mount with their sources as written, and the second run is a no-op (exit 0)
/// because mount(8) finds them in /proc/mounts. In a private mount namespace
/// (tests/it/scripts/fstab_mount_all.sh), so the helper needs no install in /sbin.
#[test]
fn fstab_mount_all_twice_is_a_no_op() {
    use common::s3::{S3Server, BUCKET, ENV, S3};
    let Some(s3) = S3::start(S3Server::Moto) else { return };
    s3.put("pre/s3.txt", b"from s3");
    let (tmp, src, _) = dirs();
    std::fs::write(src.join("local.txt"), b"local").unwrap();
    let (local_mnt, s3_mnt) = (tmp.path().join("local"), tmp.path().join("s3"));
    std::fs::create_dir_all(&local_mnt).unwrap();
    std::fs::create_dir_all(&s3_mnt).unwrap();
    let s3_source = format!("s3://{BUCKET}/pre");
    let fstab = tmp.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# a test fstab\n{} {} fuse.zarr-mount ro,view=raw,_netdev 0 0\n\
             {s3_source} {} fuse.zarr-mount ro,endpoint_url={},nofail 0 0\n",
            src.display(),
            local_mnt.display(),
            s3_mnt.display(),
            s3.endpoint()
        ),
    )
    .unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .arg(root("tests/it/scripts/fstab_mount_all.sh"))
        .arg(root("scripts/mount.zarr-mount"))
        .arg(&fstab)
        .arg(tmp.path().join("scratch"))
        .args([&local_mnt, &s3_mnt])
        .env("ZARR_MOUNT_BIN", BIN)
        .envs(ENV.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{report}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"first=0"), "{report}");
    assert_eq!(lines.get(1), Some(&"second=0"), "the second mount -a failed:\n{report}");
    for (source, mnt) in [(src.display().to_string(), &local_mnt), (s3_source, &s3_mnt)] {
        let want = format!("{source} {} fuse.zarr-mount", mnt.display());
        assert_eq!(
            lines.iter().filter(|l| **l == want).count(),
            1,
            "findmnt -t fuse.zarr-mount does not list {want:?} once:\n{report}"
        );
    }
    assert!(text.contains(&format!("ls {}: local.txt", local_mnt.display())), "{report}");
    assert!(text.contains(&format!("ls {}: s3.txt", s3_mnt.display())), "{report}");
}

#[test]
fn env_file_sets_the_environment() {
    // A bad env file line is a usage error (exit 2) naming the line, not the content.
    let (tmp, src, mnt) = dirs();
    let env = tmp.path().join("bad.env");
    std::fs::write(&env, "# comment\nAWS_SECRET_ACCESS_KEY=hunter2\nnot a pair\n").unwrap();
    let out = Command::new(BIN).arg(&src).arg(&mnt).arg("--env-file").arg(&env).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && !err.contains("hunter2"), "{err}");
    // A good one: RUST_LOG from the file takes effect (debug lines appear).
    std::fs::write(&env, "export RUST_LOG=\"zarr_mount=debug\"\n").unwrap();
    let mut d = Daemon::start(&src, &mnt, &["--env-file", env.to_str().unwrap()], "");
    d.wait_mounted();
    d.signal(libc::SIGTERM);
    assert!(d.wait(Duration::from_secs(15)).success());
}

// ---------------------------------------------------------------- install / uninstall

#[test]
fn install_dry_run_lists_targets() {
    let out = Command::new(root("scripts/install.sh"))
        .args(["--dry-run", "--prefix", "/tmp/x", "--binary", BIN])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "/tmp/x/bin/zarr-mount",
        "/tmp/x/sbin/mount.fuse.zarr-mount",
        "/sbin/mount.fuse.zarr-mount",
        "/tmp/x/lib/systemd/system/zarr-mount@.service",
        "/tmp/x/lib/systemd/system/zarr-mount-serve@.service",
        "/etc/zarr-mount",
        "/tmp/x/share/doc/zarr-mount/example.env",
        "/tmp/x/share/doc/zarr-mount/serve-example.env",
    ] {
        assert!(text.contains(want), "dry run does not mention {want}:\n{text}");
    }
    assert!(!Path::new("/tmp/x/bin/zarr-mount").exists() || text.is_empty(), "dry run wrote files");
}

#[test]
fn install_and_uninstall_into_destdir() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path();
    let run = |script: &str, args: &[&str]| {
        let out = Command::new(root(script)).args(args).env("DESTDIR", dest).output().unwrap();
        assert!(
            out.status.success(),
            "{script}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("scripts/install.sh", &["--prefix", "/opt/zm", "--binary", BIN]);
    let bin = dest.join("opt/zm/bin/zarr-mount");
    let helper = dest.join("opt/zm/sbin/mount.fuse.zarr-mount");
    let unit = dest.join("opt/zm/lib/systemd/system/zarr-mount@.service");
    assert!(bin.is_file() && helper.is_file() && unit.is_file());
    let docs = dest.join("opt/zm/share/doc/zarr-mount");
    assert!(docs.join("README.md").is_file() && docs.join("docs/CONFIGURATION.md").is_file());
    assert_eq!(
        std::fs::read_link(dest.join("sbin/mount.fuse.zarr-mount")).unwrap(),
        Path::new("/opt/zm/sbin/mount.fuse.zarr-mount")
    );
    assert!(std::fs::read_to_string(&unit)
        .unwrap()
        .contains("ExecStart=/opt/zm/bin/zarr-mount --foreground"));
    let serve_unit = dest.join("opt/zm/lib/systemd/system/zarr-mount-serve@.service");
    let serve_text = std::fs::read_to_string(&serve_unit).unwrap();
    assert!(serve_text.contains("ExecStart=/opt/zm/bin/zarr-mount serve "), "{serve_text}");
    assert!(serve_text.contains("cp /opt/zm/share/doc/zarr-mount/serve-example.env "));
    assert!(docs.join("serve-example.env").is_file() && docs.join("example.env").is_file());
    assert!(std::fs::read_to_string(&helper)
        .unwrap()
        .contains("DEFAULT_BIN=/opt/zm/bin/zarr-mount\n"));
    assert!(dest.join("etc/zarr-mount").is_dir());
    std::fs::write(dest.join("etc/zarr-mount/data.env"), "ZARR_MOUNT_SOURCE=/x\n").unwrap();
    let share = dest.join("opt/zm/share");
    let generated = [
        share.join("man/man1/zarr-mount.1"),
        share.join("bash-completion/completions/zarr-mount"),
        share.join("zsh/site-functions/_zarr-mount"),
        share.join("fish/vendor_completions.d/zarr-mount.fish"),
    ];
    let man = Command::new("man").arg("-l").arg(&generated[0]).env("MANWIDTH", "200").output();
    let man = String::from_utf8(man.expect("man(1) is installed (scripts/setup.sh)").stdout);
    for (path, text) in generated.iter().map(|p| (p, std::fs::read_to_string(p))) {
        let text = if path == &generated[0] { man.clone().unwrap() } else { text.unwrap() };
        let fish = path.extension().is_some_and(|e| e == "fish");
        for flag in long_flags() {
            // fish names a long flag `-l NAME`
            let flag = if fish { flag.replacen("--", "-l ", 1) } else { flag };
            assert!(text.contains(&flag), "{} does not mention {flag}", path.display());
        }
    }

    run("scripts/uninstall.sh", &["--prefix", "/opt/zm"]);
    assert!(!bin.exists() && !helper.exists() && !unit.exists() && !docs.exists());
    assert!(!serve_unit.exists());
    for path in &generated {
        assert!(!path.exists(), "{} left behind", path.display());
    }
    assert!(std::fs::symlink_metadata(dest.join("sbin/mount.fuse.zarr-mount")).is_err());
    assert!(dest.join("etc/zarr-mount/data.env").exists(), "env files are kept without --purge");
    run("scripts/uninstall.sh", &["--prefix", "/opt/zm", "--purge"]);
    assert!(!dest.join("etc/zarr-mount").exists());
}

/// Every `--long` flag of `zarr-mount --help`.
fn long_flags() -> Vec<String> {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let flags: Vec<String> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.split(['=', '<'])
                .next()
                .unwrap()
                .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_string()
        })
        .collect();
    assert!(flags.len() > 20, "{help}");
    flags
}
