// ds41/core/ggml_panels.hpp — GGUF blocks repacked, byte for byte, into 8-row panels, so that the
// host Linear reads eight rows' codes of one column as one small integer (issue 39: "at most a
// repack of the same size").
//
// Why: the host's Linear keeps each output's sum in K order (gemv.hpp: lanes are rows), so it needs
// column vectors of 8 rows. Decoding 8 rows' blocks and transposing the floats costs more than the
// sums themselves; a panel stores the 8 rows' code bits of a column side by side instead, and a
// column decodes with one broadcast, one variable shift and one mask per field.
//
// A panel block holds block b of 8 consecutive rows: first the 8 rows' header bytes (the block's
// f16 scales and packed sub-block scales, row after row, each in its block order), then each code
// field's columns: field f of width w bits (Q4_K's nibbles: 4; Q2_K's 2-bit codes: 2; Q8_0's int8:
// 8) takes w bytes per column, row i's code in bits [w·i, w·i + w) of that little-endian integer.
// Where an element's code has two fields (Q3_K, Q5_0, Q5_1, Q5_K, Q6_K: low bits and high bits)
// they are stored joined, as one field of 3, 5 or 6 bits, the high bits on top.
// The header ranges and fields of each type cover every byte of its block (GgmlPanelLayout), so
// unpack() gives back the row's block exactly, and the definition (core/ggml_quants.hpp) reads it.
// F16 is its own case: a panel block is one column, the 8 rows' f16 values.
//
// The Q4/Q5 legacy types, IQ4_NL, IQ4_XS, TQ2_0, NVFP4, Q1_0 and Q2_0 have per-element code fields
// too and are repacked alike. The IQ grid types (indices over 8 or 4 elements) and TQ1_0 (base-3 digits) have none and
// are not repacked.
#pragma once
#include <array>
#include <cstdint>
#include "ggml_quants.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

/// Where a type's header bytes and code fields lie in its block.
struct GgmlPanelLayout {
  int header_begin[2] = {0, 0}, header_end[2] = {0, 0};  // byte ranges kept per row (the second may be empty)
  int fields = 0;                                         // code fields (1 or 2)
  int width[2] = {0, 0};                                  // bits of each field per element
  // joined (Q3_K, Q5_0, Q5_1, Q5_K, Q6_K): the two fields are stored as one code of width[0] +
  // width[1] bits, field 1 the high bits, so that one shift and one mask give a lane its whole
  // code (Q3_K's 3-bit codes index a table of their values; the others' are low | high << 4)
  // instead of two shifts, two masks and the adds that join them
  bool joined = false;
};

/// Whether a kept ggml type is repacked into panels.
DS41_HD constexpr bool ggml_panel_type(GgmlType t) {
  switch (t) {
    case GgmlType::kF16: case GgmlType::kQ8_0: case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: case GgmlType::kQ6_K: case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS: case GgmlType::kTQ2_0: case GgmlType::kNVFP4:
    case GgmlType::kQ1_0: case GgmlType::kQ2_0: return true;
    default: return false;
  }
}

DS41_HD constexpr GgmlPanelLayout ggml_panel_layout(GgmlType t) {
  GgmlPanelLayout l;
  switch (t) {
    case GgmlType::kQ8_0: l.header_end[0] = 2, l.fields = 1, l.width[0] = 8; break;
    case GgmlType::kQ2_K:
      l.header_end[0] = 16, l.header_begin[1] = 80, l.header_end[1] = 84, l.fields = 1, l.width[0] = 2;
      break;
    case GgmlType::kQ3_K:
      l.header_begin[0] = 96, l.header_end[0] = 110, l.fields = 2, l.width[0] = 2, l.width[1] = 1, l.joined = true;
      break;
    case GgmlType::kQ4_K: l.header_end[0] = 16, l.fields = 1, l.width[0] = 4; break;
    case GgmlType::kQ5_K: l.header_end[0] = 16, l.fields = 2, l.width[0] = 4, l.width[1] = 1, l.joined = true; break;
    case GgmlType::kQ6_K:
      l.header_begin[0] = 192, l.header_end[0] = 210, l.fields = 2, l.width[0] = 4, l.width[1] = 2, l.joined = true;
      break;
    case GgmlType::kQ4_0: case GgmlType::kIQ4_NL: l.header_end[0] = 2, l.fields = 1, l.width[0] = 4; break;
    case GgmlType::kQ4_1: l.header_end[0] = 4, l.fields = 1, l.width[0] = 4; break;
    case GgmlType::kQ5_0: l.header_end[0] = 2, l.fields = 2, l.width[0] = 4, l.width[1] = 1, l.joined = true; break;
    case GgmlType::kQ5_1: l.header_end[0] = 4, l.fields = 2, l.width[0] = 4, l.width[1] = 1, l.joined = true; break;
    case GgmlType::kIQ4_XS: l.header_end[0] = 8, l.fields = 1, l.width[0] = 4; break;
    case GgmlType::kTQ2_0: l.header_begin[0] = 64, l.header_end[0] = 66, l.fields = 1, l.width[0] = 2; break;
    case GgmlType::kNVFP4: l.header_end[0] = 4, l.fields = 1, l.width[0] = 4; break;
    case GgmlType::kQ1_0: l.header_end[0] = 2, l.fields = 1, l.width[0] = 1; break;
    case GgmlType::kQ2_0: l.header_end[0] = 2, l.fields = 1, l.width[0] = 2; break;
    default: break;
  }
  return l;
}
DS41_HD constexpr int ggml_panel_header_bytes(GgmlType t) {
  const GgmlPanelLayout l = ggml_panel_layout(t);
  return l.header_end[0] - l.header_begin[0] + l.header_end[1] - l.header_begin[1];
}
/// Bytes of one panel block: 8 blocks (F16: 8 values).
DS41_HD constexpr long ggml_panel_block_bytes(GgmlType t) { return 8L * ggml_block_bytes(t); }
/// Byte offset of field f's columns in a panel block (a joined layout stores one field, f = 0).
DS41_HD constexpr int ggml_panel_field_offset(GgmlType t, int f) {
  const GgmlPanelLayout l = ggml_panel_layout(t);
  return 8 * ggml_panel_header_bytes(t) + (f == 0 ? 0 : ggml_block_elems(t) * l.width[0]);
}
/// The fields as stored: one of width[0] + width[1] bits where the layout is joined.
DS41_HD constexpr int ggml_panel_stored_fields(GgmlType t) { return ggml_panel_layout(t).joined ? 1 : ggml_panel_layout(t).fields; }
DS41_HD constexpr int ggml_panel_stored_width(GgmlType t, int f) {
  const GgmlPanelLayout l = ggml_panel_layout(t);
  return l.joined ? l.width[0] + l.width[1] : l.width[f];
}

/// Where field f of element e lies in a block of t: its byte and the shift of its bits.
DS41_HD constexpr void ggml_code_place(GgmlType t, int f, int e, int* byte, int* shift) {
  switch (t) {
    case GgmlType::kQ8_0: *byte = 2 + e, *shift = 0; return;
    case GgmlType::kQ2_K: {  // sub-block s of 16: bits 2·((s%8)/2) of qs[32·(s/8) + 16·(s%2) + l]
      const int s = e / 16, l = e % 16;
      *byte = 16 + 32 * (s / 8) + 16 * (s % 2) + l, *shift = 2 * ((s % 8) / 2);
      return;
    }
    case GgmlType::kQ3_K: {  // low bits as Q2_K's at qs = 32; high bit 4·(s/8) + (s%8)/2 of hmask[16·(s%2) + l]
      const int s = e / 16, l = e % 16;
      if (f == 0) *byte = 32 + 32 * (s / 8) + 16 * (s % 2) + l, *shift = 2 * ((s % 8) / 2);
      else *byte = 16 * (s % 2) + l, *shift = 4 * (s / 8) + (s % 8) / 2;
      return;
    }
    case GgmlType::kQ4_K: {  // sub-block j of 32: nibble j%2 of qs[32·(j/2) + l]
      const int j = e / 32, l = e % 32;
      *byte = 16 + 32 * (j / 2) + l, *shift = 4 * (j % 2);
      return;
    }
    case GgmlType::kQ5_K: {  // as Q4_K at qs = 48; fifth bit j of qh[l]
      const int j = e / 32, l = e % 32;
      if (f == 0) *byte = 48 + 32 * (j / 2) + l, *shift = 4 * (j % 2);
      else *byte = 16 + l, *shift = j;
      return;
    }
    case GgmlType::kQ6_K: {  // half h, quarter k: nibble k/2 of ql[64h + 32(k%2) + l]; bits 2k of qh[32h + l]
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      if (f == 0) *byte = 64 * h + 32 * (k % 2) + l, *shift = 4 * (k / 2);
      else *byte = 128 + 32 * h + l, *shift = 2 * k;
      return;
    }
    case GgmlType::kQ4_0: case GgmlType::kIQ4_NL: case GgmlType::kQ4_1:  // nibbles: e < 16 low of qs[e], else high of qs[e-16]
    case GgmlType::kQ5_0: case GgmlType::kQ5_1: {                          // Q5: fifth bit e of the u32 qh
      const int qs = t == GgmlType::kQ5_1 ? 8 : t == GgmlType::kQ5_0 ? 6 : t == GgmlType::kQ4_1 ? 4 : 2;
      if (f == 0) *byte = qs + e % 16, *shift = 4 * (e / 16);
      else *byte = (t == GgmlType::kQ5_1 ? 4 : 2) + e / 8, *shift = e % 8;
      return;
    }
    case GgmlType::kIQ4_XS: {  // group g of 32: its 16 bytes at 8 + 16g, low nibbles first
      const int g = e / 32, j = e % 32;
      *byte = 8 + 16 * g + j % 16, *shift = 4 * (j / 16);
      return;
    }
    case GgmlType::kTQ2_0: {  // element 128h + 32l + m: bits 2l of qs[32h + m]
      *byte = 32 * (e / 128) + e % 32, *shift = 2 * ((e / 32) % 4);
      return;
    }
    case GgmlType::kNVFP4: {  // sub-block s of 16: element j < 8 the low nibble of qs[8s + j], else the high one
      const int sb = e / 16, j = e % 16;
      *byte = 4 + 8 * sb + j % 8, *shift = 4 * (j / 8);
      return;
    }
    case GgmlType::kQ1_0: *byte = 2 + e / 8, *shift = e % 8; return;
    case GgmlType::kQ2_0: *byte = 2 + e / 4, *shift = 2 * (e % 4); return;
    default: *byte = 0, *shift = 0; return;
  }
}

/// Each code field's place in the block, element by element (ggml_code_place as tables: the
/// packer's inner loop reads them instead of dividing).
struct GgmlPanelPlaces {
  uint8_t byte[2][256] = {}, shift[2][256] = {};
};
inline const GgmlPanelPlaces& ggml_panel_places(GgmlType t) {
  static const auto tables = [] {
    std::array<GgmlPanelPlaces, 64> all{};  // indexed by type id (the panel types are below 64)
    for (const GgmlTypeInfo& info : kGgmlTypes) {
      const GgmlType g = info.type;
      if (!ggml_panel_type(g) || g == GgmlType::kF16) continue;
      GgmlPanelPlaces& p = all[static_cast<size_t>(g)];
      for (int f = 0; f < ggml_panel_layout(g).fields; ++f)
        for (int e = 0; e < ggml_block_elems(g); ++e) {
          int byte, shift;
          ggml_code_place(g, f, e, &byte, &shift);
          p.byte[f][e] = static_cast<uint8_t>(byte), p.shift[f][e] = static_cast<uint8_t>(shift);
        }
    }
    return all;
  }();
  return tables[static_cast<size_t>(t)];
}

/// Packs block b of 8 rows (rows[i]: row i's block, nullptr: a padding row of zero bytes) into
/// one panel block `out` (ggml_panel_block_bytes(t) bytes). Host only (the tables).
inline void ggml_panel_pack(GgmlType t, const uint8_t* const rows_in[8], uint8_t* out) {
  static constexpr uint8_t kZero[256] = {};
  const uint8_t* rows[8];
  for (int i = 0; i < 8; ++i) rows[i] = rows_in[i] ? rows_in[i] : kZero;
  if (t == GgmlType::kF16) {
    for (int i = 0; i < 8; ++i) out[2 * i] = rows[i][0], out[2 * i + 1] = rows[i][1];
    return;
  }
  const GgmlPanelLayout l = ggml_panel_layout(t);
  const GgmlPanelPlaces& places = ggml_panel_places(t);
  const int H = ggml_panel_header_bytes(t), be = ggml_block_elems(t);
  for (int i = 0; i < 8; ++i) {
    uint8_t* h = out + H * i;
    for (int r = 0; r < 2; ++r) {
      const int len = l.header_end[r] - l.header_begin[r];
      for (int o = 0; o < len; ++o) h[o] = rows[i][l.header_begin[r] + o];
      h += len;
    }
  }
  for (int f = 0; f < ggml_panel_stored_fields(t); ++f) {
    const int w = ggml_panel_stored_width(t, f);
    const unsigned mask = (1u << l.width[f]) - 1u;
    uint8_t* col0 = out + ggml_panel_field_offset(t, f);
    if (w == 8) {  // whole bytes (Q8_0): a byte transpose
      for (int e = 0; e < be; ++e)
        for (int i = 0; i < 8; ++i) col0[8 * e + i] = rows[i][places.byte[f][e]];
      continue;
    }
    for (int e = 0; e < be; ++e) {
      const int byte = places.byte[f][e], shift = places.shift[f][e];
      uint64_t word = 0;
      for (int i = 0; i < 8; ++i) {
        unsigned code = (rows[i][byte] >> shift) & mask;
        if (l.joined)  // field 1's bits above field 0's
          code |= ((rows[i][places.byte[1][e]] >> places.shift[1][e]) & ((1u << l.width[1]) - 1u)) << l.width[0];
        word |= static_cast<uint64_t>(code) << (w * i);
      }
      for (int k = 0; k < w; ++k) col0[e * w + k] = static_cast<uint8_t>(word >> (8 * k));  // little-endian
    }
  }
}

/// Row i's block back from a panel block (the inverse of ggml_panel_pack): `block` gets
/// ggml_block_bytes(t) bytes.
DS41_HD_OUTLINED void ggml_panel_unpack(GgmlType t, const uint8_t* in, int i, uint8_t* block) {
  if (t == GgmlType::kF16) {
    block[0] = in[2 * i], block[1] = in[2 * i + 1];
    return;
  }
  const GgmlPanelLayout l = ggml_panel_layout(t);
  const int H = ggml_panel_header_bytes(t), be = ggml_block_elems(t), bb = ggml_block_bytes(t);
  for (int o = 0; o < bb; ++o) block[o] = 0;
  int at = H * i;
  for (int r = 0; r < 2; ++r)
    for (int o = l.header_begin[r]; o < l.header_end[r]; ++o) block[o] = in[at++];
  for (int f = 0; f < ggml_panel_stored_fields(t); ++f) {
    const int w = ggml_panel_stored_width(t, f);
    const uint8_t* col0 = in + ggml_panel_field_offset(t, f);
    for (int e = 0; e < be; ++e) {
      // row i's code: bits [w·i, w·i + w) of the column's w bytes (a 3-bit code may cross a byte)
      const int bit = w * i, byte0 = e * w + bit / 8;
      const unsigned two = col0[byte0] | (bit % 8 + w > 8 ? static_cast<unsigned>(col0[byte0 + 1]) << 8 : 0u);
      const unsigned code = (two >> (bit % 8)) & ((1u << w) - 1u);
      for (int part = 0; part < (l.joined ? 2 : 1); ++part) {
        const int pf = l.joined ? part : f;
        int byte, shift;
        ggml_code_place(t, pf, e, &byte, &shift);
        const unsigned bits = (code >> (part == 1 ? l.width[0] : 0)) & ((1u << l.width[pf]) - 1u);
        block[byte] |= static_cast<uint8_t>(bits << shift);
      }
    }
  }
}

}  // namespace ds41
#include "fp_exact_end.hpp"
