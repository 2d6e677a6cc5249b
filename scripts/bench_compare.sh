#!/usr/bin/env bash
# Two zarr-mount binaries measured against each other on the same machine, alternated round by
# round so that the machine's drift hits both alike (used to show that a refactor changed no
# speed):
#
#   scripts/bench_compare.sh [--rounds N] [--cloud-args="..."] OLD_BINARY NEW_BINARY
#
# Each round runs, for OLD then NEW (NEW first in odd rounds): scripts/bench.py --only files,zarr
# (local chunk files and zarr-python through the unsharded view, each against its own baseline)
# and scripts/bench_cloud.py --parts zarr --delays 20 (zarr-python over S3 behind the 20 ms
# latency proxy, against obstore). The end prints, for every measured line, each binary's ratios
# (min / median / max over the rounds). Ratios, not times: each is against a baseline measured
# in the same run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
rounds=3
cloud_args=(--parts zarr --delays 20)
bins=()
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds="${a#--rounds=}" ;;
        --cloud-args=*) read -ra cloud_args <<<"${a#--cloud-args=}" ;;
        -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
        -*) echo "bench_compare.sh: unknown option $a" >&2; exit 2 ;;
        *) bins+=("$a") ;;
    esac
done
if [[ ${#bins[@]} != 2 ]]; then
    echo "bench_compare.sh: give two binaries (OLD NEW), e.g. target/release/zarr-mount twice from two commits" >&2
    exit 2
fi
for b in "${bins[@]}"; do
    [[ -x $b ]] || { echo "bench_compare.sh: not an executable: $b" >&2; exit 2; }
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_compare.sh: --rounds wants a positive number, not $rounds" >&2; exit 2; }
scripts/setup.sh >/dev/null
scripts/s3-server.sh install >/dev/null
.venv/bin/python -c 'import obstore' 2>/dev/null || .venv/bin/pip install -q obstore
log=$(mktemp -d /tmp/zarr-mount-bench-compare.XXXXXX)
trap 'rm -rf "$log"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, kernel $(uname -r), $rounds rounds"
for i in 0 1; do echo "# binary $i: ${bins[$i]} ($("${bins[$i]}" --version))"; done
for ((r = 0; r < rounds; r++)); do
    order=(0 1)
    ((r % 2)) && order=(1 0)
    for i in "${order[@]}"; do
        echo "## round $((r + 1)), binary $i (load $(cut -d' ' -f1 /proc/loadavg))"
        {
            .venv/bin/python -W ignore scripts/bench.py --bin "${bins[$i]}" --only files,zarr
            .venv/bin/python -W ignore scripts/bench_cloud.py --bin "${bins[$i]}" "${cloud_args[@]}"
        } | tee -a "$log/$i"
    done
done
echo "## ratios by binary: min / median / max over $rounds rounds"
.venv/bin/python - "$log/0" "$log/1" <<'EOF'
import re, statistics, sys
by_name = [{}, {}]
for i, path in enumerate(sys.argv[1:]):
    for line in open(path):
        m = re.match(r"(.*?)\s+baseline .* ratio\s+([0-9.]+)", line)
        if m:
            by_name[i].setdefault(m.group(1).strip(), []).append(float(m.group(2)))
for name in by_name[0]:
    cells = []
    for i in (0, 1):
        rs = sorted(by_name[i].get(name, []))
        cells.append(f"{rs[0]:.2f} / {statistics.median(rs):.2f} / {rs[-1]:.2f}" if rs else "-")
    print(f"{name:60s} old {cells[0]:20s} new {cells[1]}")
EOF
