// Device microbenchmarks: the CudaBackend's Linear for each weight format at DeepSeek-V4.1-Flash
// decode shapes, side by side with the tiled kernel (fp8/fp4 decode) and the old
// one-thread-per-output kernel; the fast policy's Linear (CudaFastBackend, cuda/fast_linear.hpp)
// at the same shapes for T = 1..16; a device-to-device copy as the bandwidth reference (also
// measured once in-process, so Linear benchmarks report `of_copy`); and the tiny model's decode
// step and a V4.1-shaped one (bench_v41.hpp) in both policies, eager and as CUDA graphs. Timed with CUDA events (manual
// time) or wall time; counters give bytes/s to hold against the H200's ~4.8 TB/s. Without a
// device every benchmark reports "no CUDA device".
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include "ds41/backend/cuda.hpp"
#include "ds41/ds41.hpp"
#include "ds41/testing/golden.hpp"
#include "bench_v41.hpp"

using namespace ds41;

namespace {

struct EventTimer {
  cudaEvent_t a, b;
  EventTimer() {
    DS41_CUDA_CHECK(cudaEventCreate(&a));
    DS41_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~EventTimer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start() { DS41_CUDA_CHECK(cudaEventRecord(a, CudaBackend::stream())); }
  double stop_seconds() {
    DS41_CUDA_CHECK(cudaEventRecord(b, CudaBackend::stream()));
    DS41_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    DS41_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms * 1e-3;
  }
};

bool need_device(benchmark::State& st) {
  if (CudaBackend::device_available()) return true;
  st.SkipWithError("no CUDA device");
  return false;
}

void BM_DeviceCopyBandwidth(benchmark::State& st) {
  if (!need_device(st)) return;
  const size_t bytes = static_cast<size_t>(st.range(0)) << 20;
  auto src = CudaBackend::alloc<uint8_t>(bytes), dst = CudaBackend::alloc<uint8_t>(bytes);
  EventTimer t;
  for (auto _ : st) {
    t.start();
    CudaBackend::copy(dst.data(), src.data(), bytes);
    st.SetIterationTime(t.stop_seconds());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * bytes * 2);  // read + write
}
BENCHMARK(BM_DeviceCopyBandwidth)->Arg(2048)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// BM_DeviceCopyBandwidth's rate (bytes read + written per second), measured once per process
/// (ten 1 GiB copies after a warm-up): the denominator of every `of_copy` counter.
double device_copy_rate() {
  static const double rate = [] {
    const size_t bytes = size_t{1} << 30;
    auto src = CudaBackend::alloc<uint8_t>(bytes), dst = CudaBackend::alloc<uint8_t>(bytes);
    CudaBackend::copy(dst.data(), src.data(), bytes);
    EventTimer t;
    t.start();
    for (int i = 0; i < 10; ++i) CudaBackend::copy(dst.data(), src.data(), bytes);
    const double s = t.stop_seconds();
    return s > 0 ? 2.0 * static_cast<double>(bytes) * 10 / s : 0.0;
  }();
  return rate;
}

/// Counters of a benchmark that moved `bytes` per iteration in `seconds` (all iterations): GB/s,
/// and of_copy, that rate as a fraction of the device-to-device copy's (read + write).
void set_bandwidth_counters(benchmark::State& st, double bytes, double seconds) {
  const double rate = seconds > 0 ? bytes * static_cast<double>(st.iterations()) / seconds : 0.0;
  st.counters["GB/s"] = rate * 1e-9;
  const double copy = device_copy_rate();
  st.counters["of_copy"] = copy > 0 ? rate / copy : 0.0;
}

HostTensor random_matrix(WeightFormat f, int rows, int cols) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  HostTensor t;
  t.shape = {rows, cols};
  t.format = f;
  size_t n = static_cast<size_t>(rows) * cols;
  t.payload.resize(f == WeightFormat::kF32 ? n * 4 : f == WeightFormat::kBF16 ? n * 2 : f == WeightFormat::kFp8Block32 ? n : n / 2);
  for (auto& b : t.payload) b = static_cast<uint8_t>(byte(rng) & 0x77);
  if (f == WeightFormat::kFp8Block32) t.scales.assign(static_cast<size_t>((rows + 31) / 32) * ((cols + 31) / 32), 0.01f);
  if (f == WeightFormat::kFp4Block32) t.scales.assign(static_cast<size_t>(rows) * ((cols + 31) / 32), 0.01f);
  return t;
}

/// Weight bytes a Linear reads once (payload + scales).
int64_t weight_bytes(const HostTensor& w) { return static_cast<int64_t>(w.payload.size() + w.scales.size() * 4); }

/// A Linear benchmark case (args: rows, cols, T): random weights of format F on the device, and
/// device input/output rows.
template <WeightFormat F>
struct DeviceGemvCase {
  int rows, cols;
  long T;
  HostTensor w;
  Matrix<CudaBackend> m;
  CudaBackend::Buffer<float> x, y;
  explicit DeviceGemvCase(const benchmark::State& st)
      : rows(static_cast<int>(st.range(0))), cols(static_cast<int>(st.range(1))), T(st.range(2)),
        w(random_matrix(F, rows, cols)), m(w), x(CudaBackend::alloc<float>(T * cols)),
        y(CudaBackend::alloc<float>(T * rows)) {}
  void run_linear() { CudaBackend::linear(x.data(), T, cols, m.view(), y.data(), rows, OutRound::kBF16); }
  void run_fast_linear() { CudaFastBackend::linear(x.data(), T, cols, m.view(), y.data(), rows, OutRound::kBF16); }
  /// The tiled kernel with one input row per block, bypassing the decode kernel's dispatch.
  void run_tiled_r1() {
    cuda_detail::launch_linear_tiled_rows<F, 1>(x.data(), T, cols, m.view(), y.data(), rows, OutRound::kBF16, CudaBackend::stream());
  }
};

/// Launches per timed iteration: a decode GEMV runs for tens of microseconds, so one launch
/// between two events would also time the launch itself.
constexpr int kLaunchesPerTiming = 10;

/// Times kLaunchesPerTiming back-to-back calls of `run` per iteration with CUDA events, sets the
/// per-call time as the iteration's and returns the per-call times' sum.
template <class F>
double time_launches(benchmark::State& st, F&& run) {
  EventTimer t;
  double total = 0;
  for (auto _ : st) {
    t.start();
    for (int i = 0; i < kLaunchesPerTiming; ++i) run();
    const double s = t.stop_seconds() / kLaunchesPerTiming;
    total += s;
    st.SetIterationTime(s);
  }
  DS41_CUDA_CHECK(cudaGetLastError());
  return total;
}

/// CudaBackend::linear (cuda/linear.hpp: the decode kernel for fp8/fp4 with up to 3 input rows,
/// else the tiled kernel) for T input rows (args: rows, cols, T). The time is per call, averaged
/// over kLaunchesPerTiming back-to-back calls; bytes/s counts the weights once per call.
template <WeightFormat F>
void BM_DeviceGemv(benchmark::State& st) {
  if (!need_device(st)) return;
  DeviceGemvCase<F> c(st);
  const double total = time_launches(st, [&] { c.run_linear(); });
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * weight_bytes(c.w));
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * c.rows * c.cols * c.T * st.iterations(), benchmark::Counter::kIsRate);
  set_bandwidth_counters(st, static_cast<double>(weight_bytes(c.w)), total);
}

/// Times `baseline` as the iteration and `current` in the same iterations, kLaunchesPerTiming
/// calls each, and sets `ratio_name` (when given) to baseline time / current time: a ratio
/// measured side by side. bytes/s counts the weights once per baseline call. Returns the sums of
/// the per-call times, {current, baseline}.
template <WeightFormat F, class Current, class Baseline>
std::pair<double, double> time_side_by_side(benchmark::State& st, DeviceGemvCase<F>& c, Current current, Baseline baseline,
                                            const char* ratio_name) {
  EventTimer t;
  double current_s = 0, baseline_s = 0;
  for (auto _ : st) {
    t.start();
    for (int i = 0; i < kLaunchesPerTiming; ++i) current();
    current_s += t.stop_seconds() / kLaunchesPerTiming;
    t.start();
    for (int i = 0; i < kLaunchesPerTiming; ++i) baseline();
    const double s = t.stop_seconds() / kLaunchesPerTiming;
    baseline_s += s;
    st.SetIterationTime(s);
  }
  DS41_CUDA_CHECK(cudaGetLastError());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * weight_bytes(c.w));
  if (ratio_name) st.counters[ratio_name] = current_s > 0 ? baseline_s / current_s : 0.0;
  return {current_s, baseline_s};
}

/// CudaFastBackend::linear (cuda/fast_linear.hpp where its plan takes the shape, else the exact
/// kernels) for T input rows (args: rows, cols, T), timed as BM_DeviceGemv; "exact_x" is the
/// exact policy's time over the fast one's, measured side by side in the same iterations. GB/s
/// counts the weights once per call.
template <WeightFormat F>
void BM_DeviceFastGemv(benchmark::State& st) {
  if (!need_device(st)) return;
  DeviceGemvCase<F> c(st);
  const bool fast = cuda_detail::fast_linear_supports(c.m.view(), c.T);
  const auto [exact_s, fast_s] = time_side_by_side(st, c, [&] { c.run_linear(); }, [&] { c.run_fast_linear(); }, nullptr);
  set_bandwidth_counters(st, static_cast<double>(weight_bytes(c.w)), fast_s);
  st.counters["exact_x"] = fast_s > 0 ? exact_s / fast_s : 0.0;
  const FastLinearPlan p = cuda_detail::plan_fast_linear_here(c.m.view(), c.T);
  st.SetLabel(fast ? "fast: grid " + std::to_string(p.grid_x) + "x" + std::to_string(p.grid_y) + ", " +
                         std::to_string(p.rows_per_block) + " rows/block, k_slice " + std::to_string(p.k_slice)
                   : std::string("exact fallback: ") + p.reason);
}

/// fp8/fp4 decode: the tiled kernel (one input row per block) as the iteration, CudaBackend::linear
/// (the decode kernel where it is chosen) beside it; "gemv_x" is tiled time / decode-kernel time.
template <WeightFormat F>
void BM_DeviceGemvTiledDecode(benchmark::State& st) {
  if (!need_device(st)) return;
  DeviceGemvCase<F> c(st);
  time_side_by_side(st, c, [&] { c.run_linear(); }, [&] { c.run_tiled_r1(); }, "gemv_x");
}

/// The old one-thread-per-output kernel (linear_kernel_reference) at the same shapes as the
/// iteration, CudaBackend::linear beside it; "tiled_x" is old time / CudaBackend::linear time.
template <WeightFormat F>
void BM_DeviceGemvReference(benchmark::State& st) {
  if (!need_device(st)) return;
  DeviceGemvCase<F> c(st);
  time_side_by_side(
      st, c, [&] { c.run_linear(); },
      [&] {
        cuda_detail::launch_linear_reference(c.x.data(), c.T, c.cols, c.m.view(), c.y.data(), c.rows, OutRound::kBF16,
                                             CudaBackend::stream());
      },
      "tiled_x");
}

#define DS41_GEMV_SHAPES_BF16 ->Args({1280, 5120, 1})->Args({32768, 1280, 1})->Args({1280, 5120, 16})
#define DS41_GEMV_SHAPES_FP8 ->Args({1280, 5120, 1})->Args({32768, 1280, 1})->Args({5120, 8192, 1})->Args({5120, 8192, 16})
#define DS41_GEMV_SHAPES_FP4 ->Args({2304, 5120, 1})->Args({5120, 2304, 1})->Args({2304, 5120, 16})
#define DS41_GEMV_TIMING ->UseManualTime()->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_DeviceGemv<WeightFormat::kF32>)->Args({1280, 5120, 1})->Args({4096, 5120, 1}) DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemv<WeightFormat::kBF16>) DS41_GEMV_SHAPES_BF16 DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemv<WeightFormat::kFp8Block32>) DS41_GEMV_SHAPES_FP8 DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemv<WeightFormat::kFp4Block32>) DS41_GEMV_SHAPES_FP4 DS41_GEMV_TIMING;
#define DS41_DECODE_SHAPES_FP8 ->Args({1280, 5120, 1})->Args({32768, 1280, 1})->Args({5120, 8192, 1})
#define DS41_DECODE_SHAPES_FP4 ->Args({2304, 5120, 1})->Args({5120, 2304, 1})
BENCHMARK(BM_DeviceGemvTiledDecode<WeightFormat::kFp8Block32>) DS41_DECODE_SHAPES_FP8 DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemvTiledDecode<WeightFormat::kFp4Block32>) DS41_DECODE_SHAPES_FP4 DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemvReference<WeightFormat::kBF16>) DS41_GEMV_SHAPES_BF16 DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemvReference<WeightFormat::kFp8Block32>) DS41_GEMV_SHAPES_FP8 DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceGemvReference<WeightFormat::kFp4Block32>) DS41_GEMV_SHAPES_FP4 DS41_GEMV_TIMING;
// the fast policy: BM_DeviceGemv's shapes, T = 1, 2, 4, 8, 16
#define DS41_FAST_T(r, c) ->Args({r, c, 1})->Args({r, c, 2})->Args({r, c, 4})->Args({r, c, 8})->Args({r, c, 16})
BENCHMARK(BM_DeviceFastGemv<WeightFormat::kBF16>) DS41_FAST_T(1280, 5120) DS41_FAST_T(32768, 1280) DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceFastGemv<WeightFormat::kFp8Block32>) DS41_FAST_T(1280, 5120) DS41_FAST_T(32768, 1280)
    DS41_FAST_T(5120, 8192) DS41_GEMV_TIMING;
BENCHMARK(BM_DeviceFastGemv<WeightFormat::kFp4Block32>) DS41_FAST_T(2304, 5120) DS41_FAST_T(5120, 2304) DS41_GEMV_TIMING;

void BM_DeviceTinyDecodeStep(benchmark::State& st) {
  if (!need_device(st)) return;
  static golden::Golden g = golden::load(DS41_BENCH_GOLDEN);
  static WeightSet w = golden::regenerate_weights(g);
  Model<CudaBackend> model(g.config, w);
  model.prefill(g.prompt_tokens);
  int32_t tok = 1;
  EventTimer t;
  for (auto _ : st) {
    if (model.position() >= g.config.max_seq_len) {
      model.release();
      model.prefill(g.prompt_tokens);
    }
    t.start();
    tok = model.decode(tok).argmax;
    st.SetIterationTime(t.stop_seconds());
  }
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DeviceTinyDecodeStep)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// A whole V4.1-shaped decode step on the device (bench_v41.hpp: the host's bench_layer step, the
/// same synthetic model and byte count), after a 256-token prefill. Each step ends in the
/// argmax download, so wall time is device time plus that copy.
void BM_DeviceV41DecodeStep(benchmark::State& st) {
  if (!need_device(st)) return;
  bench::v41_decode_steps<CudaBackend>(st);
}
BENCHMARK(BM_DeviceV41DecodeStep)->Args({1, 256})->Args({2, 256})->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);

/// The same V4.1-shaped decode step under a numerics policy (B: CudaBackend or CudaFastBackend),
/// eager or as CUDA graph segments (B::GraphScope around each step; the step's executable graphs
/// are updated in place from the second step on). of_copy: the weight bytes of a step per second
/// against the in-process copy rate.
template <class B, bool kGraph>
void BM_DeviceV41DecodeStepPolicy(benchmark::State& st) {
  if (!need_device(st)) return;
  const int layers = static_cast<int>(st.range(0));
  const long prompt = st.range(1);
  const ModelConfig c = bench::v41_config(layers);
  bench::V41SyntheticWeights w;
  Model<B> model(c, w);
  std::vector<int32_t> toks(prompt);
  for (long i = 0; i < prompt; ++i) toks[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
  model.prefill(toks);
  int32_t tok = 1;
  double seconds = 0;
  for (auto _ : st) {
    if (model.position() >= c.max_seq_len) {
      model.release();
      model.prefill(toks);
    }
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (kGraph) {
      typename B::GraphScope scope;
      tok = model.decode(tok).argmax;
    } else {
      tok = model.decode(tok).argmax;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += s;
    st.SetIterationTime(s);
  }
  double bytes = bench::matrix_bytes(WeightFormat::kF32, c.vocab_size, c.dim);  // the head, read every step
  for (int l = 0; l < layers; ++l) bytes += bench::layer_step_bytes(c, l == 0, false);
  set_bandwidth_counters(st, bytes, seconds);
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.SetLabel(std::string(B::kName) + (kGraph ? ", graphs" : ", eager") + ", " + std::to_string(layers) + " layer(s)");
}
#define DS41_V41_STEP ->Args({1, 256})->Args({2, 256})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20)
BENCHMARK(BM_DeviceV41DecodeStepPolicy<CudaBackend, false>) DS41_V41_STEP;
BENCHMARK(BM_DeviceV41DecodeStepPolicy<CudaBackend, true>) DS41_V41_STEP;
BENCHMARK(BM_DeviceV41DecodeStepPolicy<CudaFastBackend, false>) DS41_V41_STEP;
BENCHMARK(BM_DeviceV41DecodeStepPolicy<CudaFastBackend, true>) DS41_V41_STEP;

/// Batched decode steps and a 6-token verify + rollback on the device (bench_v41.hpp; the
/// host's bench_layer BM_V41DecodeBatch / BM_V41Verify). Not yet run on a device.
void BM_DeviceV41DecodeBatch(benchmark::State& st) {
  if (!need_device(st)) return;
  bench::v41_batch_steps<CudaBackend>(st);
}
BENCHMARK(BM_DeviceV41DecodeBatch)
    ->ArgNames({"layers", "batch"})
    ->Args({2, 1})->Args({2, 4})->Args({2, 8})->Args({2, 16})
    ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
void BM_DeviceV41Verify(benchmark::State& st) {
  if (!need_device(st)) return;
  bench::v41_verify_steps<CudaBackend>(st);
}
BENCHMARK(BM_DeviceV41Verify)->ArgNames({"layers", "draft"})->Args({2, 6})->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(10);

}  // namespace

// ---------------------------------------------------------------------------- fast attention
// The fast policy's sparse attention and index scores (cuda/fast_attention.hpp) beside the exact
// operations (CudaBackend's: a thread per (row, head) / per (row, key)) at V4.1 decode shapes: 64
// heads x 512 over a 2k context's 128 window + 512 compressed rows, 32 index heads x 128 over its
// 512 index keys; T = 1, 4, 16 query rows. Time per call over kLaunchesPerTiming calls; bytes/s
// counts what each call must read: per query row its gathered KV rows, its q and its index list
// (attention), the keys once and every row's q and head weights (index scores).

namespace {

struct DeviceAttentionCase {
  static constexpr int H = 64, D = 512, kWindow = 128, kTopk = 512;
  long T;
  int ncols = kWindow + kTopk;
  CudaBackend::Buffer<float> q, kv, sink, out;
  CudaBackend::Buffer<int32_t> idx;
  explicit DeviceAttentionCase(long rows) : T(rows) {
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> hq(T * H * D), hkv(static_cast<size_t>(ncols) * D), hs(H);
    for (auto& v : hq) v = bf16_round(nd(rng));
    for (auto& v : hkv) v = bf16_round(nd(rng));
    for (auto& v : hs) v = nd(rng);
    std::vector<int32_t> hidx(T * ncols);
    for (long t = 0; t < T; ++t)  // the window's rows in order, then the compressed rows shuffled (the top-k)
      for (int j = 0; j < ncols; ++j) hidx[t * ncols + j] = j < kWindow ? j : kWindow + static_cast<int32_t>((j * 7919L + t) % kTopk);
    q = CudaBackend::alloc<float>(hq.size());
    kv = CudaBackend::alloc<float>(hkv.size());
    sink = CudaBackend::alloc<float>(H);
    out = CudaBackend::alloc<float>(hq.size());
    idx = CudaBackend::alloc<int32_t>(hidx.size());
    CudaBackend::upload(q.data(), hq.data(), hq.size());
    CudaBackend::upload(kv.data(), hkv.data(), hkv.size());
    CudaBackend::upload(sink.data(), hs.data(), hs.size());
    CudaBackend::upload(idx.data(), hidx.data(), hidx.size());
  }
  double bytes() const { return static_cast<double>(T) * (static_cast<double>(ncols) * D * 4 + H * D * 4 + ncols * 4); }
};

template <bool kFast>
void BM_DeviceSparseAttentionT(benchmark::State& st) {
  if (!need_device(st)) return;
  DeviceAttentionCase c(st.range(0));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  const auto run = [&] {
    if constexpr (kFast)
      cuda_detail::fast_sparse_attention(c.q.data(), c.kv.data(), c.D, c.idx.data(), c.ncols, c.T, c.H, c.sink.data(), scale, c.out.data());
    else
      CudaBackend::sparse_attention(c.q.data(), c.kv.data(), c.D, c.idx.data(), c.ncols, c.T, c.H, c.sink.data(), scale, c.out.data());
  };
  run();  // the first call sets up the workspace and the kernel's shared-memory limit
  time_launches(st, run);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * c.bytes()));
}
void BM_DeviceFastSparseAttention(benchmark::State& st) { BM_DeviceSparseAttentionT<true>(st); }
void BM_DeviceExactSparseAttention(benchmark::State& st) { BM_DeviceSparseAttentionT<false>(st); }
BENCHMARK(BM_DeviceFastSparseAttention)->ArgName("T")->Arg(1)->Arg(4)->Arg(16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DeviceExactSparseAttention)->ArgName("T")->Arg(1)->Arg(4)->Arg(16)->UseManualTime()->Unit(benchmark::kMicrosecond);

template <bool kFast>
void BM_DeviceIndexScoresT(benchmark::State& st) {
  if (!need_device(st)) return;
  constexpr int H = 32, Di = 128;
  constexpr long nk = 2048 / 4;
  const long T = st.range(0);
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> hq(T * H * Di), hw(T * H), hk(nk * Di);
  for (auto* v : {&hq, &hw, &hk})
    for (auto& x : *v) x = bf16_round(nd(rng));
  auto q = CudaBackend::alloc<float>(hq.size()), w = CudaBackend::alloc<float>(hw.size()), k = CudaBackend::alloc<float>(hk.size());
  auto out = CudaBackend::alloc<float>(T * nk);
  CudaBackend::upload(q.data(), hq.data(), hq.size());
  CudaBackend::upload(w.data(), hw.data(), hw.size());
  CudaBackend::upload(k.data(), hk.data(), hk.size());
  const auto run = [&] {
    if constexpr (kFast)
      cuda_detail::fast_index_scores(q.data(), w.data(), k.data(), T, H, Di, nk, false, out.data());
    else
      CudaBackend::index_scores(q.data(), w.data(), k.data(), T, H, Di, nk, false, out.data());
  };
  run();
  time_launches(st, run);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * 4.0 * (nk * Di + T * H * Di + T * H)));
}
void BM_DeviceFastIndexScores(benchmark::State& st) { BM_DeviceIndexScoresT<true>(st); }
void BM_DeviceExactIndexScores(benchmark::State& st) { BM_DeviceIndexScoresT<false>(st); }
BENCHMARK(BM_DeviceFastIndexScores)->ArgName("T")->Arg(1)->Arg(4)->Arg(16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DeviceExactIndexScores)->ArgName("T")->Arg(1)->Arg(4)->Arg(16)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

// The one-block-a-row top-k (cuda/block_topk.hpp) beside topk_rows (CUB's segmented sort, with its
// temporary buffers and synchronisation per call): the indexer's top-512 of T rows of nk scores
// (nk = 512: a 2k context; 2048: an 8k one). Time per call; bytes/s counts the scores read.

namespace {

template <bool kBlock>
void BM_DeviceTopkT(benchmark::State& st) {
  if (!need_device(st)) return;
  const long T = st.range(0);
  const int n = static_cast<int>(st.range(1)), k = 512;
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> hv(T * n);
  for (auto& x : hv) x = bf16_round(nd(rng));
  auto v = CudaBackend::alloc<float>(hv.size());
  auto idx = CudaBackend::alloc<int32_t>(T * k);
  CudaBackend::upload(v.data(), hv.data(), hv.size());
  const auto run = [&] {
    if constexpr (kBlock) cuda_detail::block_topk_rows(v.data(), T, n, k, idx.data());
    else CudaBackend::topk_rows(v.data(), T, n, k, idx.data());
  };
  run();
  time_launches(st, run);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * T * n * 4);
}
void BM_DeviceBlockTopk(benchmark::State& st) { BM_DeviceTopkT<true>(st); }
void BM_DeviceTopkRows(benchmark::State& st) { BM_DeviceTopkT<false>(st); }
#define DS41_TOPK_SHAPES ->ArgNames({"T", "nk"})->Args({1, 512})->Args({4, 512})->Args({16, 512})->Args({1, 2048})->Args({16, 2048})
BENCHMARK(BM_DeviceBlockTopk) DS41_TOPK_SHAPES->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DeviceTopkRows) DS41_TOPK_SHAPES->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
