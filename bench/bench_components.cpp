// Host benchmarks of the model components that bench_kernels has no dedicated benchmark for, each
// run through the library's own classes (not a re-implementation):
//
//   BM_HcPre / BM_HcPost        HighwayT: hc_pre = mixes (f32 Linear [(2+hc)·hc, hc·dim] on the
//                               flattened stream, RMS scale, Sinkhorn) + collapse of the hc copies
//                               with the pre mix; hc_post = expand_post (post·x + comb-mixed residual)
//   BM_Compressor               CompressorT at ratio 1 and ratio 4: prefill of a prompt (start 0)
//                               and one decode step (ratio 4: the average over the r positions of a
//                               group, one in r completes and pools a group)
//   BM_EngramHash / BM_EngramGather / BM_Engram
//                               EngramHasher alone, ResidentTable::gather alone (random rows), and
//                               the whole engram step: hash + row gather + wkv + gate + add
//   BM_CandidatePrefilter       the indexer's level-one candidate prefilter (IndexerT::select on
//                               the candidate source): block maxima, newest block pinned, top
//                               blocks, expanded to a position mask — per query row, before the
//                               index top-k (which BM_IndexerScoreTopK / BM_TopK cover)
//
// Shapes: DeepSeek-V4.1-Flash (dim 5120, hc 4, Sinkhorn 20, head_dim 512 = the compressed latent,
// compress ratio 4) with synthetic weights in the formats bench_layer uses (hc and compressor
// weights f32, dense fp8 32x32-block), and the tiny golden fixture (dim 64, hc 4) with its own
// regenerated weights (first Arg "tiny" = 1). BM_StreamRead and BM_StreamReadPrefetch (the same with a
// software prefetch) are the bandwidth reference: read every bytes_per_second here as a
// fraction of the faster (same run, same thread pool). Bytes are what the step
// must read (weights, table rows, state, its activations) and write (outputs), counted once.
//
//   ./build/bench/bench_components [--benchmark_filter=Engram]   (DS41_HOST_THREADS=n to pin threads)
#include <cmath>
#include <memory>
#include <string>
#include "bench_common.hpp"
#include "ds41/core/compress_math.hpp"
#include "ds41/ds41.hpp"
#include "ds41/testing/golden.hpp"
#include "ds41/model/compressor.hpp"
#include "ds41/model/engram.hpp"
#include "ds41/model/highway.hpp"

using namespace ds41;
using namespace ds41::bench;

namespace {

using B = HostBackend;

BENCHMARK(BM_StreamRead)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamReadPrefetch)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

// ------------------------------------------------------------------------------- V4.1 shapes
// Engram sizes. No V4.1-Flash engram config is in this repository (ModelConfig defaults are 0; the
// goldens are tiny: 3-grams x 2 heads x 32 dims, tables of ~4k rows). What is chosen here, and why:
//   head_dim 256     the row width of the published V4.1 GGUF conversions' engram tables
//                    (`e4m3_e8m0_32_row264`, 256 codes + 8 scales: docs/GGUF.md)
//   max n-gram 3     as every fixture here (2- and 3-grams) and DeepSeek's public Engram code
//   8 heads          per n-gram, as DeepSeek's public Engram code (n_head_per_ngram = 8)
//                    -> cols = 2 x 8 = 16 rows per token, wkv [5120·(4+1), 16·256] = 105 MB fp8
//   ~5·vocab rows    per n-gram (the public Engram code's table size), split into one prime-sized
//                    segment per head: 16 primes from 80800 up, ~1.29 M rows = 341 MB of fp8 rows
//                    per engram layer (a decode step reads 16 of them)
//   2 engram layers  (as the tiny fixture) — the hasher hashes every engram layer's rows per token
//   compressed vocab 100000 of the 129280-token vocabulary (token map synthetic)
constexpr int kEngramNgram = 3, kEngramHeads = 8, kEngramHeadDim = 256;
constexpr long kVocab = 129280, kEngramCompressedVocab = 100000, kEngramRowsPerHead = 5 * kVocab / kEngramHeads;
constexpr int kEngramLayer = 1;  // layer ids {1, 15}: the benchmarked layer is slot 0
// Candidate prefilter sizes: no V4.1 value here either (tiny: blocks of 2, top 3). Chosen: blocks of
// 64 compressed positions, top 16 blocks -> 1024 candidates, twice the index top-k 512.
constexpr int kCandBlock = 64, kCandTopBlocks = 16;

bool is_prime(long n) {
  if (n < 2) return false;
  for (long d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

ModelConfig v41_config() {
  ModelConfig c = bench::v41_config(16);
  c.vocab_size = kVocab;
  c.norm_eps = 1e-6;
  c.candidate_source_layer = 0;
  c.candidate_topk_blocks = kCandTopBlocks;
  c.candidate_block_size = kCandBlock;
  // engram (see the sizes above)
  c.engram_layer_ids = {kEngramLayer, 15};
  c.engram_max_ngram_size = kEngramNgram;
  c.engram_n_heads = kEngramHeads;
  c.engram_head_dim = kEngramHeadDim;
  c.engram_compressed_vocab_size = kEngramCompressedVocab;
  const int L = c.n_engram_layers(), C = c.engram_cols();
  EngramHashParams& p = c.engram;
  p.token_map.resize(kVocab);
  for (long i = 0; i < kVocab; ++i)
    p.token_map[i] = static_cast<int32_t>((static_cast<uint64_t>(i) * 2654435761u) % kEngramCompressedVocab);
  p.pad_id = p.token_map[c.engram_pad_id];
  std::mt19937_64 rng(41);
  const uint64_t max_mult = static_cast<uint64_t>(INT64_MAX) / kEngramCompressedVocab;
  for (int i = 0; i < L * kEngramNgram; ++i) p.multipliers.push_back(static_cast<int64_t>((rng() % max_mult) | 1));
  long next = kEngramRowsPerHead;  // distinct primes for every (layer, n-gram, head)
  for (int l = 0; l < L; ++l) {
    long offset = 0;
    for (int col = 0; col < C; ++col) {
      while (!is_prime(++next)) {
      }
      p.primes.push_back(next);
      p.offsets.push_back(offset);
      offset += next;
    }
    c.engram_num_embeddings.push_back(offset);
  }
  c.validate();
  return c;
}

// ---------------------------------------------------------------------------- the two shapes
struct Shape {
  const ModelConfig* c;
  const WeightSource* w;
  const char* name;
  std::vector<int32_t> prompt;  // token ids for the engram hasher
};

/// 0: V4.1-Flash with synthetic weights, 1: the tiny golden fixture.
const Shape& shape(long tiny) {
  if (tiny) {
    static golden::Golden g = golden::load(DS41_BENCH_GOLDEN);
    static WeightSet w = golden::regenerate_weights(g);
    static Shape s{&g.config, &w, "tiny", g.prompt_tokens};
    return s;
  }
  static ModelConfig c = v41_config();
  static bench::V41SyntheticWeights w;
  static Shape s = [] {
    Shape r{&c, &w, "V4.1", {}};
    for (long i = 0; i < 512; ++i) r.prompt.push_back(static_cast<int32_t>((i * 7919) % kVocab));
    return r;
  }();
  return s;
}

double tensor_bytes(const WeightSource& w, const std::string& name, const std::vector<long>& shape) {
  const HostTensor t = w.load(name, shape);
  return static_cast<double>(t.payload.size() + t.scales.size() * 4);
}

std::string shape_label(const Shape& s, const std::string& what) {
  return std::string(s.name) + " " + what;
}

// --------------------------------------------------------------------------- mHC highway
/// hc_pre: mixes of the attention's weights on h [T, hc, dim], then the collapse with a pre mix
/// into the layer input [T, dim] (Block collapses with the previous layer's delayed FFN pre; which
/// pre it is changes no work). Args: tiny, T.
void BM_HcPre(benchmark::State& st) {
  const Shape& s = shape(st.range(0));
  const ModelConfig& c = *s.c;
  const long T = st.range(1);
  const int hc = c.hc_mult, dim = c.dim, mix = c.mix_hc();
  const long hd = static_cast<long>(hc) * dim;
  HighwayT<B> hw(c, *s.w, "layers.1.");
  std::vector<float> h = random_activations(T * hd, 21), pre(T * hc), post(T * hc), comb(T * hc * hc), y(T * dim);
  for (auto _ : st) {
    hw.mixes(hw.attn(), h.data(), T, pre.data(), post.data(), comb.data());
    hw.collapse(h.data(), pre.data(), T, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double fn = tensor_bytes(*s.w, "layers.1.hc_attn_fn", {mix, hd});
  // Linear + sum of squares + Sinkhorn (~4 flops per comb entry per iteration) + collapse
  const double flops = T * (2.0 * mix * hd + 2.0 * hd + 4.0 * c.hc_sinkhorn_iters * hc * hc + 2.0 * hd);
  set_stream_counters(st, fn + 4.0 * T * (hd + dim), flops);
  st.SetLabel(shape_label(s, "hc " + std::to_string(hc) + " x " + std::to_string(dim)));
}
BENCHMARK(BM_HcPre)
    ->ArgNames({"tiny", "T"})
    ->Args({0, 1})->Args({0, 128})->Args({1, 1})->Args({1, 23})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

/// hc_post: out[t, j] = post[t, j]·x[t] + Σ_i comb[t, i, j]·res[t, i] over [T, hc, dim], with post
/// and comb from a real mixes call. Args: tiny, T.
void BM_HcPost(benchmark::State& st) {
  const Shape& s = shape(st.range(0));
  const ModelConfig& c = *s.c;
  const long T = st.range(1);
  const int hc = c.hc_mult, dim = c.dim;
  const long hd = static_cast<long>(hc) * dim;
  HighwayT<B> hw(c, *s.w, "layers.1.");
  std::vector<float> res = random_activations(T * hd, 22), x = random_activations(T * dim, 23), out(T * hd),
                     pre(T * hc), post(T * hc), comb(T * hc * hc);
  hw.mixes(hw.attn(), res.data(), T, pre.data(), post.data(), comb.data());
  for (auto _ : st) {
    hw.expand_post(x.data(), res.data(), post.data(), comb.data(), T, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_stream_counters(st, 4.0 * T * (dim + 2 * hd), T * hd * (2.0 * hc + 2.0));
  st.SetLabel(shape_label(s, "hc " + std::to_string(hc) + " x " + std::to_string(dim)));
}
BENCHMARK(BM_HcPost)
    ->ArgNames({"tiny", "T"})
    ->Args({0, 1})->Args({0, 128})->Args({1, 1})->Args({1, 23})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------- compressor
/// CompressorT::forward. Args: tiny, ratio, T; T = 0 is one decode step after a prompt (V4.1: 256
/// tokens, tiny: its 23-token prompt), otherwise a prefill of T tokens from position 0. The tiny
/// fixture's ratio-1 compressor is layer 3's; its ratio-2 layer 1's weights (same shapes) serve
/// ratio 4.
void BM_Compressor(benchmark::State& st) {
  const Shape& s = shape(st.range(0));
  const ModelConfig& c = *s.c;
  const int r = static_cast<int>(st.range(1));
  const bool decode = st.range(2) == 0;
  const long prompt = st.range(0) ? static_cast<long>(s.prompt.size()) : 256;
  const long T = decode ? 1 : st.range(2);
  const int D = c.head_dim, dim = c.dim;
  const std::string p = std::string("layers.") + (st.range(0) && r == 1 ? "3" : "1") + ".attn.compressor.";
  CompressorT<B> comp(c, *s.w, p, r);
  auto state = comp.make_state();
  std::vector<float> x = random_activations((decode ? prompt : T) * dim, 24), out(comp.max_new(decode ? prompt : T) * D);
  if (decode) comp.forward(x.data(), prompt, 0, state, out.data());  // the prompt fills the first groups
  long i = 0, produced = 0;
  for (auto _ : st) {
    // decode: positions prompt .. prompt+r-1 in turn, the last of them completes a group
    const long start = decode ? prompt + (i++ % r) : 0;
    produced += comp.forward(x.data(), T, start, state, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double w = tensor_bytes(*s.w, p + "wkv.weight", {D, dim}) +
                   (r > 1 ? tensor_bytes(*s.w, p + "wgate.weight", {D, dim}) : 0.0);
  const double latents = static_cast<double>(produced) / static_cast<double>(st.iterations());
  const double state_bytes = r > 1 ? 2.0 * 4 * r * D * (decode ? 1 : 0) : 0.0;
  set_stream_counters(st, w + 4.0 * T * dim + state_bytes + 4.0 * latents * D,
                      2.0 * T * D * dim * (r > 1 ? 2 : 1) + latents * D * (6.0 * r + 4));
  st.counters["latents"] = latents;
  st.SetLabel(shape_label(s, "ratio " + std::to_string(r) + (decode ? " decode after " + std::to_string(prompt)
                                                                     : " prefill " + std::to_string(T)) +
                                 ", D " + std::to_string(D) + " x dim " + std::to_string(dim)));
}
BENCHMARK(BM_Compressor)
    ->ArgNames({"tiny", "ratio", "T"})
    ->Args({0, 1, 0})->Args({0, 4, 0})->Args({0, 1, 256})->Args({0, 4, 256})
    ->Args({1, 1, 0})->Args({1, 4, 0})->Args({1, 1, 23})->Args({1, 4, 23})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// -------------------------------------------------------------------------------- engram
/// The engram of layer kEngramLayer (tiny: layer 1), built once (the V4.1 table is 341 MB).
const EngramT<B>& engram(long tiny) {
  static std::unique_ptr<EngramT<B>> e[2];
  if (!e[tiny]) e[tiny] = std::make_unique<EngramT<B>>(*shape(tiny).c, *shape(tiny).w, kEngramLayer);
  return *e[tiny];
}

/// Bytes one fetched row costs: fp8 codes + the f32 per-32 scales ResidentTable holds.
double engram_row_bytes(const ModelConfig& c) { return c.engram_head_dim + 4.0 * (c.engram_head_dim / 32); }

/// EngramHasher alone: T tokens at positions start.. (decode: one token after the prompt), every
/// engram layer's rows. Args: tiny, T (0 = one decode step).
void BM_EngramHash(benchmark::State& st) {
  const Shape& s = shape(st.range(0));
  const ModelConfig& c = *s.c;
  const bool decode = st.range(1) == 0;
  const long P = static_cast<long>(s.prompt.size()), T = decode ? 1 : std::min<long>(st.range(1), P);
  EngramHasher hasher(c);
  if (decode) hasher.hash(s.prompt.data(), P - 1, 0);
  long i = 0;
  for (auto _ : st) {
    std::vector<int32_t> rows = hasher.hash(s.prompt.data() + (decode ? (i++ % P) : 0), T, decode ? P - 1 : 0);
    benchmark::DoNotOptimize(rows.data());
  }
  const double n = static_cast<double>(T) * c.n_engram_layers() * c.engram_cols();
  // per row: a multiply and an XOR per n-gram step, a 64-bit remainder and an add
  set_stream_counters(st, 4.0 * n, 4.0 * n);
  st.counters["rows/s"] = benchmark::Counter(n * st.iterations(), benchmark::Counter::kIsRate);
  st.SetLabel(shape_label(s, std::to_string(c.n_engram_layers()) + " layers x " + std::to_string(c.engram_cols()) +
                                 " rows per token"));
}
BENCHMARK(BM_EngramHash)
    ->ArgNames({"tiny", "T"})
    ->Args({0, 0})->Args({0, 512})->Args({1, 0})->Args({1, 23})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

/// ResidentTable::gather of n random rows (uniform over the table: what the hash gives), the
/// table-read part of the engram step. Args: tiny, rows.
void BM_EngramGather(benchmark::State& st) {
  const Shape& s = shape(st.range(0));
  const ModelConfig& c = *s.c;
  const long n = st.range(1);
  const int slot = c.engram_slot(kEngramLayer), hd = c.engram_head_dim;
  const long rows = c.engram_num_embeddings.at(slot);
  static std::unique_ptr<ResidentTable<B>> tables[2];
  auto& table = tables[st.range(0)];
  if (!table) table = std::make_unique<ResidentTable<B>>(*s.w, "layers.1.engram.", rows, hd);
  std::mt19937 rng(25);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % rows);
  std::vector<float> out(static_cast<size_t>(n) * hd);
  for (auto _ : st) {
    table->gather(ids.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_stream_counters(st, n * engram_row_bytes(c) + 4.0 * n * hd, 2.0 * n * hd);
  st.counters["rows/s"] = benchmark::Counter(static_cast<double>(n) * st.iterations(), benchmark::Counter::kIsRate);
  st.SetLabel(shape_label(s, std::to_string(rows) + " rows x " + std::to_string(hd)));
}
BENCHMARK(BM_EngramGather)
    ->ArgNames({"tiny", "rows"})
    ->Args({0, 16})->Args({0, 16 * 128})->Args({1, 4})->Args({1, 4 * 23})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

/// The whole engram step of one layer: hash (all engram layers, as Model does once per step),
/// upload, row gather, wkv [dim·(hc+1), cols·hd] projection, per-copy gate, h += gate·value.
/// h is restored from a copy each iteration (a memcpy of the [T, hc, dim] stream, counted).
/// Args: tiny, T (0 = one decode step after the prompt).
void BM_Engram(benchmark::State& st) {
  const Shape& s = shape(st.range(0));
  const ModelConfig& c = *s.c;
  const bool decode = st.range(1) == 0;
  const long P = static_cast<long>(s.prompt.size()), T = decode ? 1 : std::min<long>(st.range(1), P);
  const EngramT<B>& e = engram(st.range(0));
  const int hc = c.hc_mult, dim = c.dim, C = c.engram_cols(), hd = c.engram_head_dim;
  EngramHasher hasher(c);
  if (decode) hasher.hash(s.prompt.data(), P - 1, 0);
  const std::vector<float> h0 = random_activations(T * hc * dim, 26);
  std::vector<float> h(h0);
  auto hash = B::alloc<int32_t>(static_cast<size_t>(T) * c.n_engram_layers() * C);
  const Tap<B> tap;
  long i = 0;
  for (auto _ : st) {
    std::copy(h0.begin(), h0.end(), h.begin());
    std::vector<int32_t> rows = hasher.hash(s.prompt.data() + (decode ? (i++ % P) : 0), T, decode ? P - 1 : 0);
    B::upload(hash.data(), rows.data(), rows.size());
    e.forward(h.data(), hash.data(), T, tap);
    benchmark::DoNotOptimize(h.data());
    benchmark::ClobberMemory();
  }
  const long kvw = static_cast<long>(dim) * (hc + 1), K = static_cast<long>(C) * hd;
  const double wkv = tensor_bytes(*s.w, "layers.1.engram.wkv.weight", {kvw, K});
  const double bytes = T * C * engram_row_bytes(c) + wkv + 4.0 * hc * dim + 2 * 4.0 * T * hc * dim;
  const double flops = 2.0 * T * kvw * K + T * hc * dim * 9.0;
  set_stream_counters(st, bytes, flops);
  st.SetLabel(shape_label(s, std::to_string(C) + " rows x " + std::to_string(hd) + ", wkv " + std::to_string(kvw) +
                                 " x " + std::to_string(K) + (decode ? ", decode" : ", prefill " + std::to_string(T))));
}
BENCHMARK(BM_Engram)
    ->ArgNames({"tiny", "T"})
    ->Args({0, 0})->Args({0, 16})->Args({1, 0})->Args({1, 23})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------------- candidate prefilter
/// The candidate source's prefilter exactly as IndexerT::select runs it: per query row,
/// candidate_blocks_row over nk index scores (block maxima, the newest block pinned, top blocks,
/// a 0/1 mask over the nk positions). Every row sees all nk positions (decode, or a prefill chunk
/// late in the sequence). Args: T (query rows), nk (compressed positions), block size, top blocks.
void BM_CandidatePrefilter(benchmark::State& st) {
  const long T = st.range(0), nk = st.range(1);
  const int bs = static_cast<int>(st.range(2)), cb = static_cast<int>(st.range(3));
  const int nb = static_cast<int>((nk + bs - 1) / bs), kb = cb < nb ? cb : nb;
  const long kbs = kb > 0 ? kb : 1;
  std::vector<float> score = random_activations(T * nk, 27);
  auto blocks = B::alloc<float>(static_cast<size_t>(T) * nb);
  auto bidx = B::alloc<int>(static_cast<size_t>(T) * kbs);
  auto mask = B::alloc<int32_t>(static_cast<size_t>(T) * nk);
  for (auto _ : st) {
    const float* ps = score.data();
    float* pb = blocks.data();
    int* pi = bidx.data();
    int32_t* pm = mask.data();
    B::for_each(T, [=](long t) {
      candidate_blocks_row(ps + t * nk, static_cast<int>(nk), nk, cb, bs, pb + t * nb, pi + t * kbs, nullptr, pm + t * nk);
    });
    benchmark::DoNotOptimize(pm);
    benchmark::ClobberMemory();
  }
  long selected = 0;
  for (long j = 0; j < nk; ++j) selected += mask.data()[j];
  // read the scores, write the mask; a max per score, the block top-k
  set_stream_counters(st, 8.0 * T * nk, static_cast<double>(T) * (nk + nb));
  st.counters["candidates"] = static_cast<double>(selected);
  st.SetLabel(std::to_string(nk) + " positions, blocks of " + std::to_string(bs) + ", top " + std::to_string(cb));
}
BENCHMARK(BM_CandidatePrefilter)
    ->ArgNames({"T", "nk", "bs", "blocks"})
    // V4.1: 8 K / 64 K / 1 M tokens of context at ratio 4, decode and a 64-query chunk
    ->Args({1, 2048, kCandBlock, kCandTopBlocks})
    ->Args({1, 16384, kCandBlock, kCandTopBlocks})
    ->Args({1, 262144, kCandBlock, kCandTopBlocks})
    ->Args({64, 16384, kCandBlock, kCandTopBlocks})
    // tiny fixture: layer 3 (ratio 1), after the 23-token prompt + decode, blocks of 2, top 3
    ->Args({1, 29, 2, 3})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
