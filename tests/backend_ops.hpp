// tests/backend_ops.hpp — every operation of a backend against the DS41_HD function that defines it,
// bit for bit, for any backend meeting Backend<B> (backend/concept.hpp): ggml's test-backend-ops
// idea, as one template. test_backend_ops.cpp instantiates it for HostBackend (its tuned kernels:
// AVX2/AVX-512 tiles, panels, threads) and test_golden_cuda.cu for CudaBackend (exact policy), so
// a new backend or kernel is checked by adding one instantiation. Inputs go through B::upload and
// results through B::download; the references run on the host on the same inputs. Shapes are
// small and awkward (tails of 8/16/32/64, rows that are not multiples of anything) plus the
// Linear at a K of 2048; the V4.1-sized and kernel-specific cases stay in test_host_kernels.cpp
// and test_golden_cuda.cu.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>
#include "ds41/backend/concept.hpp"
#include "ds41/core/attention_math.hpp"
#include "ds41/core/compress_math.hpp"
#include "ds41/core/hc_post.hpp"
#include "ds41/core/topk.hpp"
#include "ds41/model/weights.hpp"
#include "random_weights.hpp"
#include "same_bits.hpp"

namespace ds41::testing {

/// One operation at one shape: how many outputs were compared and how many differ.
struct OpResult {
  std::string op, shape;
  long compared = 0, mismatched = 0;
};

template <class B, class T>
typename B::template Buffer<T> to_backend(const std::vector<T>& h) {
  auto d = B::template alloc<T>(h.size());
  B::upload(d.data(), h.data(), h.size());
  return d;
}
template <class B, class T>
std::vector<T> from_backend(const typename B::template Buffer<T>& d, size_t n) {
  std::vector<T> h(n);
  B::sync();
  B::download(h.data(), d.data(), n);
  return h;
}

inline std::vector<float> random_bf16_values(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_round(u(rng));
  return v;
}

inline long count_mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  long bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += !same_bits(got[i], want[i]);
  return bad + static_cast<long>(got.size() != want.size());
}

/// Linear: y[t, i] = apply_round(w.dot(x[t], i), round) (MatrixView::dot: the input rounding the
/// reference does for the weight's format, then the k-order sums), every format, T = 1..16.
template <class B>
void linear_ops(std::mt19937& rng, std::vector<OpResult>& out) {
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32,
                                  WeightFormat::kFp4Block32};
  struct Shape {
    int rows, cols;
  };
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  for (WeightFormat f : formats)
    for (const Shape s : {Shape{70, 96}, Shape{33, 2048}, Shape{9, 64}})
      for (int T : {1, 2, 3, 4, 7, 8, 16}) {
        const HostTensor t = random_matrix(f, s.rows, s.cols, rng);
        Matrix<B> m(t);
        std::vector<float> x(static_cast<size_t>(T) * s.cols);
        for (auto& e : x) e = uni(rng);  // full float32 activations: products round
        const OutRound round = T % 2 ? OutRound::kBF16 : OutRound::kF32;
        auto dx = to_backend<B>(x);
        auto dy = B::template alloc<float>(static_cast<size_t>(T) * s.rows);
        B::linear(dx.data(), T, s.cols, m.view(), dy.data(), s.rows, round);
        const auto y = from_backend<B>(dy, static_cast<size_t>(T) * s.rows);
        std::vector<float> ref(y.size());
        for (int r = 0; r < T; ++r)
          for (int i = 0; i < s.rows; ++i) ref[r * s.rows + i] = apply_round(t.view().dot(x.data() + r * s.cols, i), round);
        out.push_back({"linear", std::string(format_name(f)) + " " + std::to_string(s.rows) + "x" +
                                     std::to_string(s.cols) + " T=" + std::to_string(T),
                       static_cast<long>(ref.size()), count_mismatches(y, ref)});
      }
}

/// Linear over a GGUF file's blocks kept as stored (WeightFormat::kGgmlBlocks): every kept type
/// against MatrixView::dot on the row-major blocks (the f32 Linear on their values), T = 1..16;
/// the backend may repack them (the host's 8-row panels).
template <class B>
void ggml_linear_ops(std::mt19937& rng, std::vector<OpResult>& out) {
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  for (GgmlType g : testing::kKeptGgmlTypes)
    for (const auto& [rows, cols] : {std::pair<int, int>{70, 512}, {9, 256}, {33, 768}})
      for (int T : {1, 2, 5, 16}) {
        const int K = g == GgmlType::kF16 ? cols - 3 : cols;  // F16 rows of any length
        const HostTensor t = HostTensor::from_ggml_blocks({rows, K}, g, random_ggml_blocks(g, rows, K, rng));
        Matrix<B> m(t);
        std::vector<float> x(static_cast<size_t>(T) * K);
        for (auto& e : x) e = uni(rng);
        const OutRound round = T % 2 ? OutRound::kBF16 : OutRound::kF32;
        auto dx = to_backend<B>(x);
        auto dy = B::template alloc<float>(static_cast<size_t>(T) * rows);
        B::linear(dx.data(), T, K, m.view(), dy.data(), rows, round);
        const auto y = from_backend<B>(dy, static_cast<size_t>(T) * rows);
        std::vector<float> ref(y.size());
        for (int r = 0; r < T; ++r)
          for (int i = 0; i < rows; ++i) ref[r * rows + i] = apply_round(t.view().dot(x.data() + r * K, i), round);
        out.push_back({"linear", std::string(ggml_type_info(g).name) + " blocks " + std::to_string(rows) + "x" +
                                     std::to_string(K) + " T=" + std::to_string(T),
                       static_cast<long>(ref.size()), count_mismatches(y, ref)});
      }
}

/// sparse_attention: out[t, h] = sparse_attn_head(q[t, h], kv, idx[t], ...), -1 entries masked.
template <class B>
void attention_ops(std::mt19937& rng, std::vector<OpResult>& out) {
  struct Shape {
    long T;
    int H, D, nkv, ncols;
  };
  for (const Shape s : {Shape{2, 3, 64, 100, 70}, Shape{3, 5, 32, 20, 130}, Shape{1, 4, 512, 300, 200}}) {
    const auto q = random_bf16_values(rng, static_cast<size_t>(s.T) * s.H * s.D, -1.0f, 1.0f);
    const auto kv = random_bf16_values(rng, static_cast<size_t>(s.nkv) * s.D, -1.0f, 1.0f);
    const auto sink = random_bf16_values(rng, s.H, -2.0f, 2.0f);
    std::vector<int32_t> idx(static_cast<size_t>(s.T) * s.ncols);
    for (auto& i : idx) i = rng() % 5 == 0 ? -1 : static_cast<int32_t>(rng() % s.nkv);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    auto dq = to_backend<B>(q), dkv = to_backend<B>(kv), dsink = to_backend<B>(sink);
    auto didx = to_backend<B>(idx);
    auto dout = B::template alloc<float>(q.size());
    B::sparse_attention(dq.data(), dkv.data(), s.D, didx.data(), s.ncols, s.T, s.H, dsink.data(), scale, dout.data());
    const auto got = from_backend<B>(dout, q.size());
    std::vector<float> ref(q.size());
    for (long t = 0; t < s.T; ++t)
      for (int h = 0; h < s.H; ++h) {
        const long e = (t * s.H + h) * s.D;
        sparse_attn_head(q.data() + e, kv.data(), s.D, reinterpret_cast<const int*>(idx.data() + t * s.ncols), s.ncols,
                         s.D, sink[h], scale, ref.data() + e);
      }
    out.push_back({"sparse_attention", "T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) + " D=" +
                                           std::to_string(s.D) + " ncols=" + std::to_string(s.ncols),
                   static_cast<long>(ref.size()), count_mismatches(got, ref)});
  }
}

/// index_scores: out[t, j] = index_score_entry(q[t], w[t], keys[j]), both bmm paths.
template <class B>
void index_score_ops(std::mt19937& rng, std::vector<OpResult>& out) {
  struct Shape {
    long T;
    int H, Di;
    long nk;
  };
  for (const Shape s : {Shape{2, 4, 32, 37}, Shape{3, 32, 128, 70}, Shape{1, 2, 64, 9}})
    for (bool small_bmm : {false, true}) {
      const auto q = random_bf16_values(rng, static_cast<size_t>(s.T) * s.H * s.Di, -1.0f, 1.0f);
      const auto w = random_bf16_values(rng, static_cast<size_t>(s.T) * s.H, -1.0f, 1.0f);
      const auto keys = random_bf16_values(rng, static_cast<size_t>(s.nk) * s.Di, -1.0f, 1.0f);
      auto dq = to_backend<B>(q), dw = to_backend<B>(w), dk = to_backend<B>(keys);
      auto dout = B::template alloc<float>(static_cast<size_t>(s.T) * s.nk);
      B::index_scores(dq.data(), dw.data(), dk.data(), s.T, s.H, s.Di, s.nk, small_bmm, dout.data());
      const auto got = from_backend<B>(dout, static_cast<size_t>(s.T) * s.nk);
      std::vector<float> ref(got.size());
      for (long t = 0; t < s.T; ++t)
        for (long j = 0; j < s.nk; ++j)
          ref[t * s.nk + j] =
              index_score_entry(q.data() + t * s.H * s.Di, w.data() + t * s.H, keys.data() + j * s.Di, s.H, s.Di, small_bmm);
      out.push_back({"index_scores", "T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) + " Di=" +
                                         std::to_string(s.Di) + " nk=" + std::to_string(s.nk) +
                                         (small_bmm ? " small-bmm" : ""),
                     static_cast<long>(ref.size()), count_mismatches(got, ref)});
    }
}

/// expand_post: out[t, j, d] = hc_post_element(...); gather_fp8_rows: out[i, d] = fp8_row_value(...).
template <class B>
void row_ops(std::mt19937& rng, std::vector<OpResult>& out) {
  for (const auto& [T, hc, dim] : {std::tuple<long, int, int>{3, 4, 70}, {1, 2, 33}, {5, 4, 5120}}) {
    const auto x = random_bf16_values(rng, static_cast<size_t>(T) * dim, -2.0f, 2.0f);
    const auto res = random_bf16_values(rng, static_cast<size_t>(T) * hc * dim, -2.0f, 2.0f);
    const auto post = random_bf16_values(rng, static_cast<size_t>(T) * hc, 0.0f, 2.0f);
    const auto comb = random_bf16_values(rng, static_cast<size_t>(T) * hc * hc, 0.0f, 1.0f);
    auto dx = to_backend<B>(x), dres = to_backend<B>(res), dpost = to_backend<B>(post), dcomb = to_backend<B>(comb);
    auto dout = B::template alloc<float>(res.size());
    B::expand_post(dx.data(), dres.data(), dpost.data(), dcomb.data(), T, hc, dim, dout.data());
    const auto got = from_backend<B>(dout, res.size());
    std::vector<float> ref(res.size());
    for (long t = 0; t < T; ++t)
      for (int j = 0; j < hc; ++j)
        for (long d = 0; d < dim; ++d)
          ref[(t * hc + j) * dim + d] = hc_post_element(x.data(), res.data(), post.data(), comb.data(), t, j, d, hc, dim);
    out.push_back({"expand_post", "T=" + std::to_string(T) + " hc=" + std::to_string(hc) + " dim=" + std::to_string(dim),
                   static_cast<long>(ref.size()), count_mismatches(got, ref)});
  }
  for (const auto& [rows, hd, n] : {std::tuple<int, int, long>{10, 64, 7}, {3, 512, 9}, {40, 32, 100}}) {
    std::vector<uint8_t> codes(static_cast<size_t>(rows) * hd);
    for (auto& c : codes) c = static_cast<uint8_t>(rng());  // NaN codes included: NaN either way
    std::vector<float> scales(static_cast<size_t>(rows) * (hd / 32));
    for (auto& s : scales) s = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 6);
    std::vector<int32_t> ids(n);
    for (auto& i : ids) i = static_cast<int32_t>(rng() % rows);
    auto dc = to_backend<B>(codes);
    auto ds = to_backend<B>(scales);
    auto di = to_backend<B>(ids);
    auto dout = B::template alloc<float>(static_cast<size_t>(n) * hd);
    B::gather_fp8_rows(dc.data(), ds.data(), hd, di.data(), n, dout.data());
    const auto got = from_backend<B>(dout, static_cast<size_t>(n) * hd);
    std::vector<float> ref(got.size());
    for (long i = 0; i < n; ++i)
      for (int d = 0; d < hd; ++d)
        ref[i * hd + d] = fp8_row_value(codes[static_cast<size_t>(ids[i]) * hd + d], scales[ids[i] * (hd / 32) + d / 32]);
    out.push_back({"gather_fp8_rows", "rows=" + std::to_string(rows) + " hd=" + std::to_string(hd) + " n=" + std::to_string(n),
                   static_cast<long>(ref.size()), count_mismatches(got, ref)});
  }
}

/// topk_rows: the set torch_topk_row keeps (the order is the backend's; the model re-sorts), on
/// rows of a few levels (ties at the k-th place), -inf, ±0 and NaN.
template <class B>
void topk_ops(std::mt19937& rng, std::vector<OpResult>& out) {
  const float levels[] = {-INFINITY, -1.0f, 0.0f, -0.0f, 0.5f, 1.0f, 2.0f, NAN};
  for (const auto& [rows, n, k] : {std::tuple<long, int, int>{4, 300, 37}, {3, 64, 64}, {2, 5000, 512}, {5, 9, 1}}) {
    std::vector<float> v(static_cast<size_t>(rows) * n);
    for (auto& x : v) x = levels[rng() % (rng() % 50 == 0 ? 8 : 7)];
    auto dv = to_backend<B>(v);
    auto didx = B::template alloc<int32_t>(static_cast<size_t>(rows) * k);
    B::topk_rows(dv.data(), rows, n, k, didx.data());
    auto got = from_backend<B>(didx, static_cast<size_t>(rows) * k);
    std::vector<int32_t> ref(got.size());
    std::vector<TopkEntry> scratch(n);
    for (long r = 0; r < rows; ++r)
      torch_topk_row(v.data() + r * n, n, k, false, reinterpret_cast<int*>(ref.data() + r * k), nullptr, scratch.data());
    long bad = 0;
    for (long r = 0; r < rows; ++r) {
      std::sort(got.begin() + r * k, got.begin() + (r + 1) * k);
      std::sort(ref.begin() + r * k, ref.begin() + (r + 1) * k);
    }
    for (size_t i = 0; i < ref.size(); ++i) bad += got[i] != ref[i];
    out.push_back({"topk_rows", "rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " k=" + std::to_string(k),
                   static_cast<long>(ref.size()), bad});
  }
}

/// Every operation of B at every shape above.
template <class B>
std::vector<OpResult> run_backend_ops(unsigned seed = 41) {
  static_assert(Backend<B>);
  std::mt19937 rng(seed);
  std::vector<OpResult> out;
  linear_ops<B>(rng, out);
  ggml_linear_ops<B>(rng, out);
  attention_ops<B>(rng, out);
  index_score_ops<B>(rng, out);
  row_ops<B>(rng, out);
  topk_ops<B>(rng, out);
  return out;
}

}  // namespace ds41::testing
