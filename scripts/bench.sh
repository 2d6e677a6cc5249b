#!/usr/bin/env bash
# Benchmarks against baselines measured in the same run; results go to stdout (BENCHMARKS.md
# keeps the latest figure of each workload, with its commit, date, machine and command).
#
#   scripts/bench.sh            direct disk and zarr-python native baselines, local and S3 (scripts/bench.py),
#                               then listing 100,000 keys and peak memory while reading 4 GiB,
#                               local and on a local moto S3 server (scripts/bench_scale.py)
#   scripts/bench.sh --peers    also rclone mount (local and S3 on a local moto server) and
#                               ratarmount (zip) (scripts/bench_peers.py; installs rclone and ratarmount)
#   scripts/bench.sh --quick    smaller data for a smoke run (about a minute)
#   scripts/bench.sh --cloud    also S3 behind a latency proxy at 0 and 20 ms (scripts/bench_cloud.py:
#                               disk cache cold and warm, large-object reads, peak RSS);
#                               --cloud-args="--big-mib 256 --delays 20" passes options to it
#                               (alone, it runs just that part: --cloud-args="--parts goals
#                               --delays 20" measures the goals of cloud reads against a local
#                               disk, obstore and rclone mount);
#                               --cloud-only runs just that part
#
# Other arguments go to bench.py and bench_scale.py, e.g. --only files,listing (parts: files,
# zarr for bench.py; listing, rss for bench_scale.py) or --mount-args="--fuse-threads 4" (bench.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
peers=0
cloud=0
cloud_args=()
base_args=()
scale_args=()
for a in "$@"; do
    case "$a" in
        --peers) peers=1 ;;
        --cloud) cloud=1 ;;
        --cloud-only) cloud=2 ;;
        --cloud-args=*) read -ra cloud_args <<<"${a#--cloud-args=}" ;;
        --only=*)
            # each script takes the parts it knows
            IFS=, read -ra parts <<<"${a#--only=}"
            b=() s=()
            for p in "${parts[@]}"; do
                case "$p" in
                    files | zarr | zarr-s3) b+=("$p") ;;
                    listing | rss) s+=("$p") ;;
                    *) echo "bench.sh: unknown part $p" >&2; exit 2 ;;
                esac
            done
            base_args+=("--only=$(IFS=,; echo "${b[*]:-none}")")
            scale_args+=("--only=$(IFS=,; echo "${s[*]:-none}")")
            ;;
        --mount-args=*) base_args+=("$a") ;;
        *) base_args+=("$a") scale_args+=("$a") ;;
    esac
done
# --cloud-args alone asks for the cloud part only.
if [[ $cloud == 0 && ${#cloud_args[@]} -gt 0 ]]; then
    cloud=2
fi
scripts/setup.sh >/dev/null
scripts/s3-server.sh install >/dev/null
# zarr-python's own S3 store, the baseline of the zarr-s3 part (not a test requirement)
.venv/bin/python -c 'import obstore' 2>/dev/null || .venv/bin/pip install -q obstore
cargo build --release --quiet
BIN="$ROOT/target/release/zarr-mount"
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r), commit $(git rev-parse --short HEAD)"
if [[ $cloud != 2 ]]; then
    .venv/bin/python -W ignore scripts/bench.py --bin "$BIN" "${base_args[@]}"
    .venv/bin/python -W ignore scripts/bench_scale.py --bin "$BIN" "${scale_args[@]}"
fi
if [[ $cloud != 0 ]]; then
    # The rclone contender of bench_cloud.py (skipped there when rclone is missing).
    command -v rclone >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone >/dev/null
    .venv/bin/python -W ignore scripts/bench_cloud.py --bin "$BIN" "${cloud_args[@]}"
fi
if [[ $peers == 1 ]]; then
    command -v rclone >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rclone >/dev/null
    [[ -x .venv/bin/ratarmount ]] || .venv/bin/pip install -q ratarmount
    PATH="$ROOT/.venv/bin:$PATH" .venv/bin/python -W ignore scripts/bench_peers.py --bin "$BIN"
fi
