//! Memory bounds of one daemon, through a real FUSE mount (issue #22): index allocation for a
//! new shard, write buffers that spill to disk. The daemon's peak RSS is read from
//! /proc/PID/status (VmHWM).

mod common;

use std::io::Write;

use common::{dirs, Mount};

/// Peak resident set of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in status");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A 1-d sharded int8 array of `entries` inner chunks of one element in one shard.
fn sharded_array_json(entries: u64) -> String {
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":[{entries}],"data_type":"int8",
        "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[{entries}]}}}},
        "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
        "fill_value":0,"codecs":[{{"name":"sharding_indexed","configuration":{{"chunk_shape":[1],
        "codecs":[{{"name":"bytes","configuration":{{}}}}],
        "index_codecs":[{{"name":"bytes","configuration":{{"endian":"little"}}}},{{"name":"crc32c"}}],
        "index_location":"end"}}}}],"attributes":{{}}}}"#
    )
}

/// A write to a new shard of an array whose metadata asks for 2^26 inner chunks per shard (the
/// most a read accepts: a 1 GiB index) fails with EFBIG and one log line, without the daemon
/// allocating the index; an array claiming 2^40 is not unpacked at all (logged), so writing its
/// shard key is an ordinary file write. Arrays of sane shapes keep working on the same mount.
#[test]
fn a_new_shard_with_an_absurd_index_is_refused_without_allocating() {
    let (_tmp, src, mnt) = dirs();
    std::fs::write(src.join("zarr.json"), br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    for (name, entries) in [("huge", 1u64 << 26), ("absurd", 1 << 40), ("fine", 16)] {
        std::fs::create_dir(src.join(name)).unwrap();
        std::fs::write(src.join(name).join("zarr.json"), sharded_array_json(entries)).unwrap();
    }
    let m = Mount::start(&src, &mnt, &[]);
    let pid = m.child.as_ref().unwrap().id();

    let write = |rel: &str| -> std::io::Result<()> {
        let mut f = std::fs::File::create(m.path(rel))?;
        f.write_all(&[7])?;
        f.sync_all()?;
        drop(f);
        Ok(())
    };
    let err = write("huge/c/5").expect_err("a 1 GiB index for a one-byte chunk");
    assert_eq!(err.raw_os_error(), Some(libc::EFBIG), "{err}");
    assert!(!src.join("huge/c/0").exists(), "nothing was stored");
    std::fs::create_dir(m.path("absurd/c")).unwrap();
    write("absurd/c/0").expect("the absurd array is passed through: c/0 is a plain file");
    assert_eq!(std::fs::read(src.join("absurd/c/0")).unwrap(), [7]);
    write("fine/c/3").unwrap();
    assert_eq!(std::fs::read(m.path("fine/c/3")).unwrap(), [7]);

    let peak = peak_rss(pid);
    assert!(peak < 200 << 20, "daemon peak RSS {peak} bytes");
    let log = m.log_text();
    let refusals = log.lines().filter(|l| l.contains("a new shard would need an index")).count();
    assert!(refusals >= 1, "no log line for the refusal:\n{log}");
    assert!(
        log.contains("shard index would have 1099511627776 entries"),
        "the absurd array's pass-through is not logged:\n{log}"
    );
    eprintln!("daemon peak RSS {} MiB, refusal logged {refusals}x", peak >> 20);
}
