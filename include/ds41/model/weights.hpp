// ds41/model/weights.hpp — host-side tensors as they come from a file or a filler, and their
// backend-resident forms (Matrix<B>, vectors).
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "../core/error.hpp"
#include "../core/linear_math.hpp"
#include "../backend/concept.hpp"
#include "config.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

class ExpertSource;  // expert_source.hpp: where a model's routed experts lie in its files
class RowSource;     // row_source.hpp: where an engram table's rows lie in its files

/// One parameter on the host: a shape, a storage format and its payload. Vectors and small
/// parameters are read through to_f32().
struct HostTensor {
  std::vector<long> shape;
  WeightFormat format = WeightFormat::kF32;
  std::vector<uint8_t> payload;  // format-specific bytes
  std::vector<float> scales;     // fp8/fp4 block scales (and engram row scales)
  GgmlType ggml_type = GgmlType::kF32;  // kGgmlBlocks: the blocks' type (payload: the rows' blocks)

  long numel() const {
    long n = 1;
    for (long d : shape) n *= d;
    return n;
  }
  static HostTensor from_f32(std::vector<long> shape, const std::vector<float>& v) {
    HostTensor t;
    t.shape = std::move(shape);
    t.format = WeightFormat::kF32;
    t.payload.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(t.payload.data(), v.data(), v.size() * 4);
    return t;
  }
  /// bf16 storage of values that are already bf16 numbers (no rounding happens here beyond RNE).
  static HostTensor from_bf16_values(std::vector<long> shape, const std::vector<float>& v) {
    HostTensor t;
    t.shape = std::move(shape);
    t.format = WeightFormat::kBF16;
    t.payload.resize(v.size() * 2);
    auto* p = reinterpret_cast<uint16_t*>(t.payload.data());
    for (size_t i = 0; i < v.size(); ++i) p[i] = bf16_bits(v[i]);
    return t;
  }
  /// A [rows, cols] matrix of a GGUF file's blocks of `type` (a ggml_linear_type), kept as stored:
  /// `bytes` holds rows · ggml_row_bytes(type, cols).
  static HostTensor from_ggml_blocks(std::vector<long> shape, GgmlType type, std::vector<uint8_t> bytes) {
    DS41_CHECK(shape.size() == 2 && ggml_linear_type(type) && shape[1] % ggml_block_elems(type) == 0 &&
                   bytes.size() == static_cast<size_t>(shape[0] * ggml_row_bytes(type, static_cast<int>(shape[1]))),
               "ggml blocks: ", bytes.size(), " bytes of ", ggml_type_info(type).name, " do not make a matrix of shape ",
               shape_str({shape.begin(), shape.end()}));
    HostTensor t;
    t.shape = std::move(shape);
    t.format = WeightFormat::kGgmlBlocks;
    t.ggml_type = type;
    t.payload = std::move(bytes);
    return t;
  }
  /// This tensor with kGgmlBlocks widened to float32 values (the same values); others as they are.
  /// For the readers of a table's rows (embeddings), which take bf16 or f32.
  HostTensor widened() && {
    if (format == WeightFormat::kGgmlBlocks) return from_f32(shape, to_f32());
    return std::move(*this);
  }
  /// The values, each weight times its block scale (a matrix row by row through its format's
  /// FormatTraits; vectors and tables in f32/bf16 of any rank).
  std::vector<float> to_f32() const {
    std::vector<float> out(numel());
    if (out.empty()) return out;
    DS41_CHECK(shape.size() == 2 || !format_block_scaled(format), "tensor of format ", format_name(format),
               " with shape ", shape_str({shape.begin(), shape.end()}), " cannot be read as f32");
    const long cols = shape.empty() ? 1 : shape.back(), rows = static_cast<long>(out.size()) / cols;
    MatrixView v = view();
    v.rows = static_cast<int>(rows), v.cols = static_cast<int>(cols);
    dispatch_format(format, [&](auto tag) {
      using Tr = TraitsOf<decltype(tag)>;
      for (long n = 0; n < rows; ++n)
        Tr::values(v.row_data(static_cast<int>(n)), Tr::kBlockScaled ? v.scale_row(static_cast<int>(n)) : nullptr,
                   static_cast<int>(cols), ggml_type, out.data() + n * cols);
    });
    return out;
  }
  MatrixView view() const {
    MatrixView v;
    v.format = format;
    v.rows = static_cast<int>(shape.size() == 2 ? shape[0] : 1);
    v.cols = static_cast<int>(shape.empty() ? 1 : shape.back());
    v.data = payload.data();
    v.scales = scales.empty() ? nullptr : scales.data();
    v.ggml_type = ggml_type;
    return v;
  }
};

/// Where a model's parameters come from, by their reference (state_dict) names: an in-memory
/// WeightSet (goldens, tests) or a file-backed source (io/: GGUF shards, a safetensors
/// checkpoint). Components ask for each tensor once, with the shape they expect.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  /// The tensor `name`, which must have exactly `shape`; throws ds41::Error naming the tensor
  /// when it is missing or shaped otherwise.
  virtual HostTensor load(const std::string& name, const std::vector<long>& shape) const = 0;
  /// Where the routed experts lie in this source's files, for ExpertCache to stream them
  /// (StreamedExperts); a file format implements it in io/ (GgufWeights, SafetensorsWeights), so
  /// model/ never names a format. nullptr (the default): this source cannot stream its experts
  /// (an in-memory WeightSet), and ExpertCache says so.
  virtual std::shared_ptr<const ExpertSource> expert_source() const { return nullptr; }
  /// Where the rows of the engram table `prefix`embed.weight ([rows, head_dim] e4m3 codes with
  /// e8m0 scales, or a GGUF table's block-type values) lie, for RowReaderTable to read them one by one; nullptr (the default): this
  /// source cannot, and RowReaderTable says so.
  virtual std::shared_ptr<const RowSource> row_source(const std::string& prefix, long rows, int head_dim) const {
    (void)prefix, (void)rows, (void)head_dim;
    return nullptr;
  }

 protected:
  static void check_shape(const std::string& name, const std::vector<long>& have, const std::vector<long>& want) {
    DS41_CHECK(have == want, "weights: tensor '", name, "' has shape ", shape_str({have.begin(), have.end()}),
               ", expected ", shape_str({want.begin(), want.end()}));
  }
};

/// DSpark's stages a model of `c` on `w` builds: n_mtp_layers where the configuration has a draft
/// head and the weights carry it (mtp.0.main_proj), else 0 (the backbone alone). Model decides by
/// it, and so do the formats' expert sources (io/), which map the stages' routed experts as layers
/// n_layers .. n_layers + S - 1 for a model that streams them.
inline int dspark_stages(const ModelConfig& c, const WeightSource& w) {
  return c.has_dspark() && w.has("mtp.0.main_proj.weight") ? c.n_mtp_layers : 0;
}

/// Every parameter held in memory.
class WeightSet : public WeightSource {
 public:
  void put(const std::string& name, HostTensor t) { map_[name] = std::move(t); }
  bool has(const std::string& name) const override { return map_.count(name) != 0; }
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override { return at(name, shape); }
  /// The tensor `name` by reference, which must have exactly `shape`.
  const HostTensor& at(const std::string& name, const std::vector<long>& shape) const {
    auto it = map_.find(name);
    DS41_CHECK(it != map_.end(), "weights: missing tensor '", name, "' (expected shape ",
               shape_str({shape.begin(), shape.end()}), ")");
    check_shape(name, it->second.shape, shape);
    return it->second;
  }
  const std::map<std::string, HostTensor>& all() const { return map_; }
  size_t size() const { return map_.size(); }

 private:
  std::map<std::string, HostTensor> map_;
};

/// What a Matrix is read by: kLinear through B::linear / MatrixView (dot, at, row_slice), so the
/// backend may store it in its own layout; kTable row by row through `data` (the embedding), so it
/// stays row-major.
enum class MatrixUse { kLinear, kTable };

/// A weight matrix resident in backend B's memory.
template <class B>
struct Matrix {
  typename B::template Buffer<uint8_t> payload;
  typename B::template Buffer<float> scales;
  MatrixView v;

  Matrix() = default;
  explicit Matrix(const HostTensor& t, MatrixUse use = MatrixUse::kLinear) { assign(t, use); }

  /// Replaces the contents with `t`, reusing the buffers when their sizes fit.
  void assign(const HostTensor& t, MatrixUse use = MatrixUse::kLinear) {
    DS41_CHECK(t.shape.size() == 2, "matrix expected, got shape ", shape_str({t.shape.begin(), t.shape.end()}));
    if constexpr (PackedWeightUpload<B>)
      if (use == MatrixUse::kLinear && B::upload_linear_weights(t.view(), payload, scales, v)) return;
    if (payload.size() != t.payload.size()) payload = B::template alloc<uint8_t>(t.payload.size());
    B::upload(payload.data(), t.payload.data(), t.payload.size());
    if (!t.scales.empty()) {
      if (scales.size() != t.scales.size()) scales = B::template alloc<float>(t.scales.size());
      B::upload(scales.data(), t.scales.data(), t.scales.size());
    }
    v = MatrixView{};
    v.format = t.format;
    v.rows = static_cast<int>(t.shape[0]);
    v.cols = static_cast<int>(t.shape[1]);
    v.data = payload.data();
    v.scales = t.scales.empty() ? nullptr : scales.data();
    v.ggml_type = t.ggml_type;
  }
  const MatrixView& view() const { return v; }
  int rows() const { return v.rows; }
  int cols() const { return v.cols; }
};

/// A float32 vector resident in backend B's memory.
template <class B>
typename B::template Buffer<float> upload_f32(const std::vector<float>& h) {
  auto buf = B::template alloc<float>(h.size());
  B::upload(buf.data(), h.data(), h.size());
  return buf;
}

template <class B>
typename B::template Buffer<float> upload_vector(const WeightSource& w, const std::string& name, long n) {
  return upload_f32<B>(w.load(name, {n}).to_f32());
}

/// Rows of a table (an embedding) for ids (backend memory): out[t, :] = table[ids[t], :].
template <class B>
void table_rows(const MatrixView& tv, const int32_t* ids, long T, int dim, float* out) {
  DS41_CHECK(tv.format == WeightFormat::kBF16 || tv.format == WeightFormat::kF32, "embedding table has format ",
             format_name(tv.format), ", expected bf16 or f32");
  B::for_each(T * dim, [=] DS41_LAMBDA(long e) {
    long t = e / dim, d = e % dim;
    long off = static_cast<long>(ids[t]) * dim + d;
    out[e] = tv.format == WeightFormat::kBF16 ? bf16_to_f32(static_cast<const uint16_t*>(tv.data)[off])
                                              : static_cast<const float*>(tv.data)[off];
  });
}

template <class B>
Matrix<B> load_matrix(const WeightSource& w, const std::string& name, long rows, long cols) {
  return Matrix<B>(w.load(name, {rows, cols}));
}

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
