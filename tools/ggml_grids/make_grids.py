#!/usr/bin/env python3
"""Writes include/ds41/core/ggml_grids.hpp: ggml's lookup tables for the IQ types, as data.

The IQ types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS) store indices
into fixed tables of lattice points and values that ggml defines in src/ggml-common.h; a file's
values cannot be read without them, and they are not derivable from a formula (the grids were
chosen by ggml's authors). This script copies the tables' numbers, and nothing else, out of a
ggml-org/ggml source tree into a header of constants with host and device copies and one accessor
each. tests/test_ggml_quants.cpp then checks every dequantizer against vectors made by ggml's C
and gguf-py (tools/ggml_vectors), which between them use every entry of every table.

Usage:
  python3 tools/ggml_grids/make_grids.py GGML_SRC [--out include/ds41/core/ggml_grids.hpp]
      [--ggml-commit SHA]

GGML_SRC: a ggml-org/ggml checkout (its HEAD is recorded unless --ggml-commit is given).
"""
from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

# name in ggml-common.h -> (C++ element type, ds41 constant, accessor, accessor's return type, what it is)
TABLES = [
    ("kmask_iq2xs", "uint8_t", "kIq2xsSignMask", "iq2xs_sign_mask", "uint8_t",
     "bit j of a sign byte: element j of 8 is negative"),
    ("ksigns_iq2xs", "uint8_t", "kIq2xsSigns", "iq2xs_signs", "uint8_t",
     "the 8 signs of a group of 8 from 7 stored bits: bit 7 makes the count of minus signs even "
     "(i | parity(i) << 7); IQ2_XXS, IQ2_XS, IQ3_XXS"),
    ("iq2xxs_grid", "uint64_t", "kIq2xxsGrid", "iq2xxs_grid", "uint64_t",
     "IQ2_XXS: 256 points, 8 magnitudes each (bytes 8, 25, 43), element j in byte j"),
    ("iq2xs_grid", "uint64_t", "kIq2xsGrid", "iq2xs_grid", "uint64_t",
     "IQ2_XS: 512 points, 8 magnitudes each (bytes 8, 25, 43), element j in byte j"),
    ("iq2s_grid", "uint64_t", "kIq2sGrid", "iq2s_grid", "uint64_t",
     "IQ2_S: 1024 points, 8 magnitudes each (bytes 8, 25, 43), element j in byte j"),
    ("iq3xxs_grid", "uint32_t", "kIq3xxsGrid", "iq3xxs_grid", "uint32_t",
     "IQ3_XXS: 256 points, 4 magnitudes each (bytes 4 .. 62), element j in byte j"),
    ("iq3s_grid", "uint32_t", "kIq3sGrid", "iq3s_grid", "uint32_t",
     "IQ3_S: 512 points, 4 magnitudes each (odd bytes 1 .. 15), element j in byte j"),
    ("iq1s_grid", "uint64_t", "kIq1sGrid", "iq1s_grid", "uint64_t",
     "IQ1_S and IQ1_M: 2048 points, 8 int8 values each (-1, 0, 1), element j in byte j"),
    ("kvalues_iq4nl", "int8_t", "kIq4nlValues", "iq4nl_value", "int",
     "IQ4_NL and IQ4_XS: the 16 values a 4-bit code stands for"),
]


def parse_tables(text: str) -> dict[str, list[int]]:
    # the C build's tables (iq1s_grid exists only under GGML_COMMON_IMPL_C; later copies of a name
    # for other backends are the same numbers, and only the first is taken)
    defines = {m.group(1): m.group(2) for m in re.finditer(r"^#define\s+(\w+)\s+(\d+)\b", text, re.M)}
    out: dict[str, list[int]] = {}
    for m in re.finditer(r"GGML_TABLE_BEGIN\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)(.*?)GGML_TABLE_END\(\)", text, re.S):
        ctype, name, size, body = m.groups()
        if name in out or not re.fullmatch(r"\d+|[A-Z_0-9]+", size) or size == "size":  # skip the macro's own #define
            continue
        body = re.sub(r"//[^\n]*", "", body)
        values = [int(tok, 0) for tok in re.findall(r"-?(?:0x[0-9a-fA-F]+|\d+)", body)]
        n = int(defines.get(size, size))
        if len(values) != n:
            raise SystemExit(f"{name}: {len(values)} values, declared {n}")
        out[name] = values
    return out


def fmt(values: list[int], ctype: str) -> list[str]:
    if ctype == "uint64_t":
        per, f = 4, lambda v: f"0x{v:016x}"
    elif ctype == "uint32_t":
        per, f = 8, lambda v: f"0x{v:08x}"
    else:
        per, f = 16, lambda v: f"{v}"
    return ["    " + ", ".join(f(v) for v in values[i:i + per]) + "," for i in range(0, len(values), per)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ggml_src", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "include/ds41/core/ggml_grids.hpp")
    ap.add_argument("--ggml-commit")
    a = ap.parse_args()
    commit = a.ggml_commit or subprocess.run(["git", "-C", str(a.ggml_src), "rev-parse", "HEAD"], check=True,
                                             capture_output=True, text=True).stdout.strip()
    tables = parse_tables((a.ggml_src / "src/ggml-common.h").read_text())
    L = [
        "// ds41/core/ggml_grids.hpp — ggml's lookup tables for the IQ types (GENERATED: do not edit).",
        "//",
        f"// Made by tools/ggml_grids/make_grids.py from ggml-org/ggml {commit}, src/ggml-common.h: the",
        "// tables' numbers as data, with a device copy of each and one accessor that reads whichever the",
        "// caller's side has. core/ggml_quants_iq.hpp reads them; tests/test_ggml_quants.cpp checks them",
        "// through vectors that use every entry (tests/data/ggml_quants).",
        "#pragma once",
        "#include <cstdint>",
        '#include "macros.hpp"',
        "",
        "namespace ds41 {",
        "",
    ]
    for name, ctype, const, _, _, what in TABLES:
        L.append(f"// {name}: {what}")
        L.append(f"#define DS41_GGML_TABLE_{name.upper()} \\")
        body = fmt(tables[name], ctype)
        L += [line + " \\" for line in body[:-1]] + [body[-1]]
        L.append(f"inline constexpr {ctype} {const}[{len(tables[name])}] = {{DS41_GGML_TABLE_{name.upper()}}};")
        L.append("")
    L += [
        "#if defined(__CUDACC__)",
        "// Device copies of the same data: a host array cannot be read from device code, and an inline",
        "// __device__ variable needs -rdc, so each translation unit keeps its own (internal linkage).",
        "namespace ggml_grids_device {",
    ]
    for name, ctype, const, _, _, _ in TABLES:
        L.append(f"static __device__ const {ctype} {const}[{len(tables[name])}] = {{DS41_GGML_TABLE_{name.upper()}}};")
    L += ["}  // namespace ggml_grids_device", "#endif"]
    for name, *_ in TABLES:
        L.append(f"#undef DS41_GGML_TABLE_{name.upper()}")
    L += ["", "/// Entry i of each table, from the host or the device copy."]
    for name, ctype, const, acc, rtype, _ in TABLES:
        L += [
            f"DS41_HD {rtype} {acc}(int i) {{",
            "#if DS41_DEVICE_CODE",
            f"  return ggml_grids_device::{const}[i];",
            "#else",
            f"  return {const}[i];",
            "#endif",
            "}",
        ]
    L += ["", "}  // namespace ds41", ""]
    a.out.write_text("\n".join(L))
    print(f"wrote {a.out} ({sum(len(tables[t[0]]) for t in TABLES)} entries, ggml {commit})")


if __name__ == "__main__":
    main()
