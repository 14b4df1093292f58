// ds41/backend/cuda/fast_attention.hpp — the fast-numerics device kernels for sparse attention with
// the per-head sink and for the indexer's scores: cuda_detail::fast_sparse_attention and
// cuda_detail::fast_index_scores, with CudaBackend::sparse_attention's and index_scores' parameters,
// launched on the backend stream. Include at global scope once cuda.hpp's backend_stream,
// fast_workspace and DS41_CUDA_CHECK are defined: from a .cu file after ds41/backend/cuda.hpp, or
// from cuda.hpp itself between `}  // namespace ds41` and `namespace ds41 {` after its first
// cuda_detail block (what its FastNumerics dispatch needs).
//
// Why: the exact operations run one thread per (row, head) or per (row, key), each a sum in the
// reference's order: a decode step's 64 heads are 64 threads walking 640 x 512 products one at a
// time. Here the KV rows of a tile are gathered into shared memory once for up to 8 heads (the KV
// is one latent shared by all heads), warps share the dot products, and a long index list is split
// over blocks whose partial softmax states a second kernel merges (flash-decoding). What is kept
// and what is not: fast_attention_plan.hpp, whose DS41_HD functions do the arithmetic here.
#pragma once
#if !defined(__CUDACC__)
#error "ds41/backend/cuda/fast_attention.hpp must be compiled by nvcc (a .cu translation unit)"
#endif
#include <cuda_runtime.h>
#include <cstdint>
#include "../../core/attention_math.hpp"
#include "../../core/compress_math.hpp"
#include "fast_attention_plan.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::cuda_detail {

/// SM count and shared-memory limits of the current device, read once.
inline const fast_attn::DeviceLimits& attention_device_limits() {
  static const fast_attn::DeviceLimits lim = [] {
    fast_attn::DeviceLimits l;
    int dev = 0, v = 0;
    DS41_CUDA_CHECK(cudaGetDevice(&dev));
    DS41_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    l.sm_count = v;
    DS41_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    l.smem_per_block = static_cast<size_t>(v);
    DS41_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    l.smem_per_sm = static_cast<size_t>(v);
    return l;
  }();
  return lim;
}

/// Lets `kernel` take up to the device's opt-in dynamic shared memory.
template <class K>
inline void attn_allow_full_shared_memory(K kernel) {
  DS41_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(attention_device_limits().smem_per_block)));
}

__device__ __forceinline__ float attn_warp_sum(float v) {  // the butterfly lane_score_share names (xor 16, 8, 4, 2, 1)
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float attn_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__host__ __device__ inline bool attn_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/// dst[0 .. D4) = src[0 .. D) then zeros: one row staged into shared memory by the calling threads
/// (lane `i0` of `step` threads), 16-byte chunks when the source row allows.
__device__ __forceinline__ void attn_stage_row(float* dst, const float* src, int D, int D4, bool vec4, int i0, int step) {
  if (vec4) {  // D % 4 == 0 and src 16-byte aligned: D4 == D
    for (int c = i0; c < D4 / 4; c += step)
      reinterpret_cast<float4*>(dst)[c] = __ldg(reinterpret_cast<const float4*>(src) + c);
  } else {
    for (int d = i0; d < D4; d += step) dst[d] = d < D ? __ldg(src + d) : 0.0f;
  }
}

// ------------------------------------------------------------------ sparse attention

struct FastAttnArgs {
  const float* q;       // [T, H, D]
  const float* kv;      // [rows, D]
  const int32_t* idx;   // [T, ncols], -1: masked
  const float* sink;    // [H]
  float* out;           // [T, H, D]
  float* part_acc;      // splits > 1: [T, H, splits, D] unnormalised value sums
  float* part_state;    // splits > 1: [T, H, splits, 2] (m, den)
  long T;
  int H, D, ncols;
  float scale;
  bool vec4;            // q and kv rows may be read as float4
  fast_attn::SparseAttnPlan plan;
};

/// One block: query row t, heads [h0, h0 + hb), tiles [first_tile, end_tile) of its index list.
/// Per tile: warp 0 lists the unmasked rows in index order, the block stages them, each warp
/// scores its keys for all hb heads (lane shares + butterfly), warp h runs head h's softmax step
/// over the tile, and each thread owns a pair of output columns for all hb heads in the value sum.
__global__ void __launch_bounds__(fast_attn::kThreads) fast_sparse_attention_kernel(FastAttnArgs a) {
  using namespace fast_attn;
  extern __shared__ float4 fast_attn_smem[];
  const SparseAttnPlan& p = a.plan;
  const int D = a.D, D4 = padded_dim(D), TK = p.tile_keys;
  const long b = blockIdx.x;
  const long t = p.row_of(b);
  const int g = p.group_of(b), split = p.split_of(b);
  const int h0 = p.first_head(g), hb = p.heads_in(g, a.H);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  float* qs = reinterpret_cast<float*>(fast_attn_smem);  // [hb][D4]
  float* accs = qs + p.heads_per_block * D4;              // [hb][D4] value sums
  float* rows = accs + p.heads_per_block * D4;            // [TK][D4] the tile's unmasked rows
  float* sc = rows + TK * D4;                             // [8][TK] scores
  float* pr = sc + kMaxHeadsPerBlock * TK;                // [TK][8] bf16 probabilities
  float* st_m = pr + kMaxHeadsPerBlock * TK;
  float* st_den = st_m + kMaxHeadsPerBlock;
  float* st_alpha = st_den + kMaxHeadsPerBlock;
  int* rowsel = reinterpret_cast<int*>(st_alpha + kMaxHeadsPerBlock);  // [TK]
  int* nu_s = rowsel + TK;

  for (int h = 0; h < hb; ++h)
    attn_stage_row(qs + h * D4, a.q + (t * a.H + h0 + h) * D, D, D4, a.vec4, tid, blockDim.x);
  for (int i = tid; i < hb * D4; i += blockDim.x) accs[i] = 0.0f;
  if (tid < kMaxHeadsPerBlock) {
    const SoftmaxState s0;
    st_m[tid] = s0.m;
    st_den[tid] = s0.den;
  }
  const int32_t* idx_row = a.idx + t * a.ncols;

  for (int tile = p.first_tile(split); tile < p.end_tile(split); ++tile) {
    const int key0 = tile * TK, bn = a.ncols - key0 < TK ? a.ncols - key0 : TK;
    __syncthreads();  // the previous tile's rows, scores and probabilities are consumed
    if (warp == 0) {  // the unmasked rows in index order (lane: slots lane and lane + 32)
      const int r0 = lane < bn ? idx_row[key0 + lane] : -1;
      const int r1 = lane + 32 < bn ? idx_row[key0 + lane + 32] : -1;
      const unsigned b0 = __ballot_sync(0xffffffffu, r0 >= 0), b1 = __ballot_sync(0xffffffffu, r1 >= 0);
      const unsigned below = (1u << lane) - 1u;
      if (r0 >= 0) rowsel[__popc(b0 & below)] = r0;
      if (r1 >= 0) rowsel[__popc(b0) + __popc(b1 & below)] = r1;
      if (lane == 0) *nu_s = __popc(b0) + __popc(b1);
    }
    __syncthreads();
    const int nu = *nu_s;
    if (nu == 0) continue;  // a masked tile changes nothing (alpha would be exp(0) = 1)
    // stage: a warp per row
    for (int u = warp; u < nu; u += kWarps)
      attn_stage_row(rows + u * D4, a.kv + static_cast<long>(rowsel[u]) * D, D, D4, a.vec4, lane, 32);
    __syncthreads();
    // scores: a warp per key, every head of the block; the key's chunks read once for all heads
    for (int u = warp; u < nu; u += kWarps) {
      float part[kMaxHeadsPerBlock];
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h) part[h] = 0.0f;
      const float* k = rows + u * D4;
      for (int d0 = 4 * lane; d0 < D4; d0 += 128) {
        const float4 kc = *reinterpret_cast<const float4*>(k + d0);
        const Vec4 kv4{kc.x, kc.y, kc.z, kc.w};
#pragma unroll
        for (int h = 0; h < kMaxHeadsPerBlock; ++h)
          if (h < hb) {
            const float4 qc = *reinterpret_cast<const float4*>(qs + h * D4 + d0);
            part[h] = fma_dot4(Vec4{qc.x, qc.y, qc.z, qc.w}, kv4, part[h]);  // lane_score_share's steps
          }
      }
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h)
        if (h < hb) {
          const float s = attn_warp_sum(part[h]);
          if (lane == 0) sc[h * TK + u] = s * a.scale;
        }
    }
    __syncthreads();
    // softmax step: warp h for head h, a lane for keys lane and lane + 32
    if (warp < hb) {
      const int h = warp;
      const float s0 = lane < nu ? sc[h * TK + lane] : -INFINITY;
      const float s1 = lane + 32 < nu ? sc[h * TK + lane + 32] : -INFINITY;
      SoftmaxState st{st_m[h], st_den[h]};
      const float alpha = softmax_advance(st, attn_warp_max(fmaxf(s0, s1)));
      const float p0 = lane < nu ? softmax_prob(s0, st) : 0.0f;
      const float p1 = lane + 32 < nu ? softmax_prob(s1, st) : 0.0f;
      softmax_accumulate(st, alpha, attn_warp_sum(p0 + p1));
      if (lane < nu) pr[lane * kMaxHeadsPerBlock + h] = bf16_round(p0);
      if (lane + 32 < nu) pr[(lane + 32) * kMaxHeadsPerBlock + h] = bf16_round(p1);
      __syncwarp();  // every lane has read st_m / st_den
      if (lane == 0) {
        st_m[h] = st.m;
        st_den[h] = st.den;
        st_alpha[h] = alpha;
      }
    }
    __syncthreads();
    // value sums: a thread per column pair, every head; acc·alpha once, then bf16(p)·v per key
    for (int pair = tid; pair < D4 / 2; pair += blockDim.x) {
      float a0[kMaxHeadsPerBlock], a1[kMaxHeadsPerBlock];
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h)
        if (h < hb) {
          a0[h] = accs[h * D4 + 2 * pair] * st_alpha[h];
          a1[h] = accs[h * D4 + 2 * pair + 1] * st_alpha[h];
        }
      for (int u = 0; u < nu; ++u) {
        const float2 v = *reinterpret_cast<const float2*>(rows + u * D4 + 2 * pair);
        const float4 pa = *reinterpret_cast<const float4*>(pr + u * kMaxHeadsPerBlock);
        const float4 pb = *reinterpret_cast<const float4*>(pr + u * kMaxHeadsPerBlock + 4);
        const float ph[kMaxHeadsPerBlock] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
        for (int h = 0; h < kMaxHeadsPerBlock; ++h)
          if (h < hb) {
            a0[h] = value_step(a0[h], ph[h], v.x);
            a1[h] = value_step(a1[h], ph[h], v.y);
          }
      }
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h)
        if (h < hb) {
          accs[h * D4 + 2 * pair] = a0[h];
          accs[h * D4 + 2 * pair + 1] = a1[h];
        }
    }
  }
  __syncthreads();
  if (p.splits == 1) {  // the whole list: finish here
    for (int i = tid; i < hb * D; i += blockDim.x) {
      const int h = i / D, d = i % D;
      const float den = denominator_with_sink(SoftmaxState{st_m[h], st_den[h]}, a.sink[h0 + h]);
      a.out[(t * a.H + h0 + h) * D + d] = attn_output(accs[h * D4 + d], den);
    }
  } else {  // a partial state for the combine kernel
    for (int i = tid; i < hb * D; i += blockDim.x) {
      const int h = i / D, d = i % D;
      a.part_acc[((t * a.H + h0 + h) * p.splits + split) * D + d] = accs[h * D4 + d];
    }
    if (tid < hb) {
      const long ps = (t * a.H + h0 + tid) * p.splits + split;
      a.part_state[2 * ps] = st_m[tid];
      a.part_state[2 * ps + 1] = st_den[tid];
    }
  }
}

/// One block per (row, head): the splits' partial states merged left to right (softmax_merge),
/// then the reference's finish.
__global__ void __launch_bounds__(128) fast_attention_combine_kernel(FastAttnArgs a) {
  using namespace fast_attn;
  __shared__ float fa[kMaxSplits], fb[kMaxSplits];
  __shared__ float den_s;
  const long e = blockIdx.x;  // t · H + h
  const int splits = a.plan.splits, D = a.D;
  const float* st = a.part_state + e * splits * 2;
  if (threadIdx.x == 0) {
    SoftmaxState r;
    for (int s = 0; s < splits; ++s) r = softmax_merge(r, SoftmaxState{st[2 * s], st[2 * s + 1]}, fa[s], fb[s]);
    den_s = denominator_with_sink(r, a.sink[e % a.H]);
  }
  __syncthreads();
  const float* acc = a.part_acc + e * splits * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v = merge_sums(v, fa[s], acc[s * D + d], fb[s]);
    a.out[e * D + d] = attn_output(v, den_s);
  }
}

/// The untiled path (no index slots, or a D no tile fits): sparse_attn_head per (row, head), the
/// exact operation's bits.
__global__ void fast_attention_untiled_kernel(FastAttnArgs a) {
  const long e = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (e >= a.T * a.H) return;
  const long t = e / a.H;
  sparse_attn_head(a.q + e * a.D, a.kv, a.D, a.idx + t * a.ncols, a.ncols, a.D, a.sink[e % a.H], a.scale,
                   a.out + e * a.D);
}

/// Sparse attention with a per-head sink under fast numerics: CudaBackend::sparse_attention's
/// parameters and semantics (q [T, H, D], kv rows of D shared by the heads, idx [T, ncols] with -1
/// for masked slots, sink [H], scale → out [T, H, D], bf16 values). Tiling: plan_sparse_attention.
inline void fast_sparse_attention(const float* q, const float* kv, int D, const int32_t* idx, int ncols, long T, int H,
                                  const float* sink, float scale, float* out) {
  if (T <= 0 || H <= 0 || D <= 0) return;
  const cudaStream_t s = backend_stream();
  FastAttnArgs a{q, kv, idx, sink, out, nullptr, nullptr, T, H, D, ncols, scale,
                 D % 4 == 0 && attn_aligned16(q) && attn_aligned16(kv), {}};
  a.plan = fast_attn::plan_sparse_attention(T, H, D, ncols, attention_device_limits());
  if (!a.plan.tiled) {
    const long n = T * H;
    fast_attention_untiled_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0, s>>>(a);
    DS41_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (a.plan.splits > 1) {  // the partial states: the fast policy's grow-only workspace (cuda.hpp), stream-ordered
    const size_t states = static_cast<size_t>(T) * H * a.plan.splits;
    a.part_acc = fast_workspace(states * (D + 2));
    a.part_state = a.part_acc + states * D;
  }
  static const bool opted_in = (attn_allow_full_shared_memory(fast_sparse_attention_kernel), true);
  (void)opted_in;
  fast_sparse_attention_kernel<<<static_cast<unsigned>(a.plan.blocks), a.plan.threads, a.plan.shared_bytes, s>>>(a);
  DS41_CUDA_CHECK(cudaGetLastError());
  if (a.plan.splits > 1) {
    fast_attention_combine_kernel<<<static_cast<unsigned>(T * H), 128, 0, s>>>(a);
    DS41_CUDA_CHECK(cudaGetLastError());
  }
}

// ------------------------------------------------------------------ index scores

struct FastIndexArgs {
  const float* q;     // [T, H, Di]
  const float* w;     // [T, H]
  const float* keys;  // [nk, Di]
  float* out;         // [T, nk]
  long T;
  int H, Di;
  long nk;
  bool small_bmm;
  bool vec4;
  fast_attn::IndexScoresPlan plan;
};

/// One block: rows [t0, t0 + rn) x keys [k0, k0 + kn). A thread takes a (row, head) and four keys
/// at a time (index_dot, fused, d order), parks the heads' terms (index_head_term), then a thread
/// per score adds them over h in order and rounds once (index_score_entry's total).
__global__ void __launch_bounds__(fast_attn::kThreads) fast_index_scores_kernel(FastIndexArgs a) {
  using namespace fast_attn;
  extern __shared__ float4 fast_index_smem[];
  const IndexScoresPlan& p = a.plan;
  const int RB = p.rows_per_block, KB = p.keys_per_block, S = p.stride, H = a.H, Di = a.Di, Di4 = padded_dim(Di);
  const long b = blockIdx.x;
  const long t0 = p.row_block_of(b) * RB, k0 = p.key_block_of(b) * KB;
  const int rn = a.T - t0 < RB ? static_cast<int>(a.T - t0) : RB;
  const int kn = a.nk - k0 < KB ? static_cast<int>(a.nk - k0) : KB;
  const int items = rn * H, tid = threadIdx.x;

  float* qs = reinterpret_cast<float*>(fast_index_smem);  // [RB·H][S]
  float* ks = qs + RB * H * S;                             // [KB][S]
  float* terms = ks + KB * S;                              // [RB·H][KB + 1]
  float* ws = terms + RB * H * (KB + 1);                   // [RB·H]

  const int warp = tid >> 5, lane = tid & 31;
  for (int i = warp; i < items; i += kWarps) attn_stage_row(qs + i * S, a.q + (t0 * H + i) * Di, Di, Di4, a.vec4, lane, 32);
  for (int i = tid; i < items; i += blockDim.x) ws[i] = a.w[t0 * H + i];
  for (int j = warp; j < KB; j += kWarps) {
    if (j < kn) attn_stage_row(ks + j * S, a.keys + (k0 + j) * Di, Di, Di4, a.vec4, lane, 32);
    else
      for (int d = lane; d < Di4; d += 32) ks[j * S + d] = 0.0f;
  }
  __syncthreads();
  const int quads = KB / 4;
  for (int e = tid; e < items * quads; e += blockDim.x) {
    const int item = e % items, j0 = 4 * (e / items);
    const float* qi = qs + item * S;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int d0 = 0; d0 < Di4; d0 += 4) {
      const float4 qc = *reinterpret_cast<const float4*>(qi + d0);
      const Vec4 q4{qc.x, qc.y, qc.z, qc.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 kc = *reinterpret_cast<const float4*>(ks + (j0 + c) * S + d0);
        acc[c] = fma_dot4(q4, Vec4{kc.x, kc.y, kc.z, kc.w}, acc[c]);  // index_dot's steps
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) terms[item * (KB + 1) + j0 + c] = index_head_term(bf16_round(acc[c]), ws[item]);
  }
  __syncthreads();
  for (int e = tid; e < rn * KB; e += blockDim.x) {
    const int r = e / KB, j = e % KB;
    if (j >= kn) continue;
    float total = 0.0f;
    for (int h = 0; h < H; ++h) total += terms[(r * H + h) * (KB + 1) + j];
    a.out[(t0 + r) * a.nk + k0 + j] = bf16_round(total);
  }
}

/// The untiled path: index_score_entry per (row, key), the exact operation's bits. It takes the
/// reference's tiny-bmm problems (small_bmm: a bf16 running sum of bf16 products, a rounding point
/// rather than an order, on a problem of under 400 multiply-adds per head) and shapes no tile fits.
__global__ void fast_index_scores_untiled_kernel(FastIndexArgs a) {
  const long e = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (e >= a.T * a.nk) return;
  const long t = e / a.nk, j = e % a.nk;
  a.out[e] = index_score_entry(a.q + t * a.H * a.Di, a.w + t * a.H, a.keys + j * a.Di, a.H, a.Di, a.small_bmm);
}

/// The indexer's scores under fast numerics: CudaBackend::index_scores' parameters and semantics,
/// out[t, j] = bf16(Σ_h bf16(relu(bf16(q[t, h]·k[j]))·w[t, h])) with q [T, H, Di], w [T, H],
/// keys [nk, Di]. The q·k sums are fused multiply-adds in d order (the exact path: multiply then
/// add); the head sum is in h order as the reference's. Where every product q_d·k_d is exact in
/// float32 — the model's q and keys are fp4 round trips with power-of-two scales, and any bf16
/// values qualify — a fused multiply-add rounds as the add alone does, so these are the exact
/// path's bits. small_bmm: the exact path's tiny-bmm sum, bit for bit (see the untiled kernel).
/// Tiling: plan_index_scores.
inline void fast_index_scores(const float* q, const float* w, const float* keys, long T, int H, int Di, long nk,
                              bool small_bmm, float* out) {
  if (T <= 0 || nk <= 0) return;
  const cudaStream_t s = backend_stream();
  FastIndexArgs a{q, w, keys, out, T, H, Di, nk, small_bmm, Di % 4 == 0 && attn_aligned16(q) && attn_aligned16(keys), {}};
  a.plan = fast_attn::plan_index_scores(T, H, Di, nk, small_bmm, attention_device_limits());
  if (!a.plan.tiled) {
    const long n = T * nk;
    DS41_CHECK((n + 255) / 256 <= 0x7fffffffL, "fast_index_scores: ", T, " x ", nk, " scores exceed one grid");
    fast_index_scores_untiled_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(a);
    DS41_CUDA_CHECK(cudaGetLastError());
    return;
  }
  static const bool opted_in = (attn_allow_full_shared_memory(fast_index_scores_kernel), true);
  (void)opted_in;
  fast_index_scores_kernel<<<static_cast<unsigned>(a.plan.blocks), a.plan.threads, a.plan.shared_bytes, s>>>(a);
  DS41_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ds41::cuda_detail
#include "../../core/fp_exact_end.hpp"
