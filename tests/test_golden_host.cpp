// Golden tests on the host backend.
#include "golden_checks.hpp"
#include "ds41/backend/host.hpp"

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
