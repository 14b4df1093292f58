// ds41/model/block.hpp — Block: one layer in the reference's order (M:968-994).
//
//   [engram]  h ← h + gate·value                              (engram layers)
//   attn mix  attn_pre/post/comb = hc_mixes(h_in)
//   attention x = attn(attn_norm(hc_pre(h_in, pre_mix_in)))    (pre_mix_in: previous FFN's pre)
//             h_mid = hc_post(x, h_in, attn_post, attn_comb)
//   ffn mix   ffn_pre/post/comb = hc_mixes(h_mid)
//   MoE       y = moe(ffn_norm(hc_pre(h_mid, attn_pre)))      (the delayed pre)
//             h_out = hc_post(y, h_mid, ffn_post, ffn_comb); ffn_pre goes to the next layer
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "attention.hpp"
#include "engram.hpp"
#include "highway.hpp"
#include "moe.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B, class ExpertStore = ResidentExperts<B>, class Table = ResidentTable<B>>
class Block {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;
  using Attn = CompressedAttnT<B>;

  /// `shared...`: passed on to the ExpertStore (StreamedExperts: the model's ExpertCache).
  template <class... Shared>
  Block(const ModelConfig& c, const WeightSource& w, int layer, Shared&... shared)
      : layer_(layer), dim_(c.dim), hc_(c.hc_mult), eps_(static_cast<float>(c.norm_eps)),
        highway_(c, w, "layers." + std::to_string(layer) + "."), attn_(c, w, layer), moe_(c, w, layer, shared...) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    attn_norm_ = upload_vector<B>(w, p + "attn_norm.weight", dim_);
    ffn_norm_ = upload_vector<B>(w, p + "ffn_norm.weight", dim_);
    if (c.engram_slot(layer) >= 0) engram_ = std::make_unique<EngramT<B, Table>>(c, w, layer);
  }

  typename Attn::State make_state() const { return attn_.make_state(); }
  bool has_engram() const { return engram_ != nullptr; }
  MoeT<B, ExpertStore>& moe() { return moe_; }

  /// h: [T, hc, dim] in/out; pre_mix: [T, hc] in (this attention's collapse) / out (ffn_pre).
  /// hash: backend copy of the engram rows (may be null on models without engram).
  /// input_mean (a DSpark target layer, else null): the copies' mean of the stream entering this
  /// block (after its engram), row t at input_mean + t·mean_stride.
  void forward(float* h, float* pre_mix, const int32_t* hash, long T, long start, typename Attn::State& st,
               SharedSlots<B>& shared, const Tap<B>& tap, float* input_mean = nullptr, long mean_stride = 0) {
    layer(h, pre_mix, hash, T, T, tap, input_mean, mean_stride,
          [&](const float* x, float* y) { attn_.forward(x, T, start, st, shared, tap, y); });
  }

  /// A batched decode step: row r of h [N, hc, dim] is one token of its own sequence (rows[r]:
  /// its position, this layer's state, its shared slots and taps). Every weight pass runs once
  /// over the N rows; row for row the same bits as forward() on that sequence alone.
  void forward_rows(float* h, float* pre_mix, const int32_t* hash, const std::vector<typename Attn::Row>& rows,
                    const RowTaps<B>& taps, float* input_mean = nullptr, long mean_stride = 0) {
    const long N = static_cast<long>(rows.size());
    layer(h, pre_mix, hash, N, 1, taps, input_mean, mean_stride,
          [&](const float* x, float* y) { attn_.forward_rows(x, rows, y); });
  }

  /// The block around a caller's attention (`attend(x, y)`: attn_in [T, dim] → attn_out), its T
  /// rows one tensor of the reference: a DSpark stage (dspark.hpp), whose attention differs.
  template <class Attend>
  void forward_with(float* h, float* pre_mix, long T, const Tap<B>& tap, Attend&& attend) {
    layer(h, pre_mix, nullptr, T, T, tap, nullptr, 0, attend);
  }
  const Attn& attention() const { return attn_; }

 private:
  /// The layer around its attention (`attend(x, y)`: attn_in → attn_out). tensor_rows: rows of
  /// the reference's tensors (HighwayT::mixes): T for one sequence, 1 for a batched step.
  template <class TapT, class Attend>
  void layer(float* h, float* pre_mix, const int32_t* hash, long T, long tensor_rows, const TapT& tap,
             float* input_mean, long mean_stride, Attend&& attend) {
    const int hc = hc_, dim = dim_;
    const size_t n_h = static_cast<size_t>(T) * hc * dim, n_mix = static_cast<size_t>(T) * hc;
    if (engram_) engram_->forward(h, hash, T, tap, tensor_rows);
    if (input_mean) HighwayT<B>::copies_mean(h, T, hc, dim, input_mean, mean_stride);
    tap.f32("h_in", h, {T, hc, dim});
    tap.f32("pre_mix_in", pre_mix, {T, hc}, CapType::kF32);

    auto a_pre = B::template alloc<float>(n_mix), a_post = B::template alloc<float>(n_mix);
    auto a_comb = B::template alloc<float>(n_mix * hc);
    highway_.mixes(highway_.attn(), h, T, a_pre.data(), a_post.data(), a_comb.data(), tensor_rows);
    tap.f32("attn_pre", a_pre.data(), {T, hc}, CapType::kF32);
    tap.f32("attn_post", a_post.data(), {T, hc}, CapType::kF32);
    tap.f32("attn_comb", a_comb.data(), {T, hc, hc}, CapType::kF32);

    auto x = B::template alloc<float>(static_cast<size_t>(T) * dim);
    highway_.collapse(h, pre_mix, T, x.data());
    Ops<B>::rmsnorm(x.data(), T, dim, attn_norm_.data(), eps_);
    tap.f32("attn_in", x.data(), {T, dim});
    auto y = B::template alloc<float>(static_cast<size_t>(T) * dim);
    attend(x.data(), y.data());
    auto h_mid = B::template alloc<float>(n_h);
    highway_.expand_post(y.data(), h, a_post.data(), a_comb.data(), T, h_mid.data());
    tap.f32("h_mid", h_mid.data(), {T, hc, dim});

    auto f_post = B::template alloc<float>(n_mix), f_comb = B::template alloc<float>(n_mix * hc);
    highway_.mixes(highway_.ffn(), h_mid.data(), T, pre_mix, f_post.data(), f_comb.data(), tensor_rows);
    tap.f32("ffn_pre", pre_mix, {T, hc}, CapType::kF32);
    tap.f32("ffn_post", f_post.data(), {T, hc}, CapType::kF32);
    tap.f32("ffn_comb", f_comb.data(), {T, hc, hc}, CapType::kF32);

    highway_.collapse(h_mid.data(), a_pre.data(), T, x.data());
    Ops<B>::rmsnorm(x.data(), T, dim, ffn_norm_.data(), eps_);
    tap.f32("ffn_in", x.data(), {T, dim});
    moe_.forward(x.data(), T, tap, y.data(), tensor_rows);
    highway_.expand_post(y.data(), h_mid.data(), f_post.data(), f_comb.data(), T, h);
    tap.f32("h_out", h, {T, hc, dim});
  }

  int layer_ = 0, dim_ = 0, hc_ = 1;
  float eps_ = 0;
  HighwayT<B> highway_;
  Attn attn_;
  MoeT<B, ExpertStore> moe_;
  std::unique_ptr<EngramT<B, Table>> engram_;
  Buf<float> attn_norm_, ffn_norm_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
