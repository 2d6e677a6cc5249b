//! A compiled reader for `scripts/bench_serve.py --s3`: reads a list of files, a given number
//! at a time, either over HTTP (one keep-alive client) or from a directory (a mount), checks
//! each against a local copy, and prints one JSON line. The same reader either way, so that
//! serve and a mount are compared without a Python client's per-request cost in between.
//!
//!     cargo run --release --example read_chunks -- SOURCE EXPECTED LIST [IN_FLIGHT]
//!
//! SOURCE is `http://...` (each path is appended) or a directory; EXPECTED the directory of
//! the right bytes of every path but the first; LIST a file of paths, one a line, the first
//! (say, the array's metadata) read alone before the rest, and not checked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

enum Source {
    Http { client: reqwest::Client, base: String },
    Dir(PathBuf),
}

impl Source {
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        match self {
            Source::Http { client, base } => {
                let url = format!("{base}/{path}");
                let r = client.get(&url).send().await.map_err(|e| format!("{url}: {e}"))?;
                if r.status() != reqwest::StatusCode::OK {
                    return Err(format!("{url}: {}", r.status()));
                }
                Ok(r.bytes().await.map_err(|e| format!("{url}: {e}"))?.to_vec())
            }
            Source::Dir(dir) => {
                let p = dir.join(path);
                tokio::task::spawn_blocking(move || std::fs::read(&p))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("{path}: {e}"))
            }
        }
    }
}

/// User and system CPU seconds of this process (all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage into a zeroed struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [source, expected, list, rest @ ..] = args.as_slice() else {
        eprintln!("usage: read_chunks SOURCE EXPECTED LIST [IN_FLIGHT]");
        std::process::exit(2);
    };
    let in_flight: usize = rest.first().map_or(16, |n| n.parse().expect("IN_FLIGHT: a number"));
    let paths: Vec<String> = std::fs::read_to_string(list)
        .expect("LIST")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let source = Arc::new(if source.starts_with("http://") {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(in_flight)
            .build()
            .expect("an HTTP client");
        Source::Http { client, base: source.trim_end_matches('/').to_string() }
    } else {
        Source::Dir(PathBuf::from(source))
    });
    let expected = Path::new(expected);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let (first, rest) = paths.split_first().expect("LIST names at least one file");
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let results = rt.block_on(async {
        let mut results = vec![(None, source.read(first).await)];
        let reads = futures::stream::iter(rest.iter().cloned())
            .map(|p| {
                let s = source.clone();
                async move {
                    let r = s.read(&p).await;
                    (Some(p), r)
                }
            })
            .buffer_unordered(in_flight);
        results.extend(reads.collect::<Vec<_>>().await);
        results
    });
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    // Checked after the clock stopped.
    let (mut bytes, mut wrong, mut failed) = (0u64, 0u64, Vec::new());
    for (p, r) in results {
        match r {
            Ok(data) => {
                bytes += data.len() as u64;
                let right = p.map(|p| std::fs::read(expected.join(p)).ok());
                if right.is_some_and(|r| r.as_deref() != Some(&data[..])) {
                    wrong += 1;
                }
            }
            Err(e) => failed.push(e),
        }
    }
    println!(
        "{{\"s\": {seconds:.4}, \"files\": {}, \"bytes\": {bytes}, \"wrong\": {wrong}, \"failed\": {}, \"reader_cpu_s\": {cpu:.4}}}",
        paths.len(),
        failed.len()
    );
    if let Some(e) = failed.first() {
        eprintln!("read_chunks: {} reads failed, the first: {e}", failed.len());
        std::process::exit(1);
    }
}
