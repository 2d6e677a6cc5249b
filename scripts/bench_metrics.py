"""Does scraping /metrics disturb reads? The 4 KiB files benchmark of bench.py (`--only files`,
read through a `--view raw --read-only` mount, cold and warm), run with and without
`--metrics-addr` and a scraper polling /metrics every 100 ms, alternating the two so that
drift on the machine hits both alike. Prints files/s for every run and the medians.

  .venv/bin/python scripts/bench_metrics.py --bin target/release/zarr-mount [--count 4000] [--rounds 3]
"""

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (make_files, read_tree, Mounted, drop_caches, free_port, timed)


class Scraper:
    """GET /metrics every `every` seconds until stopped; counts the scrapes and their bytes."""

    def __init__(self, port, every):
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every = every
        self.stop = threading.Event()
        self.scrapes = 0
        self.failures = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    r.read()
                self.scrapes += 1
            except OSError:
                self.failures += 1
            self.stop.wait(self.every)

    def close(self):
        self.stop.set()
        self.thread.join()


def one_run(binary, src, mnt, count, scrape):
    args = ["--view", "raw", "--read-only", "--metadata-ttl", "60"]
    port = bench.free_port()
    if scrape:
        args += ["--metrics-addr", f"127.0.0.1:{port}"]
    with bench.Mounted(binary, src, mnt, *args):
        scraper = Scraper(port, 0.1) if scrape else None
        try:
            bench.drop_caches()
            cold = bench.timed(lambda: bench.read_tree(mnt))
            warm = bench.timed(lambda: bench.read_tree(mnt), 2)
        finally:
            if scraper:
                scraper.close()
    if scraper and (scraper.scrapes == 0 or scraper.failures):
        raise RuntimeError(f"scraper: {scraper.scrapes} scrapes, {scraper.failures} failures")
    return count / cold, count / warm, scraper.scrapes if scraper else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--count", type=int, default=4000, help="4 KiB files (bench.py uses 10,000)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="zarr-mount-bench-metrics.") as tmp:
        work = Path(tmp)
        src, mnt = work / "files", work / "mnt"
        mnt.mkdir()
        bench.make_files(src, args.count, 4096)
        for r in range(args.rounds):
            # Alternate which side goes first, so neither always runs on a warmer machine.
            for scrape in ((False, True) if r % 2 == 0 else (True, False)):
                cold, warm, scrapes = one_run(args.bin, src, mnt, args.count, scrape)
                results[scrape].append((cold, warm))
                label = f"scraped every 100 ms ({scrapes} scrapes)" if scrape else "no scraper"
                print(f"round {r + 1}  {label:34s} cold {cold:8.0f} files/s  warm {warm:8.0f} files/s",
                      flush=True)
    for scrape in (False, True):
        cold = statistics.median(c for c, _ in results[scrape])
        warm = statistics.median(w for _, w in results[scrape])
        label = "scraped every 100 ms" if scrape else "no scraper"
        print(f"median {label:34s} cold {cold:8.0f} files/s  warm {warm:8.0f} files/s")


if __name__ == "__main__":
    sys.exit(main())
