// ds41/io/gguf_model.hpp — a DeepSeek-V4.1 model in GGUF: GGUF tensor types ↔ the library's
// HostTensor formats (block-type matrices kept as stored, WeightFormat::kGgmlBlocks; other block
// tensors widened to f32 with core/ggml_quants.hpp's values), on top of
// the metadata ↔ ModelConfig of gguf_config.hpp. GgufWeights (a file-backed WeightSource) and
// write_model are in gguf_weights.hpp.
#pragma once
#include <string>
#include <vector>
#include "../model/config.hpp"
#include "../model/weights.hpp"
#include "gguf_config.hpp"
#include "gguf_names.hpp"
#include "gguf_quantize.hpp"
#include "gguf_writer.hpp"
#include "safetensors_weights.hpp"
#include "safetensors_writer.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {
// ------------------------------------------------------------------------------------ tensors
/// Whether tensor `t` holds what `ref` names (one expert of a merged [E, rows, cols] tensor: that
/// expert exists).
inline bool holds(const NameRef& ref, const TensorInfo* t) {
  if (!t) return false;
  return ref.part != Part::kExpertSlice || (t->dims.size() == 3 && static_cast<uint64_t>(ref.expert) < t->dims[2]);
}

/// Where the bytes `ref` names lie in tensor `t`, and their shape: the whole tensor, or one
/// expert's slice of a merged [E, rows, cols] tensor (`what` names the tensor in errors).
struct TensorSlice {
  uint64_t offset = 0, bytes = 0;
  std::vector<long> shape;
};
inline TensorSlice slice_of(const NameRef& ref, const TensorInfo& t, const std::string& what) {
  TensorSlice s{t.offset, t.bytes, t.shape()};
  if (ref.part != Part::kExpertSlice) return s;
  DS41_CHECK(s.shape.size() == 3 && ref.expert < s.shape[0], what, " has shape ",
             shape_str({s.shape.begin(), s.shape.end()}), ", no expert ", ref.expert);
  s.bytes = t.bytes / s.shape[0];
  s.offset += s.bytes * ref.expert;
  s.shape.erase(s.shape.begin());
  return s;
}

/// The values of block-type tensors decode_tensor widens to f32 (I8, vectors; ds41-gguf dequant):
/// core/ggml_quants.hpp's (ggml's
/// dequantize_row_<type>, uncontracted), block by block. A block whose values are not all finite
/// (an inf or NaN f16 scale) is refused, naming the tensor and the block.
inline std::vector<float> dequantize_blocks(TensorType type, const uint8_t* p, uint64_t n, const std::string& what) {
  const GgmlTypeInfo* info = ggml_info(type);
  DS41_CHECK(info && ggml_block_dequantizable(static_cast<GgmlType>(type)), what, ": type ", tensor_type_name(type),
             " has no dequantization");
  const uint64_t bb = static_cast<uint64_t>(info->block_bytes), be = static_cast<uint64_t>(info->block_elems);
  DS41_CHECK(n % bb == 0, what, ": ", n, " bytes are not whole ", tensor_type_name(type), " blocks of ", bb);
  std::vector<float> v(n / bb * be);
  for (uint64_t blk = 0; blk < n / bb; ++blk) {
    float* out = v.data() + blk * be;
    dequantize_ggml_block(static_cast<GgmlType>(type), p + blk * bb, out);
    for (uint64_t j = 0; j < be; ++j)
      DS41_CHECK(std::isfinite(out[j]), what, ": ", tensor_type_name(type), " block ", blk, " (element ", blk * be + j,
                 ") has the non-finite value ", out[j], " (a NaN or infinite scale)");
  }
  return v;
}

/// Engram tables in ggml's types whose values are not e4m3 codes times a power of two:
/// vcruz305's rungs quantize the tables with the rung (Q8_0 down to Q3_K; Q4_K at Q4_K_M), and
/// every other block type a Linear reads (ggml_linear_type: the legacy Q4_0..Q5_1, the K-quants,
/// the IQ and ternary types) reads alike; a conversion with `--outtype f16/bf16/f32` (none
/// published yet) writes them as plain floats. Such a table is read as rows of values, ggml's f32
/// of each row's K / block blocks (engram_value_rows), where the fp8 types are rows of codes and scales.
inline bool engram_value_type(TensorType t) {
  if (t == TensorType::kBF16 || t == TensorType::kF32) return true;
  return ggml_info(t) != nullptr && ggml_linear_type(static_cast<GgmlType>(t));  // F16 and the block types
}
/// One block of an engram value type to its f32 values: the float types element by element (f16 and
/// bf16 widen exactly), the block types by ggml's dequantization.
inline void engram_value_block(TensorType t, const uint8_t* p, float* out) {
  switch (t) {
    case TensorType::kF32: std::memcpy(out, p, 4); return;
    case TensorType::kF16: *out = ggml_detail::load_f16(p); return;
    case TensorType::kBF16: *out = bf16_to_f32(ggml_detail::load_u16(p)); return;
    default: dequantize_ggml_block(static_cast<GgmlType>(t), p, out); return;
  }
}
/// The tensor types an engram table may have: DS41_FP8_ROW (dims [K, rows]), I8 holding the same
/// rows' bytes (dims [K + K/32, rows]: antirez's row264 for K = 256), MXFP4 (dims [K, rows]:
/// mxxm-t's 136 B rows for K = 256), read as the DS41_FP8_ROW rows of its values (mxfp4_engram_rows),
/// or a value type (engram_value_type, dims [K, rows]).
inline bool engram_row_type(TensorType t) {
  return t == TensorType::kDs41Fp8Row || t == TensorType::kI8 || t == TensorType::kMXFP4 || engram_value_type(t);
}
/// Names the engram row types, for messages.
inline constexpr const char* kEngramRowTypes =
    "DS41_FP8_ROW, I8 (row264), MXFP4, F16, BF16, F32 or another ggml block type's rows (Q4_0 .. Q8_0, "
    "the K-quants, the IQ and TQ types)";
/// Refuses engram rows of K values that are not whole blocks of the value type t, naming `what`.
inline void check_engram_value_row(TensorType t, long K, const std::string& what) {
  const long be = ggml_info(t)->block_elems;
  DS41_CHECK(K > 0 && K % be == 0, what, ": engram rows of ", K, " values are not whole ", tensor_type_name(t),
             " blocks of ", be);
}
/// The head dimension K of an engram table row of `row_elems` elements of type t (0 when it cannot be one).
inline long engram_row_dim(TensorType t, long row_elems) {
  if (engram_value_type(t)) return row_elems > 0 && row_elems % ggml_info(t)->block_elems == 0 ? row_elems : 0;
  if (t == TensorType::kDs41Fp8Row || (t == TensorType::kMXFP4 && row_elems % 32 == 0)) return row_elems;
  if (t == TensorType::kI8 && row_elems % 33 == 0) return row_elems / 33 * 32;
  return 0;
}
/// The file bytes of one engram row of K values in type t.
inline uint64_t engram_row_bytes(TensorType t, long K) {
  if (engram_value_type(t)) {
    const GgmlTypeInfo* info = ggml_info(t);
    return static_cast<uint64_t>(K / info->block_elems * info->block_bytes);
  }
  return static_cast<uint64_t>(t == TensorType::kMXFP4 ? K / 32 * 17 : K + K / 32);
}

/// ggml's f32 values of `rows` engram rows of K in a value type (engram_value_type), row after row,
/// each its blocks in order: exactly dequantize_row_<type> (core/ggml_quants.hpp). A row whose
/// values are not all finite (an inf or NaN f16 scale, or value of a float type) is refused naming
/// it (first_row + r, the table's row) and its block (a float type's element); K not whole blocks
/// is refused.
inline std::vector<float> engram_value_rows(TensorType t, const uint8_t* p, long rows, long K, long first_row,
                                            const std::string& what) {
  DS41_CHECK(engram_value_type(t), what, ": ", tensor_type_name(t), " is not an engram value type");
  check_engram_value_row(t, K, what);
  const GgmlTypeInfo* info = ggml_info(t);
  const long be = info->block_elems, bb = info->block_bytes, nb = K / be;
  std::vector<float> v(static_cast<size_t>(rows * K));
  for (long r = 0; r < rows; ++r)
    for (long b = 0; b < nb; ++b) {
      float* out = v.data() + r * K + b * be;
      engram_value_block(t, p + (r * nb + b) * bb, out);
      for (long j = 0; j < be; ++j)
        DS41_CHECK(std::isfinite(out[j]), what, ": ", tensor_type_name(t), " engram row ", first_row + r,
                   be == 1 ? " element " : " block ", b,
                   be == 1 ? std::string() : " (element " + std::to_string(b * be + j) + ")",
                   " has the non-finite value ", out[j], be == 1 ? "" : " (a NaN or infinite scale)");
    }
  return v;
}

/// MXFP4 engram rows → DS41_FP8_ROW rows with exactly ggml's values. An MXFP4 block is e2m1 codes
/// times 2^(e-127) (ggml: its doubled integer times 2^(e-128)); every e2m1 value is an e4m3 value
/// and the block is the fp8 row's 32-value scale block, so a code maps to an e4m3 code and e to the
/// row's scale byte. ggml reads code 8 (-0) as +0, so it becomes +0. e = 0xFF has no e8m0 value
/// in ds41's rows (NaN): refused, naming the row.
inline std::vector<uint8_t> mxfp4_engram_rows(const uint8_t* p, long rows, long K, const std::string& what) {
  // e2m1 magnitude index → e4m3 code: 0, 0.5, 1, 1.5, 2, 3, 4, 6
  static constexpr uint8_t kE4m3[8] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C};
  const long nb = K / 32, rb = K + nb;
  std::vector<uint8_t> out(static_cast<size_t>(rows * rb));
  for (long r = 0; r < rows; ++r)
    for (long b = 0; b < nb; ++b) {
      const uint8_t* blk = p + (r * nb + b) * 17;
      DS41_CHECK(blk[0] != 0xFF, what, ": MXFP4 engram row ", r, " block ", b,
                 " has the scale byte 0xFF, which no engram row can hold");
      uint8_t* codes = out.data() + r * rb + b * 32;
      for (int j = 0; j < 32; ++j) {  // ggml: element j in the low nibble of byte j%16 (j < 16), high after
        const uint8_t c = j < 16 ? blk[1 + j] & 0x0F : blk[1 + j - 16] >> 4;
        codes[j] = (c & 7) == 0 ? 0x00 : static_cast<uint8_t>(kE4m3[c & 7] | (c & 8 ? 0x80 : 0));
      }
      out[static_cast<size_t>(r * rb + K + b)] = blk[0];
    }
  return out;
}

/// The block types a matrix keeps as stored (WeightFormat::kGgmlBlocks; its Linear is the f32 Linear
/// on the values, host/gemv_ggml.hpp): ggml_linear_type's blocks (Q4_0..Q8_0, the K-quants, the IQ
/// and TQ types). F16 matrices are kept too.
inline bool kept_block_type(TensorType t) {
  return t != TensorType::kF16 && ggml_linear_type(static_cast<GgmlType>(t)) && ggml_info(t) != nullptr;
}

/// GGUF bytes of `type` with row-major `shape` → a HostTensor in the library's formats. For the
/// engram parts, shape is the table's [rows, K] whatever the row type (see engram_row_type); a
/// value type's table is its codes part alone, as kF32 values (EngramT: a table without scales).
inline HostTensor decode_tensor(TensorType type, const std::vector<long>& shape, const uint8_t* p, uint64_t n,
                                Part part, const std::string& what) {
  HostTensor t;
  t.shape = shape;
  const long count = t.numel();
  const long cols = shape.empty() ? 1 : shape.back(), rows = count / std::max(1L, cols);
  auto floats = [&](auto&& f) {
    std::vector<float> v(count);
    for (long i = 0; i < count; ++i) v[i] = f(i);
    return HostTensor::from_f32(shape, v);
  };
  if (part == Part::kEngramCodes || part == Part::kEngramScales) {
    DS41_CHECK(engram_row_type(type) && shape.size() == 2, what, ": engram table has type ", tensor_type_name(type),
               ", expected ", kEngramRowTypes);
    if (engram_value_type(type)) {  // ggml's values, row by row (engram_value_rows); no scales
      DS41_CHECK(part == Part::kEngramCodes, what, ": a ", tensor_type_name(type),
                 " engram table holds values, not e4m3 codes and scales");
      check_engram_value_row(type, cols, what);
      DS41_CHECK(n == rows * engram_row_bytes(type, cols), what, ": ", n, " bytes do not hold ", rows, " ",
                 tensor_type_name(type), " engram rows of ", cols);
      return HostTensor::from_f32(shape, engram_value_rows(type, p, rows, cols, 0, what));
    }
    DS41_CHECK(cols % 32 == 0, what, ": engram rows of ", cols, " values are not whole blocks of 32 (e8m0 scales)");
    if (type == TensorType::kMXFP4) {
      DS41_CHECK(n == rows * engram_row_bytes(type, cols), what, ": ", n, " bytes do not hold ", rows,
                 " MXFP4 engram rows of ", cols);
      const std::vector<uint8_t> fp8 = mxfp4_engram_rows(p, rows, cols, what);
      return decode_tensor(TensorType::kDs41Fp8Row, shape, fp8.data(), fp8.size(), part, what);
    }
    const long nb = cols / 32, rb = cols + nb;
    DS41_CHECK(n == static_cast<uint64_t>(rows * rb), what, ": ", n, " bytes do not hold ", rows, " engram rows of ",
               rb, " bytes");
    if (part == Part::kEngramCodes) {
      t.format = WeightFormat::kFp8Block32;  // codes only; EngramT reads the scales from ".scale"
      t.payload.resize(static_cast<size_t>(count));
      for (long r = 0; r < rows; ++r) std::memcpy(&t.payload[r * cols], p + r * rb, cols);
      return t;
    }
    std::vector<float> s(static_cast<size_t>(rows) * nb);
    for (long r = 0; r < rows; ++r)
      for (long b = 0; b < nb; ++b) s[r * nb + b] = e8m0_to_f32(p[r * rb + cols + b]);
    return HostTensor::from_f32({rows, nb}, s);
  }
  DS41_CHECK(readable_tensor_type(type), what, " has type ", tensor_type_name(type), ", which ds41 does not read (it reads ",
             tensor_type_names(readable_tensor_type), " and its own DS41_FP8_BLOCK32)");
  DS41_CHECK(n == tensor_bytes(type, {shape.rbegin(), shape.rend()}, what), what, ": ", n, " bytes do not hold a ",
             tensor_type_name(type), " tensor of shape ", shape_str({shape.begin(), shape.end()}));
  switch (type) {
    case TensorType::kF32: t.format = WeightFormat::kF32; t.payload.assign(p, p + n); return t;
    case TensorType::kBF16: t.format = WeightFormat::kBF16; t.payload.assign(p, p + n); return t;
    case TensorType::kF16:
      if (shape.size() == 2) return HostTensor::from_ggml_blocks(shape, GgmlType::kF16, std::vector<uint8_t>(p, p + n));
      return floats([&](long i) { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return f16_to_f32(h); });
    case TensorType::kMXFP4: {
      DS41_CHECK(shape.size() == 2, what, ": MXFP4 is read as a matrix, got shape ", shape_str({shape.begin(), shape.end()}));
      t.format = WeightFormat::kFp4Block32;
      t.payload.assign(static_cast<size_t>(count / 2), 0);
      t.scales.resize(static_cast<size_t>(count / 32));
      for (long blk = 0; blk < count / 32; ++blk) {
        const uint8_t* b = p + blk * 17;
        DS41_CHECK(b[0] != 255, what, ": MXFP4 block ", blk, " has the NaN scale 0xFF");
        t.scales[blk] = e8m0_to_f32(b[0]);
        for (int j = 0; j < 32; ++j) {  // ggml: element j in qs[j%16], low nibble for j < 16
          uint8_t code = j < 16 ? (b[1 + j] & 0xF) : (b[1 + j - 16] >> 4);
          long k = blk * 32 + j;
          t.payload[k / 2] |= static_cast<uint8_t>((k & 1) ? code << 4 : code);
        }
      }
      return t;
    }
    case TensorType::kDs41Fp8Block32: {
      t.format = WeightFormat::kFp8Block32;
      t.payload.assign(p, p + count);
      t.scales.resize((n - count) / 4);
      std::memcpy(t.scales.data(), p + count, t.scales.size() * 4);
      return t;
    }
    case TensorType::kDs41Fp8Row: fail(what, ": DS41_FP8_ROW holds engram tables only");
    default:  // the block types: matrices kept as stored; I8 and vectors widened (docs/GGUF.md)
      if (shape.size() == 2 && kept_block_type(type)) {
        const GgmlType g = static_cast<GgmlType>(type);
        const long bad = ggml_first_nonfinite_block(g, p, static_cast<long>(n / ggml_block_bytes(g)));
        DS41_CHECK(bad < 0, what, ": ", tensor_type_name(type), " block ", bad,
                   " has non-finite values (a NaN or infinite f16 scale)");
        return HostTensor::from_ggml_blocks(shape, g, std::vector<uint8_t>(p, p + n));
      }
      return HostTensor::from_f32(shape, dequantize_blocks(type, p, n, what));
  }
}

/// float32 values → F32 / F16 / BF16 bytes, or the
/// blocks of gguf_quantize.hpp (every block type ds41 reads but I8).
inline std::vector<uint8_t> encode_values(const std::vector<float>& v, TensorType type) {
  std::vector<uint8_t> out;
  auto put16 = [&](uint16_t h) { out.push_back(h & 0xFF); out.push_back(h >> 8); };
  switch (type) {
    case TensorType::kF32: out.resize(v.size() * 4); if (!v.empty()) std::memcpy(out.data(), v.data(), out.size()); break;
    case TensorType::kF16: for (float x : v) put16(f32_to_f16(x)); break;
    case TensorType::kBF16: for (float x : v) put16(bf16_bits(x)); break;
    default:
      DS41_CHECK(quantizable_block_type(type), "gguf: encode_values cannot write type ", tensor_type_name(type));
      out = quantize_blocks(v, type);  // gguf_quantize.hpp
      break;
  }
  return out;
}

/// A HostTensor in its own format → GGUF bytes and type (f32, bf16, kept blocks as read, fp4 → MXFP4,
/// fp8 → DS41_FP8_BLOCK32; any other format as its f32 values).
inline std::pair<TensorType, std::vector<uint8_t>> encode_tensor(const HostTensor& t, const std::string& what) {
  if (t.format == WeightFormat::kF32) return {TensorType::kF32, t.payload};
  if (t.format == WeightFormat::kBF16) return {TensorType::kBF16, t.payload};
  if (t.format == WeightFormat::kGgmlBlocks) return {static_cast<TensorType>(t.ggml_type), t.payload};  // as read
  if (t.format == WeightFormat::kFp8Block32) {
    std::vector<uint8_t> out = t.payload;
    const size_t at = out.size();
    out.resize(at + t.scales.size() * 4);
    std::memcpy(out.data() + at, t.scales.data(), t.scales.size() * 4);
    return {TensorType::kDs41Fp8Block32, out};
  }
  if (t.format == WeightFormat::kFp4Block32) {
    const long count = t.numel();
    DS41_CHECK(count % 32 == 0 && static_cast<long>(t.scales.size()) == count / 32, what,
               ": fp4 tensor needs one scale per 32 values");
    std::vector<uint8_t> out(static_cast<size_t>(count / 32) * 17, 0);
    for (long blk = 0; blk < count / 32; ++blk) {
      uint8_t* b = &out[blk * 17];
      DS41_CHECK(f32_to_e8m0(t.scales[blk], &b[0]), what, ": fp4 block scale ", t.scales[blk],
                 " is not a power of two, MXFP4 cannot hold it");
      for (int j = 0; j < 32; ++j) {
        long k = blk * 32 + j;
        uint8_t code = (t.payload[k / 2] >> ((k & 1) * 4)) & 0xF;
        b[1 + j % 16] |= static_cast<uint8_t>(j < 16 ? code : code << 4);
      }
    }
    return {TensorType::kMXFP4, out};
  }
  // a format with no GGUF type of its own: its values, exactly, as f32
  return {TensorType::kF32, HostTensor::from_f32(t.shape, t.to_f32()).payload};
}

/// Engram table rows (codes as kFp8Block32 payload or e4m3 values in f32) and their pow2 scales
/// [rows, hd/32] → DS41_FP8_ROW bytes.
inline std::vector<uint8_t> encode_engram_rows(const HostTensor& codes, const HostTensor& scales, const std::string& what) {
  const long rows = codes.shape.at(0), hd = codes.shape.at(1), nb = hd / 32;
  DS41_CHECK(hd % 32 == 0 && scales.numel() == rows * nb, what, ": engram scales do not match the table");
  std::vector<uint8_t> c(static_cast<size_t>(rows * hd));
  if (codes.format == WeightFormat::kF32) {
    std::vector<float> v = codes.to_f32();
    for (size_t i = 0; i < v.size(); ++i) c[i] = e4m3_encode(v[i]);
  } else {
    DS41_CHECK(codes.format == WeightFormat::kFp8Block32, what, ": engram table has format ", format_name(codes.format));
    c = codes.payload;
  }
  std::vector<float> s = scales.to_f32();
  std::vector<uint8_t> out(static_cast<size_t>(rows * (hd + nb)));
  for (long r = 0; r < rows; ++r) {
    std::memcpy(&out[r * (hd + nb)], &c[r * hd], hd);
    for (long b = 0; b < nb; ++b)
      DS41_CHECK(f32_to_e8m0(s[r * nb + b], &out[r * (hd + nb) + hd + b]), what, ": engram scale ", s[r * nb + b],
                 " (row ", r, ") is not a power of two");
  }
  return out;
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
