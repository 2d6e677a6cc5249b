#!/usr/bin/env bash
# Full-size write-scale figures for issue #22 (BENCHMARKS.md "Large writes", "Walking many keys"): the
# tests of tests/it/scale.rs at the sizes the issue names. CI runs them smaller (1 GiB local,
# 256 MiB S3, 10 x 64 MiB). Needs ~9 GB free disk at the peak (spill file + stored copy);
# everything is deleted afterwards. S3 at full size runs on s3s-fs (objects on disk): moto
# would hold 4 GiB in its own memory.
#   scripts/bench_scale.sh            # all
#   scripts/bench_scale.sh local      # one of: local, writers, s3, walk
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
run() { cargo test --test it "scale::$1" -- --nocapture --test-threads 1 2>&1 | grep -E "MiB|test result|panicked"; }
export ZM_SCALE_WALK_KEYS="${ZM_SCALE_WALK_KEYS:-1000000}" ZM_SCALE_FILE_MIB=4096 ZM_SCALE_WRITER_MIB=512 ZM_SCALE_BUDGET_MIB=256 ZM_SCALE_S3_MIB=4096
df -h "${TMPDIR:-/tmp}" | tail -1
[[ $which == all || $which == local ]] && run a_large_file_spills_to_disk_and_is_stored_exactly
[[ $which == all || $which == writers ]] && run concurrent_writers_stay_within_the_write_budget
[[ $which == all || $which == s3 ]] && run a_large_file_streams_to_an_object_store::s3s_fs
[[ $which == all || $which == walk ]] && run walking_many_keys_twice_does_not_grow_memory
df -h "${TMPDIR:-/tmp}" | tail -1
