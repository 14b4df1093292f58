#!/usr/bin/env python3
r"""Issue 6's table from several bench_kernels runs: each benchmark's median time and GB/s, and its
bytes/s as a fraction of the faster of BM_StreamRead and BM_StreamReadPrefetch from the same run
(median and range over the runs).

    for r in 1 2 3 4 5; do
      ./build/bench/bench_kernels --benchmark_filter='StreamRead|BM_Linear|BM_DecodeGemv|BM_PanelWalk' --benchmark_repetitions=5 \
        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
        --benchmark_format=json > run$r.json
    done
    scripts/stream_fractions.py run*.json

Why: the development VM's stream read moves by +-20% from run to run, so a kernel's GB/s means
little except against the stream read measured beside it.
"""
import json
import re
import statistics
import sys


def medians(path):
    with open(path) as f:
        data = json.load(f)
    return {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "median"}


def time_text(t, unit):
    """A median time in the benchmark's unit, or in ms once it passes 1000 us."""
    if unit == "us" and t >= 1000:
        t, unit = t / 1000, "ms"
    return f"{t:.3g} {unit}" if t < 100 else f"{t:.0f} {unit}"


def main(paths):
    if not paths:
        sys.exit(__doc__)
    streams, rows = [], {}
    for path in paths:
        med = medians(path)
        # the reference is the faster of the stream reads (plain and software-prefetched): on some
        # machines the hardware prefetcher alone leaves the plain one well below what memory serves
        stream = {name: b["bytes_per_second"] for name, b in med.items() if "StreamRead" in name}
        if not stream:
            sys.exit(f"{path}: no BM_StreamRead median (run with --benchmark_repetitions and StreamRead in the filter)")
        s = max(stream.values())
        streams.append(" + ".join(f"{v / 1e9:.1f}" for _, v in sorted(stream.items())))
        for name, b in med.items():
            if "StreamRead" in name or "bytes_per_second" not in b:
                continue
            rows.setdefault(name, []).append((b["real_time"], b["time_unit"], b["bytes_per_second"] / 1e9,
                                              b["bytes_per_second"] / s))
    print("stream read (plain + prefetched), GB/s: " + " / ".join(streams))
    print("| benchmark | time (median) | GB/s (median) | fraction of stream: median (range) | runs |")
    print("|---|---|---|---|---|")
    for name in sorted(rows):
        r = rows[name]
        label = re.sub(r"BM_Linear<WeightFormat::k(\w+)>/rows:(\d+)/cols:(\d+)/T:(\d+)/real_time",
                       r"linear \1 \2x\3 T=\4", name)
        label = re.sub(r"BM_DecodeGemv<WeightFormat::k(\w+), host_gemv::VectorIsa::k(\w+)>/rows:(\d+)/cols:(\d+)/real_time",
                       lambda m: f"decode {m[1]}, {m[2].lower()} {m[3]}x{m[4]}", label)
        label = re.sub(r"BM_PanelWalk<WeightFormat::k(\w+)>/rows:(\d+)/cols:(\d+)/real_time",
                       r"panel walk (no arithmetic) \1 \2x\3", label)
        frac = [x[3] for x in r]
        print(f"| {label} | {time_text(statistics.median(x[0] for x in r), r[0][1])} | "
              f"{statistics.median(x[2] for x in r):.1f} | {100 * statistics.median(frac):.0f}% "
              f"({100 * min(frac):.0f}-{100 * max(frac):.0f}%) | {len(r)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
