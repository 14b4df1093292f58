#!/usr/bin/env python3
"""Test vectors for ds41's GGUF block dequantization (issue 39), from two implementations outside ds41.

For each GGUF block type ds41 reads (Q8_0, MXFP4, I8, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS; then
Q4_0, Q4_1, Q5_0, Q5_1, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0,
NVFP4, Q1_0, Q2_0) the script makes blocks (random bytes with finite f16 scales, edge blocks, blocks that use every
code / grid index / sign index / sub-block scale, a few blocks quantized by ggml itself from
Gaussian data) and dequantizes each with

  (a) ggml's own C `dequantize_row_<type>` (src/ggml-quants.c), compiled here at run time with
      `-O2 -ffp-contract=off`, so that every float operation is rounded on its own; and
  (b) gguf-py's numpy `gguf.quants.dequantize` (PyPI `gguf`), which rounds each array operation.

It asserts (a) and (b) give the same f32 bits for every element of every block. Q1_0 and Q2_0
have no (b): gguf-py (0.19) has no dequantizer for them, so their values are (a) alone, marked so in
MANIFEST.txt (BlockType.values_from); as a partial check the script's own numpy formula, written
here from the block layout (not gguf-py's), must give the same bits. It then writes one
binary file per type plus types.txt (ggml's type table) and MANIFEST.txt into the output folder
(tests/data/ggml_quants/README.md describes the format). ggml's code is only compiled in a
temporary folder; nothing of it is written to the output.

Usage:
  python3 tools/ggml_vectors/make_vectors.py GGML_SRC [--out tests/data/ggml_quants] [--seed 39]

GGML_SRC is a ggml-org/ggml source tree (a checkout, or a bare git directory whose HEAD is used).
Needs a C compiler (cc), numpy and gguf (`python3 -m pip install gguf numpy`).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

MAGIC = b"DS41GGQV"
VERSION = 1
LABEL_BYTES = 24
CFLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-std=gnu11", "-fPIC"]


GGML_C, GGUF_PY = "ggml C", "gguf-py"


@dataclass
class BlockType:
    name: str          # ggml's type_name, also the vector file's stem
    qtype: QT | int    # ggml's type id (a plain int where gguf-py's enum lacks the type: Q2_0)
    elems: int
    nbytes: int
    f16_d: tuple[int, ...]     # byte offsets of f16 scales ("d")
    f16_min: tuple[int, ...]   # byte offsets of f16 mins ("dmin")
    ggml_fn: str | None        # dequantize_row_<...> in ggml-quants.c (None: the shim's I8 cast)
    quantize_fn: str | None    # quantize_row_<...>_ref (x, y, k), or quantize_iq<...> (x, y, nrow,
                               # n_per_row, weights) called with unit weights, for realistic blocks
    quant_init: tuple[str, int] | None = None  # what the IQ quantizer needs first (its grid neighbours)
    f16_nibbles: int | None = None  # IQ1_M: byte offset of 4 u16 words whose top nibbles are the f16
    # which implementations made the values: both (they must agree bit for bit), or ggml's C alone
    # where gguf-py has no dequantizer (then OWN_NUMPY must hold the script's own formula for it)
    values_from: tuple[str, ...] = (GGML_C, GGUF_PY)


TYPES = [
    BlockType("q8_0", QT.Q8_0, 32, 34, (0,), (), "dequantize_row_q8_0", "quantize_row_q8_0_ref"),
    BlockType("mxfp4", QT.MXFP4, 32, 17, (), (), "dequantize_row_mxfp4", "quantize_row_mxfp4_ref"),
    BlockType("i8", QT.I8, 1, 1, (), (), None, None),
    BlockType("q2_K", QT.Q2_K, 256, 84, (80,), (82,), "dequantize_row_q2_K", "quantize_row_q2_K_ref"),
    BlockType("q3_K", QT.Q3_K, 256, 110, (108,), (), "dequantize_row_q3_K", "quantize_row_q3_K_ref"),
    BlockType("q4_K", QT.Q4_K, 256, 144, (0,), (2,), "dequantize_row_q4_K", "quantize_row_q4_K_ref"),
    BlockType("q5_K", QT.Q5_K, 256, 176, (0,), (2,), "dequantize_row_q5_K", "quantize_row_q5_K_ref"),
    BlockType("q6_K", QT.Q6_K, 256, 210, (208,), (), "dequantize_row_q6_K", "quantize_row_q6_K_ref"),
    BlockType("iq2_xxs", QT.IQ2_XXS, 256, 66, (0,), (), "dequantize_row_iq2_xxs", "quantize_iq2_xxs",
              ("iq2xs_init_impl", int(QT.IQ2_XXS))),
    # added later: each of these draws from its own RNG, seeded from (seed, type name), so that the
    # nine files above stay what they were and a type added or changed later leaves the others alone
    BlockType("q4_0", QT.Q4_0, 32, 18, (0,), (), "dequantize_row_q4_0", "quantize_row_q4_0_ref"),
    BlockType("q4_1", QT.Q4_1, 32, 20, (0,), (2,), "dequantize_row_q4_1", "quantize_row_q4_1_ref"),
    BlockType("q5_0", QT.Q5_0, 32, 22, (0,), (), "dequantize_row_q5_0", "quantize_row_q5_0_ref"),
    BlockType("q5_1", QT.Q5_1, 32, 24, (0,), (2,), "dequantize_row_q5_1", "quantize_row_q5_1_ref"),
    BlockType("iq2_xs", QT.IQ2_XS, 256, 74, (0,), (), "dequantize_row_iq2_xs", "quantize_iq2_xs",
              ("iq2xs_init_impl", int(QT.IQ2_XS))),
    BlockType("iq3_xxs", QT.IQ3_XXS, 256, 98, (0,), (), "dequantize_row_iq3_xxs", "quantize_iq3_xxs",
              ("iq3xs_init_impl", 256)),
    BlockType("iq1_s", QT.IQ1_S, 256, 50, (0,), (), "dequantize_row_iq1_s", "quantize_iq1_s",
              ("iq2xs_init_impl", int(QT.IQ1_S))),
    BlockType("iq4_nl", QT.IQ4_NL, 32, 18, (0,), (), "dequantize_row_iq4_nl", "quantize_iq4_nl"),
    BlockType("iq3_s", QT.IQ3_S, 256, 110, (0,), (), "dequantize_row_iq3_s", "quantize_iq3_s",
              ("iq3xs_init_impl", 512)),
    BlockType("iq2_s", QT.IQ2_S, 256, 82, (0,), (), "dequantize_row_iq2_s", "quantize_iq2_s",
              ("iq2xs_init_impl", int(QT.IQ2_S))),
    BlockType("iq4_xs", QT.IQ4_XS, 256, 136, (0,), (), "dequantize_row_iq4_xs", "quantize_iq4_xs"),
    # IQ1_M has no f16 field: its f16 scale is the top nibbles of the four u16 words at byte 48
    BlockType("iq1_m", QT.IQ1_M, 256, 56, (), (), "dequantize_row_iq1_m", "quantize_iq1_m",
              ("iq2xs_init_impl", int(QT.IQ1_M)), f16_nibbles=48),
    BlockType("tq1_0", QT.TQ1_0, 256, 54, (52,), (), "dequantize_row_tq1_0", "quantize_row_tq1_0_ref"),
    BlockType("tq2_0", QT.TQ2_0, 256, 66, (64,), (), "dequantize_row_tq2_0", "quantize_row_tq2_0_ref"),
    # NVFP4 has no f16 field: d[4] are UE4M3 scale bytes (one a 16-element sub-block), then qs[32]
    BlockType("nvfp4", QT.NVFP4, 64, 36, (), (), "dequantize_row_nvfp4", "quantize_row_nvfp4_ref"),
    # gguf-py 0.19 dequantizes neither (no gguf.quants class; Q2_0 is not even in its enum, id 42)
    BlockType("q1_0", QT.Q1_0, 128, 18, (0,), (), "dequantize_row_q1_0", "quantize_row_q1_0_ref",
              values_from=(GGML_C,)),
    BlockType("q2_0", 42, 64, 18, (0,), (), "dequantize_row_q2_0", "quantize_row_q2_0_ref",
              values_from=(GGML_C,)),
]

# the types whose blocks come from the one RNG seeded with --seed, in this order (the committed
# files of issue 39); every other type has its own RNG (rng_for)
SHARED_RNG_TYPES = ("q8_0", "mxfp4", "i8", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq2_xxs")

# The shim: ggml's symbols that ggml-quants.c's quantizers reference but that live in ggml.c
# (never reached by the functions called here), the I8 cast ggml applies when it converts an I8
# tensor (ggml has no dequantize_row_i8). (The IQ quantizers run through it too: their
# iq2xs_init_impl / iq3xs_init_impl need nothing more.)
SHIM_C = r"""
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>
#if !defined(__FLT_EVAL_METHOD__) || __FLT_EVAL_METHOD__ != 0
#error "float expressions must be evaluated in float (no x87 excess precision)"
#endif
void ggml_abort(const char *file, int line, const char *fmt, ...) { (void)file; (void)line; (void)fmt; abort(); }
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; abort(); }
const char *ggml_type_name(int type) { (void)type; abort(); }
size_t ggml_type_size(int type) { (void)type; abort(); }
void ds41v_dequantize_row_i8(const int8_t *x, float *y, int64_t k) { for (int64_t i = 0; i < k; ++i) y[i] = (float)x[i]; }
"""

TYPE_SIZES_C = r"""
#define GGML_COMMON_DECL_C
#include "ggml-common.h"
#include "ggml.h"
#include <stdio.h>
int main(void) {
%s
  return 0;
}
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def prepare_ggml(src: Path, work: Path, commit_arg: str | None) -> tuple[Path, str]:
    """Returns a folder holding ggml's include/ and src/, and the commit they come from."""
    is_bare = (src / "objects").is_dir() and (src / "HEAD").is_file() and not (src / "src").is_dir()
    if is_bare:
        commit = run(["git", "--git-dir", str(src), "rev-parse", "HEAD"]).strip()
        tree = work / "ggml"
        tree.mkdir()
        archive = subprocess.run(["git", "--git-dir", str(src), "archive", commit, "include", "src"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        return tree, commit
    if commit_arg:
        return src, commit_arg
    try:  # the checkout's own commit, not that of a repository the tree happens to lie in
        top = Path(run(["git", "-C", str(src), "rev-parse", "--show-toplevel"]).strip()).resolve()
        if top == src:
            return src, run(["git", "-C", str(src), "rev-parse", "HEAD"]).strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    sys.exit(f"{src}: not the top of a git checkout; give the commit with --ggml-commit")


def includes(tree: Path) -> list[str]:
    return [f"-I{tree / 'include'}", f"-I{tree / 'src'}", f"-I{tree / 'src' / 'ggml-cpu'}"]


def build_ggml_lib(tree: Path, work: Path, extra_flags: list[str], name: str) -> ctypes.CDLL:
    shim = work / "shim.c"
    shim.write_text(SHIM_C)
    lib = work / f"lib{name}.so"
    run(["cc", *CFLAGS, *extra_flags, *includes(tree), "-shared", "-o", str(lib),
         str(tree / "src" / "ggml-quants.c"), str(shim), "-lm"])
    return ctypes.CDLL(str(lib))


def ggml_type_table(tree: Path, work: Path) -> list[tuple[int, str, int, int]]:
    """ggml's own (id, type_name, blck_size, type_size) for every type in ggml.c's type_traits."""
    ggml_c = (tree / "src" / "ggml.c").read_text()
    start = "type_traits[GGML_TYPE_COUNT] = {"
    body = ggml_c[ggml_c.index(start) + len(start):]
    body = body[:body.index("\n};")]
    entries = re.findall(r"\[GGML_TYPE_(\w+)\]\s*=\s*\{(.*?)\n\s*\},", body, re.S)
    prints = []
    for tname, fields in entries:
        name = re.search(r'\.type_name\s*=\s*"([^"]+)"', fields)
        blck = re.search(r"\.blck_size\s*=\s*([^,]+),", fields)
        size = re.search(r"\.type_size\s*=\s*([^,]+),", fields)
        if not (name and blck and size) or "DEPRECATED" in tname or "REMOVED" in name.group(1):
            continue
        prints.append(f'  printf("%d %s %d %d\\n", (int)GGML_TYPE_{tname}, "{name.group(1)}", '
                      f"(int)({blck.group(1)}), (int)({size.group(1)}));")
    prog = work / "type_sizes.c"
    prog.write_text(TYPE_SIZES_C % "\n".join(prints))
    exe = work / "type_sizes"
    run(["cc", *includes(tree), "-o", str(exe), str(prog)])
    rows = []
    for line in run([str(exe)]).splitlines():
        i, n, b, s = line.split()
        rows.append((int(i), n, int(b), int(s)))
    rows.sort()
    # the ids against ggml.h's enum, the sizes against gguf-py's table
    enum = dict(re.findall(r"GGML_TYPE_(\w+)\s*=\s*(\d+),", (tree / "include" / "ggml.h").read_text()))
    # (gguf-py's entry may be stale for a type no file stores: ggml's is the one written)
    checked = {t.name for t in TYPES}
    for i, n, b, s in rows:
        assert int(enum[n.upper()]) == i, (n, i)
        if n.upper() in QT.__members__ and QT[n.upper()] in GGML_QUANT_SIZES:
            py = GGML_QUANT_SIZES[QT[n.upper()]]
            if py != (b, s):
                print(f"note: {n}: ggml says {b} elements in {s} bytes, gguf-py's GGML_QUANT_SIZES {py}")
                assert n not in checked, n
    return rows


# ------------------------------------------------------------------ blocks

def finite_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """n random f16 bit patterns, all finite (exponent field below 31), subnormals included."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    bad = ((h >> 10) & 0x1F) == 0x1F
    h[bad] &= ~np.uint32(1 << 14)  # exponent 31 -> 15
    return h.astype(np.uint16)


def moderate_f16(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """f16 scales of the size quantizers write (|N(0,1)|·scale), random sign."""
    v = np.abs(rng.standard_normal(n)) * scale * rng.choice([-1.0, 1.0], size=n)
    return v.astype(np.float16).view(np.uint16)


def put_f16(block: bytearray, offsets, value: int):
    for off in offsets:
        block[off:off + 2] = struct.pack("<H", int(value))


def put_d(t: BlockType, block: bytearray, value: int):
    """Writes the block's f16 scale d: its f16 field(s), or IQ1_M's four top nibbles (nibble w of
    the f16 is the top nibble of u16 word w), leaving the 3-bit sub-block scales below alone."""
    put_f16(block, t.f16_d, value)
    if t.f16_nibbles is not None:
        for w in range(4):
            off = t.f16_nibbles + 2 * w
            word = struct.unpack_from("<H", block, off)[0]
            struct.pack_into("<H", block, off, (word & 0x0FFF) | (((int(value) >> (4 * w)) & 0xF) << 12))


def get_d(t: BlockType, block: bytes) -> int:
    if t.f16_nibbles is not None:
        words = struct.unpack_from("<4H", block, t.f16_nibbles)
        return sum((w >> 12) << (4 * i) for i, w in enumerate(words))
    return struct.unpack_from("<H", block, t.f16_d[0])[0] if t.f16_d else -1


def f16(x: float) -> int:
    return int(np.array([x], dtype=np.float16).view(np.uint16)[0])


def code_mask(t: BlockType) -> np.ndarray:
    """True for the bytes of a block that are not f16 scale fields."""
    m = np.ones(t.nbytes, dtype=bool)
    for off in t.f16_d + t.f16_min:
        m[off:off + 2] = False
    return m


def edge_blocks(t: BlockType, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    codes = code_mask(t)

    def block(fill=None, d=None, dmin=None):
        b = bytearray(rng.integers(0, 256, size=t.nbytes, dtype=np.uint8).tobytes()) if fill is None \
            else bytearray(bytes([fill]) * t.nbytes)
        put_d(t, b, finite_f16(rng, 1)[0] if d is None else d)
        put_f16(b, t.f16_min, finite_f16(rng, 1)[0] if dmin is None else dmin)
        return b

    if t.name == "i8":  # every int8 value, one block (one element) each
        return [(f"i8={v - 256 if v > 127 else v}", bytes([v])) for v in range(256)]
    if t.name == "mxfp4":
        # every e8m0 byte class (subnormal halves 0 and 1, 2, around 1.0, near overflow, 255 =
        # 2^127 in ggml's table, not NaN), each with all 16 codes in both nibbles
        for e in (0, 1, 2, 126, 127, 128, 200, 252, 253, 254, 255):
            out.append((f"e8m0={e}", bytes([e]) + bytes(i | ((15 - i) << 4) for i in range(16))))
        out.append(("zero", bytes(t.nbytes)))
        out.append(("max-codes", bytes([127]) + b"\xff" * 16))
        return out
    if t.name == "nvfp4":
        # d[4] UE4M3 bytes (sub-block s: elements 16s..16s+15), qs[32] (sub-block s: qs[8s..8s+7],
        # element 16s+j low nibble of qs[8s+j], 16s+8+j its high nibble). ggml reads 0x00 and 0x7F
        # as 0 and ignores bit 7 otherwise: 0x80 is 0 (exponent and mantissa 0) but 0xFF is 240, not 0
        # (all 256 bytes, each under all 16 codes: coverage_blocks)
        nib = bytes(i | ((15 - i) << 4) for i in range(8))
        out.append(("zero", bytes(t.nbytes)))
        out.append(("zero-codes", bytes([0x38, 0x7E, 0xB8, 0xFF]) + bytes([0x00, 0x88]) * 16))
        out.append(("zero-scales", bytes([0x00, 0x7F, 0x80, 0x00]) + b"\xff" * 32))
        out.append(("ue4m3=7f-ff-80-00", bytes([0x7F, 0xFF, 0x80, 0x00]) + nib * 4))
        out.append(("max-codes", bytes([0x7E, 0xFE, 0xFF, 0x77]) + b"\xff" * 16 + b"\x77" * 16))
        out.append(("max-codes-sub-d", bytes([0x01, 0x81, 0x07, 0x87]) + b"\xff" * 16 + b"\x77" * 16))
        out.append(("codes-aa-55", bytes([0x38, 0x39, 0xB8, 0x08]) + b"\xaa" * 16 + b"\x55" * 16))
        return out

    out.append(("zero", bytes(t.nbytes)))
    for name, d, dmin in (("d=+0", 0x0000, None), ("d=-0", 0x8000, None), ("dmin=0", None, 0x0000),
                          ("neg-d-neg-dmin", f16(-0.0123), f16(-0.0456)),
                          ("pos-d-neg-dmin", f16(0.0123), f16(-0.0456)),
                          ("neg-d-pos-dmin", f16(-0.0123), f16(0.0456)),
                          ("sub-d=1", 0x0001, 0x0001), ("sub-d=3ff", 0x03FF, 0x83FF),
                          ("sub-d=-1", 0x8001, 0x0002), ("min-normal-d", 0x0400, 0x8400),
                          ("max-d", 0x7BFF, 0xFBFF), ("neg-max-d", 0xFBFF, 0x7BFF)):
        out.append((name, bytes(block(None, d, dmin))))
    # maximal and minimal codes (all code bytes 0xFF / 0x00 / alternating) under ordinary scales
    for name, fill in (("max-codes", 0xFF), ("min-codes", 0x00), ("codes-aa", 0xAA), ("codes-55", 0x55)):
        b = block(fill, f16(0.5), f16(0.25))
        out.append((name, bytes(b)))
    b = block(0xFF, 0x7BFF, 0x7BFF)
    out.append(("max-codes-max-d", bytes(b)))
    b = block(0xFF, 0x0001, 0x0001)
    out.append(("max-codes-sub-d", bytes(b)))

    if t.name == "q8_0":  # all 256 int8 codes over 8 blocks
        for k in range(8):
            out.append((f"codes-{32 * k}..", struct.pack("<H", f16(-1.5)) + bytes(range(32 * k, 32 * k + 32))))
    if t.name == "q6_K":  # int8 sub-block scales at their extremes
        for name, sc in (("scales=-128", 0x80), ("scales=127", 0x7F)):
            b = block(None, f16(0.75))
            b[192:208] = bytes([sc]) * 16
            out.append((name, bytes(b)))
    if t.name == "iq2_xxs":
        # every grid index (32 per block: 8 groups of 4) and every 7-bit sign index (4 per group)
        # with every 4-bit group scale
        for k in range(8):
            b = bytearray(t.nbytes)
            put_f16(b, (0,), f16(0.125))
            for g in range(8):
                idx = bytes(range(32 * k + 4 * g, 32 * k + 4 * g + 4))
                s = [(32 * (k % 4) + 4 * g + l) % 128 for l in range(4)]
                aux1 = s[0] | (s[1] << 7) | (s[2] << 14) | (s[3] << 21) | (((k + g) % 16) << 28)
                b[2 + 8 * g:2 + 8 * g + 8] = idx + struct.pack("<I", aux1)
            out.append((f"grid-{32 * k}..", bytes(b)))
    return out


def coverage_blocks(t: BlockType) -> list[tuple[str, bytes]]:
    """Blocks (no randomness) that between them use every code, grid index, sign index and
    sub-block scale a type can hold; the comments give each type's block layout (ggml-common.h)."""
    out: list[tuple[str, bytes]] = []
    nib16 = bytes(i | ((15 - i) << 4) for i in range(16))  # all 16 nibbles in both halves

    def new(d: int) -> bytearray:
        b = bytearray(t.nbytes)
        put_d(t, b, d)
        return b

    if t.name in ("q4_0", "iq4_nl", "q4_1"):
        # q4_0, iq4_nl: d, qs[16]; q4_1: d, m, qs[16]. Element j: qs[j] low nibble, j+16: high.
        qs = 4 if t.name == "q4_1" else 2
        for name, d, m in (("codes-pos", f16(0.5), f16(-4.0)), ("codes-neg", f16(-0.0123), f16(0.0456))):
            b = new(d)
            put_f16(b, t.f16_min, m)
            b[qs:qs + 16] = nib16
            out.append((name, bytes(b)))
    if t.name in ("q5_0", "q5_1"):
        # q5_0: d, qh[4] (u32: bit j is the 5th bit of element j), qs[16]; q5_1: d, m, qh, qs
        qh = 4 if t.name == "q5_1" else 2
        for name, codes, d, m in (("codes-up", list(range(32)), f16(0.5), f16(-8.0)),
                                  ("codes-down", list(range(31, -1, -1)), f16(-0.0123), f16(0.0456))):
            b = new(d)
            put_f16(b, t.f16_min, m)
            b[qh:qh + 4] = struct.pack("<I", sum((c >> 4) << e for e, c in enumerate(codes)))
            b[qh + 4:qh + 20] = bytes((codes[j] & 15) | ((codes[j + 16] & 15) << 4) for j in range(16))
            out.append((name, bytes(b)))
    if t.name == "iq4_xs":
        # d, scales_h (u16: 2 high bits of sub-block ib's 6-bit scale at bit 2ib), scales_l[4]
        # (low 4 bits, nibble ib%2 of byte ib/2), qs[128] (16 bytes a sub-block of 32): every
        # scale 0..63 (dl = d·(ls − 32)) over 8 blocks, each sub-block with all 16 codes
        for k in range(8):
            b = new(f16(0.125) if k % 2 == 0 else f16(-0.0371))
            ls = [8 * k + ib for ib in range(8)]
            b[2:4] = struct.pack("<H", sum((v >> 4) << (2 * ib) for ib, v in enumerate(ls)))
            b[4:8] = bytes((ls[2 * i] & 15) | ((ls[2 * i + 1] & 15) << 4) for i in range(4))
            b[8:136] = nib16 * 8
            out.append((f"scales-{8 * k}..", bytes(b)))
    if t.name == "tq1_0":
        # qs[48] (5 base-3 digits a byte), qh[4] (4 digits a byte), d: every byte value in qs,
        # and in qh 240..255 (243..255 no quantizer writes) and 0..7
        for k in range(6):
            b = new(f16(0.75) if k % 2 == 0 else f16(-0.0123))
            b[0:48] = bytes((48 * k + i) % 256 for i in range(48))
            b[48:52] = bytes((240 + 4 * k + i) % 256 for i in range(4))
            out.append((f"bytes-{48 * k}..", bytes(b)))
    if t.name == "nvfp4":
        # every UE4M3 scale byte 0..255, four a block in byte order, each sub-block with all 16 codes
        # (low nibbles 0..7 and high 8..15, or the other way round: every code in both nibbles)
        for k in range(64):
            b = bytearray(range(4 * k, 4 * k + 4))
            for s in range(4):
                lo = 8 * ((k + s) % 2)
                b += bytes((lo + i) | ((8 - lo + i) << 4) for i in range(8))
            out.append((f"ue4m3={4 * k:02x}..{4 * k + 3:02x}", bytes(b)))
    if t.name in ("q1_0", "q2_0"):
        # d, qs[16]: every byte value in qs over 16 blocks (Q1_0: bit j%8 of qs[j/8] is element j,
        # d if set, -d if clear; Q2_0: bits 2(j%4)..2(j%4)+1 of qs[j/4] are element j's code q,
        # value (q - 1)·d)
        for k in range(16):
            b = new(f16(0.75) if k % 2 == 0 else f16(-0.0123))
            b[2:18] = bytes(range(16 * k, 16 * k + 16))
            out.append((f"bytes-{16 * k}..", bytes(b)))
    if t.name == "tq2_0":
        # qs[64] (4 two-bit codes a byte, code 3 included: no quantizer writes it), d
        for k in range(4):
            b = new(f16(0.75) if k % 2 == 0 else f16(-0.0123))
            b[0:64] = bytes(range(64 * k, 64 * k + 64))
            out.append((f"bytes-{64 * k}..", bytes(b)))
    if t.name == "iq2_xs":
        # d, qs u16[32] (grid index 9 bits | sign index 7 bits << 9), scales[8] (two 4-bit
        # scales a 32-element sub-block): all 512 grid indices over 16 blocks, all 128 sign
        # indices, all 16 scales in every block
        for k in range(16):
            b = new(f16(0.125) if k % 2 == 0 else f16(-0.0371))
            for j in range(32):
                e = 32 * k + j
                struct.pack_into("<H", b, 2 + 2 * j, e | ((e % 128) << 9))
            b[66:74] = bytes(((2 * i + k) % 16) | (((2 * i + 1 + k) % 16) << 4) for i in range(8))
            out.append((f"grid-{32 * k}..", bytes(b)))
    if t.name == "iq2_s":
        # d, qs[32] (grid index low 8 bits), signs[32] (sign bits, stored directly), qh[8] (bits
        # 2l..2l+1 of qh[ib32]: grid index bits 8..9 of group l), scales[8]: all 1024 grid
        # indices over 32 blocks, all 256 sign bytes, all 16 scales in every block
        for k in range(32):
            b = new(f16(0.125) if k % 2 == 0 else f16(-0.0371))
            qh = [0] * 8
            for j in range(32):
                e = 32 * k + j
                b[2 + j] = e & 0xFF
                b[34 + j] = e % 256
                qh[j // 4] |= (e >> 8) << (2 * (j % 4))
            b[66:74] = bytes(qh)
            b[74:82] = bytes(((2 * i + k) % 16) | (((2 * i + 1 + k) % 16) << 4) for i in range(8))
            out.append((f"grid-{32 * k}..", bytes(b)))
    if t.name == "iq3_xxs":
        # d, qs[64] (grid indices), u32[8] (4 sign indices of 7 bits | 4-bit scale << 28): all 256
        # grid indices and 128 sign indices over 4 blocks, all 16 scales
        for k in range(4):
            b = new(f16(0.125) if k % 2 == 0 else f16(-0.0371))
            b[2:66] = bytes(range(64 * k, 64 * k + 64))
            for ib in range(8):
                s = [(32 * k + 4 * ib + l) % 128 for l in range(4)]
                struct.pack_into("<I", b, 66 + 4 * ib,
                                 s[0] | (s[1] << 7) | (s[2] << 14) | (s[3] << 21) | (((8 * k + ib) % 16) << 28))
            out.append((f"grid-{64 * k}..", bytes(b)))
    if t.name == "iq3_s":
        # d, qs[64] (grid index low 8 bits), qh[8] (bit i%8 of qh[i/8]: bit 8 of qs[i]'s index),
        # signs[32] (stored directly), scales[4] (a 4-bit scale a 32-element sub-block): all 512
        # grid indices and 256 sign bytes over 8 blocks, all 16 scales
        for k in range(8):
            b = new(f16(0.125) if k % 2 == 0 else f16(-0.0371))
            qh = [0] * 8
            for i in range(64):
                e = 64 * k + i
                b[2 + i] = e & 0xFF
                qh[i // 8] |= (e >> 8) << (i % 8)
            b[66:74] = bytes(qh)
            b[74:106] = bytes((32 * k + i) % 256 for i in range(32))
            b[106:110] = bytes(((2 * i + 8 * k) % 16) | (((2 * i + 1 + 8 * k) % 16) << 4) for i in range(4))
            out.append((f"grid-{64 * k}..", bytes(b)))
    if t.name == "iq1_s":
        # d, qs[32] (grid index low 8 bits), qh u16[8] (per 32-element sub-block: bits 3l..3l+2
        # grid index bits 8..10 of group l, bits 12..14 the 3-bit scale, bit 15 the delta sign):
        # all 2048 grid indices over 64 blocks, every scale in each block, both delta signs
        for k in range(64):
            b = new(f16(0.125) if k % 2 == 0 else f16(-0.0371))
            qh = [(((ib + k) % 8) << 12) | (((ib + k) % 2) << 15) for ib in range(8)]
            for j in range(32):
                e = 32 * k + j
                b[2 + j] = e & 0xFF
                qh[j // 4] |= (e >> 8) << (3 * (j % 4))
            b[34:50] = struct.pack("<8H", *qh)
            out.append((f"grid-{32 * k}..", bytes(b)))
    if t.name == "iq1_m":
        # qs[32] (grid index low 8 bits), qh[16] (nibble j%2 of qh[j/2] for group j: bits 0..2 grid
        # index bits 8..10, bit 3 the delta sign), scales u16[4] (bits 0..11: four 3-bit scales,
        # bits 12..15: nibble w of the f16 d): all 2048 grid indices over 64 blocks, both delta
        # signs and all 8 scales in each block
        for k in range(64):
            b = bytearray(t.nbytes)
            qh = [0] * 16
            for j in range(32):
                e = 32 * k + j
                b[j] = e & 0xFF
                qh[j // 2] |= ((e >> 8) | (((j + k) % 2) << 3)) << (4 * (j % 2))
            b[32:48] = bytes(qh)
            b[48:56] = struct.pack("<4H", *(sum(((4 * w + s + k) % 8) << (3 * s) for s in range(4))
                                            for w in range(4)))
            put_d(t, b, f16(0.125) if k % 2 == 0 else f16(-0.0371))
            out.append((f"grid-{32 * k}..", bytes(b)))
        # the f16 taken from four nibbles: distinct nibbles, under all-ones and all-zero scale bits
        for d in (0x1234, 0xC8A7, 0x7BFF, 0x8001):
            for low in (0x000, 0xFFF):
                b = bytearray(bytes([0x5A]) * 48) + struct.pack("<4H", *([low] * 4))
                put_d(t, b, d)
                out.append((f"d={d:04x}-sc={low:03x}", bytes(b)))
    return out


def realistic_blocks(t: BlockType, lib: ctypes.CDLL, rng: np.random.Generator, n: int) -> list[tuple[str, bytes]]:
    """Blocks ggml's own reference quantizer makes from Gaussian rows (the scale ranges of real files)."""
    out = []
    if t.quant_init:  # builds the IQ quantizer's grid neighbours (ggml's iq2xs/iq3xs_init_impl)
        getattr(lib, t.quant_init[0])(ctypes.c_int(t.quant_init[1]))
    for k in range(n):
        x = (rng.standard_normal(t.elems) * (0.02 * 10 ** (k % 3))).astype(np.float32)
        y = ctypes.create_string_buffer(t.nbytes)
        if t.quantize_fn.startswith("quantize_iq"):
            w = np.ones(t.elems, dtype=np.float32)  # some IQ quantizers need importance weights
            getattr(lib, t.quantize_fn)(ctypes.c_void_p(x.ctypes.data), y, ctypes.c_int64(1),
                                        ctypes.c_int64(t.elems), ctypes.c_void_p(w.ctypes.data))
        else:
            getattr(lib, t.quantize_fn)(ctypes.c_void_p(x.ctypes.data), y, ctypes.c_int64(t.elems))
        out.append((f"ggml-quantized-{k}", y.raw))
    return out


def rng_for(seed: int, t: BlockType) -> np.random.Generator:
    """The RNG of a type outside SHARED_RNG_TYPES: seeded from the seed and the type's name only."""
    return np.random.default_rng([seed, *t.name.encode("ascii")])


def random_blocks(t: BlockType, rng: np.random.Generator, n: int) -> list[tuple[str, bytes]]:
    out = []
    for k in range(n):
        b = bytearray(rng.integers(0, 256, size=t.nbytes, dtype=np.uint8).tobytes())
        if t.name == "mxfp4":
            b[0] = int(rng.integers(0, 256))
        elif t.name == "nvfp4":  # no f16: every byte as drawn (UE4M3 scales are all finite)
            pass
        elif k % 2 == 0:  # any finite f16, subnormals and 65504 included
            put_d(t, b, finite_f16(rng, 1)[0])
            put_f16(b, t.f16_min, finite_f16(rng, 1)[0])
        else:  # the sizes real files hold
            put_d(t, b, moderate_f16(rng, 1, 1e-3)[0])
            put_f16(b, t.f16_min, moderate_f16(rng, 1, 1e-3)[0])
        out.append((f"random-{k}", bytes(b)))
    return out


# ------------------------------------------------------------------ the two implementations

def dequant_ggml(t: BlockType, lib: ctypes.CDLL, data: bytes, n: int) -> np.ndarray:
    y = np.empty(n * t.elems, dtype=np.float32)
    fn = getattr(lib, t.ggml_fn or "ds41v_dequantize_row_i8")
    fn(ctypes.c_char_p(data), y.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n * t.elems))
    return y.reshape(n, t.elems)


def dequant_gguf_py(t: BlockType, data: bytes, n: int) -> np.ndarray:
    raw = np.frombuffer(data, dtype=np.uint8).reshape(n, t.nbytes)
    if t.qtype == QT.I8:  # gguf-py's GGUFReader hands I8 tensors out as int8; numpy's cast
        return raw.view(np.int8).astype(np.float32).reshape(n, t.elems)
    with np.errstate(over="ignore"):  # MXFP4 e8m0 >= 253 overflows to inf in both
        return np.asarray(gguf.quants.dequantize(raw, t.qtype), dtype=np.float32).reshape(n, t.elems)


def own_numpy_q1_0(raw: np.ndarray) -> np.ndarray:
    """The script's own Q1_0 formula (not gguf-py's: it has none): element j is bit j%8 of qs[j/8],
    d if set, -d if clear; d the f16 at byte 0 widened by numpy."""
    d = raw[:, 0:2].copy().view("<f2").astype(np.float32)                # (n, 1)
    bits = (raw[:, 2:18, None] >> np.arange(8, dtype=np.uint8)) & 1      # (n, 16, 8): element 8i+b
    return np.where(bits.reshape(-1, 128) != 0, d, -d)


def own_numpy_q2_0(raw: np.ndarray) -> np.ndarray:
    """The script's own Q2_0 formula (not gguf-py's: it has none): element j is bits 2(j%4)..+1 of
    qs[j/4], value (q - 1)·d in f32; d the f16 at byte 0 widened by numpy."""
    d = raw[:, 0:2].copy().view("<f2").astype(np.float32)                # (n, 1)
    q = (raw[:, 2:18, None] >> np.arange(0, 8, 2, dtype=np.uint8)) & 3   # (n, 16, 4): element 4i+l
    return (q.reshape(-1, 64).astype(np.float32) - np.float32(1)) * d


# a second, partial implementation for the types gguf-py cannot dequantize
OWN_NUMPY = {"q1_0": own_numpy_q1_0, "q2_0": own_numpy_q2_0}


def gguf_py_dequantizes(t: BlockType) -> bool:
    """Whether the installed gguf-py has a dequantizer for the type."""
    if not isinstance(t.qtype, QT):
        return False
    try:
        gguf.quants.dequantize(np.zeros((1, t.nbytes), dtype=np.uint8), t.qtype)
    except NotImplementedError:
        return False
    return True


def gguf_version() -> str:
    return gguf.__version__ if hasattr(gguf, "__version__") else pkg_version("gguf")


def values_note(t: BlockType) -> str:
    """What MANIFEST.txt says of a type's values where they do not come from both implementations."""
    if t.values_from == (GGML_C, GGUF_PY):
        return ""
    assert t.values_from == (GGML_C,), t.values_from
    minor = ".".join(gguf_version().split(".")[:2])
    return f" values: ggml C only (gguf-py {minor} has no dequantizer)"


def write_vectors(path: Path, t: BlockType, blocks: list[tuple[str, bytes]], values: np.ndarray):
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<6I", VERSION, int(t.qtype), t.elems, t.nbytes, len(blocks), LABEL_BYTES))
        for (label, raw), row in zip(blocks, values):
            f.write(label.encode("ascii")[:LABEL_BYTES].ljust(LABEL_BYTES, b"\0"))
            f.write(raw)
            f.write(row.astype("<f4").view("<u4").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ggml_src", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "tests/data/ggml_quants")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--blocks", type=int, default=64, help="blocks per type (I8: always 256, one per value)")
    ap.add_argument("--ggml-commit", help="the commit of GGML_SRC when it is not a git checkout")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ds41-ggml-vectors-"))
    try:
        tree, commit = prepare_ggml(args.ggml_src.resolve(), work, args.ggml_commit)
        lib = build_ggml_lib(tree, work, [], "ggmlq")
        # the same code with contraction allowed (FMA), to say how many values the definition
        # decides (informative; not written)
        fused = build_ggml_lib(tree, work, ["-mfma", "-ffp-contract=fast"], "ggmlq_fma") \
            if os.uname().machine == "x86_64" else None
        table = ggml_type_table(tree, work)
        cc = run(["cc", "--version"]).splitlines()[0]

        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "types.txt", "w") as f:
            f.write("# ggml's type table at ggml-org/ggml@%s (ggml.h ids, ggml.c type_traits):\n" % commit)
            f.write("# id name block_elements block_bytes\n")
            for i, n, b, s in table:
                f.write(f"{i} {n} {b} {s}\n")

        shared_rng = np.random.default_rng(args.seed)
        summary = []
        for t in TYPES:
            rng = shared_rng if t.name in SHARED_RNG_TYPES else rng_for(args.seed, t)
            blocks = edge_blocks(t, rng)
            if t.name != "i8":
                if t.name not in SHARED_RNG_TYPES:
                    blocks += coverage_blocks(t)
                blocks += realistic_blocks(t, lib, rng, 4)
                # at least 8 random blocks where the coverage blocks alone pass --blocks
                blocks += random_blocks(t, rng, max(8, args.blocks - len(blocks)))
            data = b"".join(raw for _, raw in blocks)
            assert all(len(raw) == t.nbytes for _, raw in blocks)
            for label, raw in blocks:  # every f16 scale finite (no inf, no NaN)
                for h in ([get_d(t, raw)] if t.f16_nibbles is not None else []) + \
                         [struct.unpack_from("<H", raw, off)[0] for off in t.f16_d + t.f16_min]:
                    assert (h >> 10) & 0x1F != 0x1F, (t.name, label, hex(h))
            a = dequant_ggml(t, lib, data, len(blocks))
            assert not np.isnan(a).any(), f"{t.name}: NaN from finite scales"
            if GGUF_PY in t.values_from:
                b, other = dequant_gguf_py(t, data, len(blocks)), "gguf-py"
            else:  # gguf-py has none: the script's own numpy formula, a partial check only
                assert not gguf_py_dequantizes(t), \
                    f"{t.name}: gguf-py {gguf_version()} dequantizes it now: add GGUF_PY to its values_from"
                raw = np.frombuffer(data, dtype=np.uint8).reshape(len(blocks), t.nbytes)
                b, other = np.asarray(OWN_NUMPY[t.name](raw), dtype=np.float32), "the script's numpy"
            differ = (a.view(np.uint32) != b.view(np.uint32))
            for k in np.flatnonzero(differ.any(axis=1)):
                j = int(np.flatnonzero(differ[k])[0])
                print(f"{t.name} block {k} ({blocks[k][0]}) element {j}: ggml {a[k, j]!r} "
                      f"({a.view(np.uint32)[k, j]:#010x}), {other} {b[k, j]!r} ({b.view(np.uint32)[k, j]:#010x})")
            assert not differ.any(), f"{t.name}: ggml's C and {other} disagree on {int(differ.sum())} values"
            fused_diff = int((dequant_ggml(t, fused, data, len(blocks)).view(np.uint32) != a.view(np.uint32)).sum()) \
                if fused else -1
            path = args.out / f"{t.name}.bin"
            write_vectors(path, t, blocks, a)
            summary.append(f"{t.name} id={int(t.qtype)} blocks={len(blocks)} elements={a.size} "
                           f"bytes={path.stat().st_size} fma_build_differs_on={fused_diff}{values_note(t)}")
            print(summary[-1])

        with open(args.out / "MANIFEST.txt", "w") as f:
            f.write(f"ggml-org/ggml commit: {commit}\n")
            f.write(f"ggml C built with: {cc}; {' '.join(CFLAGS)}\n")
            f.write(f"gguf-py: gguf {gguf_version()}, numpy {np.__version__}\n")
            f.write(f"seed: {args.seed}\n")
            f.write("ggml's C and gguf-py agree bit for bit on every element below, except the types marked "
                    "'values: ggml C only': gguf-py has no dequantizer for them, their values are ggml's C "
                    "alone (checked against the script's own numpy formula from the block layout, not gguf-py's).\n")
            f.write("fma_build_differs_on: values the same ggml code gives when built with -mfma "
                    "-ffp-contract=fast (not the definition; shows what the vectors catch)\n")
            for line in summary:
                f.write(line + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pkg_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


if __name__ == "__main__":
    main()
