import json, sys, math
import numpy as np
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
def cmpobj(x, y, path):
    if x != y: print("DIFF", path, str(x)[:200], "|", str(y)[:200])
for k in ("prompt_tokens", "decode_tokens"):
    cmpobj(a["fixture"][k], b["fixture"][k], k)
ea, eb = a["fixture"]["engram"], b["fixture"]["engram"]
if ea or eb:
    for k in ea:
        if k in ("token_map_rule",): continue
        cmpobj(ea.get(k), eb.get(k), "engram." + k)
cmpobj(a["fixture"]["config"], b["fixture"]["config"], "config")
pa = {p["name"]: p for p in a["weights_meta"]["params"]}; pb = {p["name"]: p for p in b["weights_meta"]["params"]}
cmpobj(list(pa), list(pb), "param order")
for n in pa:
    for k in ("shape", "param_dtype", "storage", "scale", "offset", "what"):
        if pa[n][k] != pb.get(n, {}).get(k): print("PARAM", n, k, pa[n][k], pb.get(n, {}).get(k))
worst = {}
for sa, sb in zip(a["steps"], b["steps"]):
    if sa["argmax"] != sb["argmax"]: print("ARGMAX", sa["index"], sa["argmax"], sb["argmax"])
    ka, kb = list(sa["captures"]), list(sb["captures"])
    if ka != kb: print("KEYS", sa["index"], set(ka) ^ set(kb), ka == sorted(ka))
    for k in ka:
        if k not in sb["captures"]: continue
        ca, cb = sa["captures"][k], sb["captures"][k]
        for f in ("shape", "dtype", "n", "stride"):
            if ca[f] != cb[f]: print("META", sa["index"], k, f, ca[f], cb[f])
        da, db = np.array(ca["data"], dtype=np.float64), np.array(cb["data"], dtype=np.float64)
        if ca["dtype"] in ("i32", "bool"):
            if not np.array_equal(da, db): print("DISCRETE", sa["index"], k)
            continue
        if da.shape != db.shape: print("SHAPE", k); continue
        nb = np.linalg.norm(db)
        rel = np.linalg.norm(da - db) / (nb if nb else 1)
        nm = k.split(".")[-1]
        if rel > worst.get(nm, (0,))[0]: worst[nm] = (rel, sa["index"], k)
        if rel > 1e-2: print("FLOAT", sa["index"], k, rel)
for nm, w in sorted(worst.items(), key=lambda t: -t[1][0]): print(f"  worst {nm}: {w[0]:.3g} step {w[1]} {w[2]}")
