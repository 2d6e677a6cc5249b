#!/usr/bin/env bash
# Benchmarks against baselines measured in the same run; results go to stdout (BENCHMARKS.md
# keeps a copy with the machine described).
#
#   scripts/bench.sh            direct disk and zarr-python native baselines (scripts/bench.py)
#   scripts/bench.sh --peers    also rclone mount (local and S3 on a local moto server) and
#                               ratarmount (zip) (scripts/bench_peers.py; installs rclone and ratarmount)
#   scripts/bench.sh --quick    smaller data for a smoke run
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
peers=0
args=()
for a in "$@"; do
    case "$a" in
        --peers) peers=1 ;;
        *) args+=("$a") ;;
    esac
done
scripts/setup.sh >/dev/null
cargo build --release --quiet
BIN="$ROOT/target/release/zarr-mount"
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r), commit $(git rev-parse --short HEAD)"
.venv/bin/python -W ignore scripts/bench.py --bin "$BIN" "${args[@]}"
if [[ $peers == 1 ]]; then
    command -v rclone >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone >/dev/null
    [[ -x .venv/bin/ratarmount ]] || .venv/bin/pip install -q ratarmount
    scripts/s3-server.sh install >/dev/null
    PATH="$ROOT/.venv/bin:$PATH" .venv/bin/python -W ignore scripts/bench_peers.py --bin "$BIN"
fi
