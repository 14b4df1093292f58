// ds41/model/config.hpp — the runtime model configuration (the reference's ModelArgs) and its
// derived per-layer roles. Sizes vary per fixture; nothing here is specialised to one model.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

enum class ScoreFunc { kSoftmax, kSigmoid, kSqrtSoftplus };

/// Engram n-gram hash parameters (the reference derives them from the tokenizer; goldens and GGUF
/// files carry them). Multipliers exceed 2^53 and are held as 64-bit integers.
struct EngramHashParams {
  std::vector<int32_t> token_map;      // [vocab] -> compressed id
  int64_t pad_id = 0;                  // compressed id of the pad token
  std::vector<int64_t> primes;         // [n_engram_layers][max_ngram-1][n_heads]
  std::vector<int64_t> offsets;        // [n_engram_layers][(max_ngram-1)*n_heads]
  std::vector<int64_t> multipliers;    // [n_engram_layers][max_ngram]
};

struct ModelConfig {
  long max_seq_len = 0;
  long vocab_size = 0;
  int dim = 0;
  int moe_inter_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int n_activated_experts = 0;
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  double gate_temp = 1.0;
  bool norm_topk_prob = true;
  double route_scale = 1.0;
  double swiglu_limit = 0.0;
  int q_lora_rank = 0;
  int head_dim = 0;
  int rope_head_dim = 0;
  double norm_eps = 1e-20;
  int o_groups = 1;
  int o_lora_rank = 0;
  int window_size = 0;
  std::vector<int> compress_ratios;
  std::vector<int> kv_source_layers;
  std::vector<int> index_source_layers;
  double compress_rope_theta = 40000.0;
  long original_seq_len = 0;
  double rope_theta = 10000.0;
  double rope_factor = 1.0;
  double beta_fast = 32;
  double beta_slow = 1;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int candidate_source_layer = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;
  int hc_mult = 1;
  int hc_sinkhorn_iters = 1;
  double hc_eps = 1e-6;
  std::vector<int> engram_layer_ids;
  std::vector<long> engram_num_embeddings;
  int engram_max_ngram_size = 1;
  int engram_n_heads = 0;
  int engram_head_dim = 0;
  long engram_pad_id = 2;
  long engram_compressed_vocab_size = 0;
  long engram_vocab_size = 0;  // where the hash primes' search starts (engram.py; 0 = not stated)
  EngramHashParams engram;
  // DSpark, the draft head (SCHEMA §11): S = n_mtp_layers stages after the backbone (layer ids
  // n_layers .. n_layers+S-1, weights mtp.s.*), drafting dspark_block_size positions at once.
  // 0 stages or a block size of 0: no draft head.
  int n_mtp_layers = 0;
  int dspark_block_size = 0;
  long dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids;  // backbone layers whose input stream feeds the head
  int dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;     // 0: the backbone's
  int dspark_n_activated_experts = 0;  // 0: the backbone's

  static bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
  int ratio(int layer) const {
    // a DSpark stage past the listed ratios is window-only (the reference asserts ratio 0 there)
    return layer >= n_layers && layer >= static_cast<int>(compress_ratios.size()) ? 0 : compress_ratios.at(layer);
  }
  bool has_dspark() const { return n_mtp_layers > 0 && dspark_block_size > 0; }
  int dspark_experts() const { return dspark_n_routed_experts ? dspark_n_routed_experts : n_routed_experts; }
  int dspark_active_experts() const {
    return dspark_n_activated_experts ? dspark_n_activated_experts : n_activated_experts;
  }
  bool is_kv_source(int l) const { return contains(kv_source_layers, l); }
  bool is_index_source(int l) const { return contains(index_source_layers, l); }
  bool is_candidate_source(int l) const { return l == candidate_source_layer; }
  bool uses_candidates(int l) const { return candidate_source_layer >= 0 && candidate_source_layer < l; }
  /// Index position of layer `l` in the engram tables, or -1.
  int engram_slot(int l) const {
    auto it = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), l);
    return it == engram_layer_ids.end() ? -1 : static_cast<int>(it - engram_layer_ids.begin());
  }
  int n_engram_layers() const { return static_cast<int>(engram_layer_ids.size()); }
  /// engram hash columns per layer: (max_ngram-1) * n_heads
  int engram_cols() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
  int mix_hc() const { return (2 + hc_mult) * hc_mult; }

  /// Rejects configurations the reference cannot run (or this library does not model), naming the
  /// field and value.
  void validate() const {
    // upper bounds keep every derived size far from overflow (the released model is far below them)
    auto pos = [](const char* f, long v) {
      DS41_CHECK(v > 0 && v <= (1L << 24), "config: ", f, " must be in [1, 2^24], got ", v);
    };
    pos("dim", dim);
    pos("vocab_size", vocab_size);
    pos("n_layers", n_layers);
    pos("n_heads", n_heads);
    pos("head_dim", head_dim);
    pos("q_lora_rank", q_lora_rank);
    pos("window_size", window_size);
    pos("max_seq_len", max_seq_len);
    pos("hc_mult", hc_mult);
    pos("n_routed_experts", n_routed_experts);
    pos("n_activated_experts", n_activated_experts);
    pos("moe_inter_dim", moe_inter_dim);
    pos("o_groups", o_groups);
    pos("o_lora_rank", o_lora_rank);
    DS41_CHECK(hc_mult <= 64 && hc_sinkhorn_iters >= 1 && hc_sinkhorn_iters <= 1000,
               "config: hc_mult must be in [1, 64] and hc_sinkhorn_iters in [1, 1000], got ", hc_mult, " / ",
               hc_sinkhorn_iters);
    DS41_CHECK(index_n_heads >= 0 && index_head_dim >= 0 && index_topk >= 0 && index_n_heads <= (1 << 16) &&
                   index_head_dim <= (1 << 16) && index_topk <= (1 << 24),
               "config: index_n_heads / index_head_dim / index_topk out of range");
    DS41_CHECK(engram_max_ngram_size >= 0 && engram_max_ngram_size <= 64 && engram_n_heads >= 0 &&
                   engram_n_heads <= 1024 && engram_head_dim >= 0 && engram_head_dim <= (1 << 16),
               "config: engram sizes out of range");
    DS41_CHECK(candidate_topk_blocks >= 0 && candidate_block_size >= 0 && candidate_block_size <= (1 << 24),
               "config: candidate prefilter sizes out of range");
    DS41_CHECK(n_shared_experts == 1, "config: n_shared_experts must be 1 (as the reference asserts), got ",
               n_shared_experts);
    DS41_CHECK(n_routed_experts <= 1024 && n_activated_experts <= 64,
               "config: at most 1024 routed experts and 64 active ones are supported, got ", n_routed_experts,
               " / ", n_activated_experts);
    DS41_CHECK(n_activated_experts <= n_routed_experts, "config: n_activated_experts ", n_activated_experts,
               " > n_routed_experts ", n_routed_experts);
    DS41_CHECK(rope_head_dim > 0 && rope_head_dim % 2 == 0 && rope_head_dim <= head_dim,
               "config: rope_head_dim must be even and in (0, head_dim], got ", rope_head_dim);
    DS41_CHECK(n_heads % o_groups == 0, "config: n_heads ", n_heads, " not divisible by o_groups ", o_groups);
    DS41_CHECK(static_cast<int>(compress_ratios.size()) >= n_layers, "config: compress_ratios has ",
               compress_ratios.size(), " entries for ", n_layers, " layers");
    int last_index_source = -1;
    for (int l = 0; l < n_layers; ++l) {
      int r = compress_ratios[l];
      DS41_CHECK(r >= 0, "config: compress_ratios[", l, "] = ", r, " is negative");
      if (is_index_source(l)) {
        DS41_CHECK(r > 0, "config: index source layer ", l, " has compress ratio 0");
        DS41_CHECK(index_n_heads > 0 && index_head_dim > 0 && index_topk > 0,
                   "config: index source layer ", l, " needs index_n_heads, index_head_dim, index_topk > 0");
        DS41_CHECK(rope_head_dim <= index_head_dim, "config: rope_head_dim ", rope_head_dim,
                   " > index_head_dim ", index_head_dim);
        last_index_source = l;
      }
      if (is_kv_source(l)) DS41_CHECK(r > 0, "config: kv source layer ", l, " has compress ratio 0");
      if (r > 0 && !is_index_source(l))
        DS41_CHECK(last_index_source >= 0, "config: layer ", l, " (ratio ", r,
                   ") reads the top-k of an index source, but no index source precedes it");
    }
    for (int l = 0; l < n_layers; ++l)
      if (compress_ratios[l] > 0) {
        bool has_source = false;
        for (int s : kv_source_layers) has_source |= (s <= l);
        DS41_CHECK(has_source, "config: layer ", l, " reads compressed KV, but no kv source precedes it");
      }
    if (candidate_source_layer >= 0) {
      DS41_CHECK(candidate_source_layer < n_layers && is_index_source(candidate_source_layer),
                 "config: candidate_source_layer ", candidate_source_layer, " is not an index source layer");
      DS41_CHECK(candidate_block_size > 0 && candidate_topk_blocks > 0,
                 "config: candidate prefilter needs candidate_block_size and candidate_topk_blocks > 0");
    }
    DS41_CHECK(n_mtp_layers >= 0 && dspark_block_size >= 0, "config: n_mtp_layers ", n_mtp_layers,
               " and dspark_block_size ", dspark_block_size, " must not be negative");
    if (has_dspark()) validate_dspark();
    if (!engram_layer_ids.empty()) {
      DS41_CHECK(engram_max_ngram_size >= 2 && engram_n_heads > 0 && engram_head_dim > 0,
                 "config: engram needs max_ngram_size >= 2, n_heads > 0, head_dim > 0");
      DS41_CHECK(engram_head_dim % 32 == 0, "config: engram_head_dim ", engram_head_dim,
                 " must be a multiple of the fp8 block 32");
      const size_t L = engram_layer_ids.size();
      DS41_CHECK(engram_num_embeddings.size() == L, "config: engram_num_embeddings has ",
                 engram_num_embeddings.size(), " entries for ", L, " engram layers");
      DS41_CHECK(static_cast<long>(engram.token_map.size()) == vocab_size, "engram: token_map has ",
                 engram.token_map.size(), " entries, vocab_size is ", vocab_size);
      DS41_CHECK(engram.primes.size() == L * engram_cols(), "engram: primes has ", engram.primes.size(),
                 " entries, expected ", L * engram_cols());
      DS41_CHECK(engram.offsets.size() == L * engram_cols(), "engram: offsets has ", engram.offsets.size(),
                 " entries, expected ", L * engram_cols());
      DS41_CHECK(engram.multipliers.size() == L * engram_max_ngram_size, "engram: multipliers has ",
                 engram.multipliers.size(), " entries, expected ", L * engram_max_ngram_size);
      for (int l : engram_layer_ids)
        DS41_CHECK(l >= 0 && l < n_layers, "config: engram layer id ", l, " out of range");
      // every hash row (offset + value mod prime) must fall inside that layer's table
      for (size_t l = 0; l < L; ++l)
        for (int c = 0; c < engram_cols(); ++c) {
          const int64_t prime = engram.primes[l * engram_cols() + c], off = engram.offsets[l * engram_cols() + c];
          DS41_CHECK(prime > 0 && off >= 0 && off + prime <= engram_num_embeddings[l], "engram: layer slot ", l,
                     " column ", c, ": offset ", off, " + prime ", prime, " exceeds the table's ",
                     engram_num_embeddings[l], " rows");
        }
      for (int64_t m : engram.multipliers)
        DS41_CHECK(m >= 0 && (engram_compressed_vocab_size == 0 || m <= INT64_MAX / std::max<long>(engram_compressed_vocab_size, 1)),
                   "engram: multiplier ", m, " would overflow a 64-bit product with a compressed id");
      DS41_CHECK(engram.pad_id >= 0 && engram.pad_id < std::max<long>(engram_compressed_vocab_size, 1),
                 "engram: pad_id ", engram.pad_id, " outside the compressed vocab");
    }
  }

  void validate_dspark() const {
    DS41_CHECK(n_mtp_layers <= 64 && dspark_block_size <= 1024, "config: n_mtp_layers ", n_mtp_layers,
               " / dspark_block_size ", dspark_block_size, " out of range (at most 64 stages, blocks of 1024)");
    DS41_CHECK(dspark_noise_token_id >= 0 && dspark_noise_token_id < vocab_size, "config: dspark_noise_token_id ",
               dspark_noise_token_id, " outside the vocabulary [0, ", vocab_size, ")");
    DS41_CHECK(!dspark_target_layer_ids.empty(), "config: DSpark needs dspark_target_layer_ids (none given)");
    for (size_t i = 0; i < dspark_target_layer_ids.size(); ++i) {
      const int t = dspark_target_layer_ids[i];
      DS41_CHECK(t >= 0 && t < n_layers, "config: dspark_target_layer_ids[", i, "] = ", t,
                 " is not a backbone layer [0, ", n_layers, ")");
      DS41_CHECK(i == 0 || t > dspark_target_layer_ids[i - 1], "config: dspark_target_layer_ids must ascend");
    }
    DS41_CHECK(dspark_markov_rank > 0 && dspark_markov_rank <= (1 << 16), "config: dspark_markov_rank ",
               dspark_markov_rank, " must be in [1, 65536]");
    DS41_CHECK(dspark_n_routed_experts >= 0 && dspark_n_routed_experts <= 1024 && dspark_n_activated_experts >= 0 &&
                   dspark_active_experts() <= dspark_experts() && dspark_active_experts() <= 64,
               "config: DSpark experts ", dspark_experts(), " top-", dspark_active_experts(), " out of range");
    for (int s = 0; s < n_mtp_layers; ++s)
      DS41_CHECK(ratio(n_layers + s) == 0, "config: compress_ratios[", n_layers + s, "] = ", ratio(n_layers + s),
                 ", but DSpark stage ", s, " is window-only (ratio 0)");
  }
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
