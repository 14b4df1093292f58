"""Per-call overhead of a decode step through Python, against the same step called from C++.

For each golden given (default: the tiny and the mid public goldens), a sequence takes the golden's
prompt; then N times: checkpoint, one decode token, rollback — once as three Python calls
(Sequence.checkpoint / extend / rollback) and once as one C++ loop doing the same calls on the same
sequence (Sequence._cxx_decode_seconds). Both loops run R rounds interleaved; the medians are
reported, and the overhead is their difference per step (three Python calls, with the argument
conversion, against none). The last column is the binding's floor: a call that does no work.

    python python/bench/step_overhead.py [GOLDEN.json ...] [--steps N] [--rounds R]
"""
import argparse
import json
import pathlib
import statistics
import sys
import time

import ds41

ROOT = pathlib.Path(__file__).resolve().parents[2]


def measure(path, steps, rounds):
    with open(path) as f:
        g = json.load(f)
    model = ds41.Model.from_golden(path)
    seq = model.new_sequence()
    seq.extend(g["steps"][0]["tokens"])
    tok = g["steps"][1]["tokens"][0]
    py, cxx = [], []
    seq.checkpoint(); seq.extend([tok]); seq.rollback()  # warm
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            seq.checkpoint()
            seq.extend([tok])
            seq.rollback()
        py.append((time.perf_counter() - t0) / steps)
        cxx.append(seq._s._cxx_decode_seconds(tok, steps) / steps)
    # the binding's own floor: a call that does no work (the length property: lock, read, return)
    t0 = time.perf_counter()
    for _ in range(20000):
        seq.length
    floor = (time.perf_counter() - t0) / 20000
    return statistics.median(py), statistics.median(cxx), floor, model.config


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("goldens", nargs="*", help="golden files (default: golden/ds41_tiny_golden.json, golden/ds41_mid_golden.json)")
    ap.add_argument("--steps", type=int, default=0, help="decode steps per round (default: about 1 s of steps)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each loop (default 5)")
    a = ap.parse_args()
    paths = a.goldens or [ROOT / "golden" / "ds41_tiny_golden.json", ROOT / "golden" / "ds41_mid_golden.json"]
    print("| model | C++ step (us) | Python step (us) | overhead per step (us) | ratio | an empty call (us) |")
    print("|---|---|---|---|---|---|")
    for p in paths:
        steps = a.steps
        if not steps:  # about one second of steps per round
            _, c, _, _ = measure(p, 3, 1)
            steps = max(3, min(2000, int(1.0 / max(c, 1e-6))))
        py, cxx, floor, cfg = measure(p, steps, a.rounds)
        print(f"| {pathlib.Path(p).name} ({cfg['n_layers']} layers, dim {cfg['dim']}; {steps} steps x {a.rounds}) "
              f"| {cxx * 1e6:.1f} | {py * 1e6:.1f} | {(py - cxx) * 1e6:.1f} | {py / cxx:.3f} | {floor * 1e6:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
