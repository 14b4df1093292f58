#!/usr/bin/python3
"""Tie-heavy top-k vectors: torch.topk's exact indices where scores tie (issue 42).

Run with Debian bookworm's python3-torch (torch 1.13.0a0, built with GCC 12 / libstdc++), the
runtime the goldens are made with:

    /usr/bin/python3 make_topk_vectors.py topk_vectors.json

DeepSeek's inference/model.py calls torch.topk three times (largest=True, dim=-1 each time):
  * "router"    Gate.forward:             (scores + bias).topk(n_activated_experts)      f32,  sorted
  * "candidate" select_candidate_blocks:   scores.topk(min(topk_blocks, num_blocks))      bf16, sorted
                (block maxima with the newest block pinned to +inf; only the set is used)
  * "indexer"   Indexer.forward:           index_score.topk(k, sorted=False).indices.sort() bf16
Each vector runs one of these calls on one row exactly as model.py does (same dtype, k, sorted) and
records what torch returns, in torch's order: `indices` and `values` (bit patterns) of the topk,
and for "indexer" also `sorted_indices` (the .indices.sort(dim=-1).values model.py keeps).

Inputs are built to tie: a few distinct bf16 numbers per row, all-equal rows, rows that tie only
at the k-th value, -inf (masked positions, as the reference's masked_fill makes them), +inf (the
pinned block), NaN, +-0; n from 1 to 3000 and k from 1 to n, on both sides of torch's switch
between partial_sort (k * 64 <= n) and nth_element (+ sort of the first k-1 when sorted).

Values are stored as bit patterns: uint16 for bf16 rows, uint32 for f32 rows. The output is
deterministic (a fixed numpy seed).
"""
import json
import sys

import numpy as np
import torch

assert torch.__version__.startswith("1.13"), torch.__version__
rng = np.random.default_rng(20240042)


def bf16_bits(x):
    """f32 array -> bf16 bit patterns, round to nearest even (NaN kept quiet)."""
    t = torch.tensor(np.asarray(x, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().astype(np.uint16)


def palette_row(n, distinct, p_neginf=0.0, p_nan=0.0, p_posinf=0.0, spread=4.0):
    """n values from `distinct` bf16 numbers, with given shares of -inf / NaN / +inf."""
    pal = rng.normal(0.0, spread, size=distinct).astype(np.float32)
    if rng.random() < 0.3:  # a zero of either sign among them
        pal[0] = -0.0 if rng.random() < 0.5 else 0.0
    row = pal[rng.integers(0, distinct, size=n)]
    u = rng.random(n)
    row[u < p_neginf] = -np.inf
    row[(u >= p_neginf) & (u < p_neginf + p_nan)] = np.nan
    row[(u >= p_neginf + p_nan) & (u < p_neginf + p_nan + p_posinf)] = np.inf
    return row


def boundary_row(n, k):
    """Distinct values except one value shared by a run of positions straddling the k-th best."""
    vals = rng.permutation(n).astype(np.float32) * 0.25 - n / 8.0
    order = np.argsort(-vals, kind="stable")
    lo, hi = max(0, k - 1 - int(rng.integers(0, 6))), min(n, k + int(rng.integers(1, 8)))
    vals[order[lo:hi]] = vals[order[k - 1]]
    return vals


def indexer_like_row(n, k):
    """A prefill row: real-looking bf16 scores (few significant bits tie often), the tail masked."""
    row = (rng.normal(0.0, 1.0, size=n) * rng.choice([0.05, 1.0, 30.0])).astype(np.float32)
    visible = int(rng.integers(0, n + 1))
    row[visible:] = -np.inf
    return row


def run(kind, row, k):
    dtype = torch.float32 if kind == "router" else torch.bfloat16
    t = torch.tensor(np.asarray(row, dtype=np.float32)).to(dtype).view(1, 1, -1)  # [b, s, n] as model.py
    if kind == "indexer":
        top = t.topk(k, dim=-1, sorted=False)
    else:
        top = t.topk(k, dim=-1)
    if dtype == torch.bfloat16:
        in_bits = t.view(torch.int16).numpy().astype(np.uint16).ravel()
        out_bits = top.values.view(torch.int16).numpy().astype(np.uint16).ravel()
    else:
        in_bits = t.view(torch.int32).numpy().astype(np.uint32).ravel()
        out_bits = top.values.view(torch.int32).numpy().astype(np.uint32).ravel()
    rec = {
        "kind": kind,
        "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
        "k": k,
        "sorted": kind != "indexer",
        "n": int(t.shape[-1]),
        "values": [int(b) for b in in_bits],
        "indices": [int(i) for i in top.indices.ravel()],
        "out_values": [int(b) for b in out_bits],
    }
    if kind == "indexer":
        rec["sorted_indices"] = [int(i) for i in top.indices.sort(dim=-1).values.ravel()]
    return rec


def pick_k(n):
    """k on either side of the k * 64 <= n switch, plus the extremes."""
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.25:
        return n
    if r < 0.5 and n >= 64:
        return int(rng.integers(1, n // 64 + 1))  # partial_sort
    return int(rng.integers(1, n + 1))


def sizes():
    small = list(range(1, 41))
    mid = [int(x) for x in rng.integers(41, 700, size=60)]
    big = [int(x) for x in rng.integers(700, 3001, size=14)]
    switch = []
    for k in (1, 2, 3, 6, 8, 16, 40):  # n at the k * 64 switch
        switch += [(64 * k - 1, k), (64 * k, k), (64 * k + 1, k)]
    return small + mid + big, switch


def main(out_path):
    vecs = []
    ns, switch = sizes()
    kinds = ("router", "candidate", "indexer")
    for n in ns:
        for kind in kinds:
            k = pick_k(n)
            style = rng.integers(0, 5)
            if style == 0:
                row = np.full(n, np.float32(rng.choice([0.0, 1.5, -2.0, -np.inf])), dtype=np.float32)
            elif style == 1:
                row = boundary_row(n, k)
            elif style == 2 and kind == "indexer":
                row = indexer_like_row(n, k)
            else:
                distinct = int(rng.choice([1, 2, 3, 5, 8, 20]))
                row = palette_row(n, distinct, p_neginf=rng.choice([0.0, 0.1, 0.5]),
                                  p_nan=rng.choice([0.0, 0.0, 0.05]), p_posinf=rng.choice([0.0, 0.0, 0.02]))
            vecs.append(run(kind, row, k))
    for n, k in switch:
        for kind in kinds:
            vecs.append(run(kind, palette_row(n, int(rng.choice([2, 3, 5])), p_neginf=0.2), k))
    # the released shapes: the router's 6 of 384 experts (a partial_sort: 6 * 64 = 384), the
    # indexer's 512 of a few thousand positions, 64-position candidate blocks
    for _ in range(12):
        vecs.append(run("router", palette_row(384, int(rng.choice([2, 4, 8, 30]))), 6))
    for n in (600, 1000, 2000, 3000):
        vecs.append(run("indexer", indexer_like_row(n, 512) if n > 1000 else palette_row(n, 6, p_neginf=0.3), min(512, n)))
    for nb in (10, 16, 32, 47):
        row = palette_row(nb, 3, p_neginf=0.3)
        row[int(rng.integers(0, nb))] = np.inf
        vecs.append(run("candidate", row, min(8, nb)))
    doc = {
        "generator": "tests/data/topk/make_topk_vectors.py",
        "torch": torch.__version__,
        "note": "torch.topk(largest=True, dim=-1) outputs in torch's order; values as bit patterns "
                "(uint16 bf16 / uint32 f32)",
        "vectors": vecs,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(vecs)} vectors -> {out_path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "topk_vectors.json")
