"""Compare a run of ds41 (through the Python module) with a golden file's captures, in Python.

The golden (SCHEMA.md) holds, per step, every capture as samples at 0, stride, 2*stride, ... and
a checksum over all elements, sum(v[i] * (i + 1)). Bit for bit here means: every sample equal to the
golden's float32 (bf16 captures are bf16 values held in float32), every integer equal, the
checksum within 1e-12 of the magnitude sum (float64 summation order differs between numpy and the
reference's), the same capture names, and the same argmax.
"""
import json

import numpy as np

import ds41
from ds41 import Captures


def load(path):
    with open(path) as f:
        return json.load(f)


def compare_capture(name, gold, mine):
    """Problems with one capture (an empty list when it is bit for bit)."""
    shape = list(mine.shape)
    if shape != list(gold["shape"]):
        return [f"{name}: shape {shape} != golden {gold['shape']}"]
    flat = np.asarray(mine).reshape(-1).astype(np.float64)
    n, stride = int(gold["n"]), int(gold["stride"])
    if flat.size != n:
        return [f"{name}: {flat.size} elements, golden n {n}"]
    samples = flat[::stride][: len(gold["data"])]
    if gold["dtype"] in ("i32", "bool"):
        want = np.asarray(gold["data"], dtype=np.float64)
    else:  # the golden's numbers are float32 values (bf16 ones exactly)
        want = np.asarray(gold["data"], dtype=np.float64).astype(np.float32).astype(np.float64)
    out = []
    bad = np.nonzero(samples != want)[0]
    if bad.size:
        i = int(bad[0])
        out.append(f"{name}: {bad.size} of {samples.size} samples differ (first at {i * stride}: "
                   f"{samples[i]!r} vs golden {want[i]!r})")
    weights = np.arange(1, n + 1, dtype=np.float64)
    ck = float(np.dot(flat, weights))
    mag = float(np.dot(np.abs(flat), weights))
    if abs(ck - gold["ck"]) > 1e-12 * max(mag, 1.0):
        out.append(f"{name}: checksum {ck!r} vs golden {gold['ck']!r}")
    return out


def compare_step(gold_step, caps, argmax):
    problems = []
    gnames, mnames = set(gold_step["captures"]), set(caps)
    for name in sorted(gnames - mnames):
        problems.append(f"step {gold_step['index']}: '{name}' missing in this run")
    for name in sorted(mnames - gnames):
        problems.append(f"step {gold_step['index']}: '{name}' produced here but absent in the golden")
    for name in gold_step["captures"]:
        if name in caps:
            problems += [f"step {gold_step['index']}: {p}" for p in compare_capture(name, gold_step["captures"][name], caps[name])]
    if argmax != gold_step["argmax"]:
        problems.append(f"step {gold_step['index']}: argmax {argmax} != golden {gold_step['argmax']}")
    return problems


def has_dspark(g):
    c = g["fixture"]["config"]
    return (c.get("n_mtp_layers") or 0) > 0 and (c.get("dspark_block_size") or 0) > 0


def is_draft_capture(name):
    """A capture of a DSpark draft call (SCHEMA §11.4.2-11.4.4), not of the target step itself
    (dspark.main_hidden, dspark.main_x and the stages' ring rows window_kv)."""
    if not name.startswith("dspark.") or name in ("dspark.main_hidden", "dspark.main_x"):
        return False
    return not (name.startswith("dspark.mtp.") and name.endswith(".window_kv"))


def run_golden(model, g, chunks=None):
    """Every step of golden `g` on a new sequence of `model`, every capture compared. `chunks`:
    decode tokens fed in chunks of these sizes (cycling), every row's captures compared as its
    own step. A DSpark golden (SCHEMA §11) drafts after each decode step, anchored on the step's
    argmax; fed in chunks, at the chunk's end only (the other rows' draft captures are not
    compared: the rings have moved on). Returns (problems, captures compared)."""
    steps = g["steps"]
    dspark = has_dspark(g)
    problems, compared = [], 0
    with model.new_sequence() as seq:
        logits, caps = seq.extend(steps[0]["tokens"], capture=True)
        problems += compare_step(steps[0], caps[0], int(np.argmax(logits)))
        compared += len(steps[0]["captures"])
        i, c = 1, 0
        while i < len(steps):
            n = 1 if not chunks else chunks[c % len(chunks)]
            c += 1
            group = steps[i : i + n]
            toks = [t for st in group for t in st["tokens"]]
            logits, caps = seq.extend(toks, all_logits=True, capture=True)
            assert logits.shape == (len(group), model.config["vocab_size"])
            if dspark:
                *_, dcaps = seq.draft(int(np.argmax(logits[-1])), capture=True)
                caps[-1] = Captures({**caps[-1], **dcaps}, {**caps[-1].dtypes, **dcaps.dtypes})
            for j, st in enumerate(group):
                gold = st
                if dspark and j + 1 < len(group):
                    gold = dict(st, captures={k: v for k, v in st["captures"].items() if not is_draft_capture(k)})
                problems += compare_step(gold, caps[j], int(np.argmax(logits[j])))
                compared += len(gold["captures"])
            i += len(group)
    return problems, compared
