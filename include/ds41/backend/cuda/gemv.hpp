// ds41/backend/cuda/gemv.hpp — the CUDA backend's decode Linear for fp8/fp4 weights (one to three
// input rows), and the warp atoms it shares with the tiled kernel (cuda/linear.hpp). nvcc only.
//
// Why a second kernel: the tiled kernel gives each lane an output row, so a 32-row tile is one
// warp's work and a 5120-row matrix is 160 blocks of 4 warps, about 5 warps per multiprocessor
// of an H200. Nsight Compute (5120x8192 fp8): 1.2 active warps per scheduler, 0.22 instructions
// issued per cycle, stalled on fixed-latency dependencies and shared memory, DRAM at 10%. The
// reference's sum leaves more parallelism than rows: each 32-column block's partial sum is
// independent (part = Σ q[k]·w[k] in k order), and only the row's sum of (part·s_x)·s_w runs in
// block order. So here a lane owns blocks, not rows:
//
//   linear_gemv_scaled_kernel<F, kVec>: a block of 8 warps owns 8 output rows of one input row.
//     1. The warps quantise the input row (act_quant, warp_act_quant: one 32-column block per warp
//        step) into shared memory, q at a 36-float pitch per block so lanes reading different
//        blocks as float4s hit distinct banks, and the block scales.
//     2. Warp w takes output row n; lane l takes blocks l, l + 32, ...: it reads its block's codes
//        straight from global memory (one warp reads 1 KB (fp8) or 512 B (fp4) of contiguous
//        row, the next block's codes in flight while this one is summed), sums part in k order,
//        and stores (part·s_x)·s_w into the warp's row of products.
//     3. Lane 0 adds the row's products in block order and rounds the output.
//   fp8 codes are decoded by bit placement (e4m3_decode_shift: a 256-entry table in shared memory
//   costs bank conflicts on random codes); fp4's 16-entry table sits in 16 distinct banks.
//   Dynamic shared memory: 180 bytes per 32 columns (K = 8192: 46 KB); rows wider than
//   gemv_shared_limit() allows go to the tiled kernel.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include "../../core/linear_math.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {
namespace cuda_detail {

/// One of a 16-byte piece's 32-bit words.
__device__ __forceinline__ uint32_t lin_word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
/// One of a float4's lanes.
__device__ __forceinline__ float lin_lane(const float4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

/// act_quant of one 32-column block of an input row, done once by a warp: lane j holds column j's
/// value v (0 for j >= ke). Returns act_quant_scale of the block and sets q to
/// act_quant_value(v, scale). The max is reduced across lanes, which is exact in any order
/// (fp8_pow2_scale_of_amax); a non-finite value anywhere in the block gives the NaN scale, as
/// act_quant_scale. Every lane must call it.
__device__ __forceinline__ float warp_act_quant(float v, float& q) {
  const bool bad = __any_sync(0xFFFFFFFFu, !act_quant_finite(v));
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float sx = bad ? act_quant_nan_scale() : fp8_pow2_scale_of_amax(amax);
  q = act_quant_value(v, sx);
  return sx;
}

constexpr int kGemvWarps = 8;                 // output rows per block, one per warp
constexpr int kGemvQPitch = 36;               // shared floats per 32-column block of q
constexpr int kGemvMaxShared = 160 * 1024;    // dynamic shared memory the kernel may ask for
constexpr int kGemvMaxInputRows = 3;          // more input rows go to the tiled kernel (R = 4)
constexpr int kGemvQuantInFlight = 4;         // input blocks a warp loads before quantising them

/// Shared bytes for K columns: q (kGemvQPitch per block), the block scales, one row of
/// products per warp.
inline size_t gemv_shared_bytes(int K) {
  const size_t kblocks = (static_cast<size_t>(K) + 31) / 32;
  return kblocks * (kGemvQPitch + 1 + kGemvWarps) * sizeof(float);
}

template <WeightFormat F>
struct GemvTraits {
  static constexpr int kBlockBytes = F == WeightFormat::kFp8Block32 ? 32 : 16;  // one 32-column block's codes
  static constexpr int kPieces = kBlockBytes / 16;
};

/// One lane's block of codes, loaded ahead of its use: its 16-byte pieces (zero past nbytes).
template <WeightFormat F>
struct GemvCodes {
  uint4 v[GemvTraits<F>::kPieces];
  float scale;
};

template <WeightFormat F, bool kVec>
__device__ __forceinline__ GemvCodes<F> gemv_load(const uint8_t* row, const float* scale_row, int kb, long row_bytes) {
  using Tr = GemvTraits<F>;
  GemvCodes<F> c;
  const long b0 = static_cast<long>(kb) * Tr::kBlockBytes;
  const int nbytes = row_bytes - b0 < Tr::kBlockBytes ? static_cast<int>(row_bytes - b0) : Tr::kBlockBytes;
#pragma unroll
  for (int p = 0; p < Tr::kPieces; ++p) {
    if constexpr (kVec) {  // row_bytes % 16 == 0 and the data 16-byte aligned: a piece is in the row or wholly past it
      c.v[p] = p * 16 < nbytes ? __ldg(reinterpret_cast<const uint4*>(row + b0 + p * 16)) : make_uint4(0, 0, 0, 0);
    } else {
      uint32_t wd[4] = {0, 0, 0, 0};
      for (int j = 0; j < 16 && p * 16 + j < nbytes; ++j) wd[j / 4] |= static_cast<uint32_t>(__ldg(row + b0 + p * 16 + j)) << (8 * (j % 4));
      c.v[p] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    }
  }
  c.scale = __ldg(scale_row + kb);
  return c;
}

/// part = Σ q[k]·w[k] over the block's columns [0, ke) in k order (the reference's), q the
/// block's 32 act_quant values in shared memory (16-byte aligned). kFull: ke == 32, no tests.
template <WeightFormat F, bool kFull>
__device__ __forceinline__ float gemv_block_part(const GemvCodes<F>& c, const float* qb, int ke, const float* lut4) {
  constexpr int kBits = F == WeightFormat::kFp8Block32 ? 8 : 4;
  constexpr int kPerWord = 32 / kBits;
  float part = 0.0f;
#pragma unroll
  for (int g = 0; g < 8; ++g) {  // 4 columns: one float4 of q
    const float4 q4 = *reinterpret_cast<const float4*>(qb + 4 * g);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int k = 4 * g + e;
      if (kFull || k < ke) {
        const uint32_t word = lin_word(c.v[k / (4 * kPerWord)], (k / kPerWord) % 4);
        const uint32_t code = (word >> (kBits * (k % kPerWord))) & ((1u << kBits) - 1);
        float wv;
        if constexpr (F == WeightFormat::kFp8Block32)
          wv = e4m3_decode_shift(code);
        else
          wv = lut4[code];
        part += lin_lane(q4, e) * wv;
      }
    }
  }
  return part;
}

/// See the file comment. Block (bx, by): output rows [8 bx, 8 bx + 8) of input row by.
template <WeightFormat F, bool kVec>
__global__ void __launch_bounds__(kGemvWarps * 32) linear_gemv_scaled_kernel(const float* x, long x_stride, MatrixView w, float* y,
                                                                             long y_stride, OutRound round) {
  extern __shared__ float4 gemv_smem[];
  __shared__ float lut4[16];
  const int K = w.cols, kblocks = (K + 31) / 32;
  float* q = reinterpret_cast<float*>(gemv_smem);  // [kblocks][kGemvQPitch]
  float* sxs = q + static_cast<long>(kblocks) * kGemvQPitch;
  float* prod = sxs + kblocks;  // [kGemvWarps][kblocks]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* xr = x + static_cast<long>(blockIdx.y) * x_stride;
  if constexpr (F == WeightFormat::kFp4Block32) {
    if (tid < 16) lut4[tid] = e2m1_decode(static_cast<uint8_t>(tid));
  }

  const int n = blockIdx.x * kGemvWarps + warp;
  const bool live = n < w.rows;  // the same for the whole warp
  const long row_bytes = row_major_row_bytes(F, K);
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + static_cast<long>(live ? n : 0) * row_bytes;
  const float* scale_row = w.scale_row(live ? n : 0);
  // the lane's first block is in flight while the input is quantised
  GemvCodes<F> next{};
  if (live && lane < kblocks) next = gemv_load<F, kVec>(row, scale_row, lane, row_bytes);

  // 1. act_quant of the input row, a few blocks' loads in flight per warp
  for (int kb0 = warp; kb0 < kblocks; kb0 += kGemvQuantInFlight * kGemvWarps) {
    float v[kGemvQuantInFlight];
#pragma unroll
    for (int u = 0; u < kGemvQuantInFlight; ++u) {
      const int kb = kb0 + u * kGemvWarps;
      v[u] = kb < kblocks && kb * 32 + lane < K ? xr[kb * 32 + lane] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kGemvQuantInFlight; ++u) {
      const int kb = kb0 + u * kGemvWarps;
      if (kb >= kblocks) break;  // the same for the whole warp
      float qv;
      const float sx = warp_act_quant(v[u], qv);
      q[kb * kGemvQPitch + lane] = qv;
      if (lane == 0) sxs[kb] = sx;
    }
  }
  __syncthreads();
  if (!live) return;  // no barrier follows

  // 2. the lane's blocks: (part·s_x)·s_w each, the next block's codes loading meanwhile
  float* prow = prod + warp * kblocks;
  for (int kb = lane; kb < kblocks; kb += 32) {
    const GemvCodes<F> c = next;
    if (kb + 32 < kblocks) next = gemv_load<F, kVec>(row, scale_row, kb + 32, row_bytes);
    const int ke = K - kb * 32 < 32 ? K - kb * 32 : 32;
    const float* qb = q + kb * kGemvQPitch;
    const float part = ke == 32 ? gemv_block_part<F, true>(c, qb, ke, lut4) : gemv_block_part<F, false>(c, qb, ke, lut4);
    prow[kb] = part * sxs[kb] * c.scale;  // (part·s_x)·s_w, as add_block
  }
  __syncwarp();

  // 3. the row's sum in block order
  if (lane == 0) {
    float acc = 0.0f;
    for (int kb = 0; kb < kblocks; ++kb) acc += prow[kb];
    y[static_cast<long>(blockIdx.y) * y_stride + n] = apply_round(acc, round);
  }
}

/// The dynamic shared memory the kernel asks for: kGemvMaxShared, or less where the device's
/// opt-in limit is lower (less the kernel's static table).
inline size_t gemv_shared_limit() {
  static const size_t limit = [] {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
      return size_t{48 * 1024 - 1024};
    const size_t avail = optin > 1024 ? static_cast<size_t>(optin) - 1024 : 0;
    return avail < kGemvMaxShared ? avail : static_cast<size_t>(kGemvMaxShared);
  }();
  return limit;
}

/// Whether the decode kernel can compute this Linear: fp8/fp4, row-major (fp4 with an even
/// column count), at most kGemvMaxInputRows input rows, and K within its shared memory.
inline bool linear_gemv_supports(const MatrixView& w, long rows) {
  if (w.format != WeightFormat::kFp8Block32 && w.format != WeightFormat::kFp4Block32) return false;
  if (w.layout != WeightLayout::kRowMajor || rows > kGemvMaxInputRows) return false;
  if (w.format == WeightFormat::kFp4Block32 && (w.cols % 2) != 0) return false;
  return gemv_shared_bytes(w.cols) <= gemv_shared_limit();
}

/// Narrower rows go to the tiled kernel: with few blocks per row most lanes idle after the
/// first, and every block re-quantises the input for few weights. H200, same run: fp8
/// 32768x1280 decode 59.0 us here against 41.9 tiled; fp4 5120x2304 14.8 against 20.1, fp8
/// 1280x5120 16.3 against 50.4, 5120x8192 50.0 against 93.0.
constexpr int kGemvMinCols = 2048;

/// Whether launch_linear sends this Linear to the decode kernel: it can, and it is faster there.
inline bool linear_gemv_chosen(const MatrixView& w, long rows) { return w.cols >= kGemvMinCols && linear_gemv_supports(w, rows); }

template <WeightFormat F>
void launch_linear_gemv(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride, OutRound round,
                        cudaStream_t stream) {
  const long row_bytes = row_major_row_bytes(F, w.cols);
  const bool vec = (reinterpret_cast<uintptr_t>(w.data) % 16) == 0 && row_bytes % 16 == 0;
  const size_t smem = gemv_shared_bytes(w.cols);
  const dim3 grid(static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps), static_cast<unsigned>(rows));
  auto kernel = vec ? linear_gemv_scaled_kernel<F, true> : linear_gemv_scaled_kernel<F, false>;
  // dynamic shared memory past 48 KB needs the opt-in, once per kernel
  static const bool opted_in[2] = {
      cudaFuncSetAttribute(linear_gemv_scaled_kernel<F, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(gemv_shared_limit())) == cudaSuccess,
      cudaFuncSetAttribute(linear_gemv_scaled_kernel<F, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(gemv_shared_limit())) == cudaSuccess};
  (void)opted_in;  // a refused opt-in shows as a launch error for wide rows, which the caller checks
  kernel<<<grid, kGemvWarps * 32, smem, stream>>>(x, x_stride, w, y, y_stride, round);
}

}  // namespace cuda_detail
}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
