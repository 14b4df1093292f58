// ds41/backend/cuda/linear.hpp — the CUDA backend's Linear: y[r, n] = round(x[r, :] · W[n, :]).
// Included by cuda.hpp (nvcc only).
//
// Three kernels give the same bits as MatrixView::dot (and so as the host):
//
//  * linear_gemv_scaled_kernel (cuda/gemv.hpp): fp8/fp4 with one to three input rows (decode)
//    and at least kGemvMinCols columns, a lane per 32-column block rather than per row; see
//    that file.
//
//  * linear_kernel_reference: one thread per output calling MatrixView::dot. Each thread streams
//    its own weight row, so a warp's loads are 32 rows apart; kept as the oracle the tiled kernel
//    is tested against, and for layouts/shapes the tiled kernel does not take (panel layout, fp4
//    with an odd column count).
//
//  * linear_tiled_kernel<F, S, R>: a block owns a tile of 32 output rows of R input rows (the
//    grid's y dimension; R = 4 for fp8/fp4 prefill, so a prefill's rows share each staged weight
//    tile and its decode, else 1). It walks K in chunks of 128 weight bytes per row (f32 32 columns, bf16 64, fp8
//    128, fp4 256: whole 32-column scale blocks), staging the tile's bytes for a chunk (32 rows x
//    128 B), the chunk of x and the chunk's scales in shared memory through an S-stage cp.async
//    pipeline (16-byte copies; 8 consecutive threads fetch one row's 128 contiguous bytes). The
//    sums keep the reference's order exactly:
//      f32/bf16: one warp; thread i adds row i's products x[k]·w[k] in k order into its one
//                accumulator, as dot_f32/dot_bf16 do.
//      fp8/fp4:  four warps; the 32-column partial sums of different scale blocks are independent
//                in the reference (part = 0; part += q[k]·w[k] in k order, q the input's
//                act_quant, computed once per block by the warp from the staged raw x into a
//                shared block the row lanes read as float4 broadcasts), so warp w computes
//                block w (and w+4 for fp4) of the chunk for its 32 rows and stores
//                (part·s_x)·s_w; warp 0 then adds those into the row's accumulator in block
//                order, one chunk behind (acc + (part·s_x)·s_w, as add_block: the product is
//                rounded to float before the add either way, since nothing is fused).
//    Weights are decoded through 256/16-entry shared tables filled by e4m3_decode/e2m1_decode
//    themselves, so the decoded values are the reference's. The project compiles CUDA with
//    --fmad=false: products and sums round separately, as on the host.
#pragma once
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <cstdint>
#include "../../core/linear_math.hpp"
#include "gemv.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {
namespace cuda_detail {

/// y[r, n] = round(x[r, :] · W[n, :]): one thread per output, adding its products in k order (the
/// reference's order); input rows are the grid's y dimension. Uncoalesced (each thread streams
/// its own row); the oracle for linear_tiled_kernel.
constexpr int kLinTile = 32;
__global__ void linear_kernel_reference(const float* x, long x_stride, MatrixView w, float* y, long y_stride,
                                        OutRound round) {
  const long r = blockIdx.y;
  const int n = blockIdx.x * kLinTile + threadIdx.x;
  if (n >= w.rows) return;
  // the per-format dot keeps the block-scale structure of fp8/fp4 and the k order
  y[r * y_stride + n] = apply_round(w.dot(x + r * x_stride, n), round);
}

// ------------------------------------------------------------------ tiled kernel
constexpr int kLinRows = 32;            // output rows per block (one per lane)
constexpr int kLinChunkBytes = 128;     // weight bytes per row per K chunk
constexpr int kLinRowPitch = 144;       // shared bytes per staged row: 16-byte aligned, and 36 words
                                        // apart so 8 lanes' 16-byte reads of one offset hit distinct banks
constexpr int kLinMaxStages = 6;        // cp.async pipeline depth, where the shared memory fits
constexpr int kLinSharedLimit = 48 * 1024;  // static shared memory of one block
constexpr int kLinMaxGridY = 65535;

template <WeightFormat F>
struct LinTraits {
  static constexpr bool kScaled = FormatTraits<F>::kBlockScaled;
  // weight bytes per column, times 2 (fp4 has half a byte)
  static constexpr int kBytes2 = F == WeightFormat::kF32 ? 8 : F == WeightFormat::kBF16 ? 4 : F == WeightFormat::kFp8Block32 ? 2 : 1;
  static constexpr int kCols = kLinChunkBytes * 2 / kBytes2;         // columns per chunk: 32, 64, 128, 256
  static constexpr int kBlocks = kCols / 32;                          // scale blocks per chunk (fp8 4, fp4 8)
  static constexpr int kWarps = kScaled ? 4 : 1;
  static constexpr int kThreads = 32 * kWarps;
  // staged scales per chunk: fp8 one per block for the whole tile (a 32-row tile is one fp8 row
  // block); fp4 one per row and block, rows kBlocks + 1 floats apart (conflict-free reads)
  static constexpr int kScalePitch = kBlocks + 1;
  static constexpr int kScales = F == WeightFormat::kFp8Block32 ? kBlocks : F == WeightFormat::kFp4Block32 ? kLinRows * kScalePitch : 0;
  static constexpr int kLut = F == WeightFormat::kFp8Block32 ? 256 : F == WeightFormat::kFp4Block32 ? 16 : 1;
};

/// Shared memory of a block with S pipeline stages and R input rows.
template <WeightFormat F, int S, int R>
struct LinShared {
  using Tr = LinTraits<F>;
  alignas(16) uint8_t w[S][kLinRows * kLinRowPitch];
  alignas(16) float x[S][R][Tr::kCols];
  float scale[S][Tr::kScales > 0 ? Tr::kScales : 1];
  float prod[2][Tr::kBlocks > 0 ? Tr::kBlocks : 1][R][kLinRows];  // fp8/fp4: part * scale, two chunks
  alignas(16) float q[Tr::kScaled ? Tr::kWarps : 1][R][32];       // fp8/fp4: each warp's act_quant block
  float lut[Tr::kLut];
};

/// The deepest pipeline, up to kLinMaxStages, whose shared memory fits a block's static limit.
template <WeightFormat F, int R, int S = kLinMaxStages>
constexpr int lin_stages() {
  if constexpr (S == 2 || sizeof(LinShared<F, S, R>) <= kLinSharedLimit)
    return S;
  else
    return lin_stages<F, R, S - 1>();
}

/// Issues the copies of chunk c into stage s (nothing for a chunk past the end; out-of-range rows,
/// bytes, columns, blocks and input rows are not fetched and never read into a result).
template <WeightFormat F, int S, int R, bool kVec>
__device__ __forceinline__ void lin_stage(LinShared<F, S, R>& sh, int s, int c, int nch, const float* xr, long x_stride, int nr,
                                          const MatrixView& w, int n0, long row_bytes, int kblocks) {
  using Tr = LinTraits<F>;
  if (c >= nch) return;
  const int tid = threadIdx.x;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const long cb0 = static_cast<long>(c) * kLinChunkBytes;
  constexpr int kPieces = kLinChunkBytes / 16;
  for (int u = tid; u < kLinRows * kPieces; u += Tr::kThreads) {
    const int i = u / kPieces, p = u % kPieces;
    const long b = cb0 + p * 16;
    if (n0 + i >= w.rows || b >= row_bytes) continue;
    const uint8_t* src = base + static_cast<long>(n0 + i) * row_bytes + b;
    uint8_t* dst = &sh.w[s][i * kLinRowPitch + p * 16];
    if constexpr (kVec) {
      __pipeline_memcpy_async(dst, src, 16);  // row_bytes % 16 == 0: the piece lies inside the row
    } else {
      const int nb = row_bytes - b < 16 ? static_cast<int>(row_bytes - b) : 16;
      for (int j = 0; j < nb; ++j) dst[j] = src[j];
    }
  }
  const int k0 = c * Tr::kCols;
  for (int u = tid; u < R * Tr::kCols; u += Tr::kThreads) {
    const int r = u / Tr::kCols, k = u % Tr::kCols;
    if (r < nr && k0 + k < w.cols) __pipeline_memcpy_async(&sh.x[s][r][k], xr + r * x_stride + k0 + k, 4);
  }
  const int kb0 = c * Tr::kBlocks;
  if constexpr (F == WeightFormat::kFp8Block32) {
    const float* srow = w.scale_row(n0);
    for (int j = tid; j < Tr::kBlocks; j += Tr::kThreads)
      if (kb0 + j < kblocks) __pipeline_memcpy_async(&sh.scale[s][j], srow + kb0 + j, 4);
  } else if constexpr (F == WeightFormat::kFp4Block32) {
    for (int u = tid; u < kLinRows * Tr::kBlocks; u += Tr::kThreads) {
      const int i = u / Tr::kBlocks, j = u % Tr::kBlocks;
      if (n0 + i < w.rows && kb0 + j < kblocks)
        __pipeline_memcpy_async(&sh.scale[s][i * Tr::kScalePitch + j], w.scale_row(n0 + i) + kb0 + j, 4);
    }
  }
}

/// Row i's partial sums of scale block jb of the staged chunk for the R input rows, columns
/// [0, ke) of the block in k order, over the rows' act_quant values qw[r][k] (the warp's shared
/// block). kFull (ke == 32, every block but a short last one) drops the per-column tests, so the
/// unrolled loads of codes and q are scheduled ahead of the chain of adds.
template <WeightFormat F, int S, int R, bool kFull>
__device__ __forceinline__ void lin_block_parts(const LinShared<F, S, R>& sh, int s, int i, int jb, int ke, const float (*qw)[32],
                                                float (&part)[R]) {
  const uint8_t* row = &sh.w[s][i * kLinRowPitch];
#pragma unroll
  for (int r = 0; r < R; ++r) part[r] = 0.0f;
  // codes per 16 staged bytes: fp8 16 (byte j = column j), fp4 32 (low nibble first)
  constexpr int kPer = F == WeightFormat::kFp8Block32 ? 16 : 32;
  constexpr int kBits = F == WeightFormat::kFp8Block32 ? 8 : 4;
#pragma unroll
  for (int h = 0; h < 32 / kPer; ++h) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + jb * (32 * kBits / 8) + h * 16);
#pragma unroll
    for (int g = 0; g < kPer / 4; ++g) {  // 4 columns: one float4 of q per input row
      const int k4 = h * kPer + g * 4;
      float4 q4[R];
#pragma unroll
      for (int r = 0; r < R; ++r) q4[r] = *reinterpret_cast<const float4*>(&qw[r][k4]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (kFull || k4 + e < ke) {
          const int j = g * 4 + e;  // the code's index within the 16 bytes
          const uint32_t code = (lin_word(v, j * kBits / 32) >> ((j * kBits) % 32)) & ((1u << kBits) - 1);
          const float wv = sh.lut[code];
#pragma unroll
          for (int r = 0; r < R; ++r) part[r] += lin_lane(q4[r], e) * wv;
        }
      }
    }
  }
}

/// Row `lane`'s f32/bf16 products of the staged chunk, columns [0, kn), added in k order into
/// acc[r] for the R input rows; kFull (kn == the chunk's columns) drops the per-column tests.
template <WeightFormat F, int S, int R, bool kFull>
__device__ __forceinline__ void lin_plain_chunk(const LinShared<F, S, R>& sh, int s, int lane, int kn, float (&acc)[R]) {
  const uint8_t* row = &sh.w[s][lane * kLinRowPitch];
  constexpr int kPer = F == WeightFormat::kF32 ? 4 : 8;  // columns per 16 bytes
#pragma unroll
  for (int h = 0; h < kLinChunkBytes / 16; ++h) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + h * 16);
#pragma unroll
    for (int g = 0; g < kPer / 4; ++g) {
      const int k4 = h * kPer + g * 4;
      float4 x4[R];
#pragma unroll
      for (int r = 0; r < R; ++r) x4[r] = *reinterpret_cast<const float4*>(&sh.x[s][r][k4]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (kFull || k4 + e < kn) {
          float wv;
          if constexpr (F == WeightFormat::kF32) {
            wv = bits_f32(lin_word(v, e));
          } else {
            const uint32_t word = lin_word(v, (g * 4 + e) / 2);
            wv = bf16_to_f32(static_cast<uint16_t>(((g * 4 + e) & 1) ? (word >> 16) : (word & 0xFFFFu)));
          }
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r] += lin_lane(x4[r], e) * wv;
        }
      }
    }
  }
}

/// The tiled, coalesced Linear (see the file comment). Block (bx, by): output rows
/// [32 bx, 32 bx + 32) of input rows [R by, R by + R) (of nrows). Every thread runs every
/// iteration and reaches every barrier and shuffle; rows past w.rows only skip their loads and
/// stores, input rows past nrows their loads and stores.
template <WeightFormat F, int S, int R, bool kVec>
__global__ void __launch_bounds__(LinTraits<F>::kThreads) linear_tiled_kernel(const float* x, long x_stride, long nrows, MatrixView w,
                                                                              float* y, long y_stride, OutRound round) {
  using Tr = LinTraits<F>;
  static_assert(S >= 2, "the pipeline needs two stages at least");
  static_assert(sizeof(LinShared<F, S, R>) <= kLinSharedLimit, "static shared memory over a block's limit");
  __shared__ LinShared<F, S, R> sh;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n0 = blockIdx.x * kLinRows;
  const int n = n0 + lane;
  const bool live = n < w.rows;
  const long r0 = static_cast<long>(blockIdx.y) * R;
  const int nr = nrows - r0 < R ? static_cast<int>(nrows - r0) : R;
  const float* xr = x + r0 * x_stride;
  const int K = w.cols;
  const long row_bytes = row_major_row_bytes(F, K);
  const int kblocks = (K + 31) / 32;
  const int nch = static_cast<int>((row_bytes + kLinChunkBytes - 1) / kLinChunkBytes);

  if constexpr (F == WeightFormat::kFp8Block32) {
    for (int c = tid; c < 256; c += Tr::kThreads) sh.lut[c] = e4m3_decode(static_cast<uint8_t>(c));
  } else if constexpr (F == WeightFormat::kFp4Block32) {
    for (int c = tid; c < 16; c += Tr::kThreads) sh.lut[c] = e2m1_decode(static_cast<uint8_t>(c));
  }
  __syncthreads();

  // prologue: chunks 0 .. S-2, one commit group each (empty groups past the end keep the count)
  for (int s = 0; s < S - 1; ++s) {
    lin_stage<F, S, R, kVec>(sh, s, s, nch, xr, x_stride, nr, w, n0, row_bytes, kblocks);
    __pipeline_commit();
  }

  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int c = 0; c < nch; ++c) {
    const int s = c % S;
    // S-1+c groups are committed; chunk c's is complete once at most S-2 newer ones are pending
    __pipeline_wait_prior(S - 2);
    // every thread's copies of chunk c are done and visible; every thread has finished reading
    // stage (c-1) % S (chunk c-1) and prod[(c-1) % 2] has chunk c-1's products
    __syncthreads();
    lin_stage<F, S, R, kVec>(sh, (c + S - 1) % S, c + S - 1, nch, xr, x_stride, nr, w, n0, row_bytes, kblocks);
    __pipeline_commit();

    const int k0 = c * Tr::kCols;
    if constexpr (!Tr::kScaled) {
      if (live) {
        const int kn = K - k0 < Tr::kCols ? K - k0 : Tr::kCols;
        if (kn == Tr::kCols)
          lin_plain_chunk<F, S, R, true>(sh, s, lane, kn, acc);
        else
          lin_plain_chunk<F, S, R, false>(sh, s, lane, kn, acc);
      }
    } else {
      // warp 0 first adds chunk c-1's block products, in block order (one chunk behind)
      if (warp == 0 && live && c > 0) {
        const int pb = (c - 1) & 1, kbp = (c - 1) * Tr::kBlocks;
#pragma unroll
        for (int jb = 0; jb < Tr::kBlocks; ++jb)
          if (kbp + jb < kblocks) {
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += sh.prod[pb][jb][r][lane];
          }
      }
      const int kb0 = c * Tr::kBlocks;
      for (int jb = warp; jb < Tr::kBlocks; jb += Tr::kWarps) {
        if (kb0 + jb >= kblocks) break;  // the same for the whole warp
        const int kb = k0 + jb * 32;
        const int ke = K - kb < 32 ? K - kb : 32;
        float sx[R], part[R];
        __syncwarp();  // the warp's lanes are done reading its q block of the previous iteration
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float q;
          sx[r] = warp_act_quant(lane < ke ? sh.x[s][r][jb * 32 + lane] : 0.0f, q);
          sh.q[warp][r][lane] = q;
        }
        __syncwarp();
        if (ke == 32)
          lin_block_parts<F, S, R, true>(sh, s, lane, jb, ke, sh.q[warp], part);
        else
          lin_block_parts<F, S, R, false>(sh, s, lane, jb, ke, sh.q[warp], part);
        const float scale = F == WeightFormat::kFp8Block32 ? sh.scale[s][jb] : sh.scale[s][lane * Tr::kScalePitch + jb];
        if (live) {
#pragma unroll
          for (int r = 0; r < R; ++r) sh.prod[c & 1][jb][r][lane] = part[r] * sx[r] * scale;  // (part·s_x)·s_w, as add_block
        }
      }
    }
  }
  if constexpr (Tr::kScaled) {
    __syncthreads();  // the last chunk's products (reached by every thread: outside all conditions)
    if (warp == 0 && live && nch > 0) {
      const int pb = (nch - 1) & 1, kbp = (nch - 1) * Tr::kBlocks;
#pragma unroll
      for (int jb = 0; jb < Tr::kBlocks; ++jb)
        if (kbp + jb < kblocks) {
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r] += sh.prod[pb][jb][r][lane];
        }
    }
  }
  if (warp == 0 && live) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < nr) y[(r0 + r) * y_stride + n] = apply_round(acc[r], round);
  }
  __pipeline_wait_prior(0);  // no copy outlives the block (the trailing groups are empty)
}

/// The formats the tiled kernel is written for (the others, GGUF blocks among them, take the
/// reference kernel: MatrixView::dot).
constexpr bool linear_tiled_format(WeightFormat f) {
  return f == WeightFormat::kF32 || f == WeightFormat::kBF16 || f == WeightFormat::kFp8Block32 || f == WeightFormat::kFp4Block32;
}
/// Whether linear_tiled handles the view (row-major, its format; fp4 with an even column count, so
/// that a row's codes are its own cols/2 bytes).
inline bool linear_tiled_supports(const MatrixView& w) {
  if (w.layout != WeightLayout::kRowMajor || !linear_tiled_format(w.format)) return false;
  if (w.format == WeightFormat::kFp4Block32 && (w.cols % 2) != 0) return false;
  return true;
}

/// Input rows per block for fp8/fp4 prefill: the rows share each staged weight tile and its
/// decode, and their independent sums hide each other's latency (H200, 5120x8192 fp8, T = 16:
/// 2753 -> 335 us). f32/bf16 keep one row per block: their one warp per block then runs R
/// chains of adds over the whole K, and fewer blocks (bf16 1280x5120, T = 16: 89 -> 219 us).
constexpr int kLinPrefillRows = 4;

template <WeightFormat F, int R>
void launch_linear_tiled_rows(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                              OutRound round, cudaStream_t stream) {
  using Tr = LinTraits<F>;
  constexpr int S = lin_stages<F, R>();
  const long row_bytes = row_major_row_bytes(F, w.cols);
  const bool vec = (reinterpret_cast<uintptr_t>(w.data) % 16) == 0 && row_bytes % 16 == 0;
  const unsigned gx = static_cast<unsigned>((w.rows + kLinRows - 1) / kLinRows);
  constexpr long kSlice = static_cast<long>(kLinMaxGridY) * R;  // the grid's y dimension holds 65535 blocks
  for (long r0 = 0; r0 < rows; r0 += kSlice) {
    const long nr = rows - r0 < kSlice ? rows - r0 : kSlice;
    const dim3 grid(gx, static_cast<unsigned>((nr + R - 1) / R));
    if (vec)
      linear_tiled_kernel<F, S, R, true><<<grid, Tr::kThreads, 0, stream>>>(x + r0 * x_stride, x_stride, nr, w, y + r0 * y_stride,
                                                                              y_stride, round);
    else
      linear_tiled_kernel<F, S, R, false><<<grid, Tr::kThreads, 0, stream>>>(x + r0 * x_stride, x_stride, nr, w, y + r0 * y_stride,
                                                                               y_stride, round);
  }
}

template <WeightFormat F>
void launch_linear_tiled(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                         OutRound round, cudaStream_t stream) {
  if constexpr (LinTraits<F>::kScaled) {
    if (linear_gemv_chosen(w, rows)) return launch_linear_gemv<F>(x, rows, x_stride, w, y, y_stride, round, stream);
    if (rows >= kLinPrefillRows)
      return launch_linear_tiled_rows<F, kLinPrefillRows>(x, rows, x_stride, w, y, y_stride, round, stream);
  }
  launch_linear_tiled_rows<F, 1>(x, rows, x_stride, w, y, y_stride, round, stream);
}

/// The old kernel (oracle / fallback), over any number of input rows.
inline void launch_linear_reference(const float* x, long rows, long x_stride, const MatrixView& w, float* y,
                                    long y_stride, OutRound round, cudaStream_t stream) {
  if (rows <= 0 || w.rows <= 0) return;
  const unsigned gx = static_cast<unsigned>((w.rows + kLinTile - 1) / kLinTile);
  for (long r0 = 0; r0 < rows; r0 += kLinMaxGridY) {
    const long nr = rows - r0 < kLinMaxGridY ? rows - r0 : kLinMaxGridY;
    linear_kernel_reference<<<dim3(gx, static_cast<unsigned>(nr)), kLinTile, 0, stream>>>(
        x + r0 * x_stride, x_stride, w, y + r0 * y_stride, y_stride, round);
  }
}

/// The tiled kernel where it applies, the reference kernel otherwise.
inline void launch_linear(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                          OutRound round, cudaStream_t stream) {
  if (rows <= 0 || w.rows <= 0) return;
  if (!linear_tiled_supports(w)) return launch_linear_reference(x, rows, x_stride, w, y, y_stride, round, stream);
  dispatch_format(w.format, [&](auto tag) {
    constexpr WeightFormat F = decltype(tag)::value;
    if constexpr (linear_tiled_format(F)) launch_linear_tiled<F>(x, rows, x_stride, w, y, y_stride, round, stream);
    else launch_linear_reference(x, rows, x_stride, w, y, y_stride, round, stream);
  });
}

}  // namespace cuda_detail
}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
