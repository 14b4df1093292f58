// Every HostBackend operation against its DS41_HD definition, bit for bit (tests/backend_ops.hpp;
// test_golden_cuda.cu runs the same template on CudaBackend).
#include <doctest/doctest.h>
#include "backend_ops.hpp"
#include "ds41/backend/host.hpp"

namespace test_backend_ops {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

TEST_CASE("backend ops: HostBackend against the DS41_HD definitions, every operation") {
  long compared = 0, ops = 0;
  for (const auto& r : testing::run_backend_ops<HostBackend>()) {
    CAPTURE(r.op);
    CAPTURE(r.shape);
    CHECK(r.compared > 0);
    CHECK(r.mismatched == 0);
    compared += r.compared;
    ++ops;
  }
  MESSAGE("host: " << ops << " operation x shape cases, " << compared << " outputs compared");
}

}  // namespace test_backend_ops
