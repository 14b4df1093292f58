// Golden tests on the CUDA backend: the same checks as the host (golden_checks.hpp), plus the
// device against the host capture by capture, and device memory returned by release(); at the end,
// the fast numerics policy (CudaFastBackend) against the exact one and the tiny golden. Without a
// device the binary prints "skipped: no CUDA device" and exits 77, which CTest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include "ds41/backend/cuda.hpp"
#include "ds41/backend/host.hpp"
#include "ds41/model/expert_arena.hpp"
#include "backend_ops.hpp"
#include "device_topk_rule.hpp"
#include "golden_checks.hpp"
#include "nine_sequences.hpp"
#include "same_bits.hpp"
#include "fast_attention_emulation.hpp"

using namespace ds41;

int main(int argc, char** argv) {
  if (!CudaBackend::device_available()) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

TEST_CASE("cuda: every capture of every step of the tiny golden") { testing::check_full_golden<CudaBackend>(); }
TEST_CASE("cuda: layer 0 bf16 and integer captures are bit-identical") { testing::check_layer0_exact<CudaBackend>(); }
TEST_CASE("cuda: two runs give identical captures") { testing::check_deterministic<CudaBackend>(); }

TEST_CASE("cuda: device captures against host captures") {
  const auto& g = testing::tiny_golden();
  Model<HostBackend> host(g.config, testing::tiny_weights());
  Model<CudaBackend> dev(g.config, testing::tiny_weights());
  long same = 0, total = 0;
  for (const auto& st : g.steps) {
    golden::CollectSink hs, ds;
    if (st.index == 0) {
      host.prefill(st.tokens, &hs);
      dev.prefill(st.tokens, &ds);
    } else {
      host.decode(st.tokens[0], &hs);
      dev.decode(st.tokens[0], &ds);
    }
    REQUIRE(hs.order == ds.order);
    for (const auto& name : hs.order) {
      const auto& a = hs.items.at(name);
      const auto& b = ds.items.at(name);
      CAPTURE(st.index);
      CAPTURE(name);
      REQUIRE(a.shape == b.shape);
      CHECK(a.i32 == b.i32);  // every discrete choice identical
      ++total;
      if (a.f32 == b.f32) {
        ++same;
        continue;
      }
      double num = 0, den = 0;
      for (size_t i = 0; i < a.f32.size(); ++i) {
        num += (double(a.f32[i]) - b.f32[i]) * (double(a.f32[i]) - b.f32[i]);
        den += double(a.f32[i]) * a.f32[i];
      }
      double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
      CAPTURE(rel);
      // same rounding points, no fused multiply-add and no libm calls left on the path (the
      // router's softplus tail uses log1p_scalar, a DS41_HD port of glibc's log1pf that is
      // bit-identical on all 2^32 inputs), so every capture is expected to match bit for bit;
      // the bound only keeps a regression readable
      CHECK(rel <= (a.type == CapType::kF32 ? golden::kF32Bound : golden::kBf16Bound));
    }
  }
  MESSAGE("cuda vs host: " << same << " of " << total << " captures bit-identical");
}

TEST_CASE("cuda: release returns the device memory of a sequence") {
  const auto& g = testing::tiny_golden();
  Model<CudaBackend> dev(g.config, testing::tiny_weights());
  dev.prefill(g.prompt_tokens);  // warm up (CUB, context)
  dev.release();
  CudaBackend::trim_memory();  // the pool's kept blocks back to the driver: free memory counts live buffers
  const size_t before = CudaBackend::free_memory();
  for (int i = 0; i < 20; ++i) {
    dev.prefill(g.prompt_tokens);
    for (int32_t t : g.decode_tokens) dev.decode(t);
    dev.release();
  }
  CudaBackend::trim_memory();
  const size_t after = CudaBackend::free_memory();
  // the driver allocates in 2 MiB pages; anything a sequence kept would accumulate over 20 runs
  CHECK(after + (2u << 20) >= before);
}

// ---------------------------------------------------------------------------- sequences
// The serving properties of test_sequence.cpp on the device: a batch of sequences gives each row
// the bits it gives alone (and the host's), rollback and snapshot/restore are exact, and
// destroying every sequence gives the device memory back.
namespace {

bool same_logits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using testing::NineSequences;

}  // namespace

TEST_CASE("cuda: a batch of sequences gives every row the bits of its sequence alone, and the host's") {
  const auto& g = testing::tiny_golden();
  Model<CudaBackend> dev(g.config, testing::tiny_weights());
  Model<HostBackend> host(g.config, testing::tiny_weights());
  NineSequences n(g);
  const auto dev_alone = n.alone(dev), host_alone = n.alone(host);
  std::vector<Model<CudaBackend>::Sequence> seqs;
  for (int q = 0; q < NineSequences::kSeqs; ++q) {
    seqs.push_back(dev.make_sequence());
    dev.extend(seqs[q], n.prompts[q]);
  }
  for (size_t i = 0; i < g.decode_tokens.size(); ++i) {
    std::vector<Model<CudaBackend>::Segment> batch(NineSequences::kSeqs);
    for (int q = 0; q < NineSequences::kSeqs; ++q) {
      batch[q].seq = &seqs[q];
      batch[q].tokens = {n.rest[q][i]};
    }
    const auto out = dev.step(batch);
    for (int q = 0; q < NineSequences::kSeqs; ++q) {
      CAPTURE(i);
      CAPTURE(q);
      CHECK(same_logits(out[q].at(0).logits, dev_alone[q][i]));
      CHECK(same_logits(out[q].at(0).logits, host_alone[q][i]));
    }
  }
}

TEST_CASE("cuda: rollback and snapshot/restore continue with the bits of an uninterrupted sequence") {
  const auto& g = testing::tiny_golden();
  Model<CudaBackend> dev(g.config, testing::tiny_weights());
  NineSequences n(g);
  const auto ref = n.alone(dev);
  auto s = dev.make_sequence();
  dev.extend(s, n.prompts[0]);
  for (size_t i = 0; i < n.rest[0].size(); ++i) {
    s.checkpoint();
    dev.extend_rows(s, {n.rest[0][i], 1, 2, 3});  // a draft of four, rejected
    s.rollback();
    if (i == n.rest[0].size() / 2) s = dev.restore(dev.snapshot(s));  // and half-way, a round trip through bytes
    CAPTURE(i);
    CHECK(same_logits(dev.extend(s, {n.rest[0][i]}).logits, ref[0][i]));
  }
}

// The streamed experts' staging is page-locked on the device backend (backend/concept.hpp's
// PinnedStaging), so uploads from it are DMA; the host backend's is plain memory.
static_assert(std::is_same_v<decltype(alloc_staging<CudaBackend>(0)), PinnedBuffer<uint8_t>>);
static_assert(std::is_same_v<decltype(alloc_staging<HostBackend>(0)), HostBuffer<uint8_t>>);
TEST_CASE("cuda: the expert staging is page-locked host memory") {
  auto buf = alloc_staging<CudaBackend>(size_t{3} << 20);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, buf.data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);  // page-locked (pageable memory reads cudaMemoryTypeUnregistered)
  CHECK(buf.data()[buf.size() - 1] == 0);  // zero-initialised, as HostBuffer
}

TEST_CASE("cuda: destroying every sequence gives the device memory back") {
  const auto& g = testing::tiny_golden();
  Model<CudaBackend> dev(g.config, testing::tiny_weights());
  NineSequences n(g);
  n.alone(dev);  // warm up (CUB, context, pools)
  CudaBackend::trim_memory();
  const size_t before = CudaBackend::free_memory();
  for (int round = 0; round < 5; ++round) {
    std::vector<Model<CudaBackend>::Sequence> seqs;
    std::vector<Model<CudaBackend>::Segment> batch(NineSequences::kSeqs);
    for (int q = 0; q < NineSequences::kSeqs; ++q) {
      seqs.push_back(dev.make_sequence());
      dev.extend(seqs[q], n.prompts[q]);
    }
    for (int q = 0; q < NineSequences::kSeqs; ++q) {
      batch[q].seq = &seqs[q];
      batch[q].tokens = n.rest[q];
    }
    dev.step(batch);
  }
  CudaBackend::trim_memory();
  const size_t after = CudaBackend::free_memory();
  // the driver allocates in 2 MiB pages; anything the sequences kept would accumulate over 5 rounds
  CHECK(after + (2u << 20) >= before);
}

TEST_CASE("cuda: decode steps take their buffers from the pool, not from cudaMalloc") {
  const auto& g = testing::tiny_golden();
  Model<CudaBackend> dev(g.config, testing::tiny_weights());
  auto seq = dev.make_sequence();
  dev.extend(seq, g.prompt_tokens);
  dev.extend(seq, {g.decode_tokens.at(0)});  // the first decode step's shapes
  const long mallocs = CudaBackend::device_mallocs(), reused = cuda_detail::device_pool().reused();
  for (size_t i = 1; i < g.decode_tokens.size(); ++i) dev.extend(seq, {g.decode_tokens[i]});
  const long new_mallocs = CudaBackend::device_mallocs() - mallocs, new_reused = cuda_detail::device_pool().reused() - reused;
  MESSAGE((g.decode_tokens.size() - 1) << " decode steps: " << new_reused << " buffers from the pool, " << new_mallocs << " cudaMalloc");
  CHECK(new_reused > 0);
  // a context one longer can cross into a new 512-byte size class now and then; never per buffer
  CHECK(new_mallocs * 20 <= new_reused);
}

TEST_CASE("backend ops: CudaBackend against the DS41_HD definitions, every operation") {
  // tests/backend_ops.hpp, the template test_backend_ops runs on HostBackend
  long compared = 0, ops = 0;
  for (const auto& r : testing::run_backend_ops<CudaBackend>()) {
    CAPTURE(r.op);
    CAPTURE(r.shape);
    CHECK(r.compared > 0);
    CHECK(r.mismatched == 0);
    compared += r.compared;
    ++ops;
  }
  MESSAGE("cuda: " << ops << " operation x shape cases, " << compared << " outputs compared");
}

// ---------------------------------------------------------------------------- tiled Linear
// The coalesced tiled Linear kernel (cuda/linear.hpp) against the one-thread-per-output reference
// kernel (MatrixView::dot per thread), bit for bit, and both against MatrixView::dot on the host.
namespace {

struct DeviceMatrix {
  DeviceBuffer<uint8_t> payload;
  DeviceBuffer<float> scales;
  std::vector<uint8_t> host_payload;  // what the view's data holds, from its first byte
  std::vector<float> host_scales;
  MatrixView view, host_view;
};

long payload_bytes(WeightFormat f, int rows, int cols) {
  const long n = static_cast<long>(rows) * cols;
  return f == WeightFormat::kF32 ? 4 * n : f == WeightFormat::kBF16 ? 2 * n : f == WeightFormat::kFp8Block32 ? n : static_cast<long>(rows) * (cols / 2);
}

/// Random finite weights of format f; `offset` bytes of padding before the payload's start move
/// the view's data off 16-byte alignment (the kernel's byte-copy path).
DeviceMatrix random_device_matrix(WeightFormat f, int rows, int cols, std::mt19937& rng, int offset = 0) {
  DeviceMatrix m;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 4e-2f);
  const long nb = payload_bytes(f, rows, cols);
  m.host_payload.resize(nb);
  auto put32 = [&](long i, uint32_t v) { std::memcpy(&m.host_payload[4 * i], &v, 4); };
  auto put16 = [&](long i, uint16_t v) { std::memcpy(&m.host_payload[2 * i], &v, 2); };
  if (f == WeightFormat::kF32)
    for (long i = 0; i < nb / 4; ++i) put32(i, f32_bits(normal(rng)));
  else if (f == WeightFormat::kBF16)
    for (long i = 0; i < nb / 2; ++i) put16(i, bf16_bits(normal(rng)));
  else
    for (auto& b : m.host_payload) {
      int v = byte(rng);
      if (f == WeightFormat::kFp8Block32 && (v & 0x7F) == 0x7F) v &= 0xFE;  // no NaN codes
      b = static_cast<uint8_t>(v);
    }
  const long kblocks = (cols + 31) / 32;
  if (f == WeightFormat::kFp8Block32) m.host_scales.resize(((rows + 31) / 32) * kblocks);
  if (f == WeightFormat::kFp4Block32) m.host_scales.resize(static_cast<long>(rows) * kblocks);
  for (auto& s : m.host_scales) s = scale(rng);
  m.payload = DeviceBuffer<uint8_t>(nb + offset + 16);
  if (nb) CudaBackend::upload(m.payload.data() + offset, m.host_payload.data(), nb);
  if (!m.host_scales.empty()) {
    m.scales = DeviceBuffer<float>(m.host_scales.size());
    CudaBackend::upload(m.scales.data(), m.host_scales.data(), m.host_scales.size());
  }
  m.view.format = m.host_view.format = f;
  m.view.rows = m.host_view.rows = rows;
  m.view.cols = m.host_view.cols = cols;
  m.view.data = m.payload.data() + offset;
  m.view.scales = m.scales.empty() ? nullptr : m.scales.data();
  m.host_view.data = m.host_payload.data();
  m.host_view.scales = m.host_scales.empty() ? nullptr : m.host_scales.data();
  return m;
}

uint32_t bits_of(float v) { return f32_bits(v); }
/// Bit-identical, or both NaN (the host's and the device's NaN bits may differ: x86 keeps a
/// NaN's payload and sign, the GPU returns its canonical NaN).
bool same_result(float a, float b) { return bits_of(a) == bits_of(b) || (a != a && b != b); }

/// Runs CudaBackend::linear, the reference kernel and (where it can run) the decode kernel on
/// random x [T, x_stride] and y [T, y_stride] (strides padded; the gaps must
/// stay untouched) and compares them bit for bit, and with MatrixView::dot on the host. Returns
/// the number of output elements that differ between the kernels.
/// With `poison`, input row 0 holds an inf and row 2 a NaN (T >= 3): every output of those rows
/// must be NaN for fp8/fp4 (act_quant's NaN scale) and whatever IEEE gives for f32/bf16, alike.
long compare_linear(const DeviceMatrix& m, long T, long x_pad, long y_pad, OutRound round, std::mt19937& rng,
                    bool with_host = true, bool poison = false) {
  const int rows = m.view.rows, cols = m.view.cols;
  const long xs = cols + x_pad, ys = rows + y_pad;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> hx(T * xs);
  for (auto& v : hx) v = bf16_round(normal(rng));  // activations reach Linears as bf16 values
  if (poison) {
    REQUIRE(T >= 3);
    hx[0 * xs + (cols > 40 ? 40 : cols - 1)] = std::numeric_limits<float>::infinity();
    hx[2 * xs + (cols > 100 ? 100 : cols - 1)] = std::numeric_limits<float>::quiet_NaN();
  }
  auto dx = CudaBackend::alloc<float>(hx.size());
  CudaBackend::upload(dx.data(), hx.data(), hx.size());
  auto y_new = CudaBackend::alloc<float>(T * ys), y_ref = CudaBackend::alloc<float>(T * ys);
  CudaBackend::fill(y_new.data(), T * ys, -12345.0f);
  CudaBackend::fill(y_ref.data(), T * ys, -12345.0f);
  REQUIRE(cuda_detail::linear_tiled_supports(m.view));
  CudaBackend::linear(dx.data(), T, xs, m.view, y_new.data(), ys, round);
  cuda_detail::launch_linear_reference(dx.data(), T, xs, m.view, y_ref.data(), ys, round, CudaBackend::stream());
  // the decode kernel wherever it can run, also where launch_linear picks the tiled one (narrow rows)
  const bool gemv = cuda_detail::linear_gemv_supports(m.view, T);
  auto y_gemv = CudaBackend::alloc<float>(gemv ? T * ys : 0);
  if (gemv) {
    CudaBackend::fill(y_gemv.data(), T * ys, -12345.0f);
    if (m.view.format == WeightFormat::kFp8Block32)
      cuda_detail::launch_linear_gemv<WeightFormat::kFp8Block32>(dx.data(), T, xs, m.view, y_gemv.data(), ys, round, CudaBackend::stream());
    else
      cuda_detail::launch_linear_gemv<WeightFormat::kFp4Block32>(dx.data(), T, xs, m.view, y_gemv.data(), ys, round, CudaBackend::stream());
  }
  DS41_CUDA_CHECK(cudaGetLastError());
  CudaBackend::sync();
  std::vector<float> a(T * ys), b(T * ys), g(gemv ? T * ys : 0);
  CudaBackend::download(a.data(), y_new.data(), a.size());
  CudaBackend::download(b.data(), y_ref.data(), b.size());
  if (gemv) CudaBackend::download(g.data(), y_gemv.data(), g.size());
  long diff = 0, host_diff = 0, gap_bad = 0, nan_missing = 0;
  for (long r = 0; r < T; ++r)
    for (long n = 0; n < ys; ++n) {
      const long i = r * ys + n;
      if (!same_result(a[i], b[i])) ++diff;
      if (gemv && !same_result(g[i], b[i])) ++diff;
      if (n >= rows) {
        if (a[i] != -12345.0f) ++gap_bad;
        continue;
      }
      if (with_host && !same_result(a[i], apply_round(m.host_view.dot(hx.data() + r * xs, static_cast<int>(n)), round)))
        ++host_diff;
      if (poison && (r == 0 || r == 2) && (m.view.format == WeightFormat::kFp8Block32 || m.view.format == WeightFormat::kFp4Block32) && a[i] == a[i]) ++nan_missing;
    }
  CHECK(gap_bad == 0);
  CHECK(host_diff == 0);
  CHECK(nan_missing == 0);
  return diff;
}

}  // namespace

TEST_CASE("cuda: tiled and decode Linear kernels are bit-identical to the reference kernel at awkward shapes") {
  std::mt19937 rng(41);
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32, WeightFormat::kFp4Block32};
  const int row_counts[] = {1, 31, 33, 257};
  const int col_counts[] = {2, 30, 32, 40, 326, 5120};
  const long t_counts[] = {1, 3, 17};
  long cases = 0;
  for (WeightFormat f : formats)
    for (int rows : row_counts)
      for (int cols : col_counts) {
        DeviceMatrix m = random_device_matrix(f, rows, cols, rng);
        for (long T : t_counts) {
          CAPTURE(format_name(f));
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(T);
          const OutRound round = (cases % 2) ? OutRound::kBF16 : OutRound::kF32;
          const long x_pad = (cases % 3 == 1) ? 5 : 0, y_pad = (cases % 3 == 2) ? 7 : 0;
          CHECK(compare_linear(m, T, x_pad, y_pad, round, rng) == 0);
          ++cases;
        }
      }
  MESSAGE(cases << " format x shape x T cases compared");
}

TEST_CASE("cuda: tiled and decode Linear kernels, unaligned data, row slices and more than 65535 input rows") {
  std::mt19937 rng(7);
  // payload off 16-byte alignment (the byte-copy path) at a shape that would take the vector path
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32, WeightFormat::kFp4Block32}) {
    CAPTURE(format_name(f));
    DeviceMatrix m = random_device_matrix(f, 97, 1024, rng, f == WeightFormat::kF32 ? 4 : f == WeightFormat::kBF16 ? 2 : 1);
    CHECK(compare_linear(m, 3, 1, 3, OutRound::kBF16, rng) == 0);
  }
  // inf and NaN inputs, through one-row blocks (T = 3) and 4-row prefill blocks (T = 5: the
  // poisoned rows share a block with clean ones)
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32, WeightFormat::kFp4Block32}) {
    CAPTURE(format_name(f));
    DeviceMatrix m = random_device_matrix(f, 33, 326, rng);
    CHECK(compare_linear(m, 3, 0, 0, OutRound::kF32, rng, true, /*poison=*/true) == 0);
    CHECK(compare_linear(m, 5, 0, 0, OutRound::kBF16, rng, true, /*poison=*/true) == 0);
  }
  // row slices (fp8 on a 32-row boundary), as attention's grouped wo_a uses them
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block32, WeightFormat::kFp4Block32}) {
    CAPTURE(format_name(f));
    DeviceMatrix m = random_device_matrix(f, 256, 448, rng);
    const MatrixView full = m.view, host_full = m.host_view;
    m.view = full.row_slice(64, 96);
    m.host_view = host_full.row_slice(64, 96);
    CHECK(compare_linear(m, 5, 0, 0, OutRound::kBF16, rng) == 0);
    m.view = full.row_slice(128, 128);
    m.host_view = host_full.row_slice(128, 128);
    CHECK(compare_linear(m, 2, 0, 0, OutRound::kF32, rng) == 0);
  }
  // input rows past one grid dimension: both kernels launch in slices of 65535
  DeviceMatrix m = random_device_matrix(WeightFormat::kBF16, 3, 40, rng);
  CHECK(compare_linear(m, 70000, 0, 1, OutRound::kBF16, rng) == 0);
}

TEST_CASE("cuda: tiled and decode Linear kernels at DeepSeek-V4.1-Flash shapes") {
  std::mt19937 rng(11);
  {
    DeviceMatrix m = random_device_matrix(WeightFormat::kFp8Block32, 5120, 8192, rng);
    CHECK(compare_linear(m, 1, 0, 0, OutRound::kBF16, rng) == 0);
    CHECK(compare_linear(m, 3, 0, 0, OutRound::kF32, rng, /*with_host=*/false) == 0);
  }
  {
    DeviceMatrix m = random_device_matrix(WeightFormat::kFp4Block32, 2304, 5120, rng);
    CHECK(compare_linear(m, 1, 0, 0, OutRound::kBF16, rng) == 0);
    CHECK(compare_linear(m, 17, 0, 0, OutRound::kBF16, rng, /*with_host=*/false) == 0);
  }
}

// ---------------------------------------------------------------------------- fast numerics
// CudaFastBackend (cuda/numerics.hpp): its Linear (cuda/fast_linear.hpp) against the exact one at
// the V4.1 shapes, and the tiny golden through Model<CudaFastBackend> within the policy's bounds.
namespace {

/// rel-L2 of the fast Linear against the exact one for T random input rows (outputs `round`),
/// with y_pad floats of gap after each output row that neither may touch.
double fast_vs_exact(const DeviceMatrix& m, long T, long y_pad, OutRound round, std::mt19937& rng) {
  const int rows = m.view.rows, cols = m.view.cols;
  const long ys = rows + y_pad;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> hx(T * cols);
  for (auto& v : hx) v = bf16_round(normal(rng));
  auto dx = CudaBackend::alloc<float>(hx.size());
  CudaBackend::upload(dx.data(), hx.data(), hx.size());
  auto y_fast = CudaBackend::alloc<float>(T * ys), y_exact = CudaBackend::alloc<float>(T * ys);
  CudaBackend::fill(y_fast.data(), T * ys, -12345.0f);
  CudaBackend::fill(y_exact.data(), T * ys, -12345.0f);
  REQUIRE(cuda_detail::fast_linear_supports(m.view, T));  // the fast kernel runs, not the fallback
  CudaFastBackend::linear(dx.data(), T, cols, m.view, y_fast.data(), ys, round);
  CudaBackend::linear(dx.data(), T, cols, m.view, y_exact.data(), ys, round);
  DS41_CUDA_CHECK(cudaGetLastError());
  CudaBackend::sync();
  std::vector<float> a(T * ys), b(T * ys);
  CudaBackend::download(a.data(), y_fast.data(), a.size());
  CudaBackend::download(b.data(), y_exact.data(), b.size());
  double num = 0, den = 0;
  long gap_bad = 0;
  for (long t = 0; t < T; ++t)
    for (long n = 0; n < ys; ++n) {
      const long i = t * ys + n;
      if (n >= rows) {
        gap_bad += a[i] != -12345.0f;
        continue;
      }
      num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      den += double(b[i]) * b[i];
    }
  CHECK(gap_bad == 0);
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

TEST_CASE("cuda fast: the fast Linear against the exact one at DeepSeek-V4.1-Flash shapes, T = 1, 2, 4, 8, 16") {
  std::mt19937 rng(24);
  struct Shape {
    WeightFormat f;
    int rows, cols;
  };
  const Shape shapes[] = {{WeightFormat::kFp8Block32, 1280, 5120}, {WeightFormat::kFp8Block32, 32768, 1280},
                          {WeightFormat::kFp8Block32, 5120, 8192}, {WeightFormat::kFp8Block32, 512, 5120},
                          {WeightFormat::kFp4Block32, 2304, 5120}, {WeightFormat::kFp4Block32, 5120, 2304},
                          {WeightFormat::kBF16, 1024, 4096},       {WeightFormat::kBF16, 32, 5120},
                          {WeightFormat::kBF16, 128, 512}};
  for (const Shape& s : shapes) {
    DeviceMatrix m = random_device_matrix(s.f, s.rows, s.cols, rng);
    for (long T : {1L, 2L, 4L, 8L, 16L}) {
      CAPTURE(format_name(s.f));
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(T);
      // float32 outputs: the same sum in another order, ~1e-7 (test_fast_plan bounds each output
      // by its reassociation error); bf16 outputs: the few that round the other way are off by at
      // most one bf16 ulp (2^-8 relative), so even all of them would stay under 2^-8
      const double rel_f32 = fast_vs_exact(m, T, T == 2 ? 3 : 0, OutRound::kF32, rng);
      CAPTURE(rel_f32);
      CHECK(rel_f32 <= 1e-5);
      const double rel_bf16 = fast_vs_exact(m, T, 0, OutRound::kBF16, rng);
      CAPTURE(rel_bf16);
      CHECK(rel_bf16 <= 0x1p-8);
    }
  }
}

TEST_CASE("cuda fast: the tiny golden through Model<CudaFastBackend>") {
  const auto& g = testing::tiny_golden();
  // the golden's smallest relative selection margin per kind (SCHEMA §6): a discrete capture must be
  // identical where that is at least the policy's 1e-2; below it, differences are counted only
  std::map<std::string, double> min_gap;
  {
    std::ifstream f(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
    const auto j = golden::json::parse(f);
    for (const auto& [kind, k] : j.at("margins").at("kinds").items())
      min_gap[kind] = k.at("min_relative_gap").is_number() ? k.at("min_relative_gap").get<double>() : 1.0;
  }
  auto kind_of = [](const std::string& name) -> std::string {
    if (name.find("moe_indices") != std::string::npos) return "moe_topk";
    if (name.find("index_topk") != std::string::npos) return "index_topk";
    if (name.find("candidates") != std::string::npos) return "candidate_blocks";
    return "";
  };
  Model<CudaFastBackend> model(g.config, testing::tiny_weights());
  // teacher-forced, the bar's definition (issue 40): each component from the golden's own inputs.
  // Free-running, differences compound from layer to layer and step to step: measured on the H200
  // on 2026-12-04, 9 captures of the last layers' window_kv / attn_o / attn_out at rel-L2 1.05e-2
  // to 3.6e-2 (docs/device/2026-12-04); reported below, not required
  golden::RunOptions forced;
  forced.force_inputs = true;
  const auto reports = golden::run(g, model, forced);
  REQUIRE(reports.size() == g.steps.size());
  {
    Model<CudaFastBackend> free_model(g.config, testing::tiny_weights());
    double worst = 0;
    for (const auto& rep : golden::run(g, free_model))
      for (const auto& r : rep.results)
        if (r.dtype != CapType::kI32 && r.dtype != CapType::kBool) worst = std::max(worst, r.rel_l2);
    MESSAGE("cuda-fast free-running on the tiny golden: worst float capture rel-L2 " << worst);
  }
  long floats = 0, discrete = 0, discrete_diffs = 0, excused = 0, argmax_diffs = 0;
  for (const auto& rep : reports) {
    if (rep.argmax_mine != rep.argmax_gold) ++argmax_diffs;
    for (const auto& r : rep.results) {
      CAPTURE(rep.step);
      CAPTURE(r.name);
      CAPTURE(r.note);
      REQUIRE(r.present_mine);
      REQUIRE(r.shape_ok);
      if (r.dtype == CapType::kI32 || r.dtype == CapType::kBool) {
        ++discrete;
        if (r.mismatches == 0) continue;
        ++discrete_diffs;
        const std::string kind = kind_of(r.name);
        if (!kind.empty() && min_gap.count(kind) && min_gap[kind] < 1e-2) {
          ++excused;
          continue;
        }
        CHECK(r.mismatches == 0);  // the golden's margin is >= 1e-2 here: the choice must not move
      } else {
        ++floats;
        CAPTURE(r.rel_l2);
        CHECK(r.rel_l2 <= 1e-2);  // every float capture (bf16 and f32) within the issue's bar
      }
    }
  }
  // the logits argmax's margin in this golden is 3e-3 relative: reported, not required
  MESSAGE("cuda-fast on the tiny golden: " << floats << " float captures within rel-L2 1e-2, " << discrete
                                           << " discrete captures, " << discrete_diffs << " differing (" << excused
                                           << " where the golden's margin is below 1e-2), " << argmax_diffs
                                           << " argmax differences");
}

TEST_CASE("cuda fast: two runs give identical captures") { testing::check_deterministic<CudaFastBackend>(); }

TEST_CASE("cuda fast: decode steps as CUDA graphs give the eager steps' logits") {
  const auto& g = testing::tiny_golden();
  Model<CudaFastBackend> eager(g.config, testing::tiny_weights()), graphed(g.config, testing::tiny_weights());
  eager.prefill(g.prompt_tokens);
  graphed.prefill(g.prompt_tokens);
  for (int32_t t : g.decode_tokens) {
    const std::vector<float> a = eager.decode(t).logits;
    std::vector<float> b;
    {
      CudaFastBackend::GraphScope scope;  // the same recorder as CudaBackend's
      b = graphed.decode(t).logits;
    }
    CHECK(same_logits(a, b));  // the fast kernels are deterministic: no atomics, fixed orders
  }
  CudaFastBackend::release_graphs();
}

// ---------------------------------------------------------------------------- fast attention
// The fast policy's sparse attention and index scores (cuda/fast_attention.hpp) against the exact
// operations (CudaBackend's), within the tolerances of tests/fast_attention_emulation.hpp, at V4.1
// and tiny-golden shapes; and how many outputs match the host emulation of the kernels' order bit
// for bit (reported, not required: the emulation is checked on the host, test_fast_attention_plan).

namespace {

template <class T>
DeviceBuffer<T> fast_attn_upload(const std::vector<T>& v) {
  auto d = CudaBackend::alloc<T>(v.size());
  CudaBackend::upload(d.data(), v.data(), v.size());
  return d;
}
template <class T>
std::vector<T> fast_attn_download(const DeviceBuffer<T>& d, size_t n) {
  std::vector<T> v(n);
  CudaBackend::download(v.data(), d.data(), n);
  return v;
}

/// Fast and exact device sparse attention on random bf16 q and kv (a fifth of the slots masked,
/// row `all_masked` entirely, head 1's sink -inf); `q_offset` floats of lead before q (1: rows
/// off 16 bytes, the kernel's scalar staging). Returns outputs outside the tolerance.
long fast_attention_case(long T, int H, int D, int ncols, long all_masked, float spread, long q_offset, std::mt19937& rng) {
  CAPTURE(T);
  CAPTURE(H);
  CAPTURE(D);
  CAPTURE(ncols);
  CAPTURE(q_offset);
  const int rows = std::max(ncols, 8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(q_offset + T * H * D), kv(static_cast<size_t>(rows) * D), sink(H);
  for (auto& v : q) v = bf16_round(nd(rng));
  for (auto& v : kv) v = bf16_round(nd(rng));
  for (int h = 0; h < H; ++h) sink[h] = h == 1 ? -INFINITY : nd(rng);
  std::vector<int32_t> idx(T * ncols);
  for (long t = 0; t < T; ++t)
    for (int j = 0; j < ncols; ++j) idx[t * ncols + j] = (t == all_masked || rng() % 5 == 0) ? -1 : static_cast<int32_t>(rng() % rows);
  const float scale = spread / std::sqrt(static_cast<float>(D));
  auto dq = fast_attn_upload(q), dkv = fast_attn_upload(kv), dsink = fast_attn_upload(sink);
  auto didx = fast_attn_upload(idx);
  auto o_fast = CudaBackend::alloc<float>(T * H * D), o_exact = CudaBackend::alloc<float>(T * H * D);
  cuda_detail::fast_sparse_attention(dq.data() + q_offset, dkv.data(), D, didx.data(), ncols, T, H, dsink.data(), scale,
                                     o_fast.data());
  CudaBackend::sparse_attention(dq.data() + q_offset, dkv.data(), D, didx.data(), ncols, T, H, dsink.data(), scale,
                                o_exact.data());
  CudaBackend::sync();
  const std::vector<float> fast = fast_attn_download(o_fast, T * H * D), exact = fast_attn_download(o_exact, T * H * D);
  const fast_attn::SparseAttnPlan plan = fast_attn::plan_sparse_attention(T, H, D, ncols, cuda_detail::attention_device_limits());
  std::vector<float> emulated(T * H * D);
  if (plan.tiled)
    testing::emulate_fast_sparse_attention(q.data() + q_offset, kv.data(), D, idx.data(), ncols, T, H, sink.data(), scale,
                                           plan, emulated.data());
  std::vector<double> weighted(D);
  long bad = 0, same_exact = 0, same_emulated = 0;
  for (long t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      testing::sparse_attention_tolerance(q.data() + q_offset, kv.data(), D, idx.data(), ncols, h, H, t, sink.data(), scale,
                                          weighted.data());
      for (int d = 0; d < D; ++d) {
        const long i = (t * H + h) * D + d;
        bad += !testing::within_attention_tolerance(fast[i], exact[i], weighted[d]);
        same_exact += testing::same_bits(fast[i], exact[i]);
        same_emulated += plan.tiled && testing::same_bits(fast[i], emulated[i]);
      }
    }
  MESSAGE("fast sparse attention T=" << T << " H=" << H << " D=" << D << " ncols=" << ncols << " (splits " << plan.splits
                                     << ", tile " << plan.tile_keys << "): " << same_exact << " of " << T * H * D
                                     << " bit-identical to the exact kernel, " << same_emulated << " to the host emulation");
  if (all_masked >= 0 && all_masked < T)  // 0 with a finite sink, NaN with head 1's -inf one: the exact values
    for (int h = 0; h < H; ++h) CHECK((h == 1 ? std::isnan(fast[(all_masked * H + h) * D]) : fast[(all_masked * H + h) * D] == 0.0f));
  return bad;
}

/// Fast and exact device index scores on random q, keys (bf16 values, or full float32) and bf16
/// head weights. Returns scores outside the tolerance; `same` counts bit-identical ones.
long fast_index_case(long T, int H, int Di, long nk, bool f32_inputs, bool small_bmm, long& same, std::mt19937& rng) {
  CAPTURE(T);
  CAPTURE(H);
  CAPTURE(Di);
  CAPTURE(nk);
  CAPTURE(f32_inputs);
  CAPTURE(small_bmm);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(T * H * Di), w(T * H), k(nk * Di);
  for (auto& v : q) v = f32_inputs ? nd(rng) : bf16_round(nd(rng));
  for (auto& v : k) v = f32_inputs ? nd(rng) : bf16_round(nd(rng));
  for (auto& v : w) v = bf16_round(nd(rng) * 0.1f);
  auto dq = fast_attn_upload(q), dw = fast_attn_upload(w), dk = fast_attn_upload(k);
  auto s_fast = CudaBackend::alloc<float>(T * nk), s_exact = CudaBackend::alloc<float>(T * nk);
  cuda_detail::fast_index_scores(dq.data(), dw.data(), dk.data(), T, H, Di, nk, small_bmm, s_fast.data());
  CudaBackend::index_scores(dq.data(), dw.data(), dk.data(), T, H, Di, nk, small_bmm, s_exact.data());
  CudaBackend::sync();
  const std::vector<float> fast = fast_attn_download(s_fast, T * nk), exact = fast_attn_download(s_exact, T * nk);
  long bad = 0;
  same = 0;
  for (long t = 0; t < T; ++t)
    for (long j = 0; j < nk; ++j) {
      const long i = t * nk + j;
      same += testing::same_bits(fast[i], exact[i]);
      bad += !testing::within_index_tolerance(fast[i], exact[i], q.data() + t * H * Di, w.data() + t * H, k.data() + j * Di, H, Di);
    }
  MESSAGE("fast index scores T=" << T << " H=" << H << " Di=" << Di << " nk=" << nk << std::string(f32_inputs ? " f32" : " bf16")
                                 << " inputs: " << same << " of " << T * nk << " bit-identical to the exact kernel");
  return bad;
}

}  // namespace

TEST_CASE("cuda fast attention: sparse attention within the tolerance of the exact kernel") {
  std::mt19937 rng(404);
  for (long T : {1L, 4L, 16L}) CHECK(fast_attention_case(T, 64, 512, 640, T > 1 ? 2 : -1, 1.0f, 0, rng) == 0);  // V4.1 decode, 2k context
  CHECK(fast_attention_case(1, 64, 512, 144, -1, 4.0f, 0, rng) == 0);  // a ratio-128 layer: window + 16 rows
  CHECK(fast_attention_case(3, 64, 512, 640, 0, 1.0f, 1, rng) == 0);   // rows off 16 bytes: scalar staging
  CHECK(fast_attention_case(64, 64, 512, 640, 5, 1.0f, 0, rng) == 0);  // a prefill chunk's rows
  CHECK(fast_attention_case(3, 4, 64, 12, 1, 1.0f, 0, rng) == 0);      // tiny golden
  CHECK(fast_attention_case(9, 4, 64, 12, -1, 8.0f, 0, rng) == 0);
  CHECK(fast_attention_case(2, 12, 7, 130, 0, 2.0f, 0, rng) == 0);     // odd D, uneven head groups
  CHECK(fast_attention_case(2, 4, 64, 0, -1, 1.0f, 0, rng) == 0);      // no slots: the untiled kernel
}

TEST_CASE("cuda fast attention: index scores within the tolerance of the exact kernel") {
  std::mt19937 rng(505);
  long same = 0;
  for (long T : {1L, 4L, 16L}) {  // V4.1: 32 heads x 128 over a 2k context's 512 keys
    CHECK(fast_index_case(T, 32, 128, 512, false, false, same, rng) == 0);
    CHECK(same == T * 512);  // bf16 inputs: every product exact, so fmaf rounds as multiply-then-add
    CHECK(fast_index_case(T, 32, 128, 512, true, false, same, rng) == 0);
  }
  CHECK(fast_index_case(1, 32, 128, 4096, true, false, same, rng) == 0);  // a 16k context
  CHECK(fast_index_case(300, 32, 128, 256, true, false, same, rng) == 0);  // prefill rows
  CHECK(fast_index_case(2, 5, 33, 17, true, false, same, rng) == 0);       // odd Di: scalar staging
  CHECK(fast_index_case(1, 2, 32, 5, true, true, same, rng) == 0);         // tiny golden, small bmm: the exact bits
  CHECK(same == 5);
}

// The one-block-a-row top-k (cuda/block_topk.hpp) against topk_rows: the same indices in the same
// order, ties, -inf (masked) entries and NaN included.

TEST_CASE("cuda top-k: the fast block sort gives the radix order's first k; topk_rows gives torch's set, as the host") {
  std::mt19937 rng(606);
  struct Shape {
    long rows;
    int n, k;
  };
  for (const Shape s : {Shape{1, 512, 512}, Shape{4, 512, 512}, Shape{16, 2048, 512}, Shape{3, 4096, 512},
                        Shape{2, 4096, 4096}, Shape{5, 5, 4}, Shape{7, 300, 1}, Shape{2, 1000, 999}}) {
    CAPTURE(s.rows);
    CAPTURE(s.n);
    CAPTURE(s.k);
    std::vector<float> v(s.rows * s.n);
    for (auto& x : v) {  // coarse values (many ties), a tenth -inf, a few NaN, +0 and -0
      const unsigned c = rng() % 100;
      x = c < 10 ? -INFINITY : c == 10 ? NAN : c == 11 ? 0.0f : c == 12 ? -0.0f : bf16_round(static_cast<float>(static_cast<int>(rng() % 64) - 32) / 8);
    }
    auto dv = fast_attn_upload(v);
    auto a = CudaBackend::alloc<int32_t>(s.rows * s.k), b = CudaBackend::alloc<int32_t>(s.rows * s.k);
    REQUIRE(cuda_detail::block_topk_rows(dv.data(), s.rows, s.n, s.k, a.data()));
    CudaBackend::topk_rows(dv.data(), s.rows, s.n, s.k, b.data());
    CudaBackend::sync();
    // the block sort: the first k by descending topk_order_key, in that order
    std::vector<int32_t> radix(s.rows * s.k);
    for (long r = 0; r < s.rows; ++r) testing::device_topk_row(v.data() + r * s.n, s.n, s.k, false, radix.data() + r * s.k);
    CHECK(fast_attn_download(a, s.rows * s.k) == radix);
    // topk_rows: torch's set (HostBackend's), whatever the order
    std::vector<int32_t> host(s.rows * s.k), dev = fast_attn_download(b, s.rows * s.k);
    HostBackend::topk_rows(v.data(), s.rows, s.n, s.k, host.data());
    for (long r = 0; r < s.rows; ++r) {
      std::sort(host.begin() + r * s.k, host.begin() + (r + 1) * s.k);
      std::sort(dev.begin() + r * s.k, dev.begin() + (r + 1) * s.k);
    }
    CHECK(dev == host);
  }
  CHECK_FALSE(cuda_detail::block_topk_rows(nullptr, 1, 4097, 512, nullptr));  // more than a block's 4096: not taken
}
