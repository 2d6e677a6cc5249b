//! S3 credentials found the way the AWS CLI finds them (#54), against a moto that records every
//! request with its headers (`S3::start_recording`), so each test sees which access key signed
//! what. Every daemon runs with no environment but PATH and what the test gives it: a private
//! HOME with its own ~/.aws files, and IMDS pointed at a closed port on 127.0.0.1.
//!
//! Every test secret holds `MARK`; after each mount the daemon's -vv log, its /metrics and the
//! command line of every process on the machine are searched for it.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::s3::{free_port, mount_refused_clean, Recorded, BUCKET, S3};
use common::Mount;

/// In every secret of these tests, and nowhere else.
const MARK: &str = "zm-creds-secret";
const PROFILE_KEY: &str = "AKIDZMPROFILE0001";
const PROFILE_SECRET: &str = "zm-creds-secret-profile-0001";
const BASE_KEY: &str = "AKIDZMBASE0002";
const BASE_SECRET: &str = "zm-creds-secret-base-0002";

/// A private HOME with ~/.aws/config and ~/.aws/credentials as given.
fn home(config: &str, credentials: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let aws = home.path().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(aws.join("config"), config).unwrap();
    std::fs::write(aws.join("credentials"), credentials).unwrap();
    home
}

/// IMDS on a port where nothing listens (never the real link-local address).
fn closed_imds() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// The daemon's environment: HOME and IMDS, plus `extra`.
fn env<'a>(home: &'a Path, imds: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![("HOME", home.to_str().unwrap()), ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds)];
    v.extend_from_slice(extra);
    v
}

/// The S3 requests moto recorded for the bucket (not STS, not moto's own API).
fn bucket_requests(s3: &S3) -> Vec<Recorded> {
    let prefix = format!("/{BUCKET}");
    s3.recorded().into_iter().filter(|r| r.path.starts_with(&prefix)).collect()
}

/// The one key that signed the daemon's bucket requests among `recorded` (at least 3 of them;
/// the test client's requests, signed with its own key, left out).
fn one_signing_key(recorded: &[Recorded]) -> String {
    let daemon: Vec<_> = recorded
        .iter()
        .filter(|r| r.path.starts_with(&format!("/{BUCKET}")))
        .filter(|r| r.key.as_deref() != Some(common::s3::ACCESS_KEY))
        .collect();
    assert!(daemon.len() >= 3, "{daemon:?}");
    let key = daemon[0].key.clone().expect("signed");
    assert!(daemon.iter().all(|r| r.key.as_deref() == Some(key.as_str())), "{daemon:?}");
    key
}

fn metrics_text(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw
}

/// No test secret in `text` (named `what`).
fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(MARK), "a secret in {what}:\n{text}");
}

/// No test secret on the command line of any process (the daemon and whatever it started).
fn assert_no_secret_in_any_cmdline() {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            assert_no_secret(&format!("{}/cmdline", entry.path().display()), &text);
        }
    }
}

/// The log, /metrics and every command line hold no test secret.
fn assert_secrets_kept(m: &Mount, metrics_port: u16) {
    assert_no_secret("the daemon's -vv log", &m.log_text());
    assert_no_secret("/metrics", &metrics_text(metrics_port));
    assert_no_secret_in_any_cmdline();
}

/// Write a file through the mount, read it back, and read an object put by another client.
fn reads_and_writes(s3: &S3, m: &Mount, tag: &str) {
    std::fs::write(m.path(&format!("written-{tag}")), b"through the mount").unwrap();
    s3.put(&format!("pre/put-{tag}"), b"put by a client");
    assert_eq!(std::fs::read(m.path(&format!("put-{tag}"))).unwrap(), b"put by a client");
    let stored = s3
        .recorded()
        .iter()
        .any(|r| r.method == "PUT" && r.path.ends_with(&format!("/written-{tag}")));
    assert!(stored, "the written file reached the store");
}

fn profile_keys(selected_by: &str) {
    let Some(s3) = S3::start_recording() else { return };
    let home = home(
        "[profile myprof]\nregion = us-east-1\n",
        &format!("[myprof]\naws_access_key_id = {PROFILE_KEY}\naws_secret_access_key = {PROFILE_SECRET}\n"),
    );
    let imds = closed_imds();
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let endpoint = s3.endpoint();
    let mut args = vec!["--endpoint-url", &endpoint, "-vv", "--metrics-addr", &metrics_addr];
    let mut extra = vec![];
    match selected_by {
        "flag" => args.extend(["--profile", "myprof"]),
        _ => extra.push(("AWS_PROFILE", "myprof")),
    }
    let tmp = tempfile::tempdir().unwrap();
    let from = bucket_requests(&s3).len();
    let m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &tmp.path().join("mnt"),
        &args,
        &env(home.path(), &imds, &extra),
    );
    reads_and_writes(&s3, &m, selected_by);
    let requests = &bucket_requests(&s3)[from..];
    let daemon: Vec<_> =
        requests.iter().filter(|r| r.key.as_deref() != Some(common::s3::ACCESS_KEY)).collect();
    assert!(daemon.len() >= 3, "the daemon's requests: {requests:?}");
    for r in daemon {
        assert_eq!(r.key.as_deref(), Some(PROFILE_KEY), "signed by the profile's key: {r:?}");
    }
    assert_secrets_kept(&m, metrics);
}

#[test]
fn a_profile_named_by_the_flag_signs_the_requests() {
    profile_keys("flag");
}

#[test]
fn a_profile_named_by_aws_profile_signs_the_requests() {
    profile_keys("env");
}

/// A credential_process that counts its calls in `dir/calls`, records its open descriptors
/// in `dir/fds.N` and hands out credentials numbered by call, valid for `lifetime` seconds.
fn counting_process(dir: &Path, lifetime: u32) -> PathBuf {
    let script = dir.join("creds.sh");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
n=$(( $(cat "{d}/calls" 2>/dev/null || echo 0) + 1 ))
ls -l /proc/$$/fd > "{d}/fds.$n" 2>&1
exp=$(date -u -d "+{lifetime} seconds" +%Y-%m-%dT%H:%M:%SZ)
printf '{{"Version": 1, "AccessKeyId": "AKIDZMPROCESS%04d", "SecretAccessKey": "{MARK}-process-%d", "SessionToken": "{MARK}-token-%d", "Expiration": "%s"}}\n' $n $n $n "$exp"
echo $n > "{d}/calls"
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

fn calls(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("calls")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

#[test]
fn credential_process_credentials_are_renewed_before_each_expiry() {
    let Some(s3) = S3::start_recording() else { return };
    let work = tempfile::tempdir().unwrap();
    // Credentials valid for 6 s: renewed after about half of that.
    let script = counting_process(work.path(), 6);
    let home = home(
        &format!("[default]\nregion = us-east-1\ncredential_process = {}\n", script.display()),
        "",
    );
    let imds = closed_imds();
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let endpoint = s3.endpoint();
    let mnt = work.path().join("mnt");
    let m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &mnt,
        &["--endpoint-url", &endpoint, "-vv", "--metrics-addr", &metrics_addr],
        &env(home.path(), &imds, &[]),
    );
    assert_eq!(calls(work.path()), 1, "one call to mount");
    // Read new objects (each a real request) until the process has been called 4 times:
    // three renewals, each of credentials that were about to expire.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut reads = 0;
    while calls(work.path()) < 4 {
        assert!(Instant::now() < deadline, "only {} calls after {reads} reads", calls(work.path()));
        let body = format!("object {reads}");
        s3.put(&format!("pre/o{reads}"), body.as_bytes());
        let got = std::fs::read(m.path(&format!("o{reads}")))
            .unwrap_or_else(|e| panic!("read {reads} failed: {e}\n{}", m.log_text()));
        assert_eq!(got, body.as_bytes());
        reads += 1;
    }
    let signed: Vec<String> = bucket_requests(&s3)
        .into_iter()
        .filter_map(|r| r.key)
        .filter(|k| k.starts_with("AKIDZMPROCESS"))
        .collect();
    assert!(signed.len() > 3 * 4, "{} requests for {} calls", signed.len(), calls(work.path()));
    // Each set of credentials took over from the one before, in order.
    let mut used: Vec<&String> = signed.iter().collect();
    used.dedup();
    let want: Vec<String> = (1..=used.len()).map(|n| format!("AKIDZMPROCESS{n:04}")).collect();
    assert_eq!(used, want.iter().collect::<Vec<_>>(), "keys in the order handed out");
    assert!(used.len() >= 3, "renewed credentials signed requests: {used:?}");
    assert!(common::metric(metrics, "zarr_mount_credential_renewals_total").unwrap() >= 3);
    assert_eq!(common::metric(metrics, "zarr_mount_credential_renewal_failures_total"), Some(0));
    // The process inherited nothing of the daemon's: no FUSE device, socket or log file, and
    // no standard input.
    let fds = std::fs::read_to_string(work.path().join("fds.2")).unwrap();
    assert!(fds.contains(" 0 -> /dev/null"), "stdin:\n{fds}");
    for leak in ["fuse", "socket:", ".log"] {
        assert!(!fds.contains(leak), "the credential process inherited {leak}:\n{fds}");
    }
    assert_secrets_kept(&m, metrics);
}

#[test]
fn role_arn_with_source_profile_assumes_the_role_at_sts() {
    let Some(s3) = S3::start_recording() else { return };
    let endpoint = s3.endpoint();
    // The endpoint comes from the profile too (S3 and STS), as the CLI reads it.
    let home = home(
        &format!(
            "[profile base]\nregion = us-east-1\nendpoint_url = {endpoint}\n\n\
             [profile assumer]\nregion = us-east-1\nendpoint_url = {endpoint}\n\
             role_arn = arn:aws:iam::123456789012:role/zm-reader\nsource_profile = base\n"
        ),
        &format!("[base]\naws_access_key_id = {BASE_KEY}\naws_secret_access_key = {BASE_SECRET}\n"),
    );
    let imds = closed_imds();
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let tmp = tempfile::tempdir().unwrap();
    let from = s3.recorded().len();
    let m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &tmp.path().join("mnt"),
        &["--profile", "assumer", "-vv", "--metrics-addr", &metrics_addr],
        &env(home.path(), &imds, &[]),
    );
    reads_and_writes(&s3, &m, "role");
    let recorded = s3.recorded().split_off(from);
    let assume = recorded
        .iter()
        .find(|r| r.service.as_deref() == Some("sts") && r.body.contains("Action=AssumeRole"))
        .unwrap_or_else(|| panic!("no AssumeRole call: {recorded:?}"));
    assert_eq!(assume.key.as_deref(), Some(BASE_KEY), "the source profile signs AssumeRole");
    let role_key = one_signing_key(&recorded);
    assert_ne!(role_key, BASE_KEY, "the assumed role's key, not the source profile's");
    assert_secrets_kept(&m, metrics);
}

#[test]
fn no_sign_request_reads_a_public_bucket_without_credentials() {
    let Some(s3) = S3::start_recording() else { return };
    s3.put("pre/open", b"public data");
    public_read_policy(&s3);
    // Nothing to sign with anywhere, and IMDS disabled: a chain consulted would fail the mount.
    let empty_home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = s3.endpoint();
    let from = s3.recorded().len();
    let mut m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &tmp.path().join("mnt"),
        &["--endpoint-url", &endpoint, "--no-sign-request", "--read-only"],
        &[("HOME", empty_home.path().to_str().unwrap()), ("AWS_EC2_METADATA_DISABLED", "true")],
    );
    let read = std::fs::read(m.path("open")).unwrap_or_else(|e| panic!("{e}:\n{}", m.log_text()));
    assert_eq!(read, b"public data");
    let requests = &s3.recorded()[from..];
    let daemon: Vec<_> =
        requests.iter().filter(|r| r.path.starts_with(&format!("/{BUCKET}"))).collect();
    assert!(daemon.iter().any(|r| r.method == "GET" && r.path.ends_with("/open")), "{daemon:?}");
    assert!(daemon.iter().all(|r| r.key.is_none()), "unsigned: {daemon:?}");
    assert!(m.stop().success());
}

/// A bucket policy that lets anyone read `BUCKET`'s objects. moto checks a HEAD as the action
/// s3:HeadObject (AWS as s3:GetObject), so the policy names both; without it moto refuses
/// anonymous reads of private objects, as S3 does.
fn public_read_policy(s3: &S3) {
    use std::io::{Read, Write};
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":"*","Action":["s3:GetObject","s3:HeadObject"],"Resource":"arn:aws:s3:::{BUCKET}/*"}}]}}"#
    );
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s3.port)).unwrap();
    write!(
        c,
        "PUT /{BUCKET}?policy HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{policy}",
        s3.port,
        policy.len()
    )
    .unwrap();
    let mut resp = String::new();
    c.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 2") || resp.starts_with("HTTP/1.0 2"), "put policy: {resp}");
}

/// A mount refused for want of credentials: exit 2, one line naming what was tried.
fn refused(args: &[&str], envs: &[(&str, &str)], want: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let result =
        mount_refused_clean(&format!("s3://{BUCKET}/pre"), &tmp.path().join("mnt"), args, envs);
    let stderr = result.1.clone();
    common::s3::assert_refused(result, want);
    assert_no_secret("the error", &stderr);
}

#[test]
fn missing_profile_failing_process_and_unreachable_imds_name_what_was_tried() {
    let Some(s3) = S3::start_recording() else { return };
    let endpoint = s3.endpoint();
    let imds = closed_imds();
    let args = ["--endpoint-url", endpoint.as_str()];
    // A named profile that is nowhere (the files hold another, with secrets).
    let other = home("[profile other]\nregion = us-east-1\n", &format!("[other]\naws_access_key_id = {PROFILE_KEY}\naws_secret_access_key = {PROFILE_SECRET}\n"));
    let want = "no credentials: tried environment, profile `myprof` (no such profile in ~/.aws/config or ~/.aws/credentials), IMDS (unreachable)";
    refused(&[&args[..], &["--profile", "myprof"]].concat(), &env(other.path(), &imds, &[]), want);
    refused(&args, &env(other.path(), &imds, &[("AWS_PROFILE", "myprof")]), want);
    // Nothing configured at all.
    let empty = tempfile::tempdir().unwrap();
    refused(
        &args,
        &env(empty.path(), &imds, &[]),
        "no credentials: tried environment, profile `default` (nothing in ~/.aws/config or ~/.aws/credentials), IMDS (unreachable)",
    );
    // A credential_process that fails: the search ends there, with its reason.
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("fail.sh");
    std::fs::write(&script, "#!/bin/sh\necho 'vault: permission denied' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let failing = home(
        &format!("[profile vault]\ncredential_process = {}\n", script.display()),
        &format!("[other]\naws_secret_access_key = {PROFILE_SECRET}\n"),
    );
    refused(
        &[&args[..], &["--profile", "vault"]].concat(),
        &env(failing.path(), &imds, &[]),
        "no credentials: tried environment, profile `vault` (",
    );
    let tmp = tempfile::tempdir().unwrap();
    let (_, stderr, _) = mount_refused_clean(
        &format!("s3://{BUCKET}/pre"),
        &tmp.path().join("mnt"),
        &[&args[..], &["--profile", "vault"]].concat(),
        &env(failing.path(), &imds, &[]),
    );
    assert!(stderr.contains("vault: permission denied"), "the process's own reason: {stderr}");
    assert!(!stderr.contains("IMDS"), "the search ends at the failing source: {stderr}");
}

#[test]
fn profile_and_no_sign_request_are_checked_before_mounting() {
    use clap::Parser;
    use zarr_mount::cli::Args;
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().to_str().unwrap();
    let check = |args: &[&str]| {
        let all = [&["zarr-mount"], args, &[mnt]].concat();
        let args = Args::try_parse_from(all).map_err(|e| e.to_string())?;
        args.validate().map(|c| c.remote).map_err(|e| e.0)
    };
    let ok = check(&["s3://b/p", "--profile", "analytics"]).unwrap();
    assert_eq!(ok.profile.as_deref(), Some("analytics"));
    assert!(check(&["s3://b/p", "--no-sign-request"]).unwrap().no_sign_request);
    let refused = |args: &[&str], want: &str| {
        let e = check(args).unwrap_err();
        assert!(e.contains(want), "{args:?}: {e}");
    };
    refused(&["gs://b/p", "--profile", "x"], "apply only to s3:// sources");
    refused(&[tmp.path().to_str().unwrap(), "--no-sign-request"], "apply only to s3:// sources");
    refused(&["s3://b/p", "--profile", "x", "--no-sign-request"], "exclude each other");
    refused(&["s3://b/p", "--profile", "a b"], "not a profile name");
    refused(&["icechunk+s3://b/repo", "--profile", "x"], "does not apply to Icechunk sources");
}

#[test]
fn a_failing_renewal_is_logged_once_and_reads_go_on_with_the_old_credentials() {
    let Some(s3) = S3::start_recording() else { return };
    let work = tempfile::tempdir().unwrap();
    let d = work.path().display();
    // Succeeds on its first call, then fails until the file `ok` exists.
    let script = work.path().join("creds.sh");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
n=$(( $(cat "{d}/calls" 2>/dev/null || echo 0) + 1 ))
echo $n > "{d}/calls"
if [ $n -gt 1 ] && [ ! -e "{d}/ok" ]; then echo "vault sealed" >&2; exit 1; fi
exp=$(date -u -d "+4 seconds" +%Y-%m-%dT%H:%M:%SZ)
printf '{{"Version": 1, "AccessKeyId": "AKIDZMFLAKY%04d", "SecretAccessKey": "{MARK}-flaky-%d", "Expiration": "%s"}}\n' $n $n "$exp"
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let home = home(&format!("[default]\ncredential_process = {}\n", script.display()), "");
    let imds = closed_imds();
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let endpoint = s3.endpoint();
    let m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &work.path().join("mnt"),
        &["--endpoint-url", &endpoint, "-v", "--metrics-addr", &metrics_addr],
        &env(home.path(), &imds, &[]),
    );
    let failures = || common::metric(metrics, "zarr_mount_credential_renewal_failures_total");
    let renewals = || common::metric(metrics, "zarr_mount_credential_renewals_total");
    let mut reads = 0;
    // Reads (each a new object: a real request) until `done`, none failing.
    let mut read_until = |done: &dyn Fn() -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what} did not happen:\n{}", m.log_text());
            s3.put(&format!("pre/f{reads}"), b"x");
            let got = std::fs::read(m.path(&format!("f{reads}")));
            assert_eq!(got.unwrap_or_else(|e| panic!("read {reads}: {e}")), b"x");
            reads += 1;
        }
    };
    // Several failed renewals (moto takes expired credentials: the reads go on).
    read_until(&|| failures().unwrap_or(0) >= 3, "three failed renewals");
    std::fs::write(work.path().join("ok"), "").unwrap();
    read_until(&|| renewals().unwrap_or(0) >= 1, "a renewal after the failures");
    let log = m.log_text();
    assert_eq!(log.matches("renewing the credentials failed").count(), 1, "{log}");
    assert!(log.contains("vault sealed"), "the process's reason: {log}");
    assert_eq!(log.matches("credentials renewed again").count(), 1, "{log}");
    assert_secrets_kept(&m, metrics);
}

#[test]
fn web_identity_from_the_environment_assumes_the_role_at_sts() {
    let Some(s3) = S3::start_recording() else { return };
    let work = tempfile::tempdir().unwrap();
    let token = work.path().join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ6bS10ZXN0In0.c2lnbmF0dXJl").unwrap();
    let empty_home = tempfile::tempdir().unwrap();
    let imds = closed_imds();
    let endpoint = s3.endpoint();
    let from = s3.recorded().len();
    let m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &work.path().join("mnt"),
        &["--endpoint-url", &endpoint],
        &env(
            empty_home.path(),
            &imds,
            &[
                ("AWS_WEB_IDENTITY_TOKEN_FILE", token.to_str().unwrap()),
                ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/zm-irsa"),
                ("AWS_ROLE_SESSION_NAME", "zm-test"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ENDPOINT_URL_STS", &endpoint),
            ],
        ),
    );
    reads_and_writes(&s3, &m, "irsa");
    let recorded = s3.recorded().split_off(from);
    assert!(
        recorded.iter().any(|r| r.body.contains("Action=AssumeRoleWithWebIdentity")),
        "no AssumeRoleWithWebIdentity: {recorded:?}"
    );
    one_signing_key(&recorded);
}

/// A container credentials endpoint as EKS Pod Identity runs one: answers with credentials only
/// to requests that carry `token` as their Authorization header; counts the requests. Serves
/// until the test ends (its thread dies with the test binary; the port is private to it).
fn container_endpoint(
    token: &'static str,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut authorized = false;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != "" {
                authorized |= line.to_ascii_lowercase().starts_with("authorization:")
                    && line.trim_end().ends_with(token);
                line.clear();
            }
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let body = format!(
                r#"{{"AccessKeyId": "AKIDZMPOD{n:04}", "SecretAccessKey": "{MARK}-pod-{n}", "Token": "{MARK}-pod-token-{n}", "Expiration": "2099-01-01T00:00:00Z"}}"#
            );
            let status = if authorized { "200 OK" } else { "403 Forbidden" };
            let mut conn = conn;
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, served)
}

#[test]
fn eks_pod_identity_container_credentials_sign_the_requests() {
    const TOKEN: &str = "zm-pod-identity-token";
    let Some(s3) = S3::start_recording() else { return };
    let (port, served) = container_endpoint(TOKEN);
    let work = tempfile::tempdir().unwrap();
    let token_file = work.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let uri = format!("http://127.0.0.1:{port}/v1/credentials");
    let empty_home = tempfile::tempdir().unwrap();
    let imds = closed_imds();
    let endpoint = s3.endpoint();
    let from = bucket_requests(&s3).len();
    let m = Mount::start_clean(
        &format!("s3://{BUCKET}/pre"),
        &work.path().join("mnt"),
        &["--endpoint-url", &endpoint],
        &env(
            empty_home.path(),
            &imds,
            &[
                ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
                ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file.to_str().unwrap()),
            ],
        ),
    );
    reads_and_writes(&s3, &m, "pod");
    let daemon: Vec<_> = bucket_requests(&s3)
        .split_off(from)
        .into_iter()
        .filter(|r| r.key.as_deref() != Some(common::s3::ACCESS_KEY))
        .collect();
    assert!(daemon.len() >= 3, "{daemon:?}");
    assert!(daemon.iter().all(|r| r.key.as_deref() == Some("AKIDZMPOD0001")), "{daemon:?}");
    // Credentials that last are fetched once, not per request.
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
}
