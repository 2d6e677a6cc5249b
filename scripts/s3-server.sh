#!/usr/bin/env bash
# A local S3-compatible server (moto) for tests, listening on 127.0.0.1 only.
#
#   scripts/s3-server.sh install             install moto[server] into .venv (idempotent)
#   scripts/s3-server.sh start DIR PORT      start it in the background; DIR holds the pid file
#                                            and log; returns once the server answers
#   scripts/s3-server.sh stop DIR            stop the server started with DIR
#
# moto accepts any credentials and keeps its data in memory: a restart starts empty.
# Exit codes: 0 ok, 1 failure, 3 moto could not be installed (e.g. no network).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
MOTO="$VENV/bin/moto_server"

die() {
    echo "s3-server: $*" >&2
    exit 1
}

install() {
    if [[ -x "$MOTO" ]]; then
        return 0
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        "$ROOT/scripts/setup.sh" >&2 || {
            echo "s3-server: scripts/setup.sh failed" >&2
            exit 3
        }
    fi
    # flock: parallel test runs must not install into one venv at the same time.
    (
        flock 9
        if [[ ! -x "$MOTO" ]]; then
            echo "s3-server: installing moto[server] into $VENV" >&2
            "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'moto[server]' >&2 || exit 3
        fi
    ) 9>"$VENV/.moto-install.lock" || {
        echo "s3-server: could not install moto[server]" >&2
        exit 3
    }
}

answers() {
    "$VENV/bin/python" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1)
except urllib.error.HTTPError:
    pass  # any HTTP answer means it is up
EOF
}

start() {
    local dir="$1" port="$2"
    [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number"
    install
    mkdir -p "$dir"
    local pidfile="$dir/moto.pid"
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        die "already running (pid $(cat "$pidfile"))"
    fi
    setsid "$MOTO" -H 127.0.0.1 -p "$port" >>"$dir/moto.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 1 150); do
        if answers "$port"; then
            return 0
        fi
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            rm -f "$pidfile"
            die "moto exited at start; log: $(tail -n 5 "$dir/moto.log")"
        fi
        sleep 0.1
    done
    stop "$dir"
    die "moto did not answer on port $port within 15 s"
}

stop() {
    local dir="$1" pidfile="$1/moto.pid" pid
    [[ -f "$pidfile" ]] || return 0
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

case "${1:-}" in
    install) install ;;
    start)
        [[ $# -eq 3 ]] || die "usage: $0 start DIR PORT"
        start "$2" "$3"
        ;;
    stop)
        [[ $# -ge 2 ]] || die "usage: $0 stop DIR"
        stop "$2"
        ;;
    *)
        sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
