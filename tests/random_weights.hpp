// tests/random_weights.hpp — random weight matrices of every WeightFormat, for the kernel tests.
#pragma once
#include <cmath>
#include <random>
#include <vector>
#include "ds41/model/weights.hpp"

namespace ds41::testing {

/// A random [rows, cols] matrix of format f; fp8 codes avoid the NaN codes unless asked.
inline HostTensor random_matrix(WeightFormat f, int rows, int cols, std::mt19937& rng, bool fp8_nan_codes = false) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  HostTensor t;
  t.shape = {rows, cols};
  t.format = f;
  const long n = static_cast<long>(rows) * cols;
  const long kblocks = (cols + 31) / 32;
  switch (f) {
    case WeightFormat::kF32: {
      std::vector<float> v(n);
      for (auto& e : v) e = uni(rng);
      t = HostTensor::from_f32({rows, cols}, v);
      break;
    }
    case WeightFormat::kBF16: {
      std::vector<float> v(n);
      for (auto& e : v) e = uni(rng);
      t = HostTensor::from_bf16_values({rows, cols}, v);
      break;
    }
    case WeightFormat::kFp8Block32:
      t.payload.resize(n);
      for (auto& b : t.payload) {
        b = static_cast<uint8_t>(byte(rng));
        if (!fp8_nan_codes && (b & 0x7F) == 0x7F) b ^= 1;
      }
      t.scales.resize(static_cast<size_t>((rows + 31) / 32) * kblocks);
      for (auto& s : t.scales) s = std::ldexp(1.0f, static_cast<int>(byte(rng) % 9) - 6) * (1.0f + uni(rng) / 8);
      break;
    case WeightFormat::kFp4Block32:
      t.payload.resize(static_cast<size_t>(rows) * (cols / 2));
      for (auto& b : t.payload) b = static_cast<uint8_t>(byte(rng));
      t.scales.resize(static_cast<size_t>(rows) * kblocks);  // e8m0, as every fp4 checkpoint's
      for (auto& s : t.scales) s = std::ldexp(1.0f, static_cast<int>(byte(rng) % 9) - 6);
      break;
  }
  return t;
}

}  // namespace ds41::testing
