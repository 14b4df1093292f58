"""Weight quantisation of fp8/fp4 goldens (golden/SCHEMA.md §10.2) and the official-format
checkpoint writer (§10.5). numpy only; the generator records this file's SHA-256 as
fixture.reference.quant_sha256."""
import hashlib
import json
import os
import struct

import numpy as np

E2M1_TABLE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def pow2_exponent(amax, F):
    """k = smallest integer with amax <= F * 2^k (exact, float64), k = 0 where amax == 0."""
    amax = np.asarray(amax, dtype=np.float64)
    nz = amax > 0
    k = np.ceil(np.log2(np.where(nz, amax, 1.0) / F)).astype(np.int64)
    for _ in range(3):  # exact fix-up of the log2 rounding
        k = np.where(amax > F * np.ldexp(1.0, k), k + 1, k)
        k = np.where(amax <= F * np.ldexp(1.0, k - 1), k - 1, k)
    return np.where(nz, k, 0)


def e4m3_value(x):
    """float64 -> nearest float8_e4m3fn value (ties to even code, saturating at +-448, sign kept)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    _, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    step = np.maximum(np.ldexp(1.0, e - 1 - 3), 2.0 ** -9)
    q = np.minimum(np.round(a / step) * step, 448.0)  # np.round: half to even
    return np.copysign(q, x)


def e4m3_byte(v):
    """e4m3 values (exact) -> their byte sign<<7 | E<<3 | m."""
    v = np.asarray(v, dtype=np.float64)
    sign = np.signbit(v).astype(np.uint8)
    a = np.abs(v)
    sub = a < 2.0 ** -6
    _, e = np.frexp(np.where(sub, 1.0, a))
    E = (e - 1 + 7).astype(np.int64)
    m_norm = (np.where(sub, 1.0, a) / np.ldexp(1.0, e - 1) - 1.0) * 8.0
    m_sub = a / 2.0 ** -9
    E = np.where(sub, 0, E)
    m = np.where(sub, m_sub, m_norm)
    assert np.all(m == np.round(m)) and np.all((m >= 0) & (m < 8)) and np.all(E <= 15)
    out = (sign.astype(np.int64) << 7) | (E << 3) | m.astype(np.int64)
    assert not np.any((E == 15) & (m == 7))
    return out.astype(np.uint8)


def e8m0_byte(s):
    """power-of-two scales 2^k -> byte k + 127."""
    s = np.asarray(s, dtype=np.float64)
    m, e = np.frexp(s)
    assert np.all(m == 0.5)
    k = e - 1
    assert np.all((k >= -127) & (k <= 127))
    return (k + 127).astype(np.uint8)


def quant_e4m3_block32x32(v):
    """fp8 Linear weight [out, in] float32 -> (codes float64 [out, in], scales 2^k [ceil(out/32), ceil(in/32)])."""
    out, inn = v.shape
    bo, bi = -(-out // 32), -(-inn // 32)
    pad = np.zeros((bo * 32, bi * 32), dtype=np.float64)
    pad[:out, :inn] = np.abs(v.astype(np.float64))
    amax = pad.reshape(bo, 32, bi, 32).max(axis=(1, 3))
    k = pow2_exponent(amax, 448.0)
    scale = np.ldexp(1.0, k)
    full = np.repeat(np.repeat(scale, 32, 0), 32, 1)[:out, :inn]
    codes = e4m3_value(v.astype(np.float64) / full)
    return codes, scale


def quant_e4m3_rows32(v):
    """engram table [rows, De]: per row, per 32 columns (SCHEMA §1.3)."""
    rows, cols = v.shape
    assert cols % 32 == 0
    blk = v.astype(np.float64).reshape(rows, cols // 32, 32)
    k = pow2_exponent(np.abs(blk).max(-1), 448.0)
    scale = np.ldexp(1.0, k)
    codes = e4m3_value(blk / scale[..., None]).reshape(rows, cols)
    return codes, scale


def quant_e2m1_block32(v):
    """fp4 expert weight, logical [out, in] float32 -> (packed bytes uint8 [out, in/2],
    nibbles [out, in], code values [out, in], scales 2^k [out, in/32])."""
    out, inn = v.shape
    assert inn % 32 == 0
    blk = v.astype(np.float64).reshape(out, inn // 32, 32)
    k = pow2_exponent(np.abs(blk).max(-1), 6.0)
    scale = np.ldexp(1.0, k)
    x = np.clip(blk / scale[..., None], -6.0, 6.0)
    a = np.abs(x)
    _, e = np.frexp(a)
    step = np.maximum(np.ldexp(1.0, e - 1 - 1), 0.5)
    q = np.minimum(np.round(a / step) * step, 6.0)
    idx = np.searchsorted(E2M1_TABLE, q)
    assert np.all(E2M1_TABLE[idx] == q)
    nib = (np.signbit(v.reshape(out, inn // 32, 32)).astype(np.int64) << 3) | idx
    nib = nib.reshape(out, inn)
    codes = np.where(nib >= 8, -1.0, 1.0) * E2M1_TABLE[nib & 7]
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return packed, nib, codes, scale


# ------------------------------------------------------------------------------------------------
# checkpoint (SCHEMA §10.5)

DEEPSEEK_CONFIG_KEYS = [
    "vocab_size", "dim", "moe_inter_dim", "n_layers", "n_mtp_layers", "dspark_block_size",
    "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank", "dspark_n_routed_experts",
    "dspark_n_activated_experts", "n_heads", "n_routed_experts", "n_shared_experts", "n_activated_experts",
    "score_func", "route_scale", "swiglu_limit", "q_lora_rank", "head_dim", "rope_head_dim", "norm_eps",
    "o_groups", "o_lora_rank", "window_size", "kv_source_layers", "index_source_layers", "original_seq_len",
    "rope_theta", "rope_factor", "beta_fast", "beta_slow", "index_n_heads", "index_head_dim", "index_topk",
    "candidate_source_layer", "candidate_topk_blocks", "candidate_block_size", "hc_mult", "hc_sinkhorn_iters",
    "hc_eps", "engram_layer_ids", "engram_vocab_size", "engram_num_embeddings", "engram_max_ngram_size",
    "engram_pad_id", "engram_compressed_vocab_size", "dtype", "expert_dtype", "compress_rope_theta",
    "compress_ratios", "vision_n_layers", "vision_dim", "vision_n_heads", "vision_inter_dim",
    "vision_patch_size", "vision_downsample_ratio", "vision_max_n_token", "vision_min_pixels",
    "vision_max_wh_ratio", "image_token_id", "engram_n_heads", "engram_head_dim", "vision_rope_theta",
]
RUNTIME_KEYS = ("max_batch_size", "max_seq_len", "temperature")


def checkpoint_config(cfg, defaults):
    """cfg: fixture.config (ModelArgs values, lists for tuples); defaults: [(field, default)] in ModelArgs order."""
    out = {k: cfg[k] for k in DEEPSEEK_CONFIG_KEYS}
    for k, d in defaults:
        if k in out or k in RUNTIME_KEYS:
            continue
        dv = list(d) if isinstance(d, tuple) else d
        if cfg[k] != dv:
            out[k] = cfg[k]
    return out


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def write_safetensors(path, fixture_name, tensors):
    """tensors: list of (name, dtype string, shape, raw little-endian bytes) in file order."""
    header = {"__metadata__": {"format": "pt", "ds41_fixture": fixture_name}}
    off = 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    blob = struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)
    with open(path, "wb") as f:
        f.write(blob)
    return blob, off


def write_checkpoint(ckpt_dir, fixture_name, cfg, defaults, tensors, n_layers):
    """tensors: list of (name, dtype, shape, raw bytes) in state_dict order (extras included).
    Returns the weights_meta.checkpoint 'files' dict."""
    os.makedirs(ckpt_dir, exist_ok=True)
    first = -(-n_layers // 2)

    def shard_of(name):
        if name == "embed.weight":
            return 0
        if name.startswith("layers."):
            return 0 if int(name.split(".")[1]) < first else 1
        return 1

    shards = [[t for t in tensors if shard_of(t[0]) == s] for s in (0, 1)]
    fnames = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    files = {}
    cfg_text = (json.dumps(checkpoint_config(cfg, defaults), indent=4) + "\n").encode("utf-8")
    with open(os.path.join(ckpt_dir, "config.json"), "wb") as f:
        f.write(cfg_text)
    total = 0
    blobs = []
    for fn, sh in zip(fnames, shards):
        blob, size = write_safetensors(os.path.join(ckpt_dir, fn), fixture_name, sh)
        blobs.append((fn, blob))
        total += size
    weight_map = {t[0]: fnames[shard_of(t[0])] for t in tensors}
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    idx_text = (json.dumps(index, indent=2) + "\n").encode("utf-8")
    with open(os.path.join(ckpt_dir, "model.safetensors.index.json"), "wb") as f:
        f.write(idx_text)
    files["config.json"] = {"sha256": _sha(cfg_text), "bytes": len(cfg_text)}
    files["model.safetensors.index.json"] = {"sha256": _sha(idx_text), "bytes": len(idx_text)}
    for fn, blob in blobs:
        files[fn] = {"sha256": _sha(blob), "bytes": len(blob)}
    return files
