#!/usr/bin/env bash
# Benchmarks against baselines measured in the same run; output goes to stdout (paste it into
# BENCHMARKS.md with the machine described). `scripts/bench.sh --quick` for a smaller run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh >/dev/null
cargo build --release --quiet
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r), commit $(git rev-parse --short HEAD)"
exec .venv/bin/python -W ignore scripts/bench.py --bin "$ROOT/target/release/zarr-mount" "$@"
