// ds41/backend/cuda/fast_linear.hpp — the fast numerics policy's decode Linear (CudaFastBackend):
// y[t, n] = round(x[t, :] · W[n, :]) for fp8 32x32-block, fp4 per-32 and bf16 weights and 1..16
// input rows, summed in any order with fused multiply-adds but with the reference's rounding
// points (the plan, the atoms and why: cuda/fast_linear_plan.hpp; docs/NUMERICS.md, "The device's
// fast policy"). nvcc only; included by cuda.hpp.
//
// Passes of one call (all on the backend stream):
//   1. fp8/fp4: fast_act_quant_kernel quantises the T input rows once (warp_act_quant, the exact
//      path's own, so the codes and scales are the reference's) into the workspace.
//   2. fast_linear_kernel<F, TT, R>: each block stages its K slice of the T rows (q or raw x) in
//      shared memory, then each lane streams its warp's R rows 16 bytes at a time (the next chunk
//      in flight while this one is summed), decodes in registers and fuses T x R multiply-adds per
//      column; an xor butterfly adds the lanes.
//   3. splits > 1: fast_split_reduce_kernel adds the slices' partials in split order and rounds.
// Anything the plan rejects, misaligned weights and the panel layout return false: the caller then
// runs the exact kernels (cuda/linear.hpp).
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include "../../core/linear_math.hpp"
#include "fast_linear_plan.hpp"
#include "gemv.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {
namespace cuda_detail {

/// Pass 1: act_quant of T rows of K columns (K % 32 == 0), one warp per 32-column block.
__global__ void __launch_bounds__(kFastThreads) fast_act_quant_kernel(const float* x, long x_stride, int T, int K, float* q,
                                                                      float* sx) {
  const long warp_id = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int kblocks = K / 32;
  if (warp_id >= static_cast<long>(T) * kblocks) return;  // the same for the whole warp
  const int t = static_cast<int>(warp_id / kblocks), kb = static_cast<int>(warp_id % kblocks);
  float qv;
  const float s = warp_act_quant(x[t * x_stride + kb * 32 + lane], qv);
  q[static_cast<long>(t) * K + kb * 32 + lane] = qv;
  if (lane == 0) sx[static_cast<long>(t) * kblocks + kb] = s;
}

/// Pass 2 (see the file comment). Block (bx, by): output rows [bx·8R, bx·8R + 8R) (warp w: R rows
/// from bx·8R + w·R), columns [by·k_slice, ...). `in` holds the rows to stage (q for fp8/fp4, x for
/// bf16), `in_scales` their act_quant scales [T][K/32] (fp8/fp4). splits == 1: rounded outputs
/// into y; else raw sums into partials[by][t][n].
template <WeightFormat F, int TT, int R>
__global__ void __launch_bounds__(kFastThreads) fast_linear_kernel(const float* in, long in_stride, const float* in_scales, int T,
                                                                   MatrixView w, int k_slice, float* y, long y_stride,
                                                                   float* partials, int splits, OutRound round) {
  constexpr int CC = fast_chunk_cols(F), QP = fast_q_pitch(F);
  constexpr bool kScaled = FormatTraits<F>::kBlockScaled;
  extern __shared__ float4 fast_smem[];
  float* sq = reinterpret_cast<float*>(fast_smem);
  const int K = w.cols, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int k0 = blockIdx.y * k_slice;
  const int klen = K - k0 < k_slice ? K - k0 : k_slice;
  const int nchunks = klen / CC;
  const int t_pitch = nchunks * QP;  // floats per staged row (a multiple of 4: float4 reads stay aligned)
  const int nblk = klen / 32;
  float* ssx = sq + TT * t_pitch;  // [TT][nblk], fp8/fp4

  // stage the slice of the input rows (zeros past T) and their scales
  for (int i = tid; i < TT * klen; i += kFastThreads) {
    const int t = i / klen, k = i - t * klen;
    sq[t * t_pitch + (k / CC) * QP + k % CC] = t < T ? in[t * in_stride + k0 + k] : 0.0f;
  }
  if constexpr (kScaled) {
    for (int i = tid; i < TT * nblk; i += kFastThreads) {
      const int t = i / nblk, b = i - t * nblk;
      ssx[i] = t < T ? in_scales[static_cast<long>(t) * (K / 32) + k0 / 32 + b] : 0.0f;
    }
  }
  __syncthreads();

  const int n0 = blockIdx.x * (kFastWarps * R) + warp * R;
  const long row_bytes = row_major_row_bytes(F, K), slice_byte0 = row_major_row_bytes(F, k0);
  const uint8_t* rowp[R];
  const float* srow[R];
  bool live[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    live[r] = n0 + r < w.rows;
    const int n = live[r] ? n0 + r : 0;
    rowp[r] = static_cast<const uint8_t*>(w.data) + static_cast<long>(n) * row_bytes + slice_byte0;
    srow[r] = kScaled ? w.scale_row(n) + k0 / 32 : nullptr;
  }
  auto load = [&](int c, FastChunk (&ch)[R], float (&sw)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint4 v = make_uint4(0, 0, 0, 0);
      sw[r] = 0.0f;
      if (live[r] && c < nchunks) {
        v = __ldg(reinterpret_cast<const uint4*>(rowp[r] + static_cast<long>(c) * 16));
        if constexpr (kScaled) sw[r] = __ldg(srow[r] + (c * CC) / 32);
      }
      ch[r] = FastChunk{{v.x, v.y, v.z, v.w}};
    }
  };

  float acc[R][TT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[r][t] = 0.0f;
  FastChunk next[R];
  float next_sw[R];
  load(lane, next, next_sw);
  for (int c = lane; c < nchunks; c += 32) {
    FastChunk ch[R];
    float sw[R];
#pragma unroll
    for (int r = 0; r < R; ++r) ch[r] = next[r], sw[r] = next_sw[r];
    load(c + 32, next, next_sw);  // the next chunk's loads in flight while this one is summed
    float part[R][TT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < TT; ++t) part[r][t] = kScaled ? 0.0f : acc[r][t];
    const float* qc = sq + c * QP;
#pragma unroll
    for (int g = 0; g < CC / 4; ++g) {
      float q4[TT][4];
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        const float4 v = *reinterpret_cast<const float4*>(qc + t * t_pitch + 4 * g);
        q4[t][0] = v.x, q4[t][1] = v.y, q4[t][2] = v.z, q4[t][3] = v.w;
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float w4[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) w4[e] = fast_chunk_value<F>(ch[r], 4 * g + e);
#pragma unroll
        for (int t = 0; t < TT; ++t) part[r][t] = fast_fma4(part[r][t], q4[t], w4);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        if constexpr (kScaled)
          acc[r][t] = fast_scaled_term(acc[r][t], part[r][t], ssx[t * nblk + (c * CC) / 32], sw[r]);
        else
          acc[r][t] = part[r][t];
      }
  }

  // the lanes' sums: an xor butterfly (every lane ends with the total, fast_butterfly_sum)
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      acc[r][t] = v;
    }
  // lane i stores output (r, t) = (i / TT, i % TT) of its warp's R x TT (at most 32 of them)
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (lane != r * TT + t || !live[r] || t >= T) continue;
      const long n = n0 + r;
      if (splits == 1)
        y[t * y_stride + n] = apply_round(acc[r][t], round);
      else
        partials[(static_cast<long>(blockIdx.y) * T + t) * w.rows + n] = acc[r][t];
    }
}

/// Pass 3: y[t, n] = round(Σ_s partials[s][t][n]) in split order.
__global__ void fast_split_reduce_kernel(const float* partials, int splits, int T, int rows, float* y, long y_stride,
                                         OutRound round) {
  const long e = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long>(T) * rows) return;
  const long t = e / rows, n = e % rows;
  y[t * y_stride + n] = apply_round(fast_split_sum(partials + e, splits, static_cast<long>(T) * rows), round);
}

/// The device's multiprocessor count and opt-in shared memory per block (once per process).
struct FastDeviceLimits {
  int sm_count = 0;
  size_t shared_optin = 0;
};
inline FastDeviceLimits fast_device_limits() {
  static const FastDeviceLimits lim = [] {
    FastDeviceLimits l;
    int dev = 0, sms = 0, optin = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess) {
      l.sm_count = sms;
      l.shared_optin = static_cast<size_t>(optin);
    } else {
      (void)cudaGetLastError();
    }
    return l;
  }();
  return lim;
}

/// The plan for this device: its multiprocessors, and shared memory up to kFastSharedBudget or its
/// opt-in limit, whichever is lower.
inline FastLinearPlan plan_fast_linear_here(const MatrixView& w, long rows) {
  const FastDeviceLimits lim = fast_device_limits();
  const size_t limit = lim.shared_optin < kFastSharedBudget ? lim.shared_optin : kFastSharedBudget;
  if (rows > kFastMaxRows || lim.sm_count == 0) {
    FastLinearPlan p;
    p.reason = rows > kFastMaxRows ? "more than 16 input rows (prefill: the exact tiled kernel)" : "no device limits";
    return p;
  }
  return plan_fast_linear(w.rows, w.cols, static_cast<int>(rows), w.format, lim.sm_count, limit);
}

/// Whether the fast kernel takes this Linear on this device: a plan, the row-major layout, block
/// scales present for fp8/fp4, and 16-byte aligned weights (chunks are 16-byte loads).
inline bool fast_linear_supports(const MatrixView& w, long rows) {
  if (w.layout != WeightLayout::kRowMajor || (reinterpret_cast<uintptr_t>(w.data) % 16) != 0) return false;
  if (w.block_scaled() && w.scales == nullptr) return false;
  return plan_fast_linear_here(w, rows).ok;
}

template <WeightFormat F, int TT>
void launch_fast_linear_kernel(const FastLinearPlan& p, const float* in, long in_stride, const float* in_scales, const MatrixView& w,
                               float* y, long y_stride, float* partials, OutRound round, cudaStream_t stream) {
  constexpr int R = fast_rows_per_warp(TT);
  auto kernel = fast_linear_kernel<F, TT, R>;
  // dynamic shared memory past 48 KB needs the opt-in, once per kernel, up to the limit the plan
  // was made for (a refusal shows as a launch error, which the caller checks)
  static const bool opted_in = [&] {
    const size_t optin = fast_device_limits().shared_optin;
    const int limit = static_cast<int>(optin < kFastSharedBudget ? optin : kFastSharedBudget);
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit) == cudaSuccess;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>(p.grid_x), static_cast<unsigned>(p.grid_y));
  kernel<<<grid, kFastThreads, p.shared_bytes, stream>>>(in, in_stride, in_scales, p.T, w, p.k_slice, y, y_stride, partials,
                                                         p.splits, round);
}

template <WeightFormat F>
void launch_fast_linear_format(const FastLinearPlan& p, const float* in, long in_stride, const float* in_scales, const MatrixView& w,
                               float* y, long y_stride, float* partials, OutRound round, cudaStream_t stream) {
  switch (p.t_tile) {
    case 1: return launch_fast_linear_kernel<F, 1>(p, in, in_stride, in_scales, w, y, y_stride, partials, round, stream);
    case 2: return launch_fast_linear_kernel<F, 2>(p, in, in_stride, in_scales, w, y, y_stride, partials, round, stream);
    case 4: return launch_fast_linear_kernel<F, 4>(p, in, in_stride, in_scales, w, y, y_stride, partials, round, stream);
    case 8: return launch_fast_linear_kernel<F, 8>(p, in, in_stride, in_scales, w, y, y_stride, partials, round, stream);
    default: return launch_fast_linear_kernel<F, 16>(p, in, in_stride, in_scales, w, y, y_stride, partials, round, stream);
  }
}

/// The fast Linear, or false (nothing launched) where fast_linear_supports says no. `workspace(n)`
/// returns a device buffer of at least n floats that stays valid until the stream has run this
/// call (cuda.hpp's fast_workspace, one for both policies).
template <class Workspace>
bool launch_fast_linear(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride, OutRound round,
                        cudaStream_t stream, Workspace&& workspace) {
  if (rows <= 0 || w.rows <= 0 || !fast_linear_supports(w, rows)) return false;
  const FastLinearPlan p = plan_fast_linear_here(w, rows);
  float* ws = p.workspace_floats ? workspace(p.workspace_floats) : nullptr;
  const float* in = x;
  long in_stride = x_stride;
  const float* in_scales = nullptr;
  if (p.block_scaled()) {
    const long warps = static_cast<long>(rows) * (w.cols / 32);
    const unsigned blocks = static_cast<unsigned>((warps + kFastWarps - 1) / kFastWarps);
    fast_act_quant_kernel<<<blocks, kFastThreads, 0, stream>>>(x, x_stride, static_cast<int>(rows), w.cols, ws, ws + p.ws_scales());
    in = ws;
    in_stride = w.cols;
    in_scales = ws + p.ws_scales();
  }
  float* partials = p.splits > 1 ? ws + p.ws_partials() : nullptr;
  dispatch_format(w.format, [&](auto tag) {  // the plan took only formats with fast_chunk_cols
    constexpr WeightFormat F = decltype(tag)::value;
    if constexpr (fast_chunk_cols(F) != 0)
      launch_fast_linear_format<F>(p, in, in_stride, in_scales, w, y, y_stride, partials, round, stream);
  });
  if (p.splits > 1) {
    const long n = rows * static_cast<long>(w.rows);
    fast_split_reduce_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(partials, p.splits, static_cast<int>(rows),
                                                                                          w.rows, y, y_stride, round);
  }
  return true;
}

}  // namespace cuda_detail
}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
