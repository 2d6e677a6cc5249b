//! `gs://` against fake-gcs-server and `az://` against Azurite, both on 127.0.0.1, started and
//! stopped by each test (scripts/s3-server.sh): mount, list 2,000 keys, read the unsharded view
//! exactly with zarr-python, write a chunk through the view and read the result natively
//! (Azure), an outage gives EIO within 30 s and the mount recovers without a remount.
//!
//! fake-gcs-server (v1.54.0 in the PyPI wheel, the only wrapper version; upstream unchanged
//! through v1.55.1) answers object_store's XML-API upload (`PUT /bucket/key`) with 400
//! "invalid uploadType": writes to `gs://` cannot be tested against it (docs/SOURCES.md,
//! "S3-compatible servers and emulators"), and test data goes in through its JSON upload API
//! instead. The tests skip (with a message) only when an emulator cannot be installed.

use crate::common;
use common::python::{files_under, run_python, venv_python};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::s3::{free_port, SCRIPT};
use common::Mount;
use object_store::path::Path as OPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const BUCKET: &str = "bkt";
/// Azurite's well-known development account (public, in every Azure SDK's docs).
const AZ_ACCOUNT: &str = "devstoreaccount1";
const AZ_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// A service-account key that tells object_store's GCS client not to ask for tokens.
const GCS_NO_AUTH_KEY: &str =
    r#"{"disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    FakeGcs,
    Azurite,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::FakeGcs => "fake-gcs",
            Kind::Azurite => "azurite",
        }
    }
}

/// An emulator on 127.0.0.1:port with the bucket (container) `BUCKET`, stopped on drop. Both
/// keep their data on disk, so a restart keeps every object.
struct Emulator {
    kind: Kind,
    dir: tempfile::TempDir,
    port: u16,
    running: bool,
}

impl Emulator {
    fn start(kind: Kind) -> Option<Emulator> {
        let status = Command::new(SCRIPT).arg("install").arg(kind.name()).status().unwrap();
        if status.code() == Some(3) {
            common::server_unavailable(kind.name(), "could not be installed (no network?)");
            return None;
        }
        assert!(status.success(), "install {}: {status}", kind.name());
        let mut e =
            Emulator { kind, dir: tempfile::tempdir().unwrap(), port: free_port(), running: false };
        e.up();
        e.create_bucket();
        Some(e)
    }

    fn up(&mut self) {
        let status = Command::new(SCRIPT)
            .arg("start")
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .arg(self.kind.name())
            .status()
            .unwrap();
        assert!(status.success(), "{} did not start", self.kind.name());
        self.running = true;
    }

    fn down(&mut self) {
        assert!(Command::new(SCRIPT).arg("stop").arg(self.dir.path()).status().unwrap().success());
        self.running = false;
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn create_bucket(&self) {
        match self.kind {
            // The JSON API takes unauthenticated requests.
            Kind::FakeGcs => {
                let body = format!(r#"{{"name":"{BUCKET}"}}"#);
                let resp = self.http("POST", "/storage/v1/b?project=test", body.as_bytes());
                assert!(resp.starts_with("HTTP/1.1 200"), "create bucket: {resp}");
            }
            // Azure's own SDK (installed with Azurite by scripts/s3-server.sh) signs it.
            Kind::Azurite => {
                let python = venv_python();
                let conn = format!(
                    "DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};\
                     BlobEndpoint={}/{AZ_ACCOUNT};",
                    self.endpoint()
                );
                let out = Command::new(python)
                    .arg("-c")
                    .arg(
                        "import sys\n\
                         from azure.storage.blob import BlobServiceClient\n\
                         BlobServiceClient.from_connection_string(sys.argv[1]).create_container(sys.argv[2])\n",
                    )
                    .arg(conn)
                    .arg(BUCKET)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "create container: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// One plain HTTP/1.1 request; the whole response as text.
    fn http(&self, method: &str, path: &str, body: &[u8]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        String::from_utf8_lossy(&resp).into_owned()
    }

    /// An object_store client on the bucket, built the way the daemon builds its own.
    fn client(&self) -> Arc<dyn ObjectStore> {
        match self.kind {
            Kind::FakeGcs => {
                use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey as K};
                Arc::new(
                    GoogleCloudStorageBuilder::new()
                        .with_bucket_name(BUCKET)
                        .with_config(K::BaseUrl, self.endpoint())
                        .with_config(K::Client(object_store::ClientConfigKey::AllowHttp), "true")
                        .with_service_account_key(GCS_NO_AUTH_KEY)
                        .build()
                        .unwrap(),
                )
            }
            Kind::Azurite => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::new()
                    .with_account(AZ_ACCOUNT)
                    .with_access_key(AZ_KEY)
                    .with_container_name(BUCKET)
                    .with_endpoint(format!("{}/{AZ_ACCOUNT}", self.endpoint()))
                    .with_allow_http(true)
                    .build()
                    .unwrap(),
            ),
        }
    }

    fn put_all(&self, objects: &[(String, Vec<u8>)]) {
        match self.kind {
            // See the module comment: fake-gcs-server takes uploads through the JSON API only.
            Kind::FakeGcs => {
                for (key, data) in objects {
                    let path =
                        format!("/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={key}");
                    let resp = self.http("POST", &path, data);
                    assert!(resp.starts_with("HTTP/1.1 200"), "upload {key}: {resp}");
                }
            }
            Kind::Azurite => {
                use futures::StreamExt;
                let client = self.client();
                rt().block_on(futures::stream::iter(objects).for_each_concurrent(16, |(k, v)| {
                    let client = client.clone();
                    async move {
                        let payload = PutPayload::from(Bytes::from(v.clone()));
                        client.put(&OPath::from(k.as_str()), payload).await.unwrap();
                    }
                }));
            }
        }
    }

    fn get(&self, key: &str) -> Vec<u8> {
        rt().block_on(async {
            self.client().get(&OPath::from(key)).await.unwrap().bytes().await.unwrap().to_vec()
        })
    }

    fn keys(&self, prefix: &str) -> Vec<String> {
        use futures::TryStreamExt;
        rt().block_on(async {
            let mut v: Vec<String> = self
                .client()
                .list(Some(&OPath::from(prefix)))
                .map_ok(|m| m.location.to_string())
                .try_collect()
                .await
                .unwrap();
            v.sort();
            v
        })
    }

    /// The daemon's SOURCE, arguments and environment for `bucket/pre` at `endpoint`: the
    /// options each backend needs against its emulator (docs/SOURCES.md, "S3-compatible servers and emulators").
    fn spec(&self, bucket: &str, endpoint: &str) -> (String, Vec<String>, Vec<(String, String)>) {
        match self.kind {
            Kind::FakeGcs => (
                format!("gs://{bucket}/pre"),
                vec![
                    "--endpoint-url".into(),
                    endpoint.into(),
                    "-o".into(),
                    format!("google_service_account_key={GCS_NO_AUTH_KEY}"),
                ],
                vec![],
            ),
            Kind::Azurite => (
                format!("az://{bucket}/pre"),
                vec!["-o".into(), "azure_storage_use_emulator=true".into()],
                vec![("AZURITE_BLOB_STORAGE_URL".into(), endpoint.into())],
            ),
        }
    }

    fn mount(&self, mnt: &Path, extra: &[&str]) -> Mount {
        let (source, args, envs) = self.spec(BUCKET, &self.endpoint());
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Mount::start_with(&source, mnt, &args, &envs)
    }

    /// A missing bucket, a wrong endpoint and (Azurite checks signatures) a wrong key are
    /// refused at mount time: one line, exit 2.
    fn check_refusals(&self, mnt: &Path) {
        use common::s3::{assert_refused, mount_refused};
        let run = |bucket: &str, endpoint: &str, extra: &[&str]| {
            let (source, args, envs) = self.spec(bucket, endpoint);
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            args.extend_from_slice(extra);
            let envs: Vec<(&str, &str)> =
                envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            mount_refused(&source, mnt, &args, &envs)
        };
        let nobody = format!("http://127.0.0.1:{}", free_port());
        assert_refused(run(BUCKET, &nobody, &[]), "cannot reach the store");
        // fake-gcs-server answers a listing of a missing bucket with 500 (its filesystem
        // backend's lstat error), not 404: refused all the same, without the diagnosis.
        let missing = match self.kind {
            Kind::FakeGcs => "no such file or directory",
            Kind::Azurite => "does not exist",
        };
        assert_refused(run("no-such-bucket", &self.endpoint(), &[]), missing);
        if self.kind == Kind::Azurite {
            let wrong = format!("azure_storage_account_key={}", AZ_KEY.replace('E', "F"));
            assert_refused(run(BUCKET, &self.endpoint(), &["-o", &wrong]), "access denied");
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if self.running {
            let _ = Command::new(SCRIPT).arg("stop").arg(self.dir.path()).status();
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

const EXPECTED: &str = "exp = np.arange(1200, dtype='int32').reshape(40, 30)\n";

fn mount_list_read_write_outage(kind: Kind) {
    let Some(mut emu) = Emulator::start(kind) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    run_python(
        &format!(
            "import sys, zarr, numpy as np\n{EXPECTED}\
             a = zarr.create_array(sys.argv[1] + '/a', shape=(40, 30), shards=(20, 16), chunks=(5, 4), dtype='int32', fill_value=0)\n\
             a[:] = exp\n"
        ),
        &[&local],
    );
    let mut objects: Vec<(String, Vec<u8>)> =
        files_under(&local).into_iter().map(|(k, v)| (format!("pre/{k}"), v)).collect();
    objects.extend((0..2000).map(|i| (format!("pre/many/k{i:05}"), format!("value {i}").into())));
    let started = Instant::now();
    emu.put_all(&objects);
    eprintln!("{}: {} objects put in {:?}", kind.name(), objects.len(), started.elapsed());

    emu.check_refusals(&tmp.path().join("refused"));
    let m = emu.mount(&tmp.path().join("mnt"), &["--metadata-ttl", "1"]);

    // 2,000 keys list fully, with their sizes.
    let mut names: Vec<String> = std::fs::read_dir(m.path("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2000);
    assert_eq!(names[1234], "k01234");
    assert_eq!(std::fs::metadata(m.path("many/k01234")).unwrap().len(), 10);

    // zarr-python reads the unsharded view exactly.
    run_python(
        &format!(
            "import sys, zarr, numpy as np\n{EXPECTED}\
             a = zarr.open_array(sys.argv[1] + '/a', mode='r')\n\
             assert a.shards is None and a.chunks == (5, 4), (a.shards, a.chunks)\n\
             np.testing.assert_array_equal(a[:], exp)\n"
        ),
        &[&m.mnt],
    );

    if kind == Kind::Azurite {
        // A chunk written through the view lands in its shard; read natively from the bucket.
        run_python(
            "import sys, zarr\n\
             a = zarr.open_array(sys.argv[1] + '/a', mode='r+')\n\
             a[5:10, 4:8] = -7\n",
            &[&m.mnt],
        );
        let back = tmp.path().join("back");
        for key in emu.keys("pre/a") {
            let path = back.join(key.strip_prefix("pre/").unwrap());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, emu.get(&key)).unwrap();
        }
        run_python(
            &format!(
                "import sys, zarr, numpy as np\n{EXPECTED}\
                 exp[5:10, 4:8] = -7\n\
                 z = zarr.open_array(sys.argv[1] + '/a', mode='r')\n\
                 assert z.shards == (20, 16)\n\
                 np.testing.assert_array_equal(z[:], exp)\n"
            ),
            &[&back],
        );
    }

    // Outage: a file looked up while the server is up, read while it is down, gives EIO
    // within 30 s; after the restart it reads without a remount.
    let mut opened = std::fs::File::open(m.path("many/k00042")).unwrap();
    emu.down();
    let started = Instant::now();
    let mut buf = Vec::new();
    let err = opened.read_to_end(&mut buf).unwrap_err();
    let took = started.elapsed();
    eprintln!("{}: read during the outage failed after {took:?}: {err}", kind.name());
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err:?}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(common::is_mounted(&m.mnt));
    emu.up();
    m.advance_clock(); // past the metadata TTL
    let mut buf = Vec::new();
    std::io::Seek::seek(&mut opened, std::io::SeekFrom::Start(0)).unwrap();
    opened.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"value 42");
    assert_eq!(std::fs::read(m.path("many/k01999")).unwrap(), b"value 1999");
    drop(m);
}

#[test]
fn gcs_against_fake_gcs_server() {
    mount_list_read_write_outage(Kind::FakeGcs);
}

#[test]
fn azure_against_azurite() {
    mount_list_read_write_outage(Kind::Azurite);
}

/// A service-account key file as `gcloud iam service-accounts keys create` writes it, with a
/// fresh RSA key: object_store signs its own JWTs with it, so no token endpoint is asked.
fn service_account_key(path: &Path) {
    let key = Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .output()
        .expect("openssl");
    assert!(key.status.success(), "openssl genpkey: {:?}", key);
    let file = serde_json::json!({
        "type": "service_account",
        "project_id": "zm-test",
        "private_key_id": "0123456789abcdef",
        "private_key": String::from_utf8(key.stdout).unwrap(),
        "client_email": "reader@zm-test.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, file.to_string()).unwrap();
}

/// Application Default Credentials (#54): a service-account file where `gcloud` puts ADC, or
/// named by GOOGLE_APPLICATION_CREDENTIALS, mounts with no other configuration; without either
/// the metadata server is asked (here a closed port on 127.0.0.1), and the mount is refused at
/// mount time. An ADC kind object_store lacks (`external_account`) is refused in one line.
#[test]
fn gcs_application_default_credentials_are_found_as_gcloud_leaves_them() {
    use common::s3::mount_refused_clean;
    let Some(e) = Emulator::start(Kind::FakeGcs) else { return };
    e.put_all(&[("pre/a".into(), b"through ADC".to_vec())]);
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = e.endpoint();
    let args = ["--endpoint-url", endpoint.as_str(), "--read-only"];
    let closed = format!("127.0.0.1:{}", free_port());
    let source = format!("gs://{BUCKET}/pre");
    let env = |home: &Path, extra: &[(&'static str, String)]| {
        let mut v = vec![
            ("HOME".to_string(), home.to_str().unwrap().to_string()),
            ("GCE_METADATA_HOST".to_string(), closed.clone()),
            ("GCE_METADATA_IP".to_string(), closed.clone()),
        ];
        v.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        v
    };
    let mount = |mnt: &Path, envs: &[(String, String)]| {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Mount::start_clean(&source, mnt, &args, &envs)
    };
    // The well-known file of `gcloud auth application-default login`.
    let home = tmp.path().join("home");
    service_account_key(&home.join(".config/gcloud/application_default_credentials.json"));
    let m = mount(&tmp.path().join("m1"), &env(&home, &[]));
    assert_eq!(std::fs::read(m.path("a")).unwrap(), b"through ADC");
    drop(m);
    // GOOGLE_APPLICATION_CREDENTIALS, with an empty HOME.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let key = tmp.path().join("key.json");
    service_account_key(&key);
    let gac = [("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().unwrap().to_string())];
    let m = mount(&tmp.path().join("m2"), &env(&empty, &gac));
    assert_eq!(std::fs::read(m.path("a")).unwrap(), b"through ADC");
    drop(m);
    let refused = |envs: Vec<(String, String)>, mnt: &str| {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (code, stderr, _) = mount_refused_clean(&source, &tmp.path().join(mnt), &args, &envs);
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        stderr
    };
    // Neither: the metadata server, which does not answer.
    refused(env(&empty, &[]), "m3");
    // Workload Identity Federation's file kind: not one object_store reads.
    let external = tmp.path().join("external.json");
    std::fs::write(&external, r#"{"type": "external_account", "audience": "x"}"#).unwrap();
    let stderr = refused(
        env(&empty, &[("GOOGLE_APPLICATION_CREDENTIALS", external.to_str().unwrap().to_string())]),
        "m4",
    );
    assert!(stderr.contains("external_account"), "{stderr}");
}

/// Azure credentials from the `AZURE_*` variables alone (#54), as `az` and the SDKs read them:
/// the account and key in the environment, nothing on the command line but the endpoint.
/// Azurite checks signatures, so a wrong key in the environment is refused at mount time.
#[test]
fn azure_account_key_from_the_environment() {
    use common::s3::{assert_refused, mount_refused_clean};
    let Some(e) = Emulator::start(Kind::Azurite) else { return };
    e.put_all(&[("pre/a".into(), b"from the environment".to_vec())]);
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = format!("{}/{AZ_ACCOUNT}", e.endpoint());
    let args = ["--endpoint-url", endpoint.as_str(), "--read-only"];
    let source = format!("az://{BUCKET}/pre");
    let home = tmp.path().to_str().unwrap();
    let wrong = AZ_KEY.replace('E', "F");
    let env = |key| {
        [
            ("HOME", home),
            ("AZURE_STORAGE_ACCOUNT_NAME", AZ_ACCOUNT),
            ("AZURE_STORAGE_ACCOUNT_KEY", key),
        ]
    };
    let m = Mount::start_clean(&source, &tmp.path().join("m1"), &args, &env(AZ_KEY));
    assert_eq!(std::fs::read(m.path("a")).unwrap(), b"from the environment");
    drop(m);
    let result = mount_refused_clean(&source, &tmp.path().join("m2"), &args, &env(&wrong));
    assert!(!result.1.contains(&wrong), "the key in the error: {}", result.1);
    assert_refused(result, "access denied");
}
