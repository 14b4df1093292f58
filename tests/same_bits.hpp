// tests/same_bits.hpp — the float comparison of the bit-exact tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ds41::testing {

/// The same float bit for bit, or both NaN (NaN payloads are not part of the contract).
inline bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

}  // namespace ds41::testing
