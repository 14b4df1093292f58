// ds41/model/moe.hpp — MoeT<ExpertStore>: router (sqrt-softplus / sigmoid / softmax scores,
// selection-only bias, renormalisation, route_scale), routed experts with clamped SwiGLU, and the
// shared expert (M:793-904).
//
// The routing decision is downloaded to the host (it decides which weights to touch); the math
// runs on the backend. Routed outputs are added in increasing expert id, then the unweighted
// shared expert, into a float32 accumulator rounded once to bf16.
#pragma once
#include <algorithm>
#include <string>
#include <vector>
#include "../core/activation.hpp"
#include "../core/reduce.hpp"
#include "../core/torch_math.hpp"
#include "../core/topk.hpp"
#include "config.hpp"
#include "tap.hpp"
#include "weights.hpp"
#include "../backend/concept.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// One SwiGLU expert's three matrices.
template <class B>
struct ExpertWeights {
  Matrix<B> w1, w2, w3;  // gate [I, dim], down [dim, I], up [I, dim]
};

/// ExpertStore policy: every expert resident in backend memory (streamed_experts.hpp: the other).
template <class B>
class ResidentExperts {
 public:
  static constexpr bool kPrefetches = false;
  /// Whether the references get() returns stay valid while other experts are fetched, so that
  /// a step may take every routed expert's weights first and run them as concurrent tasks.
  static constexpr bool kStableRefs = true;
  ResidentExperts() = default;
  ResidentExperts(const ModelConfig& c, const WeightSource& w, int layer) {
    const std::string p = "layers." + std::to_string(layer) + ".ffn.experts.";
    experts_.resize(c.n_routed_experts);
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = p + std::to_string(e) + ".";
      experts_[e].w1 = load_matrix<B>(w, q + "w1.weight", c.moe_inter_dim, c.dim);
      experts_[e].w2 = load_matrix<B>(w, q + "w2.weight", c.dim, c.moe_inter_dim);
      experts_[e].w3 = load_matrix<B>(w, q + "w3.weight", c.moe_inter_dim, c.dim);
    }
  }
  /// Hint of the experts the next step will use (resident: nothing to do).
  void prefetch(const std::vector<int>&) {}
  const ExpertWeights<B>& get(int e) { return experts_.at(e); }

 private:
  std::vector<ExpertWeights<B>> experts_;
};

template <class B, class ExpertStore = ResidentExperts<B>>
class MoeT {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  MoeT() = default;
  /// `shared...`: what the ExpertStore shares across layers (StreamedExperts: its ExpertCache).
  template <class... Shared>
  MoeT(const ModelConfig& c, const WeightSource& w, int layer, Shared&... shared)
      : dim_(c.dim), inter_(c.moe_inter_dim), E_(c.n_routed_experts), K_(c.n_activated_experts),
        score_func_(c.score_func), gate_temp_(static_cast<float>(c.gate_temp)), norm_topk_(c.norm_topk_prob),
        route_scale_(static_cast<float>(c.route_scale)), limit_(static_cast<float>(c.swiglu_limit)),
        experts_(c, w, layer, shared...) {
    const std::string p = "layers." + std::to_string(layer) + ".ffn.";
    gate_ = load_matrix<B>(w, p + "gate.weight", E_, dim_);
    bias_ = upload_vector<B>(w, p + "gate.bias", E_);
    shared_.w1 = load_matrix<B>(w, p + "shared_experts.w1.weight", inter_, dim_);
    shared_.w2 = load_matrix<B>(w, p + "shared_experts.w2.weight", dim_, inter_);
    shared_.w3 = load_matrix<B>(w, p + "shared_experts.w3.weight", inter_, dim_);
  }

  ExpertStore& experts() { return experts_; }

  /// Stores that prefetch (StreamedExperts) get this layer's experts as soon as it is routed and the
  /// next layer's prediction; others skip its cost.
  /// Every ExpertStore says which it is.
  static constexpr bool kPrefetches = ExpertStore::kPrefetches;
  /// The next layer's MoE: this layer runs its router on this layer's input to predict its experts.
  void set_next(MoeT* next) { next_ = next; }

  /// Run this layer's router on `x` (the previous layer's MoE input) and prefetch what it names.
  void predict_and_prefetch(const float* x, long T) {
    auto scores = B::template alloc<float>(static_cast<size_t>(T) * E_);
    auto idx = B::template alloc<int32_t>(static_cast<size_t>(T) * K_);
    auto wts = B::template alloc<float>(static_cast<size_t>(T) * K_);
    route(x, T, scores.data(), idx.data(), wts.data());
    std::vector<int32_t> h_idx(static_cast<size_t>(T) * K_);
    B::download(h_idx.data(), idx.data(), h_idx.size());
    std::vector<bool> seen(E_, false);
    std::vector<int> wanted;
    for (int32_t e : h_idx)
      if (e >= 0 && e < E_ && !seen[e]) seen[e] = true, wanted.push_back(e);
    experts_.prefetch(wanted);
  }

  /// x: [T, dim] (ffn_in) → out [T, dim]. `tensor_rows`: as HighwayT::mixes — T (0) for one
  /// sequence's step; 1 for a batched decode step of different sequences' rows, where each row's
  /// router and each row's expert calls are, in the reference, tensors of their own (the
  /// sigmoid/softplus and SiLU exp paths depend on it). TapT: Tap or RowTaps.
  template <class TapT>
  void forward(const float* x, long T, const TapT& tap, float* out, long tensor_rows = 0) {
    const bool row_local = tensor_rows == 1 && T > 1;
    const int E = E_, K = K_;
    auto scores = B::template alloc<float>(static_cast<size_t>(T) * E);
    auto idx = B::template alloc<int32_t>(static_cast<size_t>(T) * K);
    auto wts = B::template alloc<float>(static_cast<size_t>(T) * K);
    route(x, T, scores.data(), idx.data(), wts.data(), tensor_rows);
    tap.f32("moe_scores", scores.data(), {T, E}, CapType::kF32);
    tap.i32("moe_indices", idx.data(), {T, K});
    tap.f32("moe_weights", wts.data(), {T, K}, CapType::kF32);

    // the routing decision goes to the host: it decides which expert weights are touched
    std::vector<int32_t> h_idx(static_cast<size_t>(T) * K);
    std::vector<float> h_w(static_cast<size_t>(T) * K);
    B::download(h_idx.data(), idx.data(), h_idx.size());
    B::download(h_w.data(), wts.data(), h_w.size());
    if constexpr (kPrefetches) {
      // this layer's own experts queued first (each read overlaps the conversion and compute of
      // the ones before it), then the next layer's predicted ones (overlapping this layer)
      std::vector<bool> seen(E, false);
      std::vector<int> own;
      for (int32_t e : h_idx)
        if (e >= 0 && e < E && !seen[e]) seen[e] = true, own.push_back(e);
      std::sort(own.begin(), own.end());  // the order the loop below takes them in
      experts_.prefetch(own);
      if (next_) next_->predict_and_prefetch(x, T);
    }

    auto acc = B::template alloc<float>(static_cast<size_t>(T) * dim_);  // zeros
    std::vector<Routed> routed;  // increasing expert id
    for (int e = 0; e < E; ++e) {
      Routed r{e, {}, {}};
      for (long t = 0; t < T; ++t)
        for (int j = 0; j < K; ++j)
          if (h_idx[t * K + j] == e) {
            r.rows.push_back(static_cast<int32_t>(t));
            r.weights.push_back(h_w[t * K + j]);
          }
      if (!r.rows.empty()) routed.push_back(std::move(r));
    }
    bool as_tasks = false;
    if constexpr (kExpertTasks) {
      as_tasks = T <= kExpertTaskMaxRows && B::threads() > 1;
      if (as_tasks) run_experts_as_tasks(routed, x, T, acc.data(), row_local);
    }
    if (!as_tasks) {
      for (const Routed& r : routed) run_expert(experts_.get(r.expert), x, r.rows, &r.weights, acc.data(), row_local);
      std::vector<int32_t> all(T);
      for (long t = 0; t < T; ++t) all[t] = static_cast<int32_t>(t);
      run_expert(shared_, x, all, nullptr, acc.data(), row_local);
    }
    float* pa = acc.data();
    B::for_each(T * dim_, [=] DS41_LAMBDA(long e) { out[e] = bf16_round(pa[e]); });
    tap.f32("ffn_out", out, {T, dim_});
  }

  /// Router: f32 Linear on bf16 values, score function, biased top-k, weights from raw scores;
  /// scores [T, E], idx/wts [T, K] on the backend. (Public for CUDA's extended lambdas.)
  void route(const float* x, long T, float* scores, int32_t* idx, float* wts, long tensor_rows = 0) const {
    const int E = E_, K = K_;
    const long tr = tensor_rows > 0 ? tensor_rows : T;
    B::linear(x, T, dim_, gate_.view(), scores, E, OutRound::kF32);
    {
      float* ps = scores;
      const float* bias = bias_.data();
      int32_t* pi = idx;
      float* pw = wts;
      const float temp = gate_temp_, rscale = route_scale_;
      const ScoreFunc sf = score_func_;
      const bool norm = norm_topk_;
      auto topk_buf = B::template alloc<TopkEntry>(static_cast<size_t>(T) * E);  // torch_topk_row's scratch
      TopkEntry* pt = topk_buf.data();
      B::for_each(T, [=] DS41_LAMBDA(long t) {
        float* s = ps + t * E;
        if (sf == ScoreFunc::kSoftmax) {
          // torch's last-dim softmax: vector exp on every element, reduce_all sum, times 1/sum
          float mx = -INFINITY;
          for (int e = 0; e < E; ++e) mx = fmaxf(mx, s[e] / temp);
          for (int e = 0; e < E; ++e) s[e] = exp_sleef_u10(s[e] / temp - mx);
          const float inv = 1.0f / torch_reduce_all_sum(s, E);
          for (int e = 0; e < E; ++e) s[e] = s[e] * inv;
        } else {
          for (int e = 0; e < E; ++e) {
            float z = s[e] / temp;
            // torch.sigmoid over the [T, E] scores: the element's position picks its exp path
            const long i = t % tr * E + e, n = tr * E;
            s[e] = sf == ScoreFunc::kSigmoid ? torch_sigmoid(z, i, n) : sqrtf(torch_softplus(z, i, n));
          }
        }
        // biased scores select; at most 64 experts chosen per token
        float biased[1024];
        int sel[64];
        for (int e = 0; e < E && e < 1024; ++e) biased[e] = s[e] + bias[e];
        // (scores + bias).topk(K): torch's order, ties included (core/topk.hpp), on both backends
        reference_topk_row(biased, E, K, true, sel, pt + t * E);
        for (int j = 0; j < K; ++j) {
          pi[t * K + j] = sel[j];
          pw[t * K + j] = s[sel[j]];
        }
        // weights.sum(dim=-1): torch's order over the K gathered weights (not left to right once K > 4)
        const float* wt = pw + t * K;
        const float sum = torch_order_sum(K, [=](long j) { return wt[j]; });
        if (norm && K > 1)
          for (int j = 0; j < K; ++j) pw[t * K + j] = pw[t * K + j] / (sum + 1e-20f);
        for (int j = 0; j < K; ++j) pw[t * K + j] = pw[t * K + j] * rscale;
      });
    }
  }

  /// acc[rows[i]] += w2(bf16(weight_i · silu(clamp(w1 x)) · clamp(w3 x))) for the gathered rows;
  /// `row_local`: each row was its own call in the reference (a batched decode step), else the
  /// rows were one call's [n, I] tensor.
  /// (Public: CUDA's extended lambdas may not live in private member functions.)
  void run_expert(const ExpertWeights<B>& ew, const float* x, const std::vector<int32_t>& rows,
                  const std::vector<float>* weights, float* acc, bool row_local = false) const {
    const long n = static_cast<long>(rows.size());
    const int dim = dim_;
    auto d_rows = B::template alloc<int32_t>(n);
    B::upload(d_rows.data(), rows.data(), n);
    auto y = expert_output(ew, x, d_rows.data(), n, weights, row_local);
    const int32_t* pr = d_rows.data();
    const float* py = y.data();
    B::for_each_in_rows(n, dim, [=] DS41_LAMBDA(long i, long d) { acc[pr[i] * static_cast<long>(dim) + d] += py[i * dim + d]; });
  }

  /// The expert's output rows [n, dim] for the input rows x[rows[i]] (`rows` on the backend): w2 of
  /// the weighted, clamped SwiGLU, each Linear rounded to bf16 as the reference's.
  Buf<float> expert_output(const ExpertWeights<B>& ew, const float* x, const int32_t* rows, long n,
                           const std::vector<float>* weights, bool row_local) const {
    const int dim = dim_, I = inter_;
    auto d_w = B::template alloc<float>(weights ? n : 1);
    if (weights) B::upload(d_w.data(), weights->data(), n);
    auto xs = B::template alloc<float>(static_cast<size_t>(n) * dim);
    {
      const int32_t* pr = rows;
      float* px = xs.data();
      B::for_each_in_rows(n, dim, [=] DS41_LAMBDA(long i, long d) { px[i * dim + d] = x[pr[i] * static_cast<long>(dim) + d]; });
    }
    auto g = B::template alloc<float>(static_cast<size_t>(n) * I);
    auto u = B::template alloc<float>(static_cast<size_t>(n) * I);
    B::linear(xs.data(), n, dim, ew.w1.view(), g.data(), I, OutRound::kBF16);
    B::linear(xs.data(), n, dim, ew.w3.view(), u.data(), I, OutRound::kBF16);
    {
      float *pg = g.data(), *pu = u.data();
      const float* pw = weights ? d_w.data() : nullptr;
      const float lim = limit_;
      // the reference's clamped, weighted SwiGLU (swiglu_entry), a row's run at a time; silu's
      // exp path by the element's place in its row (row_local) or in the whole [n, I] tensor
      B::for_each_run(n, I, [=] DS41_LAMBDA(long i, long c0, long c1) {
        swiglu_run(pg + i * I, pu + i * I, c0, c1, lim, pw ? pw + i : nullptr, row_local ? 0 : i * I,
                   row_local ? I : n * I);
      });
    }
    auto y = B::template alloc<float>(static_cast<size_t>(n) * dim);
    B::linear(g.data(), n, I, ew.w2.view(), y.data(), dim, OutRound::kBF16);
    return y;
  }

 private:
  /// One routed expert's share of a step: its input rows and their routing weights.
  struct Routed {
    int expert;
    std::vector<int32_t> rows;
    std::vector<float> weights;
  };

  /// Whether a step's experts may run as whole tasks on the backend's threads (HostBackend::
  /// run_tasks; a device backend runs them in turn): the store's weights must stay put while
  /// the step fetches every routed expert first.
  static constexpr bool kExpertTasks = [] {
    if constexpr (TaskRunner<B> && requires { ExpertStore::kStableRefs; }) return B::kRunsTasks && ExpertStore::kStableRefs;
    return false;
  }();
  /// Up to this many rows in a step (a batched decode step, a verify draft) the experts run as tasks;
  /// a prefill's experts have rows enough to keep every thread busy inside each Linear.
  static constexpr long kExpertTaskMaxRows = 16;

  /// The experts of a step of few rows as tasks, one expert wholly on one thread (its Linears
  /// and elementwise steps run inline there), each output in a buffer of its own, then added into
  /// acc: the routed ones in increasing expert id, then the shared one, so each element's
  /// additions are the loop's in the loop's order (the same bits). Why: at a few rows most routed
  /// experts are one- or two-row GEMVs bound by memory, the shared expert and the rest multi-row
  /// tiles bound by the multiply-adds; split Linear by Linear across the threads, each Linear
  /// pays a barrier and both threads wait on memory at the same time. As tasks, heaviest first,
  /// the first thread's share starts with the shared and the multi-row experts and the other's
  /// with one-row ones (HostThreadPool::run_owned), so arithmetic and reads overlap.
  void run_experts_as_tasks(const std::vector<Routed>& routed, const float* x, long T, float* acc, bool row_local) {
    const size_t n = routed.size() + 1;  // the shared expert last
    std::vector<const ExpertWeights<B>*> weights(n, &shared_);
    for (size_t i = 0; i < routed.size(); ++i) weights[i] = &experts_.get(routed[i].expert);
    std::vector<int32_t> every_row(static_cast<size_t>(T));
    for (long t = 0; t < T; ++t) every_row[t] = static_cast<int32_t>(t);
    auto rows_of = [&](size_t i) -> const std::vector<int32_t>& { return i < routed.size() ? routed[i].rows : every_row; };
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if ((a == n - 1) != (b == n - 1)) return a == n - 1;  // the shared expert (every row) first
      return rows_of(a).size() > rows_of(b).size();
    });
    std::vector<Buf<int32_t>> rows(n);
    std::vector<Buf<float>> outs(n);
    for (size_t i = 0; i < n; ++i) {
      rows[i] = B::template alloc<int32_t>(rows_of(i).size());
      B::upload(rows[i].data(), rows_of(i).data(), rows_of(i).size());
    }
    B::run_tasks(static_cast<long>(n), [&](long k) {
      const size_t i = order[k];
      const std::vector<float>* w = i < routed.size() ? &routed[i].weights : nullptr;
      outs[i] = expert_output(*weights[i], x, rows[i].data(), static_cast<long>(rows_of(i).size()), w, row_local);
    });
    // per row, its experts' output rows in increasing expert id, then the shared expert's
    std::vector<std::vector<const float*>> sources(static_cast<size_t>(T));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < rows_of(i).size(); ++j)
        sources[rows_of(i)[j]].push_back(outs[i].data() + static_cast<long>(j) * dim_);
    const int dim = dim_;
    B::for_each_in_rows(T, dim, [&](long t, long d) {
      float& a = acc[t * dim + d];
      for (const float* src : sources[t]) a += src[d];
    });
  }

  int dim_ = 0, inter_ = 0, E_ = 0, K_ = 0;
  ScoreFunc score_func_ = ScoreFunc::kSqrtSoftplus;
  float gate_temp_ = 1;
  bool norm_topk_ = true;
  float route_scale_ = 1, limit_ = 0;
  ExpertStore experts_;
  Matrix<B> gate_;
  Buf<float> bias_;
  ExpertWeights<B> shared_;
  MoeT* next_ = nullptr;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
