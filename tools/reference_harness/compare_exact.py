"""Exact comparison of two ds41 goldens: every capture of every step (shape, dtype, n, stride, ck, data),
in the same order, argmax, tokens and (DSpark goldens, SCHEMA §11) the step's `dspark` record must be identical; the other top-level sections are diffed field by field and
printed (provenance, margins and coverage fields are expected to differ between generators).
Optional: --ckpt DIR_A DIR_B compares the checkpoint folders byte for byte.

usage: compare_exact.py A.json B.json [--skip fixture,margins,...] [--ckpt DIR_A DIR_B]
exit status: 1 if a capture, step field or checkpoint file differs, else 0."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("a")
ap.add_argument("b")
ap.add_argument("--skip", default="")
ap.add_argument("--ckpt", nargs=2)
ns = ap.parse_args()
a, b = json.load(open(ns.a)), json.load(open(ns.b))
bad, n, nd = 0, 0, 0
if len(a["steps"]) != len(b["steps"]):
    print("STEPS", len(a["steps"]), len(b["steps"]))
    bad += 1
for sa, sb in zip(a["steps"], b["steps"]):
    for k in ("index", "kind", "start_pos", "tokens", "argmax", "dspark"):
        if sa.get(k) != sb.get(k):
            print("STEP", sa["index"], k, sa.get(k), sb.get(k))
            bad += 1
    if list(sa["captures"]) != list(sb["captures"]):
        print("KEYS", sa["index"], sorted(set(sa["captures"]) ^ set(sb["captures"])))
        bad += 1
    for k, ca in sa["captures"].items():
        n += 1
        nd += k.startswith("dspark.")
        cb = sb["captures"].get(k)
        if ca != cb:
            bad += 1
            print("CAPTURE", sa["index"], k, [f for f in ca if cb is None or ca[f] != cb.get(f)])
print(f"captures compared: {n} (backbone {n - nd}, dspark {nd}), differing (captures or step fields): {bad}")
wa, wb = a.get("weights_meta", {}), b.get("weights_meta", {})
pa, pb = wa.get("params", []), wb.get("params", [])
same_params = sum(x == y for x, y in zip(pa, pb))
print(f"weights_meta.params: {len(pa)} vs {len(pb)} entries, {same_params} identical; "
      f"aliases {'identical' if wa.get('aliases') == wb.get('aliases') else 'DIFFER'} "
      f"({len(wa.get('aliases') or [])} vs {len(wb.get('aliases') or [])})")


def diff(x, y, path):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in list(x) + [k for k in y if k not in x]:
            if k not in x or k not in y:
                print("ONLY_IN_" + ("B" if k not in x else "A"), path + "." + k)
                continue
            diff(x[k], y[k], path + "." + k)
    elif x != y:
        print("DIFF", path, str(x)[:150], "|", str(y)[:150])


for top in ("fixture", "weights_meta", "spot_checks", "margins", "coverage"):
    if top not in ns.skip.split(","):
        diff(a.get(top), b.get(top), top)
if ns.ckpt:
    da, db = ns.ckpt
    names = sorted(set(os.listdir(da)) | set(os.listdir(db)))
    for f in names:
        pa, pb = os.path.join(da, f), os.path.join(db, f)
        same = os.path.exists(pa) and os.path.exists(pb) and open(pa, "rb").read() == open(pb, "rb").read()
        print("CKPT", "identical" if same else "DIFFERS", f)
        bad += 0 if same else 1
sys.exit(1 if bad else 0)
