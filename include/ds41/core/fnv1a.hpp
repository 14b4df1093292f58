// ds41/core/fnv1a.hpp — FNV-1a, 64 bits: the golden contract's hash of a parameter name (SCHEMA §1,
// testing/filler.hpp) and the snapshot format's fingerprint of a model's shapes
// (model/sequence_bytes.hpp). Here, not in the filler, so that the model does not include the
// golden harness.
#pragma once
#include <cstdint>
#include <string_view>

namespace ds41 {

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : s) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

}  // namespace ds41
