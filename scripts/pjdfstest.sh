#!/usr/bin/env bash
# POSIX conformance: run pjdfstest against a writable mount of a local directory (default
# view), print a per-group table and compare every test's outcome with
# tests/pjdfstest/expected.txt. docs/SEMANTICS.md "POSIX conformance" explains the expected failures.
#
#   scripts/pjdfstest.sh              run all groups and compare: a test that passed before and
#                                     no longer does fails the run; a newly passing one is reported
#   scripts/pjdfstest.sh --update     run all groups and rewrite tests/pjdfstest/expected.txt
#   scripts/pjdfstest.sh open rename  only these groups (or test-name patterns), no comparison
#
# Needs root (pjdfstest switches users; its root-only tests are part of the expectations).
# Installs pjdfstest (pinned version) into target/tools on first use (about 1 minute).
# pjdfstest's own output (with each failure's message) is kept in target/pjdfstest.log.
# Environment: ZARR_MOUNT_BIN (default: the debug binary, built when missing),
# CARGO_TARGET_DIR, PJDFSTEST_TIMEOUT (seconds for the whole run, default 900).
# The mount is always unmounted and the daemon stopped, also on failure or Ctrl-C.
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
TOOLS="$TARGET/tools"
PJD="$TOOLS/bin/pjdfstest"
PJD_VERSION=0.2.2
CONFIG="$ROOT/tests/pjdfstest/pjdfstest.toml"
EXPECTED="$ROOT/tests/pjdfstest/expected.txt"
TIMEOUT="${PJDFSTEST_TIMEOUT:-900}"

update=0
patterns=()
for arg in "$@"; do
    case "$arg" in
        --update) update=1 ;;
        -h | --help)
            sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        -*)
            echo "pjdfstest.sh: unknown option: $arg" >&2
            exit 2
            ;;
        *) patterns+=("$arg") ;;
    esac
done
if ((update && ${#patterns[@]})); then
    echo "pjdfstest.sh: --update needs the full run (no group names)" >&2
    exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "pjdfstest.sh: must run as root (pjdfstest switches users and mounts need /dev/fuse)" >&2
    exit 1
fi

say() { echo "pjdfstest.sh: $*"; }

# ---------------------------------------------------------------- tools
if [[ "$("$PJD" --version 2>/dev/null)" != "pjdfstest $PJD_VERSION" ]]; then
    say "installing pjdfstest $PJD_VERSION into $TOOLS"
    cargo install pjdfstest --version "$PJD_VERSION" --locked --root "$TOOLS" --quiet
fi
BIN="${ZARR_MOUNT_BIN:-$TARGET/debug/zarr-mount}"
if [[ ! -x "$BIN" ]]; then
    say "building zarr-mount"
    cargo build --quiet
fi

# ---------------------------------------------------------------- mount, with cleanup
WORK="$(mktemp -d "${TMPDIR:-/tmp}/zarr-mount-pjdfstest.XXXXXX")"
SRC="$WORK/src"
MNT="$WORK/mnt"
mkdir -p "$SRC" "$MNT"
DAEMON_PID=""

mounted() { grep -qsF " $MNT " /proc/self/mounts; }

cleanup() {
    local status=$?
    set +e
    if mounted; then
        fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT"
    fi
    if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$DAEMON_PID" 2>/dev/null
    fi
    [[ -n "$DAEMON_PID" ]] && wait "$DAEMON_PID" 2>/dev/null
    if mounted; then
        umount -l "$MNT" 2>/dev/null
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$BIN" "$SRC" "$MNT" --foreground >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 200); do
    mounted && break
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
        say "zarr-mount exited before mounting:" >&2
        cat "$WORK/daemon.log" >&2
        exit 1
    fi
    sleep 0.1
done
mounted || { say "the mount did not appear within 20 s" >&2; exit 1; }

# pjdfstest's harness sets each test directory to mode 0755 first and aborts the whole run,
# silently, when that fails: say so plainly instead.
probe="$MNT/pjdfstest-probe"
mkdir "$probe"
if ! chmod 0755 "$probe"; then
    say "chmod 0755 of a new directory fails on the mount; pjdfstest cannot run its tests" >&2
    exit 1
fi
rmdir "$probe"

# ---------------------------------------------------------------- run
say "running pjdfstest $PJD_VERSION on $MNT (${patterns[*]:-all groups})"
started=$SECONDS
set +e
(cd "$WORK" && NO_COLOR=1 timeout "$TIMEOUT" "$PJD" -c "$CONFIG" -p "$MNT" "${patterns[@]}") >"$WORK/run.log" 2>&1
run_status=$?
set -e
elapsed=$((SECONDS - started))
LOG="$TARGET/pjdfstest.log"
sed 's/\x1b\[[0-9;]*m//g' "$WORK/run.log" >"$LOG"
# One "NAME OUTCOME" line per test: pass, fail or skip.
awk '
    match($0, / +(ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)$/) {
        name = substr($0, 1, RSTART - 1); outcome = substr($0, RSTART); sub(/^ +/, "", outcome)
        if (name !~ /^[a-z_0-9]+::[^ ]+$/) next
        o = (outcome == "ok" || outcome == "PASSED UNEXPECTEDLY") ? "pass" : (outcome == "skipped" ? "skip" : "fail")
        print name, o
    }' "$LOG" | sort >"$WORK/results.txt"

if ! grep -q '^Summary:' "$LOG"; then
    say "pjdfstest did not finish (exit status $run_status after ${elapsed}s); the end of its output:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
fi

# ---------------------------------------------------------------- table
table() {
    awk '{ split($1, p, "::"); g = p[1]; n[g "," $2]++; groups[g] = 1; t[$2]++ }
        END {
            printf "%-16s %7s %7s %7s %7s\n", "group", "passed", "failed", "skipped", "total"
            cnt = 0; for (g in groups) names[++cnt] = g
            for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (names[j] < names[i]) { x = names[i]; names[i] = names[j]; names[j] = x }
            for (i = 1; i <= cnt; i++) { g = names[i]
                printf "%-16s %7d %7d %7d %7d\n", g, n[g ",pass"], n[g ",fail"], n[g ",skip"], n[g ",pass"] + n[g ",fail"] + n[g ",skip"] }
            printf "%-16s %7d %7d %7d %7d\n", "total", t["pass"], t["fail"], t["skip"], t["pass"] + t["fail"] + t["skip"]
        }' "$1"
}
echo
table "$WORK/results.txt"
echo
say "pjdfstest took ${elapsed}s; its full output is in $LOG"

if ((${#patterns[@]})); then
    say "failures (group filter given, not compared with $EXPECTED):"
    awk '$2 == "fail" { print "  " $1 }' "$WORK/results.txt"
    exit 0
fi

if ((update)); then
    {
        echo "# pjdfstest $PJD_VERSION on a writable zarr-mount of a local directory (default view)."
        echo "# One test per line: NAME pass|fail|skip|either. Regenerate with scripts/pjdfstest.sh --update;"
        echo "# docs/SEMANTICS.md (POSIX conformance) says why the failures are expected, and why the tests"
        echo "# marked either pass or fail by timing (--update keeps that mark)."
        awk 'NR == FNR { if ($2 == "either") either[$1] = 1; next } ($1 in either) { $2 = "either" } 1' \
            <(grep -v '^#' "$EXPECTED" 2>/dev/null || true) "$WORK/results.txt"
    } >"$EXPECTED"
    say "wrote $EXPECTED"
    exit 0
fi

# ---------------------------------------------------------------- compare
[[ -f "$EXPECTED" ]] || { say "$EXPECTED is missing: run scripts/pjdfstest.sh --update" >&2; exit 1; }
grep -v '^#' "$EXPECTED" | sort >"$WORK/expected.txt"
# NAME EXPECTED ACTUAL for every test whose outcome changed (or that is new or gone).
# A test marked `either` may pass or fail, not vanish or be skipped.
join -a1 -a2 -e missing -o 0,1.2,2.2 "$WORK/expected.txt" "$WORK/results.txt" |
    awk '$2 != $3 && !($2 == "either" && ($3 == "pass" || $3 == "fail"))' >"$WORK/changes.txt"
# Newly passing tests are improvements; every other change (a test that no longer passes,
# or now fails instead of being skipped, or a test that appeared or vanished) is a regression.
improvements="$(awk '$3 == "pass"' "$WORK/changes.txt")"
regressions="$(awk '$3 != "pass"' "$WORK/changes.txt")"
if [[ -n "$improvements" ]]; then
    say "better than $EXPECTED; update it with scripts/pjdfstest.sh --update (and the table in docs/SEMANTICS.md):"
    printf '%s\n' "$improvements" | awk 'NF { printf "  %-70s %s -> %s\n", $1, $2, $3 }'
fi
# A test that failed where it should pass is run twice more on its own: one that passes then is
# timing-dependent. It is reported as FLAKY, loudly, and does not fail the run; one that fails
# again is a regression. The one case seen so far, ftruncate::extend_file_shrink_sparse (about 1
# CI run in 6: after ftruncate(fd1, 1234567), open(O_WRONLY) as fd2 and ftruncate(fd2, 567),
# lstat showed 1234567), has not recurred since in 11 full runs (5 of them beside
# `stress-ng --cpu 2` and a `cargo test` on both cores), 30 runs of the ftruncate, truncate and
# open groups and 120 runs of the case alone (20 with --metadata-ttl 0, so that every lstat and
# path walk asks the daemon). Both handles share the path's one write buffer
# (files.rs `open`/`join_buf`), SETATTR answers from that buffer (`setattr` -> `getattr` ->
# `resolve` -> `pending_node`), and GETATTR or LOOKUP never answers from the metadata cache
# while a buffer is open (`cached_node`): no daemon path that shows the old size was found.
flaky=""
if [[ -n "$regressions" ]]; then
    kept=""
    while read -r name want got; do
        [[ -n "$name" ]] || continue
        if [[ "$want" == pass && "$got" == fail ]]; then
            passed=0
            for _ in 1 2; do
                if (cd "$WORK" && NO_COLOR=1 timeout 60 "$PJD" -c "$CONFIG" -p "$MNT" "$name") 2>&1 \
                    | sed 's/\x1b\[[0-9;]*m//g' | grep -Eq "^${name} +ok$"; then
                    passed=$((passed + 1))
                fi
            done
            if ((passed == 2)); then
                flaky+="$name"$'\n'
                continue
            fi
        fi
        kept+="$name $want $got"$'\n'
    done <<<"$regressions"
    regressions="$kept"
fi
if [[ -n "$flaky" ]]; then
    say "FLAKY (failed once, then passed twice on its own; see the log above and $LOG):" >&2
    printf '%s' "$flaky" | awk 'NF { printf "  %s\n", $1 }' >&2
fi
if [[ -n "${regressions//[$'\n' ]/}" ]]; then
    say "REGRESSIONS against $EXPECTED:" >&2
    printf '%s\n' "$regressions" | awk 'NF { printf "  %-70s %s -> %s\n", $1, $2, $3 }' >&2
    say "details of the failing tests:" >&2
    for name in $(printf '%s\n' "$regressions" | awk 'NF && $3 == "fail" { print $1 }'); do
        awk -v n="$name" 'index($0, n " ") == 1 { show = 1; print; next } show && /^\t/ { print; next } { show = 0 }' "$LOG" >&2
    done
    exit 1
fi
say "matches $EXPECTED"
