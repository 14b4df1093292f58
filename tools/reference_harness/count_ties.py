"""Count exact ties at top-k boundaries in a ds41 golden: from the generator's margins and,
independently, from the index_score captures (reachable positions, candidate mask applied)."""
import json, sys, math
g = json.load(open(sys.argv[1]))
cfg = g["fixture"]["config"] if "config" in g["fixture"] else g["fixture"]
print("margins:", {k: (v["events"], v["ties"], v.get("excluded")) for k, v in g["margins"]["kinds"].items()}
      if "kinds" in g["margins"] else {k: (v.get("events"), v.get("ties")) for k, v in g["margins"].items() if isinstance(v, dict)})
c = g["fixture"]["config"]
ratios, topk = c["compress_ratios"], c["index_topk"]
cs, cb, cbs = c.get("candidate_source_layer", -1), c.get("candidate_topk_blocks", 0), c.get("candidate_block_size", 0)
idx_rows = idx_ties = cand_rows = cand_ties = 0
for st in g["steps"]:
    sp = st["start_pos"]; caps = st["captures"]
    cand = None
    for li in range(len(ratios)):
        k = f"layers.{li}.index_score"
        if k not in caps: continue
        cap = caps[k]; T, W = cap["shape"]; d = cap["data"]; r = ratios[li]
        if cap["stride"] != 1: continue  # sampled capture: only the margins (full tensors) count it
        if f"layers.{li}.candidates" in caps:
            cand = caps[f"layers.{li}.candidates"]["data"]; assert caps[f"layers.{li}.candidates"]["stride"] == 1
        for t in range(T):
            L = (sp + t + 1) // r
            row = [float(x) for x in d[t * W:(t + 1) * W]][:L]
            if cand is not None and 0 <= cs < li:
                m = cand[t * W:(t + 1) * W]
                row = [v for v, keep in zip(row, m) if keep]
            kk = min(topk, (sp + T) // r)
            if li == cs and cb:
                nb = -(-L // cbs); last = (L - 1) // cbs
                bm = sorted((max(row[b*cbs:(b+1)*cbs]) for b in range(nb) if b != last), reverse=True)
                slots = min(cb, -(-W // cbs)) - 1
                if slots >= 1 and len(bm) > slots:
                    cand_rows += 1; cand_ties += bm[slots-1] == bm[slots]
            if len(row) > kk:
                s = sorted(row, reverse=True); idx_rows += 1; idx_ties += s[kk-1] == s[kk]
print(f"independent: index_topk rows {idx_rows} ties {idx_ties}; candidate rows {cand_rows} ties {cand_ties}")
