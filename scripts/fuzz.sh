#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz / libFuzzer) of every parser of untrusted bytes: the
# targets in fuzz/fuzz_targets (shard_index, zarr_json, zarray, zip, codec, cli; see each file's
# header for its input format and the invariants it asserts).
#
#   scripts/fuzz.sh                  build, then run every target for FUZZ_SECS seconds
#   scripts/fuzz.sh zip codec        only these targets
#   scripts/fuzz.sh --merge [T...]   run, then minimise (-merge=1) everything found into the
#                                    committed corpus fuzz/corpus/<target> (commit it yourself);
#                                    with FUZZ_SECS=0 only re-minimise the committed corpus
#   scripts/fuzz.sh --build-only     install cargo-fuzz if needed and build the targets
#
# Each run reads the committed corpus fuzz/corpus/<target> plus seeds made from the real
# fixtures (fuzz/seeds.py), and writes what it finds to a temp directory, so a run never
# dirties the repository; only --merge updates fuzz/corpus. Any crash, panic, failed
# invariant, timeout, or an allocation above the limit fails the run (exit 1), and the
# reproducer is kept in target/fuzz-artifacts/ with the command that replays it.
#
# Environment: FUZZ_SECS (per target, default 25), FUZZ_RSS_LIMIT_MB (default 1024),
# FUZZ_MALLOC_LIMIT_MB (largest single allocation, default 256), FUZZ_TIMEOUT (seconds per
# input, default 10), FUZZ_CORPUS_MAX_BYTES (largest input --merge commits, default 4096),
# FUZZ_SANITIZER (none, the default, or address), FUZZ_TARGET_DIR (the fuzz build; default
# $CARGO_TARGET_DIR/fuzz, else ~/.cache/zarr-mount/fuzz-target), CARGO_TARGET_DIR (cargo-fuzz
# is installed into its tools/, as pjdfstest is).
#
# Stable Rust: cargo-fuzz only needs nightly for its sanitizers (-Zsanitizer). Its coverage
# instrumentation (-Cpasses=sancov-module, -Cllvm-args=-sanitizer-coverage-*) and --cfg
# fuzzing are stable rustc flags, and libfuzzer-sys builds libFuzzer from C++ with the system
# compiler, so `cargo fuzz build --sanitizer none` works on a stable toolchain as it is. Without
# a sanitizer libFuzzer's own -malloc_limit_mb is inert (it needs the sanitizer's malloc
# hooks), so the targets install an allocator (fuzz/src/lib.rs) that aborts on any single
# allocation above FUZZ_MALLOC_LIMIT_MB; -rss_limit_mb still works. FUZZ_SANITIZER=address
# builds with AddressSanitizer on stable by setting RUSTC_BOOTSTRAP=1 (which lets stable
# rustc accept -Zsanitizer; the ASan runtime ships with the stable toolchain) - slower, and
# mostly useful for the FFI codecs (blosc, zstd).
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
TOOLS="$TARGET/tools"
CARGO_FUZZ="$TOOLS/bin/cargo-fuzz"
CARGO_FUZZ_VERSION=0.13.1
# The fuzz build shares nothing with the main build (its own RUSTFLAGS and --target), and a
# cold one takes several minutes on 2 cores. So unless CARGO_TARGET_DIR says otherwise it
# lives in a cache outside the work tree, where it survives fresh clones (CI clones the repo
# anew on the same machine): then a run rebuilds only zarr-mount and the targets (~1 min).
if [[ -n "${FUZZ_TARGET_DIR:-}" ]]; then
    :
elif [[ -n "${CARGO_TARGET_DIR:-}" ]]; then
    FUZZ_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"
else
    FUZZ_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/zarr-mount/fuzz-target"
fi
ARTIFACTS="$TARGET/fuzz-artifacts"
SECS="${FUZZ_SECS:-25}"
RSS_MB="${FUZZ_RSS_LIMIT_MB:-1024}"
MALLOC_MB="${FUZZ_MALLOC_LIMIT_MB:-256}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"
SANITIZER="${FUZZ_SANITIZER:-none}"
CORPUS_MAX="${FUZZ_CORPUS_MAX_BYTES:-4096}"
ALL_TARGETS=(shard_index zarr_json zarray zip codec cli refs template ome)

merge=0
build_only=0
targets=()
for arg in "$@"; do
    case "$arg" in
        --merge) merge=1 ;;
        --build-only) build_only=1 ;;
        -h | --help)
            awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
            exit 0
            ;;
        -*)
            echo "fuzz.sh: unknown option: $arg" >&2
            exit 2
            ;;
        *)
            if [[ ! -f "fuzz/fuzz_targets/$arg.rs" ]]; then
                echo "fuzz.sh: no fuzz target $arg (have: ${ALL_TARGETS[*]})" >&2
                exit 2
            fi
            targets+=("$arg")
            ;;
    esac
done
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")

say() { echo "fuzz.sh: $*"; }

# ---------------------------------------------------------------- tool and build
if [[ "$("$CARGO_FUZZ" --version 2>/dev/null | head -n1)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    say "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$TOOLS" --quiet
fi
if [[ "$SANITIZER" != none ]]; then
    export RUSTC_BOOTSTRAP=1
    FUZZ_TARGET_DIR="$FUZZ_TARGET_DIR-$SANITIZER"
fi
say "building fuzz targets (sanitizer: $SANITIZER)"
build_start=$SECONDS
"$CARGO_FUZZ" build --fuzz-dir fuzz --sanitizer "$SANITIZER" --target-dir "$FUZZ_TARGET_DIR"
say "built in $((SECONDS - build_start)) s"
((build_only)) && exit 0
BIN="$FUZZ_TARGET_DIR/x86_64-unknown-linux-gnu/release"

# ---------------------------------------------------------------- run
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zarr-mount-fuzz.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
python3 fuzz/seeds.py "$WORK/seeds"
mkdir -p "$ARTIFACTS"
export FUZZ_ALLOC_LIMIT_MB="$MALLOC_MB"

failed=()
for t in "${targets[@]}"; do
    mkdir -p "$WORK/new/$t" "$WORK/seeds/$t" "fuzz/corpus/$t"
    ((SECS > 0)) || continue # FUZZ_SECS=0 --merge: only re-minimise the committed corpus
    log="$WORK/$t.log"
    say "$t: ${SECS} s"
    # The first directory receives new inputs; the committed corpus and seeds are only read.
    status=0
    "$BIN/$t" -max_total_time="$SECS" -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$MALLOC_MB" \
        -timeout="$TIMEOUT" -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$t-" \
        "$WORK/new/$t" "fuzz/corpus/$t" "$WORK/seeds/$t" >"$log" 2>&1 || status=$?
    # Final stats: stat::number_of_executed_units, stat::average_exec_per_sec, ...
    stat() { awk -v k="stat::$1:" '$1 == k { print $2 }' "$log"; }
    cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -n1 | cut -d' ' -f2)"
    say "$t: $(stat number_of_executed_units) execs, $(stat average_exec_per_sec) exec/s, cov ${cov:-?}, $(ls "$WORK/new/$t" | wc -l) new inputs, peak rss $(stat peak_rss_mb) MB"
    if ((status != 0)); then
        failed+=("$t")
        echo "----- $t: libFuzzer exited $status; its report:" >&2
        # The panic message (or allocation guard line) and libFuzzer's summary, without the
        # progress lines and the backtrace.
        grep -v -E '^#[0-9]|^ +[0-9]+: |^ +at ' "$log" | tail -n 30 >&2
        while read -r unit; do
            echo "fuzz.sh: $t: reproducer $unit" >&2
            echo "fuzz.sh:   replay: $BIN/$t $unit" >&2
        done < <(grep -Eo "Test unit written to [^ ]+" "$log" | cut -d' ' -f5)
    fi
done

# ---------------------------------------------------------------- merge
if ((merge)); then
    for t in "${targets[@]}"; do
        # Start from the seeds so only inputs adding coverage beyond them are kept, then drop
        # the seeds (every run adds them again).
        m="$WORK/merge/$t"
        mkdir -p "$m" "$WORK/candidates/$t"
        cp "$WORK/seeds/$t/"* "$m/" 2>/dev/null || true
        # Inputs above FUZZ_CORPUS_MAX_BYTES stay out of the committed corpus (mostly mutated
        # copies of the larger zip fixtures, which are seeds of every run anyway).
        find "fuzz/corpus/$t" "$WORK/new/$t" -type f -size -"$((CORPUS_MAX + 1))"c \
            -exec cp -t "$WORK/candidates/$t" {} +
        # -use_counters=0: keep an input for a new edge, not for a new hit count of a known
        # one; that keeps the coverage and a third of the inputs.
        "$BIN/$t" -merge=1 -use_counters=0 -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$MALLOC_MB" \
            -timeout="$TIMEOUT" "$m" "$WORK/candidates/$t" >"$WORK/$t.merge.log" 2>&1 || {
            failed+=("$t (merge)")
            tail -n 20 "$WORK/$t.merge.log" >&2
            continue
        }
        rm -f "$m"/seed-*
        rm -rf "fuzz/corpus/$t"
        mkdir -p "fuzz/corpus/$t"
        cp "$m/"* "fuzz/corpus/$t/" 2>/dev/null || true
        say "$t: corpus now $(ls "fuzz/corpus/$t" | wc -l) inputs, $(cat "fuzz/corpus/$t"/* 2>/dev/null | wc -c) bytes"
    done
fi

if ((${#failed[@]})); then
    say "FAILED: ${failed[*]}" >&2
    exit 1
fi
say "all ${#targets[@]} targets ran without a failure"
