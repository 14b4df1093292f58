// golden_device.hpp — ds41-golden's --backend cuda, defined in ds41_golden_cuda.cu (compiled by
// nvcc) so that ds41_golden.cpp stays a C++ source with the build's -march (golden_report.hpp).
#pragma once
#include <string>
#include "ds41/testing/golden_run.hpp"
#include "golden_report.hpp"

namespace ds41::examples {

/// What --backend cuda runs besides the golden itself.
struct DeviceRun {
  std::string checkpoint;     // --checkpoint DIR ("" = regenerated weights)
  long streamed = 0;          // --streamed-experts N
  bool graph_oracle = false;  // --graph-oracle
  bool fast = false;          // --numerics fast
};

/// Runs golden `g` (read from `golden_path`) on the device; the exit code (2: no device).
int run_on_device(const golden::Golden& g, const std::string& golden_path, const DeviceRun& how,
                  const golden::RunOptions& opt, ReportOptions ro);

}  // namespace ds41::examples
