// Golden tests on the host backend.
#include "golden_checks.hpp"
#include "ds41/backend/host.hpp"

namespace test_golden_host {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

TEST_CASE("host: every capture of every step of the tiny golden") { testing::check_full_golden<HostBackend>(); }
TEST_CASE("host: layer 0 bf16 and integer captures are bit-identical") { testing::check_layer0_exact<HostBackend>(); }
TEST_CASE("host: two runs give identical captures") { testing::check_deterministic<HostBackend>(); }
TEST_CASE("host: teacher-forced run isolates each component and still passes everything") {
  const auto& g = testing::tiny_golden();
  Model<HostBackend> model(g.config, testing::tiny_weights());
  golden::RunOptions opt;
  opt.force_inputs = true;
  auto t = testing::check_reports(golden::run(g, model, opt));
  CHECK(t.failed == 0);
}

TEST_CASE("host: every capture of every step is bit-identical to the reference") {
  // the reference's rounding points plus its runtime's summation orders and exp/log1p paths
  // (docs/NUMERICS.md) reproduce the tiny golden exactly, not just within the bounds
  const auto& g = testing::tiny_golden();
  Model<HostBackend> model(g.config, testing::tiny_weights());
  long total = 0, exact = 0;
  for (const auto& rep : golden::run(g, model))
    for (const auto& r : rep.results) {
      CAPTURE(rep.step);
      CAPTURE(r.name);
      CHECK(r.exact);
      ++total;
      exact += r.exact;
    }
  CHECK(exact == total);
  CHECK(total == 1006);
}

}  // namespace test_golden_host
