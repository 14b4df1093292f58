// Golden tests on the CUDA backend: the same checks as the host (golden_checks.hpp), plus the
// device against the host capture by capture, and device memory returned by release(). Without a
// device the binary prints "skipped: no CUDA device" and exits 77, which CTest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <cstdio>
#include "ds41/backend/cuda.hpp"
#include "ds41/backend/host.hpp"
#include "golden_checks.hpp"

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
      // same rounding points and no fused multiply-add: only libm differences (log1pf in the
      // router's softplus) may remain, at float32 ulp level
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
  CudaBackend::sync();
  const size_t before = CudaBackend::free_memory();
  for (int i = 0; i < 20; ++i) {
    dev.prefill(g.prompt_tokens);
    for (int32_t t : g.decode_tokens) dev.decode(t);
    dev.release();
  }
  CudaBackend::sync();
  const size_t after = CudaBackend::free_memory();
  // the driver allocates in 2 MiB pages; anything a sequence kept would accumulate over 20 runs
  CHECK(after + (2u << 20) >= before);
}
