// ds41/io/gguf_types.hpp — GGUF (v3) vocabulary: metadata value types, tensor types and their
// sizes, typed metadata values, half-precision and e8m0 conversion, positional reads.
//
// The format (ggml/docs/gguf.md): "GGUF", version, tensor count, metadata count, metadata
// key/values, tensor infos (name, dims innermost first, type, offset), padding to
// general.alignment, tensor data. Everything little-endian. docs/GGUF.md lists what ds41 writes.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "../core/error.hpp"
#include "../core/ggml_quants.hpp"
#include "../core/numeric.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as little-endian uint32
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

inline const char* value_type_name(ValueType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}
inline bool valid_value_type(uint32_t t) { return t <= 12; }
/// Bytes of a fixed-size scalar (0 for string and array).
inline size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    default: return 0;
  }
}

/// Tensor types: ggml's ids (core/ggml_quants.hpp's table: every id ggml knows is parsed, sized
/// and named from it) and two ds41 types (ids far above ggml's range) for DeepSeek's fp8 storage,
/// which ggml has no type for (docs/GGUF.md). The enumerators are the types ds41 reads; a file may
/// hold any other id of ggml's table, which is refused when a tensor of it is loaded.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,    // the block types (core/ggml_quants.hpp, ggml_quants_iq.hpp); matrices kept as stored
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,    // blocks of 32: f16 scale d, 32 int8; value = d * q
  kQ2_K = 10,   // the K-quants: 256 per block
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ2_XXS = 16,  // the IQ types: grids of lattice points (core/ggml_grids.hpp)
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,     // int8; as an engram table [rows, K + K/32], the bytes of DS41_FP8_ROW rows (row264)
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,  // ternary
  kTQ2_0 = 35,
  kMXFP4 = 39,  // blocks of 32: e8m0 exponent, 16 bytes; element j low nibble of qs[j], j+16 high
  kNVFP4 = 40,  // blocks of 64: 4 UE4M3 scales (one per 16), 32 bytes of e2m1 codes
  kQ1_0 = 41,   // ggml's 1- and 2-bit types with one f16 d
  kQ2_0 = 42,
  kDs41Fp8Row = 1000,      // per row: K e4m3 codes, then K/32 e8m0 scales (engram tables)
  kDs41Fp8Block32 = 1001,  // [N,K] e4m3 codes, then ceil(N/32)·ceil(K/32) float32 block scales
};

inline bool ds41_tensor_type(uint32_t t) {
  return t == static_cast<uint32_t>(TensorType::kDs41Fp8Row) || t == static_cast<uint32_t>(TensorType::kDs41Fp8Block32);
}
/// Whether a file may hold the id: ggml knows it (its size is in the table) or it is one of ds41's.
inline bool known_tensor_type(uint32_t t) { return ds41_tensor_type(t) || ggml_type_info(t) != nullptr; }

/// ggml's row of a type (nullptr for ds41's own types and unknown ids).
inline const GgmlTypeInfo* ggml_info(TensorType t) { return ggml_type_info(static_cast<uint32_t>(t)); }

/// The type's name as llama.cpp prints it in upper case ("Q2_K", "IQ2_XXS", "F32"), ds41's own
/// names for its types, "type N" for an id nobody knows.
inline std::string tensor_type_name(TensorType t) {
  if (t == TensorType::kDs41Fp8Row) return "DS41_FP8_ROW";
  if (t == TensorType::kDs41Fp8Block32) return "DS41_FP8_BLOCK32";
  const GgmlTypeInfo* info = ggml_info(t);
  if (!info) return "type " + std::to_string(static_cast<uint32_t>(t));
  std::string n = info->name;
  for (char& ch : n) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return n;
}

/// The type a name (either case: "q4_K", "Q4_K", "iq2_xxs") stands for; false when none.
inline bool tensor_type_from_name(const std::string& name, TensorType* out) {
  for (uint32_t id : {static_cast<uint32_t>(TensorType::kDs41Fp8Row), static_cast<uint32_t>(TensorType::kDs41Fp8Block32)})
    if (tensor_type_name(static_cast<TensorType>(id)) == name) return *out = static_cast<TensorType>(id), true;
  for (const GgmlTypeInfo& info : kGgmlTypes) {
    const std::string n = tensor_type_name(static_cast<TensorType>(info.type));
    if (n.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < n.size() && same; ++i)
      same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(n[i]);
    if (same) return *out = static_cast<TensorType>(info.type), true;
  }
  return false;
}

/// Whether ds41 loads tensors of the type: kept (F32, BF16, MXFP4, its fp8 types; matrices of F16
/// and of every other block type ggml_quants.hpp dequantizes, as WeightFormat::kGgmlBlocks), or
/// widened to f32 (I8, and the vectors of the block types and F16).
inline bool readable_tensor_type(TensorType t) {
  switch (t) {
    case TensorType::kF32: case TensorType::kF16: case TensorType::kBF16: case TensorType::kMXFP4:
    case TensorType::kDs41Fp8Row: case TensorType::kDs41Fp8Block32: return true;
    default: return ggml_info(t) && ggml_block_dequantizable(static_cast<GgmlType>(t));
  }
}

/// The names of the types `keep` accepts among ggml's table, in id order, joined by ", " (for
/// messages that list what ds41 reads).
template <class Keep>
inline std::string tensor_type_names(Keep&& keep) {
  std::string out;
  for (const GgmlTypeInfo& info : kGgmlTypes)
    if (keep(static_cast<TensorType>(info.type))) out += (out.empty() ? "" : ", ") + tensor_type_name(static_cast<TensorType>(info.type));
  return out;
}

/// Bytes of a tensor of type t with dims (innermost first); throws on shapes the type cannot hold.
inline uint64_t tensor_bytes(TensorType t, const std::vector<uint64_t>& dims, const std::string& what) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  const uint64_t inner = dims.empty() ? 1 : dims[0];
  auto need_block = [&](uint64_t b) {
    DS41_CHECK(inner % b == 0, what, ": type ", tensor_type_name(t), " needs the innermost dimension (", inner,
               ") to be a multiple of ", b);
  };
  if (t == TensorType::kDs41Fp8Row) {
    need_block(32);
    return n + n / 32;
  }
  if (t == TensorType::kDs41Fp8Block32) {
    DS41_CHECK(dims.size() == 2, what, ": type DS41_FP8_BLOCK32 needs a matrix, got ", dims.size(), " dims");
    const uint64_t kb = (dims[0] + 31) / 32, nb = (dims[1] + 31) / 32;
    return n + 4 * kb * nb;
  }
  const GgmlTypeInfo* info = ggml_info(t);
  DS41_CHECK(info, what, ": unknown tensor type ", static_cast<uint32_t>(t));
  need_block(static_cast<uint64_t>(info->block_elems));
  return n / static_cast<uint64_t>(info->block_elems) * static_cast<uint64_t>(info->block_bytes);
}

/// One metadata value. Integers keep their 64-bit pattern (never pass through a double).
struct Value {
  ValueType type = ValueType::kU8;
  uint64_t bits = 0;  // unsigned/signed integers (two's complement), bool; float/double bit patterns
  std::string str;
  ValueType elem = ValueType::kU8;  // arrays
  std::vector<Value> arr;

  static Value u32(uint32_t v) { return scalar(ValueType::kU32, v); }
  static Value i32(int32_t v) { return scalar(ValueType::kI32, static_cast<uint64_t>(static_cast<int64_t>(v))); }
  static Value u64(uint64_t v) { return scalar(ValueType::kU64, v); }
  static Value i64(int64_t v) { return scalar(ValueType::kI64, static_cast<uint64_t>(v)); }
  static Value boolean(bool v) { return scalar(ValueType::kBool, v ? 1 : 0); }
  static Value f32(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return scalar(ValueType::kF32, b);
  }
  static Value f64(double v) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return scalar(ValueType::kF64, b);
  }
  static Value string(std::string s) {
    Value v;
    v.type = ValueType::kString;
    v.str = std::move(s);
    return v;
  }
  static Value array(ValueType elem, std::vector<Value> items) {
    Value v;
    v.type = ValueType::kArray;
    v.elem = elem;
    v.arr = std::move(items);
    return v;
  }
  template <class T>
  static Value int_array(ValueType elem, const std::vector<T>& xs) {
    std::vector<Value> items;
    items.reserve(xs.size());
    for (T x : xs) items.push_back(scalar(elem, static_cast<uint64_t>(static_cast<int64_t>(x))));
    return array(elem, std::move(items));
  }
  static Value scalar(ValueType t, uint64_t bits) {
    Value v;
    v.type = t;
    v.bits = bits;
    return v;
  }

  bool is_int() const {
    switch (type) {
      case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
      case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64: return true;
      default: return false;
    }
  }
  bool is_signed() const {
    return type == ValueType::kI8 || type == ValueType::kI16 || type == ValueType::kI32 || type == ValueType::kI64;
  }
  /// Signed value of an integer (sign-extended by its width); u64 above INT64_MAX is refused by callers.
  int64_t as_i64() const {
    switch (type) {
      case ValueType::kI8: return static_cast<int8_t>(bits);
      case ValueType::kI16: return static_cast<int16_t>(bits);
      case ValueType::kI32: return static_cast<int32_t>(bits);
      default: return static_cast<int64_t>(bits);
    }
  }
  double as_f64() const {
    if (type == ValueType::kF32) {
      float f;
      uint32_t b = static_cast<uint32_t>(bits);
      std::memcpy(&f, &b, 4);
      return f;
    }
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
};

/// IEEE half → float (exact).
using ds41::f16_to_f32;  // core/numeric.hpp (device code and ggml_quants.hpp use it too)
/// float → IEEE half, round to nearest even (values of the writer's tests; overflow saturates to inf).
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (a != a) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a < 6.103515625e-05f) {  // subnormal half: multiples of 2^-24
    float q = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  uint32_t e = ((f32_bits(a) >> 23) & 0xFF) - 112, m = f32_bits(a) & 0x7FFFFF;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rest = m & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// e8m0 block scales: e8m0_to_f32 / f32_to_e8m0 (core/numeric.hpp), shared with the host's fp4 panels.

/// A read-only file opened for positional reads (pread is safe from several threads at once).
class PosixFile {
 public:
  PosixFile() = default;
  explicit PosixFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DS41_CHECK(fd_ >= 0, "gguf ", path, ": cannot open (", std::strerror(errno), ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      ::close(fd_);
      fail("gguf ", path, ": cannot stat (", std::strerror(errno), ")");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  PosixFile(PosixFile&& o) noexcept { *this = std::move(o); }
  PosixFile& operator=(PosixFile&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = o.fd_;
      size_ = o.size_;
      path_ = std::move(o.path_);
      o.fd_ = -1;
    }
    return *this;
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  ~PosixFile() { close(); }

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Exactly n bytes at `offset`; throws naming the file when they are not there.
  void read_at(void* dst, uint64_t n, uint64_t offset, const char* what) const {
    DS41_CHECK(offset <= size_ && n <= size_ - offset, "gguf ", path_, ": ", what, " [", offset, ", ", offset + n,
               ") lies past the end of the file (", size_, " bytes)");
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      DS41_CHECK(r > 0, "gguf ", path_, ": read of ", what, " at ", offset, " failed (",
                 r < 0 ? std::strerror(errno) : "unexpected end of file", ")");
      p += r;
      n -= static_cast<uint64_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

 private:
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
