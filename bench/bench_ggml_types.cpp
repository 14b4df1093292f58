// bench/bench_ggml_types.cpp — issue 39: ds41's Linear for each GGUF type a DeepSeek-V4.1 GGUF
// holds (Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, F16, MXFP4) at five V4.1 shapes, and for the
// other types ggml stores weights in (Q1_0 .. Q5_1, the other IQ types, TQ1_0, TQ2_0, NVFP4) at two, beside it,
// in the same run and on the same bytes, ggml's own CPU mul_mat for that type and shape where
// ggml is installed (find_package(ggml) at configure time: -DCMAKE_PREFIX_PATH=<ggml install>;
// README, "Performance").
//
//   ./build/bench/bench_kernels --benchmark_filter='Ggml|Gguf|BM_StreamRead/'
//
// Each case runs three ways, next to each other (the names pair them):
//   BM_GgufLinear<kQ4_K>/rows:N/cols:K/T:t          ds41: HostBackend::linear, y f32
//   BM_GgmlMulMat<kQ4_K>/rows:N/cols:K/T:t          ggml as llama.cpp runs it on the CPU
//   BM_GgmlMulMatNoRepack<kQ4_K>/rows:N/cols:K/T:t  the same with the weight in a plain CPU buffer
//                                                   (llama.cpp --no-repack); only where the two differ
//
// The weights: random values (sd 0.02) encoded once per (type, shape) by ds41's encoder
// (gguf::encode_values: ds41's simple quantizers, not llama-quantize's; any valid blocks time the
// same), and those bytes are what both sides read; the IQ grid types but IQ2_XXS, whose encoder
// searches its grid for minutes at these sizes, are random bytes with finite scales instead. Both keep enough copies of them (>= 256 MiB
// together, DS41_BENCH_COLD_MIB) to take one per iteration, so each iteration reads its weights from memory, as a
// decode step does. bytes_per_second is the GGUF bytes of one copy (what a model file in that type
// holds) per iteration on every line, so the two sides of a pair compare as their times do, and
// each side against BM_StreamRead (scripts/stream_fractions.py). FLOP/s counts 2 per weight and
// input row.
//
// ds41's side is the weight as ds41 keeps it: where the library has WeightFormat::kGgmlBlocks
// (DS41_HAVE_GGML_BLOCKS, core/linear_math.hpp), the blocks as stored; before it, what the GGUF
// loader makes of them (gguf::decode_tensor: the f32 of the dequantized values; its `read/s`
// counter is the f32 bytes actually read). MXFP4 is ds41's fp4 Linear either way (decode_tensor
// loads MXFP4 as kFp4Block32).
//
// ggml's side (DS41_BENCH_GGML): the CPU backend as llama.cpp sets it up for a weight on the CPU:
// the weight in the first buffer type whose supports_op accepts the mul_mat (the CPU backend's
// extra buffer types first: CPU_REPACK, which re-lays Q4_K and MXFP4 out for its gemv/gemm on
// AVX2, Q2_K on AVX-512; else the plain CPU buffer, whose path is the type's vec_dot), an f32
// activation tensor [K, T], ggml_mul_mat, one graph per weight copy, ggml_backend_graph_compute on
// a persistent threadpool of ds41's host thread count (HostThreadPool::global(), DS41_HOST_THREADS;
// llama.cpp's own build keeps OpenMP's persistent team, which this stands in for; it also builds
// ggml with GGML_LLAMAFILE=ON, whose sgemm takes Q8_0 and F16 at T > 1: build the ggml pointed at
// likewise to time what llama.cpp runs). The activations' quantization to the type's
// vec_dot_type (Q8_0 / Q8_K; F16 for F16) happens inside mul_mat and is timed. The label names
// ggml's commit (ggml_commit()), the type and the buffer type; rel_err is |y_ggml - y_ref| /
// |y_ref| (2-norms) against ds41's f32 Linear over the dequantized values, from the same run's
// ds41 line (or computed when that line was filtered out): ggml rounds the activations to 8 bits
// (F16: to f16), so expect ~1e-3..1e-2, not 0.
//
// On a shared machine ggml's lines suffer first when another process takes a core: its threads
// meet at spinning barriers, and a descheduled one holds the others (a 2-vCPU VM measured ~8 ms
// a call, whatever the shape, against 0.2-3 ms idle). Trust the lines whose real time is close to
// their CPU time (the main thread computes throughout on both sides).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>
#include "bench_common.hpp"
#include "ds41/io/gguf_model.hpp"
#if DS41_BENCH_GGML
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>
#endif

using namespace ds41;
using namespace ds41::bench;

namespace {

using gguf::TensorType;

struct GgufType {
  TensorType type;
  const char* tag;    // the benchmark names' template argument
  bool published;     // in a published V4.1 file (GGUF-PUBLISHED.md's census): every shape; else two
};
constexpr GgufType kGgufTypes[] = {
    {TensorType::kQ8_0, "kQ8_0", true},       {TensorType::kQ2_K, "kQ2_K", true},     {TensorType::kQ3_K, "kQ3_K", true},
    {TensorType::kQ4_K, "kQ4_K", true},       {TensorType::kQ5_K, "kQ5_K", true},     {TensorType::kQ6_K, "kQ6_K", true},
    {TensorType::kIQ2_XXS, "kIQ2_XXS", true}, {TensorType::kF16, "kF16", true},       {TensorType::kMXFP4, "kMXFP4", true},
    {TensorType::kQ4_0, "kQ4_0", false},      {TensorType::kQ4_1, "kQ4_1", false},    {TensorType::kQ5_0, "kQ5_0", false},
    {TensorType::kQ5_1, "kQ5_1", false},      {TensorType::kIQ4_NL, "kIQ4_NL", false}, {TensorType::kIQ4_XS, "kIQ4_XS", false},
    {TensorType::kIQ2_XS, "kIQ2_XS", false},  {TensorType::kIQ2_S, "kIQ2_S", false},  {TensorType::kIQ3_XXS, "kIQ3_XXS", false},
    {TensorType::kIQ3_S, "kIQ3_S", false},    {TensorType::kIQ1_S, "kIQ1_S", false},  {TensorType::kIQ1_M, "kIQ1_M", false},
    {TensorType::kTQ1_0, "kTQ1_0", false},    {TensorType::kTQ2_0, "kTQ2_0", false},  {TensorType::kNVFP4, "kNVFP4", false},
    {TensorType::kQ1_0, "kQ1_0", false},      {TensorType::kQ2_0, "kQ2_0", false},
};
// wq_a [1280, 5120], wq_b [64·512, 1280], wo_b [5120, 8·1024], a routed expert's w1 [2304, 5120]
// and w2 [5120, 2304]; rows N, cols K
constexpr long kGgufShapes[][2] = {{1280, 5120}, {32768, 1280}, {5120, 8192}, {2304, 5120}, {5120, 2304}};
// the types no published file has: wq_a and an expert's w1
constexpr long kOtherTypeShapes[][2] = {{1280, 5120}, {2304, 5120}};
// T: the decode GEMV, and a small batch / prefill chunk
constexpr long kGgufInputRows[] = {1, 16};

std::string type_name(TensorType t) { return ggml_type_info(static_cast<GgmlType>(t)).name; }

/// n weights of sd ~0.02 (a sum of four uniforms: no tails, fast to make by the hundred million).
std::vector<float> random_weights(long n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  HostThreadPool::global().run(n, 1 << 16, [&](long b, long e) {
    for (long i = b; i < e; ++i) {
      uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1);  // splitmix64
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const float s = static_cast<float>((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
      v[i] = (s - 131070.0f) * (0.02f / 37837.0f);  // 4 uniforms on [0, 65535]: sd 65536·sqrt(1/3)
    }
  });
  return v;
}

/// The IQ types with grids but IQ2_XXS (whose encoded blocks the earlier runs timed).
bool grid_search_type(TensorType t) {
  switch (t) {
    case TensorType::kIQ2_XS: case TensorType::kIQ2_S: case TensorType::kIQ3_XXS: case TensorType::kIQ3_S:
    case TensorType::kIQ1_S: case TensorType::kIQ1_M: return true;
    default: return false;
  }
}
/// rows x cols of `type` as random bytes whose f16 scales are random finite values of the sizes
/// real blocks hold (2^-14 .. 2^-8); any bytes are a valid block of these types.
std::vector<uint8_t> random_blocks(TensorType type, long rows, long cols, uint64_t seed) {
  const GgmlType g = static_cast<GgmlType>(type);
  std::vector<uint8_t> b(static_cast<size_t>(rows * ggml_row_bytes(g, static_cast<int>(cols))));
  std::mt19937_64 rng(seed);
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  int off[2];
  ggml_scale_offsets(g, off);
  for (size_t blk = 0; blk < b.size(); blk += static_cast<size_t>(ggml_block_bytes(g))) {
    const auto scale = [&] { return static_cast<uint16_t>((1 + rng() % 6) << 10 | (rng() & 0x3FF)); };
    for (int i = 0; i < 2 && off[i] >= 0; ++i) {
      const uint16_t h = scale();
      b[blk + off[i]] = static_cast<uint8_t>(h), b[blk + off[i] + 1] = static_cast<uint8_t>(h >> 8);
    }
    if (g == GgmlType::kIQ1_M) set_iq1_m_d_bits(&b[blk], scale());
  }
  return b;
}

/// The GGUF bytes of a [rows, cols] weight of `type` (rows of whole blocks, row-major, as a file
/// stores them), encoded by gguf::encode_values. The last (type, shape) is kept: a case's ds41 and
/// ggml lines, and its T = 1 and T = 16 lines, run one after another and read the same bytes.
const std::vector<uint8_t>& gguf_weights(TensorType type, long rows, long cols) {
  static TensorType cached_type{};
  static long cached_rows = -1, cached_cols = -1;
  static std::vector<uint8_t> bytes;
  if (type == cached_type && rows == cached_rows && cols == cached_cols) return bytes;
  bytes.clear();
  bytes.shrink_to_fit();
  if (grid_search_type(type)) {  // random blocks (ds41's encoder searches these grids by brute force: minutes)
    bytes = random_blocks(type, rows, cols, 1000 * static_cast<uint64_t>(type) + rows + cols);
    cached_type = type, cached_rows = rows, cached_cols = cols;
    return bytes;
  }
  const std::vector<float> v = random_weights(rows * cols, 1000 * static_cast<uint64_t>(type) + rows + cols);
  // row blocks encoded on the pool (ds41's IQ2_XXS encoder searches its grid by brute force)
  const long block_rows = 64, nblocks = (rows + block_rows - 1) / block_rows;
  std::vector<std::vector<uint8_t>> parts(nblocks);
  HostThreadPool::global().run(nblocks, 1, [&](long b, long e) {
    for (long i = b; i < e; ++i) {
      const long r0 = i * block_rows, r1 = std::min(rows, r0 + block_rows);
      parts[i] = gguf::encode_values(std::vector<float>(v.begin() + r0 * cols, v.begin() + r1 * cols), type);
    }
  });
  for (auto& p : parts) bytes.insert(bytes.end(), p.begin(), p.end());
  DS41_CHECK(bytes.size() == gguf::tensor_bytes(type, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, "bench"),
             "bench: ", type_name(type), " encoded to ", bytes.size(), " bytes");
  cached_type = type, cached_rows = rows, cached_cols = cols;
  return bytes;
}

/// The weight as ds41's GGUF loader makes it today: F16 and the block types widened to their f32
/// values, MXFP4 as kFp4Block32 (gguf::decode_tensor).
HostTensor loaded_weight(TensorType type, long rows, long cols, const std::vector<uint8_t>& bytes) {
  return gguf::decode_tensor(type, {rows, cols}, bytes.data(), bytes.size(), gguf::Part::kWhole, "bench weight");
}

/// The weight as ds41's Linear takes it in this build: the blocks as stored where the library has
/// kGgmlBlocks (MXFP4: kFp4Block32, ds41's fp4 Linear, which kGgmlBlocks does not cover), else the
/// loader's f32.
HostTensor ds41_weight(TensorType type, long rows, long cols, const std::vector<uint8_t>& bytes) {
#if defined(DS41_HAVE_GGML_BLOCKS)
  if (type != TensorType::kMXFP4) return HostTensor::from_ggml_blocks({rows, cols}, static_cast<GgmlType>(type), bytes);
#endif
  return loaded_weight(type, rows, cols, bytes);
}

/// Whether y from a weight of this format is ds41's f32 Linear over the dequantized values (the
/// reference for ggml's rel_err): f32, and kGgmlBlocks (bit-identical to it by construction).
bool f32_equivalent(WeightFormat f) {
#if defined(DS41_HAVE_GGML_BLOCKS)
  if (f == WeightFormat::kGgmlBlocks) return true;
#endif
  return f == WeightFormat::kF32;
}

std::string ds41_label(TensorType type, const HostTensor& w) {
  if (w.format == WeightFormat::kFp4Block32) return "ds41 fp4 Linear (MXFP4 loaded as kFp4Block32)";
  if (w.format == WeightFormat::kF32) return "ds41 f32 of the dequantized values (" + type_name(type) + ")";
  return std::string("ds41 ") + format_name(w.format) + " " + type_name(type);
}

/// How many copies of a weight of `bytes` bytes both sides keep: >= DS41_BENCH_COLD_MIB MiB together
/// (default 256), at most 4096. Why the knob: 256 MiB is 8x a 32 MiB L3, but some hosts have more
/// (a 480 MiB L3 here, session 37), where 256 MiB of copies can be read from L3 rather than
/// memory; DS41_BENCH_COLD_MIB=1024 makes every iteration read memory on those too.
size_t cold_copies(double bytes) {
  static const double mib = [] {
    const char* v = std::getenv("DS41_BENCH_COLD_MIB");
    const double m = v ? std::atof(v) : 256.0;
    return m > 0 ? m : 256.0;
  }();
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(mib * (1 << 20) / bytes)), 1, 4096);
}

/// Copies of one ds41 weight, >= DS41_BENCH_COLD_MIB MiB together (cold_copies), taken in turn
/// (bench_kernels' ColdMatrices).
struct ColdCopies {
  std::vector<std::unique_ptr<Matrix<HostBackend>>> copies;
  size_t next = 0;
  explicit ColdCopies(const HostTensor& w) {
    const double bytes = static_cast<double>(w.payload.size() + w.scales.size());  // fp4 panels keep e8m0 bytes
    const size_t n = cold_copies(bytes);
    while (copies.size() < n) copies.push_back(std::make_unique<Matrix<HostBackend>>(w));
  }
  MatrixView take() { return copies[next++ % copies.size()]->view(); }
};

/// ds41's f32 Linear over the dequantized values of the last case, y [T, rows]: the reference of
/// ggml's rel_err. Kept from the ds41 line when that weight was f32-equivalent, else computed.
struct Reference {
  TensorType type{};
  long rows = -1, cols = -1, T = -1;
  std::vector<float> y;
  bool is(TensorType t, long r, long c, long n) const { return t == type && r == rows && c == cols && n == T; }
};
Reference& last_reference() {
  static Reference ref;
  return ref;
}
[[maybe_unused]] const std::vector<float>& reference_y(TensorType type, long rows, long cols, long T, const std::vector<float>& x) {
  Reference& ref = last_reference();
  if (ref.is(type, rows, cols, T)) return ref.y;
  HostTensor w = loaded_weight(type, rows, cols, gguf_weights(type, rows, cols));
  if (w.format != WeightFormat::kF32) w = HostTensor::from_f32(w.shape, w.to_f32());
  Matrix<HostBackend> m(w);
  ref = Reference{type, rows, cols, T, std::vector<float>(static_cast<size_t>(T * rows))};
  HostBackend::linear(x.data(), T, cols, m.view(), ref.y.data(), rows, OutRound::kF32);
  return ref.y;
}

void gguf_linear(benchmark::State& st, TensorType type) {
  const long rows = st.range(0), cols = st.range(1), T = st.range(2);
  const std::vector<uint8_t>& bytes = gguf_weights(type, rows, cols);
  const double gguf_bytes = static_cast<double>(bytes.size());
  const HostTensor w = ds41_weight(type, rows, cols, bytes);
  ColdCopies m(w);
  std::vector<float> x = random_activations(T * cols, 2), y(static_cast<size_t>(T * rows));
  for (auto _ : st) {
    HostBackend::linear(x.data(), T, cols, m.take(), y.data(), rows, OutRound::kF32);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_stream_counters(st, gguf_bytes, 2.0 * T * rows * cols);
  if (w.format == WeightFormat::kF32)  // what the f32 Linear reads
    st.counters["read/s"] = benchmark::Counter(4.0 * rows * cols * st.iterations(), benchmark::Counter::kIsRate);
  st.counters["threads"] = HostThreadPool::global().threads();
  st.SetLabel(ds41_label(type, w));
  if (f32_equivalent(w.format)) last_reference() = Reference{type, rows, cols, T, std::move(y)};
}

[[maybe_unused]] double relative_error(const std::vector<float>& y, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    d += (static_cast<double>(y[i]) - ref[i]) * (static_cast<double>(y[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

#if DS41_BENCH_GGML
// ds41's GGUF type ids are ggml's
static_assert(static_cast<int>(TensorType::kQ8_0) == GGML_TYPE_Q8_0 && static_cast<int>(TensorType::kQ2_K) == GGML_TYPE_Q2_K &&
              static_cast<int>(TensorType::kQ3_K) == GGML_TYPE_Q3_K && static_cast<int>(TensorType::kQ4_K) == GGML_TYPE_Q4_K &&
              static_cast<int>(TensorType::kQ5_K) == GGML_TYPE_Q5_K && static_cast<int>(TensorType::kQ6_K) == GGML_TYPE_Q6_K &&
              static_cast<int>(TensorType::kIQ2_XXS) == GGML_TYPE_IQ2_XXS && static_cast<int>(TensorType::kF16) == GGML_TYPE_F16 &&
              static_cast<int>(TensorType::kMXFP4) == GGML_TYPE_MXFP4 && static_cast<int>(TensorType::kQ4_0) == GGML_TYPE_Q4_0 &&
              static_cast<int>(TensorType::kQ4_1) == GGML_TYPE_Q4_1 && static_cast<int>(TensorType::kQ5_0) == GGML_TYPE_Q5_0 &&
              static_cast<int>(TensorType::kQ5_1) == GGML_TYPE_Q5_1 && static_cast<int>(TensorType::kIQ4_NL) == GGML_TYPE_IQ4_NL &&
              static_cast<int>(TensorType::kIQ4_XS) == GGML_TYPE_IQ4_XS && static_cast<int>(TensorType::kIQ2_XS) == GGML_TYPE_IQ2_XS &&
              static_cast<int>(TensorType::kIQ2_S) == GGML_TYPE_IQ2_S && static_cast<int>(TensorType::kIQ3_XXS) == GGML_TYPE_IQ3_XXS &&
              static_cast<int>(TensorType::kIQ3_S) == GGML_TYPE_IQ3_S && static_cast<int>(TensorType::kIQ1_S) == GGML_TYPE_IQ1_S &&
              static_cast<int>(TensorType::kIQ1_M) == GGML_TYPE_IQ1_M && static_cast<int>(TensorType::kTQ1_0) == GGML_TYPE_TQ1_0 &&
              static_cast<int>(TensorType::kTQ2_0) == GGML_TYPE_TQ2_0 && static_cast<int>(TensorType::kNVFP4) == GGML_TYPE_NVFP4 &&
              static_cast<int>(TensorType::kQ1_0) == GGML_TYPE_Q1_0 && static_cast<int>(TensorType::kQ2_0) == GGML_TYPE_Q2_0);

/// The CPU backend and its threadpool, made once (and left to the process's end: ggml's own statics
/// may be gone by the time ours are destroyed).
struct GgmlCpu {
  ggml_backend_t backend = nullptr;
  ggml_threadpool* pool = nullptr;
  int threads = 0;
  static GgmlCpu& get() {
    static GgmlCpu cpu = [] {
      GgmlCpu c;
      c.threads = HostThreadPool::global().threads();
      c.backend = ggml_backend_cpu_init();
      DS41_CHECK(c.backend, "ggml_backend_cpu_init failed");
      ggml_threadpool_params params = ggml_threadpool_params_default(c.threads);
      c.pool = ggml_threadpool_new(&params);
      DS41_CHECK(c.pool, "ggml_threadpool_new failed");
      ggml_backend_cpu_set_n_threads(c.backend, c.threads);
      ggml_backend_cpu_set_threadpool(c.backend, c.pool);
      ggml_threadpool_pause(c.pool);  // resumed by each graph's kickoff
      return c;
    }();
    return cpu;
  }
};

/// ggml's log with its debug and info lines dropped (CPU_REPACK reports every tensor it repacks).
void quiet_ggml_log() {
  ggml_log_set(
      [](ggml_log_level level, const char* text, void*) {
        if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
      },
      nullptr);
}

ggml_backend_dev_t cpu_device() { return ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0); }

/// Whether the CPU device runs mul_mat(w, b) with w of `type` [cols, rows] held in `buft`: llama.cpp's
/// weight_buft_supported (a dummy buffer of the type, an f32 input of 512 columns).
bool buft_supports(ggml_backend_buffer_type_t buft, TensorType type, long rows, long cols) {
  ggml_init_params params{3 * ggml_tensor_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* w = ggml_new_tensor_2d(ctx, static_cast<ggml_type>(type), cols, rows);
  ggml_tensor* b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, 512);
  ggml_tensor* op = ggml_mul_mat(ctx, w, b);
  w->buffer = ggml_backend_buft_alloc_buffer(buft, 0);
  const bool ok = ggml_backend_dev_supports_op(cpu_device(), op);
  ggml_backend_buffer_free(w->buffer);
  w->buffer = nullptr;
  ggml_free(ctx);
  return ok;
}

/// The buffer type llama.cpp puts a CPU weight in: the first of the CPU device's extra buffer
/// types (CPU_REPACK, ...) that supports the mul_mat, else the plain CPU buffer.
ggml_backend_buffer_type_t llama_cpp_weight_buft(TensorType type, long rows, long cols) {
  ggml_backend_dev_t dev = cpu_device();
  auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(ggml_backend_cpu_reg(), "ggml_backend_dev_get_extra_bufts"));
  if (extra)
    for (ggml_backend_buffer_type_t* b = extra(dev); b && *b; ++b)
      if (buft_supports(*b, type, rows, cols)) return *b;
  return ggml_backend_cpu_buffer_type();
}

/// One case on ggml: `copies` weight tensors holding the same bytes (cold_copies), one
/// graph y_i = mul_mat(w_i, x) for each; x and every y_i in one CPU buffer (the y_i share their bytes).
struct GgmlMulMat {
  ggml_context* ctx_w = nullptr;
  ggml_context* ctx_g = nullptr;
  ggml_backend_buffer_t buf_w = nullptr, buf_io = nullptr;
  ggml_tensor* x = nullptr;
  std::vector<ggml_tensor*> y;
  std::vector<ggml_cgraph*> graphs;
  size_t next = 0;

  GgmlMulMat(TensorType type, long rows, long cols, long T, const std::vector<uint8_t>& bytes,
             ggml_backend_buffer_type_t buft) {
    const size_t n = cold_copies(static_cast<double>(bytes.size()));
    ctx_w = ggml_init({n * ggml_tensor_overhead(), nullptr, true});
    std::vector<ggml_tensor*> w(n);
    for (auto& t : w) t = ggml_new_tensor_2d(ctx_w, static_cast<ggml_type>(type), cols, rows);
    DS41_CHECK(ggml_nbytes(w[0]) == bytes.size(), "ggml sizes a ", type_name(type), " [", rows, ", ", cols, "] as ",
               ggml_nbytes(w[0]), " bytes, ds41 as ", bytes.size());
    buf_w = ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, buft);
    DS41_CHECK(buf_w, "ggml: could not allocate the weights in ", ggml_backend_buft_name(buft));
    ggml_backend_buffer_set_usage(buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    for (auto* t : w) ggml_backend_tensor_set(t, bytes.data(), 0, bytes.size());  // CPU_REPACK repacks here

    ctx_g = ggml_init({(n + 1) * ggml_tensor_overhead() + n * ggml_graph_overhead_custom(4, false), nullptr, true});
    x = ggml_new_tensor_2d(ctx_g, GGML_TYPE_F32, cols, T);
    for (auto* t : w) {
      y.push_back(ggml_mul_mat(ctx_g, t, x));  // [rows, T]
      graphs.push_back(ggml_new_graph_custom(ctx_g, 4, false));
      ggml_build_forward_expand(graphs.back(), y.back());
    }
    ggml_backend_buffer_type_t cpu = ggml_backend_cpu_buffer_type();
    const size_t align = ggml_backend_buft_get_alignment(cpu);
    const size_t x_bytes = (ggml_nbytes(x) + align - 1) / align * align;
    buf_io = ggml_backend_buft_alloc_buffer(cpu, x_bytes + ggml_nbytes(y[0]) + align);
    auto* base = static_cast<char*>(ggml_backend_buffer_get_base(buf_io));
    ggml_backend_tensor_alloc(buf_io, x, base);
    for (auto* t : y) ggml_backend_tensor_alloc(buf_io, t, base + x_bytes);
  }
  ~GgmlMulMat() {
    ggml_backend_buffer_free(buf_io);
    ggml_backend_buffer_free(buf_w);
    ggml_free(ctx_g);
    ggml_free(ctx_w);
  }
  GgmlMulMat(const GgmlMulMat&) = delete;
  GgmlMulMat& operator=(const GgmlMulMat&) = delete;

  void set_x(const std::vector<float>& v) { ggml_backend_tensor_set(x, v.data(), 0, v.size() * sizeof(float)); }
  ggml_status run(size_t i) { return ggml_backend_graph_compute(GgmlCpu::get().backend, graphs[i % graphs.size()]); }
  std::vector<float> y0() const {
    std::vector<float> out(ggml_nelements(y[0]));
    ggml_backend_tensor_get(y[0], out.data(), 0, out.size() * sizeof(float));
    return out;
  }
};

void ggml_mul_mat_bench(benchmark::State& st, TensorType type, bool repack) {
  const long rows = st.range(0), cols = st.range(1), T = st.range(2);
  GgmlCpu& cpu = GgmlCpu::get();
  const std::vector<uint8_t>& bytes = gguf_weights(type, rows, cols);
  ggml_backend_buffer_type_t buft = repack ? llama_cpp_weight_buft(type, rows, cols) : ggml_backend_cpu_buffer_type();
  if (!buft_supports(buft, type, rows, cols)) {
    st.SkipWithError("ggml's CPU backend does not run this mul_mat");
    return;
  }
  GgmlMulMat mm(type, rows, cols, T, bytes, buft);
  const std::vector<float> x = random_activations(T * cols, 2);
  mm.set_x(x);
  if (mm.run(0) != GGML_STATUS_SUCCESS) {
    st.SkipWithError("ggml_backend_graph_compute failed");
    return;
  }
  const double rel_err = relative_error(mm.y0(), reference_y(type, rows, cols, T, x));
  bool ok = true;
  for (auto _ : st) {
    ok &= mm.run(mm.next++) == GGML_STATUS_SUCCESS;
    benchmark::ClobberMemory();
  }
  ggml_threadpool_pause(cpu.pool);  // its workers sleep through the other benchmarks
  if (!ok) st.SkipWithError("ggml_backend_graph_compute failed");
  set_stream_counters(st, static_cast<double>(bytes.size()), 2.0 * T * rows * cols);
  st.counters["rel_err"] = rel_err;
  st.counters["threads"] = cpu.threads;
  st.SetLabel(std::string("ggml ") + ggml_commit() + " " + ggml_type_name(static_cast<ggml_type>(type)) + " " +
              ggml_backend_buft_name(buft));
}
#endif  // DS41_BENCH_GGML

benchmark::internal::Benchmark* shaped(benchmark::internal::Benchmark* b, long rows, long cols, long T) {
  return b->ArgNames({"rows", "cols", "T"})->Args({rows, cols, T})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

/// Registered case by case, so that a case's lines run (and print) next to each other.
bool register_gguf_benchmarks() {
#if !DS41_BENCH_GGML
  benchmark::RegisterBenchmark("BM_GgmlMulMat/not_built", [](benchmark::State& st) {
    for (auto _ : st) {
    }
    st.SkipWithError("ggml was not found when this build was configured: configure with "
                     "-DCMAKE_PREFIX_PATH=<ggml install> to time ggml beside ds41 (README, Performance)");
  })->Iterations(1);
#endif
#if DS41_BENCH_GGML
  quiet_ggml_log();
#endif
  for (const GgufType& g : kGgufTypes)
    for (const auto& shape : kGgufShapes)
      for (long T : kGgufInputRows) {
        if (!g.published && std::find_if(std::begin(kOtherTypeShapes), std::end(kOtherTypeShapes), [&](const auto& o) {
              return o[0] == shape[0] && o[1] == shape[1];
            }) == std::end(kOtherTypeShapes))
          continue;
        const TensorType type = g.type;
        const long rows = shape[0], cols = shape[1];
        const std::string tag = std::string("<") + g.tag + ">";
        shaped(benchmark::RegisterBenchmark(("BM_GgufLinear" + tag).c_str(),
                                            [type](benchmark::State& st) { gguf_linear(st, type); }),
               rows, cols, T);
#if DS41_BENCH_GGML
        shaped(benchmark::RegisterBenchmark(("BM_GgmlMulMat" + tag).c_str(),
                                            [type](benchmark::State& st) { ggml_mul_mat_bench(st, type, true); }),
               rows, cols, T);
        if (llama_cpp_weight_buft(type, rows, cols) != ggml_backend_cpu_buffer_type())
          shaped(benchmark::RegisterBenchmark(("BM_GgmlMulMatNoRepack" + tag).c_str(),
                                              [type](benchmark::State& st) { ggml_mul_mat_bench(st, type, false); }),
                 rows, cols, T);
#endif
      }
  return true;
}
[[maybe_unused]] const bool gguf_benchmarks_registered = register_gguf_benchmarks();

}  // namespace
