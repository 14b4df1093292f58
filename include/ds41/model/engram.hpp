// ds41/model/engram.hpp — EngramT<Table>: n-gram hash lookups written into the residual stream
// before the block (M:326-365, E:160-184).
//
// EngramHasher turns token ids into table rows (token map → compressed ids → rolling XOR of
// id·multiplier products → mod prime + offset per (n-gram, head)), keeping the history across
// prefill and decode. EngramT fetches the table's rows (fp8 rows dequantised exactly, or the values
// of a GGUF Q8_0/K-quant table, rounded to bf16 as the reference's lookup does), projects them
// with wkv into one key per hc copy plus a shared value, and adds gate·value to each copy with the
// signed-sqrt sigmoid gate of the normalised stream·key product.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "../core/activation.hpp"
#include "../core/torch_math.hpp"
#include "config.hpp"
#include "tap.hpp"
#include "weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// Host-side n-gram hashing over the sequence's token history (integer work on a few ids per
/// token: it stays on the host for every backend).
class EngramHasher {
 public:
  static constexpr int64_t kDead = -1;  // tokens that take no part in an n-gram (image spans)

  EngramHasher() = default;
  explicit EngramHasher(const ModelConfig& c)
      : p_(c.engram), layers_(c.n_engram_layers()), nmax_(c.engram_max_ngram_size), heads_(c.engram_n_heads),
        max_seq_(c.max_seq_len) {
    history_.assign(max_seq_, 0);
  }
  int cols() const { return (nmax_ - 1) * heads_; }
  int layers() const { return layers_; }
  /// Compressed token ids by position (what sequence snapshots save and restore).
  std::vector<int64_t>& history() { return history_; }
  const std::vector<int64_t>& history() const { return history_; }

  /// Hash rows [T, n_engram_layers, cols] for tokens at positions start..start+T-1; the history is
  /// written first, so later steps see these tokens.
  std::vector<int32_t> hash(const int32_t* tokens, long T, long start) {
    for (long t = 0; t < T; ++t) history_[start + t] = p_.token_map[tokens[t]];
    const int C = cols();
    std::vector<int32_t> out(static_cast<size_t>(T) * layers_ * C);
    std::vector<int64_t> tok(nmax_);
    for (long t = 0; t < T; ++t) {
      const long pos = start + t;
      bool blocked = false;
      for (int s = 0; s < nmax_; ++s) {  // look back until the sequence start or a dead token
        int64_t src = history_[pos - s >= 0 ? pos - s : 0];
        blocked = blocked || pos < s || src == kDead;
        tok[s] = blocked ? p_.pad_id : src;
      }
      for (int l = 0; l < layers_; ++l) {
        const int64_t* mult = &p_.multipliers[static_cast<size_t>(l) * nmax_];
        uint64_t rolling = static_cast<uint64_t>(tok[0] * mult[0]);
        for (int n = 1; n < nmax_; ++n) {
          rolling ^= static_cast<uint64_t>(tok[n] * mult[n]);
          for (int h = 0; h < heads_; ++h) {
            const size_t col = static_cast<size_t>(n - 1) * heads_ + h;
            const int64_t prime = p_.primes[static_cast<size_t>(l) * C + col];
            // products are non-negative and below 2^63 (the reference bounds the multipliers), so
            // the XOR is too, and torch's % equals the unsigned remainder
            int64_t row = static_cast<int64_t>(rolling % static_cast<uint64_t>(prime)) +
                          p_.offsets[static_cast<size_t>(l) * C + col];
            out[(static_cast<size_t>(t) * layers_ + l) * C + col] = static_cast<int32_t>(row);
          }
        }
      }
    }
    return out;
  }

 private:
  EngramHashParams p_;
  int layers_ = 0, nmax_ = 1, heads_ = 0;
  long max_seq_ = 0;
  std::vector<int64_t> history_;
};

/// Table policy: the whole table resident in backend memory. A table of fp8 rows (embed.weight's
/// e4m3 codes, or their values in f32, with embed.scale's per-32 pow2 scales) stays codes + scales;
/// a table given without embed.scale is its values (f32 or bf16: a GGUF table in Q8_0 or a K-quant,
/// ggml's values) and is held as bf16(value), the row the lookup gives.
template <class B>
class ResidentTable {
 public:
  ResidentTable() = default;
  ResidentTable(const WeightSource& w, const std::string& p, long rows, int head_dim) : rows_(rows), hd_(head_dim) {
    const HostTensor t = w.load(p + "embed.weight", {rows, head_dim});
    if (!w.has(p + "embed.scale")) {
      DS41_CHECK(t.format == WeightFormat::kF32 || t.format == WeightFormat::kBF16, "engram table '", p,
                 "embed.weight' has format ", format_name(t.format), " and no '", p,
                 "embed.scale': a table without scales is its values, in f32 or bf16");
      // the reference rounds each looked-up row to bf16 (ParallelEngramEmbedding), so holding
      // bf16(value) gives the same rows at half the memory of f32
      std::vector<float> v = t.to_f32();
      for (float& x : v) x = bf16_round(x);
      values_ = Matrix<B>(HostTensor::from_bf16_values({rows, head_dim}, v), MatrixUse::kTable);
      return;
    }
    const HostTensor s = w.load(p + "embed.scale", {rows, head_dim / 32});
    DS41_CHECK(t.format == WeightFormat::kFp8Block32 || t.format == WeightFormat::kF32,
               "engram table '", p, "embed.weight' has format ", format_name(t.format), ", expected fp8 codes");
    std::vector<uint8_t> codes(static_cast<size_t>(rows) * head_dim);
    if (t.format == WeightFormat::kF32) {  // e4m3 code values held as float32
      std::vector<float> v = t.to_f32();
      for (size_t i = 0; i < v.size(); ++i) codes[i] = e4m3_encode(v[i]);
    } else {
      codes = t.payload;
    }
    codes_ = B::template alloc<uint8_t>(codes.size());
    B::upload(codes_.data(), codes.data(), codes.size());
    scales_ = upload_f32<B>(s.to_f32());
  }
  long rows() const { return rows_; }
  /// Gather rows: out[i, :] = bf16(value) for ids[i] (ids on the backend); value = code · scale
  /// for fp8 rows.
  void gather(const int32_t* ids, long n, float* out) const {
    if (values_.rows() > 0) return table_rows<B>(values_.view(), ids, n, hd_, out);
    const uint8_t* c = codes_.data();
    const float* s = scales_.data();
    const int hd = hd_;
    B::gather_fp8_rows(c, s, hd, ids, n, out);
  }

 private:
  long rows_ = 0;
  int hd_ = 0;
  typename B::template Buffer<uint8_t> codes_;
  typename B::template Buffer<float> scales_;
  Matrix<B> values_;  // a table of values: bf16(value) rows (rows() 0 for fp8 rows)
};

template <class B, class Table = ResidentTable<B>>
class EngramT {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  EngramT() = default;
  EngramT(const ModelConfig& c, const WeightSource& w, int layer)
      : layer_(layer), slot_(c.engram_slot(layer)), hc_(c.hc_mult), dim_(c.dim), cols_(c.engram_cols()),
        hd_(c.engram_head_dim), n_layers_(c.n_engram_layers()), eps_(static_cast<float>(c.norm_eps)) {
    const std::string p = "layers." + std::to_string(layer) + ".engram.";
    table_ = Table(w, p, c.engram_num_embeddings.at(slot_), hd_);
    wkv_ = load_matrix<B>(w, p + "wkv.weight", static_cast<long>(dim_) * (hc_ + 1), static_cast<long>(cols_) * hd_);
    // q_weight and k_weight are only ever used as their float32 product
    std::vector<float> q = w.load(p + "q_weight", {hc_, dim_}).to_f32();
    std::vector<float> k = w.load(p + "k_weight", {hc_, dim_}).to_f32();
    for (size_t i = 0; i < q.size(); ++i) q[i] = q[i] * k[i];
    qk_ = upload_f32<B>(q);
  }

  /// h: [T, hc, dim] updated in place; hash: backend copy of [T, n_engram_layers, cols].
  /// tensor_rows: as HighwayT::mixes (the gate's sigmoid path); TapT: Tap or RowTaps.
  template <class TapT>
  void forward(float* h, const int32_t* hash, long T, const TapT& tap, long tensor_rows = 0) const {
    const long tr = tensor_rows > 0 ? tensor_rows : T;
    const int C = cols_, hd = hd_, hc = hc_, dim = dim_, L = n_layers_, slot = slot_;
    auto ids = B::template alloc<int32_t>(static_cast<size_t>(T) * C);
    {
      int32_t* pi = ids.data();
      const long rows = table_.rows();
      B::for_each(T * C, [=] DS41_LAMBDA(long e) {
        long t = e / C, c = e % C;
        int32_t r = hash[(t * L + slot) * C + c];
        pi[e] = r >= 0 && r < rows ? r : 0;  // unreachable: ModelConfig::validate bounds every row
      });
    }
    auto emb = B::template alloc<float>(static_cast<size_t>(T) * C * hd);
    table_.gather(ids.data(), T * C, emb.data());
    const long kvw = static_cast<long>(dim) * (hc + 1);
    auto kv = B::template alloc<float>(static_cast<size_t>(T) * kvw);
    B::linear(emb.data(), T, static_cast<long>(C) * hd, wkv_.view(), kv.data(), kvw, OutRound::kBF16);
    auto gate = B::template alloc<float>(static_cast<size_t>(T) * hc);
    {
      const float *pk = kv.data(), *qk = qk_.data();
      float* pg = gate.data();
      const float eps = eps_, inv_sqrt_dim = static_cast<float>(std::pow(dim, -0.5));
      B::for_each(T * hc, [=] DS41_LAMBDA(long e) {
        long t = e / hc;
        int i = static_cast<int>(e % hc);
        const float* x = h + e * dim;
        const float* key = pk + t * kvw + static_cast<long>(i) * dim;
        // normalised per (token, copy) over dim, not jointly over the copies
        float rstd = rsqrt_ref(sum_squares(x, dim) / static_cast<float>(dim) + eps) *
                     rsqrt_ref(sum_squares(key, dim) / static_cast<float>(dim) + eps);
        const float* w = qk + static_cast<long>(i) * dim;
        float dot = torch_order_sum(dim, [=](long d) { return x[d] * w[d] * key[d]; });
        dot = dot * rstd * inv_sqrt_dim;
        pg[e] = torch_sigmoid(copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot), e % (tr * hc), tr * hc);
      });
      const float* pgc = pg;
      B::for_each(T * hc * dim, [=] DS41_LAMBDA(long e) {
        long t = e / (static_cast<long>(hc) * dim);
        long tc = e / dim;
        float v = pk[t * kvw + static_cast<long>(hc) * dim + e % dim];
        h[e] = bf16_round(h[e] + pgc[tc] * v);
      });
    }
    tap.f32("engram_gate", gate.data(), {T, hc}, CapType::kF32);
    tap.f32("engram_out", h, {T, hc, dim});
  }

 private:
  int layer_ = 0, slot_ = 0, hc_ = 1, dim_ = 0, cols_ = 0, hd_ = 0, n_layers_ = 0;
  float eps_ = 0;
  Table table_;
  Matrix<B> wkv_;
  Buf<float> qk_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
