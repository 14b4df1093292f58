// libFuzzer target: the golden loader must turn any input into a Golden or a ds41::Error —
// never a crash, an overflow or a leak.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include "ds41/testing/golden.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ds41::golden::Golden g =
        ds41::golden::parse(std::string_view(reinterpret_cast<const char*>(data), size), "<fuzz>");
    // a golden that loads must also regenerate its weights or refuse cleanly; keep that cheap
    long elements = 0;
    for (const auto& p : g.params) {
      long n = 1;
      for (long d : p.shape) n *= d;
      elements += n;
    }
    if (elements < (1L << 20)) (void)ds41::golden::regenerate_weights(g);
  } catch (const ds41::Error&) {
  }
  return 0;
}
