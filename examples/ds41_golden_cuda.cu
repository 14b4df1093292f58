// ds41_golden_cuda.cu — ds41-golden's --backend cuda (golden_device.hpp): CudaBackend and
// CudaFastBackend runs, resident or from a checkpoint, and the graph oracle.
#include <cstdio>
#include "ds41/backend/cuda.hpp"
#include "golden_device.hpp"
#include "graph_oracle.hpp"

namespace ds41::examples {

int run_on_device(const golden::Golden& g, const std::string& golden_path, const DeviceRun& how,
                  const golden::RunOptions& opt, ReportOptions ro) {
  if (!CudaBackend::device_available()) {
    std::fprintf(stderr, "ds41-golden: no CUDA device available\n");
    return 2;
  }
  if (how.graph_oracle) return graph_oracle(g, golden::regenerate_weights(g));
  if (how.fast) {
    ro.fast = true;
    ro.margins = Margins::load(golden_path);
    if (!how.checkpoint.empty()) return run_checkpoint<CudaFastBackend, false>(g, how.checkpoint, 0, opt, ro);
    return run_regenerated<CudaFastBackend>(g, opt, ro);
  }
  if (!how.checkpoint.empty()) return run_checkpoint<CudaBackend>(g, how.checkpoint, how.streamed, opt, ro);
  return run_regenerated<CudaBackend>(g, opt, ro);
}

}  // namespace ds41::examples
