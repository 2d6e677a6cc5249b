#!/usr/bin/env bash
# The project's test command (see README): setup, build, rustfmt and clippy checks, Rust tests,
# the Python interop suite, the packages (scripts/packages.sh: release build, wheel, .deb),
# pjdfstest (scripts/pjdfstest.sh, compared with tests/pjdfstest/expected.txt), a one-minute
# chaos soak (scripts/soak.sh) and a short run of the fuzz targets (scripts/fuzz.sh).
#
#   scripts/test.sh                 everything
#   scripts/test.sh -k corrupt      extra arguments go to pytest
#
# Environment: ZM_SKIP_SETUP=1 skips scripts/setup.sh; ZM_FUZZ_SECS sets the seconds per
# fuzz target; ZM_SOAK_MINUTES the soak's minutes (default 1), ZM_CONTENTION_MINUTES the
# contention soaks' (default 1 each); CARGO_TARGET_DIR is honoured.
# Leaves no mounts or daemons behind: everything the suite mounts lives under one temp dir,
# which the exit trap unmounts and removes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TMPBASE="$(mktemp -d "${TMPDIR:-/tmp}/zarr-mount-test.XXXXXX")"

cleanup() {
    local status=$?
    set +e +o pipefail
    # unmount everything under TMPBASE, deepest first
    local mp
    while read -r mp; do
        [[ -n "$mp" ]] || continue
        echo "test.sh: cleaning up leftover mount $mp" >&2
        fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
    done < <(awk -v base="$TMPBASE" 'index($2, base) == 1 { print $2 }' /proc/self/mounts | sort -r)
    # daemons started by this run carry TMPBASE in their arguments
    local pid
    for pid in $(grep -lsF -- "$TMPBASE" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
        [[ "$pid" == "$$" ]] && continue
        local exe
        exe="$(head -z -n1 "/proc/$pid/cmdline" 2>/dev/null | tr -d '\0')"
        if [[ "$(basename -- "$exe")" == zarr-mount ]]; then
            echo "test.sh: killing leftover zarr-mount process $pid" >&2
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$TMPBASE" 2>/dev/null || true
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failed=()
# Each stage's name and seconds, printed as a table at the end.
stage_names=()
stage_secs=()
stage_start=$SECONDS
begin_stage() {
    echo "test.sh: $1"
    stage_names+=("$1")
    stage_start=$SECONDS
}
end_stage() {
    stage_secs+=($((SECONDS - stage_start)))
}
# Tests skipped because a test server could not be had (only outside CI: with CI=true or
# ZM_REQUIRE_SERVERS=1 they fail instead); tests/it/common and zm_s3.py append to it.
export ZM_SKIP_LOG="$TMPBASE/skipped-servers"
: >"$ZM_SKIP_LOG"

# CI machines have far less free disk than a workstation; a run that fills it fails in
# confusing places (ENOSPC in a Python test). Say up front how much there is, and again at the end.
df -h "$ROOT" | sed 's/^/test.sh: disk: /'
# One-off builds gain nothing from incremental state (3 GB of it for the test binaries).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if [[ "${ZM_SKIP_SETUP:-0}" != 1 ]]; then
    begin_stage "setup"
    scripts/setup.sh
    end_stage
fi

begin_stage "cargo build"
build_ok=1
if ! cargo build; then
    failed+=("cargo build")
    build_ok=0
fi
end_stage

if ((build_ok)); then
    # One style (rustfmt.toml) and no clippy warnings, in every target (issue #17).
    begin_stage "cargo fmt --check"
    if ! cargo fmt --check; then
        failed+=("cargo fmt --check")
    fi
    end_stage
    begin_stage "cargo clippy"
    if ! cargo clippy --all-targets -- -D warnings; then
        failed+=("cargo clippy")
    fi
    end_stage

    # The test servers (moto, s3s-fs, fake-gcs, Azurite, nginx), installed before the tests
    # rather than by the first test that needs each: building s3s-fs takes minutes of both
    # cores, which would slow every test running beside it. A server that cannot be installed
    # is reported by the tests that need it.
    begin_stage "test servers"
    for kind in moto s3s-fs fake-gcs azurite nginx; do
        scripts/s3-server.sh install "$kind" || echo "test.sh: could not install $kind" >&2
    done
    end_stage

    begin_stage "cargo test"
    # --no-fail-fast: one failing test binary must not hide the results of the others.
    if ! cargo test --no-fail-fast; then
        failed+=("cargo test")
    fi
    end_stage

    begin_stage "pytest"
    export ZARR_MOUNT_BIN="${ZARR_MOUNT_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/zarr-mount}"
    export ZM_REQUIRE_BINARY=1
    # pytest's exit status 5 (no tests collected) counts as a failure too
    if ! .venv/bin/python -m pytest tests/python -q -p no:cacheprovider --basetemp "$TMPBASE/pytest" "$@"; then
        failed+=("pytest")
    fi
    end_stage

    # The packages from one release build (scripts/packages.sh): the binary's size, the wheel
    # in a fresh venv (tests/python/test_wheel.py), the .deb's contents, install and removal.
    begin_stage "packages"
    if ! TMPDIR="$TMPBASE" ZM_REQUIRE_WHEEL=1 scripts/packages.sh; then
        failed+=("packages")
    fi
    end_stage

    # POSIX conformance against tests/pjdfstest/expected.txt (under a minute once installed).
    begin_stage "pjdfstest"
    if ! TMPDIR="$TMPBASE" scripts/pjdfstest.sh; then
        failed+=("pjdfstest")
    fi
    end_stage

    # A one-minute chaos soak (scripts/soak.sh): two daemons on one bucket, moto then s3s-fs,
    # under writers, readers, server restarts, latency spikes and cut connections; then two
    # contention soaks of a minute: a few files rewritten through one daemon and read through
    # both many times a second. On moto, most readers in the other daemon (the binary before
    # the first fix of #55 failed there within a minute); on s3s-fs, eight readers in the
    # writing daemon (before the second, a reader there followed its own old version past its
    # end: 4 failed checks in 6 minutes).
    begin_stage "soak"
    if ! scripts/soak.sh --minutes "${ZM_SOAK_MINUTES:-1}" --workdir "$TMPBASE/soak"; then
        failed+=("soak")
    fi
    if ! scripts/soak.sh --contention --servers moto --minutes "${ZM_CONTENTION_MINUTES:-1}" \
        --workdir "$TMPBASE/soak-contention"; then
        failed+=("soak --contention")
    fi
    if ! scripts/soak.sh --contention --readers-at-writer 8 --servers s3s-fs \
        --minutes "${ZM_CONTENTION_MINUTES:-1}" --workdir "$TMPBASE/soak-contention-writer"; then
        failed+=("soak --contention --readers-at-writer 8")
    fi
    end_stage

    # Coverage-guided fuzzing of every parser of untrusted bytes (scripts/fuzz.sh), briefly:
    # ZM_FUZZ_SECS per target (default 10; 9 targets: 90 s, as 6 targets at 15 s were), plus
    # the build of the fuzz targets.
    begin_stage "fuzz"
    if ! FUZZ_SECS="${ZM_FUZZ_SECS:-10}" TMPDIR="$TMPBASE" scripts/fuzz.sh; then
        failed+=("fuzz")
    fi
    end_stage
fi

df -h "$ROOT" | sed 's/^/test.sh: disk: /'
echo "test.sh: stage durations"
for i in "${!stage_names[@]}"; do
    printf 'test.sh:   %-20s %5d s\n' "${stage_names[$i]}" "${stage_secs[$i]}"
done
printf 'test.sh:   %-20s %5d s\n' "total" "$SECONDS"
skipped=$(wc -l <"$ZM_SKIP_LOG")
if ((skipped)); then
    echo "test.sh: $skipped Rust test(s) skipped for a missing test server:" >&2
    sort "$ZM_SKIP_LOG" | sed 's/^/test.sh:   /' >&2
fi
if ((${#failed[@]})); then
    echo "test.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
exit 0
