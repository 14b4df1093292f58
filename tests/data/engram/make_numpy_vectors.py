#!/usr/bin/python3
"""Reference values for ds41/text/numpy_random.hpp: numpy's default_rng(seed).integers(low, high,
size, dtype=int64) and the raw PCG64 outputs, as engram.py draws its hash multipliers.

Run with Debian's /usr/bin/python3 (numpy 1.24.2, the version the release's reference values were
made with):  /usr/bin/python3 make_numpy_vectors.py > numpy_vectors.json
Integers are written as decimal strings (JSON numbers lose precision above 2^53 in many readers).
"""
import json
import sys

import numpy as np

RELEASE_BOUND = max(1, (2**63 - 1) // 99092 // 2)  # engram.py's multiplier bound for the release
assert RELEASE_BOUND == 46539438283891

seeds = [0, 1, 2, 7, 42, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 3, 2**63 + 11, 2**64 - 1,
         2**64, 2**64 + 7, 2**96 + 1, 2**100, 2**127 + 2**64 + 9]
seeds += [10007 * layer for layer in range(61)]
seeds = sorted(set(seeds))

highs = [1, 2, 3, 10, 255, 256, 2**16 + 1, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1,
         2**33 + 17, 2**40, 2**53 + 1, 2**62, 2**63 - 1, RELEASE_BOUND]
ranges = [(0, h) for h in highs] + [(-5, 10), (-(2**63), 2**63 - 1), (-(2**31), 2**31), (123456789, 2**50),
                                    (-(2**40), -3), (2**62, 2**63 - 1)]

picker = np.random.default_rng(20240601)  # the random (low, high) pairs below, fixed by this seed
for _ in range(24):
    bits = int(picker.integers(1, 63))
    high = int(picker.integers(1, 2**bits)) + 1
    low = int(picker.integers(-(2**20), 2**20)) if picker.integers(0, 2) else 0
    ranges.append((min(low, high - 1), high))

cases = []
for seed in seeds:
    for k, (low, high) in enumerate(ranges):
        # every seed gets the release's bound, the 32-bit edge cases and a rotating share of the rest
        if not (high in (RELEASE_BOUND, 1, 2**32 - 1, 2**32, 2**32 + 1, 2**31 + 1) or (k + seed) % 5 == 0):
            continue
        size = 1 + (seed + k) % 10
        values = np.random.default_rng(seed).integers(low, high, size=size, dtype=np.int64)
        cases.append({"seed": str(seed), "low": str(low), "high": str(high),
                      "values": [str(int(v)) for v in values]})
    # several calls on one generator: the 32-bit half buffer carries over between calls
    g = np.random.default_rng(seed)
    chain = [(0, 3, 3), (0, 2**40, 2), (0, 1000, 1), (0, 2**32, 3), (5, 6, 2), (0, 7, 5)]
    cases.append({"seed": str(seed), "chain": [
        {"low": str(lo), "high": str(hi), "values": [str(int(v)) for v in g.integers(lo, hi, size=n, dtype=np.int64)]}
        for lo, hi, n in chain]})

raw = []
for seed in [0, 1, 10007, 10007 * 14, 2**32 + 5, 2**100]:
    bg = np.random.default_rng(seed).bit_generator
    raw.append({"seed": str(seed), "raw": [str(int(v)) for v in bg.random_raw(8)]})

json.dump({"numpy": np.__version__, "python": sys.version.split()[0],
           "generator": "tests/data/engram/make_numpy_vectors.py",
           "integers": cases, "random_raw": raw}, sys.stdout, indent=0)
sys.stdout.write("\n")
