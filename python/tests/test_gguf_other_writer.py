"""GGUF files written by another tool: gguf-py (PyPI `gguf`, the writer llama.cpp's convert script
uses). Every other GGUF test reads files ds41's own writer made, so a reader and a writer that
shared a misreading would pass them; here gguf-py writes the files and gguf-py computes the
oracle, and ds41 only reads.

1. ds41-gguf-write makes a small model in each dialect (docs/GGUF.md "Dialects"); gguf-py's
   GGUFReader reads it for its structure only: metadata keys, values and value types, tensor names,
   ggml dims and types. No tensor data comes from it.
2. gguf-py's GGUFWriter writes two files of that structure with data made here (numpy, fixed
   seeds). A holds in ggml's types, across the ladder Q8_0, Q2_K..Q6_K, IQ2_XXS, F16, the tensors
   ds41 takes as values (docs/GGUF.md "Kept as stored": a matrix of those types is kept as stored
   and its Linear is the f32 Linear on its values; a vector or an embedding row is widened to its
   values): in the llama.cpp dialect the Linear weights published files quantize (the rest BF16 and
   F32, as a converter writes them), in the other two every matrix and vector. B holds instead
   gguf-py's `dequantize` of A's bytes, as F32. The MXFP4 experts (ds41's fp4 Linear, the
   reference's, which is not an f32 Linear) and the engram tables (rows of codes and scales) have
   the same bytes in both. docs/NUMERICS.md "GGUF block types": ds41's values of a block are
   ggml's, which gguf-py computes; so A and B give the same logits and captures, bit for bit,
   resident and streamed. A and B also differ from ds41's writer and from each other in layout:
   alignment, tensor order, metadata order and integer widths, one file or gguf-py's own split.
3. gguf-py reads the files ds41-gguf-write makes in ggml's types, and sees the tensors (names,
   shapes, types, values) and the census that `ds41-gguf dequant` / `ds41-gguf info` report.

The model: the extra golden sigmoid.json (3 layers, an engram layer, a compressor and an indexer)
with dim and moe_inter_dim widened to 256, so that the K-quants and IQ2_XXS (256 values a block)
fit the rows of the matrices whose inner dimension is one of them.
"""
import json
import os
import re
import subprocess
import zlib

import numpy as np
import pytest

import ds41
from conftest import golden_dir

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
if not hasattr(gguf.quants, "MXFP4") or not hasattr(gguf.quants, "IQ2_XXS"):
    pytest.skip("gguf-py without MXFP4 / IQ2_XXS (dequantize); scripts/setup.sh installs a current one",
                allow_module_level=True)

# Bit equality, no tolerance: A and B hold the same values (gguf-py's dequantization of A's bytes)
# and ds41 promises the f32 Linear's bits on them (docs/NUMERICS.md), so any difference at all is a
# misread block, a wrong value, or a Linear over kept blocks that is not the f32 Linear.

LADDER = [Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ2_XXS, Q.F16]  # matrices
# the other block types ggml stores weights in (no published V4.1 file has them; llama-quantize
# writes them for other mixes): the legacy 32-value types, the other IQ types, the ternary ones
MORE_TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ1_S, Q.IQ1_M,
              Q.IQ4_NL, Q.IQ4_XS, Q.TQ1_0, Q.TQ2_0, Q.NVFP4]  # (Q1_0, Q2_0: gguf-py 0.19 has no dequantizer)
VECTOR_LADDER = [Q.Q8_0, Q.F16]  # vectors: values from gguf-py's quantize (it has no K-quant quantizer)
# each dialect's ladders (matrices, vectors): llama.cpp's the published types, ds4's every type, mxxm's
# the other types (with gguf-py's quantize for the legacy 32-value types' vectors)
LADDERS = {
    "llama.cpp": (LADDER, VECTOR_LADDER),
    "ds4": (LADDER + MORE_TYPES, VECTOR_LADDER + [Q.Q4_0, Q.Q5_1]),
    "mxxm": (MORE_TYPES, [Q.Q4_1, Q.Q5_0, Q.F16]),
}
# The Linear weights published files quantize (gguf::dense_quantized_weight and the routed experts;
# docs/GGUF.md "Writing other types"), by their GGUF names (ds4 spells engram.wkv `engram_kv`)
PUBLISHED = {"attn_q_a", "attn_q_b", "attn_kv", "attn_output_a", "attn_output_b", "indexer.attn_q_b",
             "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "engram_wkv", "engram_kv", "output",
             "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}
ENGRAM_TABLES = {"engram_embd", "engram_embed"}  # llama.cpp and ds4 / mxxm (docs/GGUF.md "Dialects")

# Where the f16 super-scales sit in a block (ggml's block_q2_K .. block_iq2_xxs: d, and dmin where
# the type has one), and a scale that keeps every value within about +-0.1 whatever the random codes
# and sub-block scales are: the tiny model's activations stay finite. Many of Q4_K..Q6_K's d are
# f16 subnormals (below 6.1e-5), which a reader's f16 conversion must get right too.
SUPER_SCALES = {
    Q.Q2_K: ((80, 82), 2e-3),    # scales[16] qs[64] d dmin: |value| <= d*15*3 + dmin*15
    Q.Q3_K: ((108,), 8e-4),      # hmask[32] qs[64] scales[12] d: |value| <= d*32*4
    Q.Q4_K: ((0, 2), 1e-4),      # d dmin scales[12] qs[128]: |value| <= d*63*15
    Q.Q5_K: ((0, 2), 5e-5),      # d dmin scales[12] qh[32] qs[128]: |value| <= d*63*31
    Q.Q6_K: ((208,), 2.5e-5),    # ql[128] qh[64] scales[16] d: |value| <= d*128*32
    Q.IQ2_XXS: ((0,), 6e-4),     # d qs[32 x u16]: |value| <= d*15.5/4*43
    Q.Q4_0: ((0,), 1e-2),        # d qs[16]: |value| <= d*8
    Q.Q4_1: ((0, 2), 5e-3),      # d m qs[16]: |value| <= d*15 + m
    Q.Q5_0: ((0,), 5e-3),        # d qh[4] qs[16]: |value| <= d*16
    Q.Q5_1: ((0, 2), 3e-3),      # d m qh[4] qs[16]: |value| <= d*31 + m
    Q.IQ2_XS: ((0,), 6e-4),      # d qs[32 x u16] scales[8]: |value| <= d*15.5/4*43
    Q.IQ2_S: ((0,), 6e-4),       # d qs[64] qh[8] scales[8]: as IQ2_XS
    Q.IQ3_XXS: ((0,), 2e-4),     # d qs[96]: |value| <= d*15.5/2*62
    Q.IQ3_S: ((0,), 2e-4),       # d qs[64] qh[8] signs[32] scales[4]: |value| <= d*31*15
    Q.IQ1_S: ((0,), 5e-3),       # d qs[32] qh[8 x u16]: |value| <= d*15*1.125
    Q.IQ1_M: ((), 5e-3),         # qs[32] qh[16] scales[8]: d's nibbles are the scale words' top ones
    Q.IQ4_NL: ((0,), 8e-4),      # d qs[16]: |value| <= d*127
    Q.IQ4_XS: ((0,), 2.5e-5),    # d scales_h scales_l[4] qs[128]: |value| <= d*32*127
    Q.TQ1_0: ((52,), 0.1),       # qs[48] qh[4] d: value in {-d, 0, d}
    Q.TQ2_0: ((64,), 0.05),      # qs[64] d: value in {-d, 0, d, 2d}
    Q.NVFP4: ((), 0),            # d[4] (UE4M3 bytes, set in _block_bytes) qs[32]: |value| <= 12 * half scale
}

# ds41-gguf-write's options for the structure's source: a mix of types in each dialect (the engram
# tables I8 row264 by default, Q8_0 values where asked)
DIALECTS = {
    "llama.cpp": ["--type", "q4_K", "--dense-type", "q8_0", "--engram-type", "q8_0"],
    "ds4": ["--type", "mxfp4", "--dense-type", "q6_K"],
    "mxxm": ["--type", "iq2_xxs", "--dense-type", "f16", "--engram-i8"],
}
# which tensors A holds in ggml's types (_model_data): llama.cpp's file like a converter's (the
# published set; BF16 and F32 elsewhere), the others every matrix and vector
PUBLISHED_ONLY = {"llama.cpp": True, "ds4": False, "mxxm": False}
# gguf-py's layouts of A and B: alignments other than ds41's 32 (ds4's published 16384 among them)
ALIGN = {"llama.cpp": (64, 256), "ds4": (256, 16384), "mxxm": (128, 64)}
# integer value types one width wider (u64 arrays: i64, every value below 2^63)
V = gguf.GGUFValueType
WIDER = {V.UINT8: V.UINT16, V.UINT16: V.UINT32, V.UINT32: V.UINT64, V.INT32: V.INT64, V.UINT64: V.INT64}


def _binary(var: str) -> str:
    path = os.environ.get(var)
    if not path:
        pytest.skip(f"{var} (the {var.lower().replace('_', '-')} binary) not given; CTest gives it")
    return path


def _wide_golden(tmp_path) -> str:
    """sigmoid.json with dim 56 -> 256 and moe_inter_dim 16 -> 256: every parameter dimension that
    is a multiple of dim scaled (dim, hc*dim, (hc+1)*dim: no other number in its shapes is one), and
    the experts' moe_inter_dim. The captures are dropped: the writer needs only the weights' rules."""
    with open(golden_dir() / "extra" / "sigmoid.json") as f:
        g = json.load(f)
    c = g["fixture"]["config"]
    dim, inter = c["dim"], c["moe_inter_dim"]
    c["dim"] = c["moe_inter_dim"] = 256
    for p in g["weights_meta"]["params"]:
        experts = ".ffn.experts." in p["name"] or ".ffn.shared_experts." in p["name"]
        p["shape"] = [d // dim * 256 if d % dim == 0 else 256 if experts and d == inter else d for d in p["shape"]]
    for s in g["steps"]:
        s["captures"] = {}
    out = tmp_path / "wide.json"
    out.write_text(json.dumps(g))
    return str(out)


def _ds41_write(tmp_path, name: str, args) -> list:
    """ds41-gguf-write's shards of the widened model, in order."""
    subprocess.run([_binary("DS41_GGUF_WRITE"), _wide_golden(tmp_path), str(tmp_path / name), *args],
                   check=True, capture_output=True)
    shards = sorted(tmp_path.glob(f"{name}-*-of-*.gguf"))
    assert shards, f"ds41-gguf-write wrote no {name}-*.gguf"
    return shards


# ----------------------------------------------------------------------------------------------
# 1. the structure, through gguf-py's reader


def _structure(shards):
    """(metadata, tensors) of a model's shards as gguf-py reads them: metadata [(key, value types,
    value)] in file order, without the split and alignment keys (the layout's, not the model's);
    tensors [(name, ggml dims innermost first, type)] in file order across the shards."""
    meta, tensors = [], []
    for i, path in enumerate(shards):
        r = gguf.GGUFReader(path)
        for key, field in r.fields.items():
            if key.startswith("GGUF.") or key.startswith("split.") or key == "general.alignment":
                continue
            assert i == 0, f"{path}: metadata key {key} outside the first shard"
            types = list(field.types)
            assert len(types) <= 2, f"{key}: nested arrays are not in these files"
            meta.append((key, types, field.contents()))
        tensors += [(t.name, [int(d) for d in t.shape], Q(t.tensor_type)) for t in r.tensors]
    return meta, tensors


def _suffix(name: str) -> str:
    """blk.1.engram_embd.weight -> engram_embd; output.weight -> output."""
    parts = name.split(".")
    if parts[0] == "blk":
        parts = parts[2:]
    return ".".join(parts[:-1]) if parts[-1] in ("weight", "bias") else ".".join(parts)


# ----------------------------------------------------------------------------------------------
# 2. data made here, and the files


def _rng(name: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])  # per tensor: order-independent


def _block_bytes(qtype, shape, rng):
    """Random blocks of a block type with finite small super-scales: uint8 [..., row bytes]."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, nb = int(np.prod(shape[:-1])), shape[-1] // block
    b = rng.integers(0, 256, size=(rows * nb, size), dtype=np.uint8)
    offsets, d0 = SUPER_SCALES[qtype]
    for off in offsets:
        d = (d0 * rng.uniform(0.5, 1.5, size=rows * nb)).astype(np.float16)
        b[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
    if qtype == Q.NVFP4:  # UE4M3 scale bytes 0x04..0x0B: half scales 2^-8 .. 1.9 * 2^-7, values below 0.1
        b[:, 0:4] = rng.integers(0x04, 0x0C, size=(b.shape[0], 4), dtype=np.uint8)
    if qtype == Q.IQ1_M:  # the f16 d: nibble i in the top nibble of scale word i (bytes 48 + 2i, 49 + 2i)
        h = (d0 * rng.uniform(0.5, 1.5, size=rows * nb)).astype(np.float16).view(np.uint16)
        for i in range(4):
            b[:, 49 + 2 * i] = (b[:, 49 + 2 * i] & 0x0F) | (((h >> (4 * i)) & 0xF) << 4).astype(np.uint8)
    return b.reshape(*shape[:-1], nb * size)


def _values(name, shape, rng):
    """f32 values for a tensor of numpy shape `shape`: norms and the engram gate weights around 1,
    other vectors (hc bases and scales, sinks, router biases) small, matrices ~ 1/sqrt(K)."""
    if _suffix(name).endswith("norm") or _suffix(name) in ("engram_q", "engram_k"):
        v = 1 + 0.1 * rng.standard_normal(shape)
    elif len(shape) == 1:
        v = 0.2 * rng.standard_normal(shape)
    else:
        v = rng.standard_normal(shape) / np.sqrt(shape[-1])
    return v.astype(np.float32)


def _encode(name, qtype, shape, rng):
    """A tensor of type qtype: the array gguf-py writes (bytes as uint8 [..., row bytes] for the
    block types and BF16; float16, float32 or int8 arrays for F16, F32 and I8)."""
    if qtype in SUPER_SCALES and len(shape) >= 2:
        return _block_bytes(qtype, shape, rng)
    if qtype == Q.MXFP4:  # ggml: e8m0 scale byte, 16 bytes of e2m1 pairs; values up to 12 * 2^(e-128)
        k = shape[-1]
        b = rng.integers(0, 256, size=(int(np.prod(shape[:-1])) * (k // 32), 17), dtype=np.uint8)
        b[:, 0] = rng.integers(119, 124, size=b.shape[0])
        return b.reshape(*shape[:-1], k // 32 * 17)
    if qtype == Q.I8:  # an engram table of row264 rows: K e4m3 codes (no NaN 0x7F/0xFF), K/32 e8m0 scales
        kc = shape[-1] * 32 // 33
        codes = rng.integers(0, 0x7F, size=(*shape[:-1], kc), dtype=np.uint8)
        codes |= rng.integers(0, 2, size=codes.shape, dtype=np.uint8) << 7
        scales = rng.integers(120, 128, size=(*shape[:-1], shape[-1] - kc), dtype=np.uint8)
        return np.concatenate([codes, scales], axis=-1).view(np.int8)
    v = _values(name, shape, rng)
    if qtype in (Q.F32, Q.F16):
        return v.astype(np.float32 if qtype == Q.F32 else np.float16)
    if qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        return gguf.quants.quantize(v, qtype)
    raise AssertionError(f"{name}: no data rule for type {qtype.name}")


def _model_data(tensors, seed: int, ladder_start: int, published: bool, ladders=(LADDER, VECTOR_LADDER)):
    """Data for every tensor: {name: (A's array, A's type, B's array, B's type)}. A tensor ds41 takes
    as values gets, in A, the type of its ladder used least so far among those that fit its rows
    (the K-quants and IQ2_XXS need whole 256-value blocks, Q8_0 32), ties in ladder order from
    `ladder_start`, so that each type lands on matrices of several kinds; in B, gguf-py's values of
    A's bytes as F32. `published`: only the Linear weights published files quantize (PUBLISHED) do,
    the rest keeps its type from the structure (BF16, F32) with the same bytes in A and B, as in a
    converter's file; otherwise every matrix and vector does. The MXFP4 experts and the engram
    tables keep their type and bytes in both."""
    ladders = {n: lad[ladder_start % len(lad):] + lad[:ladder_start % len(lad)] for n, lad in ((2, ladders[0]), (1, ladders[1]))}
    data, uses = {}, {(n, t): 0 for n in (1, 2) for t in ladders[n]}  # per rank: matrices and vectors apart
    for name, dims, qtype in tensors:
        shape = list(reversed(dims))
        rng = _rng(name, seed)
        if qtype in (Q.MXFP4, Q.I8) or _suffix(name) in ENGRAM_TABLES or published and _suffix(name) not in PUBLISHED:
            a = _encode(name, qtype, shape, rng)
            data[name] = (a, qtype, a, qtype)
            continue
        fits = [t for t in ladders[min(len(shape), 2)] if shape[-1] % gguf.GGML_QUANT_SIZES[t][0] == 0]
        rank = min(len(shape), 2)
        t = min(fits, key=lambda t: uses[rank, t])
        uses[rank, t] += 1
        a = _encode(name, t, shape, rng)
        v = gguf.quants.dequantize(a.view(np.uint8) if t == Q.F16 else a, t)
        assert v.shape == tuple(shape) and np.isfinite(v).all(), name
        data[name] = (a, t, v, Q.F32)
    return data


def _write(path, meta, data, which: int, order, alignment=None, split: int = 0) -> str:
    """A (which 0) or B (1) with gguf-py's writer: metadata in the order given, tensors in `order`,
    general.alignment `alignment` (added among the metadata, not first; None: gguf-py's default 32
    and no key), split by gguf-py into `split` files of tensors after a first file of metadata alone
    (convert_hf_to_gguf.py's --split-max-tensors with --no-tensor-first-split: gguf-py's names
    NAME-0000k-of-0000n.gguf and its split.* keys). Returns the first file."""
    per = -(-len(order) // split) if split else 0
    w = gguf.GGUFWriter(path, dict((k, v) for k, _, v in meta)["general.architecture"], split_max_tensors=per,
                        small_first_shard=bool(split))
    for n, (key, types, value) in enumerate(meta):
        if n == len(meta) // 2 and alignment:
            w.add_custom_alignment(alignment)
        if key == "general.architecture":  # gguf-py writes it first, at construction
            continue
        w.add_key_value(key, value, types[0], sub_type=types[1] if len(types) > 1 else None)
    for name in order:
        arr, qtype = data[name][2 * which], data[name][2 * which + 1]
        w.add_tensor(name, arr, raw_dtype=qtype if arr.dtype == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if not split:
        return str(path)
    first = sorted(path.parent.glob(f"{path.stem}-00001-of-*.gguf"))
    assert len(first) == 1 and len(gguf.GGUFReader(first[0]).tensors) == 0
    return str(first[0])


def _run(path, cache: int, prompt, steps):
    """Every prompt row's logits and each decode step's (the tokens given) as uint32 bits, and every
    capture of the prompt and of the steps."""
    m = ds41.Model.from_gguf(path, cache_experts=cache)
    s = m.new_sequence()
    rows, caps = s.extend(prompt, all_logits=True, capture=True)
    logits = [rows]
    for t in steps:
        row, c = s.extend([t], capture=True)
        logits.append(row[None, :])
        caps += c
    return np.concatenate(logits).view(np.uint32), caps


def _first_difference(caps, ref_caps):
    """The first capture (step and tap) whose bits differ, or None."""
    assert len(caps) == len(ref_caps)
    for step, (c, r) in enumerate(zip(caps, ref_caps)):
        assert set(c.keys()) == set(r.keys()), f"step {step}: other captures"
        for k in r.keys():
            x, y = np.asarray(c[k]), np.asarray(r[k])
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                return f"step {step} {k}"
    return None


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_gguf_py_files_bit_for_bit(dialect, tmp_path):
    """A (ggml's types) and B (gguf-py's f32 values of them) give the same logits and captures, bit
    for bit, resident and streamed; a model whose weights differ does not."""
    meta, tensors = _structure(_ds41_write(tmp_path, "src", ["--dialect", dialect] + DIALECTS[dialect]))
    data = _model_data(tensors, seed=41, ladder_start=list(DIALECTS).index(dialect), published=PUBLISHED_ONLY[dialect],
                       ladders=LADDERS[dialect])
    for rank, ladder in ((2, LADDERS[dialect][0]), (1, LADDERS[dialect][1])):
        used = {data[n][1] for n, d, _ in tensors if data[n][3] == Q.F32 and data[n][1] != Q.F32 and min(len(d), 2) == rank}
        assert used == set(ladder) or rank == 1 and PUBLISHED_ONLY[dialect], \
            f"rank {rank}: the ladder's types not all used: {sorted(t.name for t in used)}"
    same = [n for n, _, _ in tensors if data[n][0] is data[n][2]]  # the same bytes in A and B
    assert any(_suffix(n) in ENGRAM_TABLES for n in same), "no engram table"
    if PUBLISHED_ONLY[dialect]:
        assert {Q.BF16, Q.F32} <= {data[n][1] for n in same}

    names = [n for n, _, _ in tensors]
    shuffled = [names[i] for i in np.random.default_rng(7).permutation(len(names))]
    align_a, align_b = ALIGN[dialect]
    # A: one file, tensors and metadata in reverse; B: one file, tensors shuffled, metadata sorted
    # by key; B split: B's data as gguf-py's own split writes it, the metadata alone in the first
    # file and the tensors in 3 more, every integer key one width wider (ds41 reads an integer key of
    # any integer type that holds its value). The split keeps gguf-py's default alignment: gguf-py
    # pads every shard to a custom alignment but writes general.alignment into the first shard only,
    # so its later shards are misread by every reader that follows the GGUF spec (no key: alignment
    # 32): gguf-py's own GGUFReader, llama.cpp, ds41.
    a = _write(tmp_path / "a.gguf", meta[::-1], data, 0, names[::-1], align_a)
    b = _write(tmp_path / "b.gguf", sorted(meta), data, 1, shuffled, align_b)
    wider = [(k, [WIDER.get(t, t) for t in types], v) for k, types, v in meta]
    assert wider != meta
    b_split = _write(tmp_path / "b_split.gguf", wider, data, 1, names, split=3)
    assert gguf.GGUFReader(a).alignment == align_a and gguf.GGUFReader(b).alignment == align_b

    rng = np.random.default_rng(3)
    vocab = dict((n, d) for n, d, _ in tensors)["token_embd.weight"][1]
    prompt = rng.integers(0, vocab, size=14).tolist()
    steps = rng.integers(0, vocab, size=3).tolist()
    ref, ref_caps = _run(a, 0, prompt, steps)
    assert np.isfinite(ref.view(np.float32)).all()
    for path, cache in ((a, 2), (b, 0), (b, 2), (b_split, 0), (b_split, 2)):
        got, caps = _run(path, cache, prompt, steps)
        rows = np.flatnonzero((got != ref).any(axis=1))
        where = f"{dialect}: {os.path.basename(path)} cache_experts={cache}"
        assert rows.size == 0, f"{where}: logits of rows {rows.tolist()} differ from A's (first capture: {_first_difference(caps, ref_caps)})"
        assert _first_difference(caps, ref_caps) is None, f"{where}: {_first_difference(caps, ref_caps)} differs from A's"

    # the comparison can fail: B with one value of layer 0's first Linear (wq_a) changed
    first = "blk.0.attn_q_a.weight"
    v = data[first][2].copy()
    v.reshape(-1)[0] += np.float32(0.25)
    changed = dict(data, **{first: (*data[first][:2], v, Q.F32)})
    c = _write(tmp_path / "c.gguf", meta, changed, 1, names)
    assert (_run(c, 0, prompt, steps)[0] != ref).any(), f"changing {first} changed no logit"


# ----------------------------------------------------------------------------------------------
# 3. the other direction: gguf-py reads what ds41 writes

READ_BACK = {  # ds41-gguf-write's options: mixes other than DIALECTS' (whose files part 2 reads already)
    "llama.cpp": ["--type", "q2_K", "--dense-type", "q5_K", "--engram-i8", "--shards", "3"],
    "ds4": ["--type", "q3_K", "--dense-type", "iq2_xxs"],
    "mxxm": ["--type", "mxfp4", "--dense-type", "q4_K", "--engram-type", "q8_0"],
}


def _info(first) -> dict:
    out = subprocess.run([_binary("DS41_GGUF"), "info", str(first)], check=True, capture_output=True, text=True).stdout
    head = re.search(r"\((\d+) shards, GGUF v(\d+), alignment (\d+)\)", out)
    census = {m[1]: (int(m[2]), int(m[3]), int(m[4]))
              for m in re.finditer(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)  ", out, re.M) if m[1] != "type"}
    return {"shards": int(head[1]), "version": int(head[2]), "alignment": int(head[3]),
            "dialect": re.search(r"^dialect: (\S+)", out, re.M)[1],
            "tensors": int(re.search(r"^tensors: (\d+)", out, re.M)[1]), "census": census,
            "loads": "ds41 loads this model: yes" in out}


@pytest.mark.parametrize("dialect", list(READ_BACK))
def test_gguf_py_reads_ds41_files(dialect, tmp_path):
    """gguf-py's reader opens every shard ds41-gguf-write makes, and sees what `ds41-gguf info`
    reports (shards, version, alignment, the census of types: tensors, elements, bytes) and, tensor
    by tensor, what `ds41-gguf dequant` reports: the name, type and shape, and the values
    (gguf-py's dequantize, bit for bit; I8 as its integers)."""
    shards = _ds41_write(tmp_path, "m", ["--dialect", dialect] + READ_BACK[dialect])
    info = _info(shards[0])
    assert info["dialect"] == dialect and info["loads"]
    readers = [gguf.GGUFReader(p) for p in shards]
    assert info["shards"] == len(shards) == readers[0].fields["split.count"].contents()
    assert info["alignment"] == readers[0].alignment
    assert info["version"] == readers[0].fields["GGUF.version"].contents()
    tensors = [t for r in readers for t in r.tensors]
    assert info["tensors"] == len(tensors) == readers[0].fields["split.tensors.count"].contents()
    census = {}
    for t in tensors:
        k = census.setdefault(t.tensor_type.name, [0, 0, 0])
        k[0] += 1
        k[1] += int(t.n_elements)
        k[2] += int(t.n_bytes)
    assert info["census"] == {n: tuple(k) for n, k in census.items()}

    out = tmp_path / "values.f32"
    for t in tensors:
        said = subprocess.run([_binary("DS41_GGUF"), "dequant", str(shards[0]), t.name, "--out", str(out)],
                              check=True, capture_output=True, text=True).stdout
        m = re.match(r"tensor '(.+)' \((\S+)\): (\d+) float32 values \(shape ([\d ]+)\)", said)
        assert m, said
        shape = [int(d) for d in m[4].split()]
        assert (m[1], m[2], int(m[3])) == (t.name, t.tensor_type.name, t.n_elements)
        assert shape == [int(d) for d in reversed(t.shape)], t.name
        mine = np.fromfile(out, dtype="<f4")
        if t.tensor_type == Q.I8:
            theirs = t.data.astype(np.float32)
        else:
            theirs = gguf.quants.dequantize(t.data.view(np.uint8) if t.data.dtype != np.uint8 else t.data, t.tensor_type)
        assert np.array_equal(mine.view(np.uint32), theirs.reshape(-1).view(np.uint32)), f"{t.name}: values differ"


@pytest.mark.parametrize("dialect", ["llama.cpp", "ds4", "mxxm"])
def test_gguf_py_reads_ds41_default_files(dialect, tmp_path):
    """ds41-gguf-write with no type options: every shard gguf-py can open (the engram tables are I8
    row264 by default; ds41's own DS41_FP8_ROW id, --engram-ds41-row, is no ggml type and gguf-py
    refuses it, checked so that this test can fail)."""
    for p in _ds41_write(tmp_path, "m", ["--dialect", dialect]):
        gguf.GGUFReader(p)  # raises ValueError on a tensor type id that is not ggml's
    with pytest.raises(ValueError):
        for p in _ds41_write(tmp_path, "r", ["--engram-ds41-row"]):
            gguf.GGUFReader(p)
