// Streamed expert reads, two scales.
//
// Tiny (always): the tiny golden's model written as GGUF to a temp directory, read from the page
// cache, against a raw sequential read of the same shards:
//   BM_RawSequentialRead        pread of every shard front to back in 1 MiB chunks
//   BM_StreamedExperts/0        every (layer, expert) through a 1-expert cache: pread + convert + upload
//   BM_StreamedExperts/1        the same with layer l+1's experts prefetched while layer l is consumed
//
// Released size (only with DS41_BENCH_DIR set; never in CI): a safetensors checkpoint of the
// released routed experts, 2 layers x 384 experts of 18,800,640 bytes (w1/w3 [2304, 5120] and w2
// [5120, 2304], fp4 e2m1 packed I8 + F8_E8M0 scales per 32: 14.4 GB), written once to
// $DS41_BENCH_DIR/ds41-experts-2x384 (streamed to disk, synthetic weights; reused when present).
// The page cache is dropped before every timed iteration (sync; echo 3 > /proc/sys/vm/drop_caches
// where permitted, else posix_fadvise(DONTNEED) on the file: the label says which):
//   BM_RawDirect/random/inflight   O_DIRECT reads of whole experts (18.8 MB), 64 per iteration,
//                                  in file order (random=0) or a random order over both layers,
//                                  by `inflight` threads: the disk's reference rate
//   BM_RawUring/random/depth/chunk_kib
//                                  the same 64 expert reads from one thread through io_uring
//                                  (io/uring_reader.hpp; only where liburing was found): `depth`
//                                  reads of at most `chunk_kib` KiB in flight
//   BM_ReleasedStore/prefetch/readers/convert_on_readers
//                                  64 random experts through ExpertCache (O_DIRECT, `readers`
//                                  reader threads), get() after get(), with (1) or without (0)
//                                  the next 6 prefetched while the current 6 are converted;
//                                  convert_on_readers=1: the reader threads also convert. Each
//                                  iteration first reads 64 other random experts raw (O_DIRECT, 1
//                                  in flight, page cache dropped): raw_bytes/s, and of_raw = the
//                                  store's rate over it (the issue's >= 0.8)
//   BM_ReleasedConvert/copy        one expert's staged bytes to resident weights, from memory: the
//                                  per-expert conversion cost that must stay below a read's; copy=0
//                                  the cache's path (ExpertSource::views: packed straight from the
//                                  staged bytes), copy=1 decode() to HostTensors, then packed
//   BM_ReleasedDecode/budget/readers/convert_on_readers/own
//                                  decode steps over both layers at a cache budget of `budget`%
//                                  of the 768 experts: 96 untimed warm-up steps fill the cache to
//                                  its steady state, then the page cache is dropped and 8 steps an
//                                  iteration are timed. 6 experts per layer drawn with a Zipf(1)
//                                  skew, each used by a one-token fp4 Linear through w1, w3 and w2
//                                  (HostBackend::linear); the next layer's experts prefetched
//                                  (oracle prediction) before this layer computes, and with own=1
//                                  this layer's own experts queued as soon as it is routed (their
//                                  reads overlap the first ones' conversion and compute).
//                                  tokens/s (a step is one token through the 2 layers), the
//                                  steady-state hit rate, and the share of read time hidden behind
//                                  compute two ways: hidden_share = 1 - get()'s wait / read time
//                                  summed over reader threads (reads in flight together count more
//                                  than once), hidden_wall = 1 - wait / the wall time some read was
//                                  in flight. Layer 0 of each step is not predicted.
// Rates are bytes/s of expert data (wall clock); compare store rates with the raw rates of the
// same run.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>
#include <nlohmann/json.hpp>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden.hpp"
#include "ds41/core/direct_file.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/io/uring_reader.hpp"
#include "ds41/model/streamed_experts.hpp"

using namespace ds41;

namespace {

struct Fixture {
  std::filesystem::path dir;
  std::vector<std::string> shards;
  Fixture() {
    std::string t = (std::filesystem::temp_directory_path() / "ds41-bench-XXXXXX").string();
    if (!::mkdtemp(t.data())) std::abort();
    dir = t;
    const golden::Golden g = golden::load(DS41_BENCH_GOLDEN);
    shards = gguf::write_model(g.config, golden::regenerate_weights(g), (dir / "tiny").string(), 2);
  }
  ~Fixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_RawSequentialRead(benchmark::State& st) {
  std::vector<gguf::PosixFile> files;
  for (const auto& p : fixture().shards) files.emplace_back(p);
  std::vector<uint8_t> buf(1 << 20);
  uint64_t bytes = 0;
  for (auto _ : st) {
    for (const auto& f : files)
      for (uint64_t at = 0; at < f.size(); at += buf.size()) {
        const uint64_t n = std::min<uint64_t>(buf.size(), f.size() - at);
        f.read_at(buf.data(), n, at, "bench");
        bytes += n;
      }
    benchmark::DoNotOptimize(buf.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RawSequentialRead)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StreamedExperts(benchmark::State& st) {
  const bool prefetch = st.range(0) != 0;
  GgufWeights w(fixture().shards[0]);
  const ModelConfig& c = w.config();
  ExpertCache<HostBackend> cache(w, {.capacity_experts = 1});
  std::vector<int> all(c.n_routed_experts);
  for (int e = 0; e < c.n_routed_experts; ++e) all[e] = e;
  for (auto _ : st) {
    for (int l = 0; l < c.n_layers; ++l) {
      if (prefetch && l + 1 < c.n_layers) cache.prefetch(l + 1, all);
      for (int e = 0; e < c.n_routed_experts; ++e) benchmark::DoNotOptimize(cache.get(l, e).w1.view().data);
    }
  }
  const ExpertCounters k = cache.counters();
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(k.bytes_read), benchmark::Counter::kIsRate);
  st.counters["prefetch_hit_rate"] = k.prefetch_hit_rate();
}
BENCHMARK(BM_StreamedExperts)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- released size ----------------------------------------------------------------------------

constexpr int kLayers = 2, kExperts = 384, kActive = 6;
constexpr int kSteps = 8, kWarmSteps = 96;  // BM_ReleasedDecode: timed steps per iteration, untimed warm-up
constexpr long kInter = 2304, kDim = 5120;
const long kShape[3][2] = {{kInter, kDim}, {kDim, kInter}, {kInter, kDim}};  // w1, w2, w3
constexpr uint64_t kExpertBytes = 18'800'640;

std::string tensor_name(int l, int e, int k, bool scale) {
  return "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w" + std::to_string(k + 1) +
         (scale ? ".scale" : ".weight");
}

/// Writes the checkpoint's one file front to back (header, then every expert's six tensors),
/// one expert's bytes in memory at a time; to NAME.partial, renamed when complete.
void write_released(const std::filesystem::path& file) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}, {"ds41", "bench_streaming synthetic released-shape experts"}};
  uint64_t at = 0;
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < kExperts; ++e)
      for (int k = 0; k < 3; ++k) {
        const long r = kShape[k][0], c = kShape[k][1];
        const uint64_t wb = static_cast<uint64_t>(r * c / 2), sb = static_cast<uint64_t>(r * c / 32);
        h[tensor_name(l, e, k, false)] = {{"dtype", "I8"}, {"shape", {r, c / 2}}, {"data_offsets", {at, at + wb}}};
        at += wb;
        h[tensor_name(l, e, k, true)] = {{"dtype", "F8_E8M0"}, {"shape", {r, c / 32}}, {"data_offsets", {at, at + sb}}};
        at += sb;
      }
  std::string header = h.dump();
  header.resize((header.size() + 8 + 7) / 8 * 8 - 8, ' ');  // the data starts 8-byte aligned (not 4096)
  const std::string partial = file.string() + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + partial);
  const uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  std::fwrite(len, 1, 8, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::vector<uint8_t> buf(kExpertBytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < kExperts; ++e) {
      uint8_t* p = buf.data();
      for (int k = 0; k < 3; ++k) {
        const uint64_t wb = static_cast<uint64_t>(kShape[k][0] * kShape[k][1] / 2), sb = wb / 16;
        for (uint64_t i = 0; i < wb; i += 8) {  // xorshift64: fp4 codes, every value allowed
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          std::memcpy(p + i, &x, 8);
        }
        p += wb;
        for (uint64_t i = 0; i < sb; ++i) p[i] = static_cast<uint8_t>(120 + (i * 7 + e) % 12);  // 2^-7 .. 2^4
        p += sb;
      }
      if (std::fwrite(buf.data(), 1, buf.size(), f) != buf.size()) throw std::runtime_error("short write to " + partial);
    }
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) throw std::runtime_error("cannot flush " + partial);
  std::fclose(f);
  std::filesystem::rename(partial, file);
}

/// The released-shape experts as an ExpertSource (the checkpoint holds experts only, so the slice
/// map and the fp4 parts are built here rather than by SafetensorsWeights from a whole model).
class ReleasedSource : public ExpertSource {
 public:
  explicit ReleasedSource(const std::string& dir) : shards_(std::make_shared<safetensors::SafetensorsShards>(dir)) {
    map_ = ExpertSliceMap(kExperts);
    parts_.resize(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      std::vector<ExpertSliceMap::Expert> layer(kExperts);
      parts_[l].resize(kExperts);
      for (int e = 0; e < kExperts; ++e)
        for (int k = 0; k < 3; ++k) {
          safetensors::Parts p;
          p.kind = safetensors::Kind::kFp4;
          p.weight = shards_->find(tensor_name(l, e, k, false));
          p.scale = shards_->find(tensor_name(l, e, k, true));
          if (!p.weight || !p.scale) throw std::runtime_error("bench checkpoint: missing " + tensor_name(l, e, k, false));
          p.shape = {kShape[k][0], kShape[k][1]};
          for (const safetensors::TensorInfo* t : {p.weight, p.scale}) {
            layer[e].parts.push_back({t->shard, t->offset, t->bytes});
            layer[e].bytes += t->bytes;
          }
          parts_[l][e][k] = p;
        }
      map_.add_layer(std::move(layer));
    }
  }
  const ExpertSliceMap& slices() const override { return map_; }
  std::vector<std::string> shard_paths() const override { return {shards_->shard(0).path()}; }
  std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const override {
    std::array<HostTensor, 3> out;
    for (int k = 0; k < 3; ++k)
      out[k] = safetensors::decode_parts(*shards_, parts_[layer][e][k], parts[2 * k], parts[2 * k + 1]);
    return out;
  }
  bool views(int layer, int e, const uint8_t* const* parts, std::array<MatrixView, 3>& out,
             std::array<std::vector<float>, 3>& scales) const override {
    for (int k = 0; k < 3; ++k)
      if (!safetensors_view(*shards_, parts_[layer][e][k], parts[2 * k], parts[2 * k + 1], out[k], scales[k])) return false;
    return true;
  }

 private:
  std::shared_ptr<safetensors::SafetensorsShards> shards_;
  ExpertSliceMap map_;
  std::vector<std::vector<std::array<safetensors::Parts, 3>>> parts_;
};

struct Released {
  std::string dir, file, error, how_dropped;
  std::shared_ptr<ReleasedSource> src;
  Released() {
    const char* root = std::getenv("DS41_BENCH_DIR");
    if (!root || !*root) {
      error = "set DS41_BENCH_DIR to a directory with 15 GB free for the released-size benchmarks";
      return;
    }
    dir = (std::filesystem::path(root) / "ds41-experts-2x384").string();
    file = dir + "/model.safetensors";
    try {
      std::filesystem::create_directories(dir);
      if (!std::filesystem::exists(file)) {
        std::fprintf(stderr, "bench_streaming: writing %s (14.4 GB, once)...\n", file.c_str());
        const auto t0 = std::chrono::steady_clock::now();
        write_released(file);
        std::fprintf(stderr, "bench_streaming: written in %.1f s\n",
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      src = std::make_shared<ReleasedSource>(dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  /// Empties the page cache of the checkpoint: drop_caches where permitted, else DONTNEED.
  void drop() {
    ::sync();
    if (std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w")) {
      const bool ok = std::fputs("3\n", f) >= 0;
      if (std::fclose(f) == 0 && ok) {
        how_dropped = "drop_caches";
        return;
      }
    }
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    how_dropped = "fadvise DONTNEED";
  }
};
Released& released() {
  static Released r;
  return r;
}

/// Aligned buffers for O_DIRECT reads of one expert each.
struct AlignedBuf {
  std::unique_ptr<uint8_t, decltype(&std::free)> p{nullptr, &std::free};
  explicit AlignedBuf(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, align_up(n))), &std::free) {}
  uint8_t* data() { return p.get(); }
};

/// A fresh seed for each random draw of experts: per process (so a rerun does not read the same
/// experts again: a VM's disk may be cached by its host, beyond drop_caches' reach) and per call.
uint64_t fresh_seed() {
  static const uint64_t base = std::random_device{}();
  static std::atomic<uint64_t> n{0};
  return base * 0x9E3779B97F4A7C15ull + n++;
}

/// 64 experts per iteration: the first 64 of layer 0 in file order, or a random 64 of both layers.
std::vector<std::pair<int, int>> pick(bool random, uint64_t seed) {
  std::vector<std::pair<int, int>> all;
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < kExperts; ++e) all.push_back({l, e});
  if (random) {
    std::mt19937_64 g(seed);
    std::shuffle(all.begin(), all.end(), g);
  }
  all.resize(64);
  return all;
}

void BM_RawDirect(benchmark::State& st) {
  Released& R = released();
  if (!R.src) return st.SkipWithError(R.error.c_str());
  const bool random = st.range(0) != 0;
  const int inflight = static_cast<int>(st.range(1));
  const ExpertSliceMap& m = R.src->slices();
  DirectFile f(R.file, DirectFile::Mode::kDirect);
  std::vector<AlignedBuf> bufs;
  for (int i = 0; i < inflight; ++i) bufs.emplace_back(kExpertBytes + 2 * kDirectAlign);
  uint64_t bytes = 0;
  for (auto _ : st) {
    st.PauseTiming();
    R.drop();
    const auto order = pick(random, fresh_seed());
    st.ResumeTiming();
    std::atomic<size_t> next{0};
    auto work = [&](int t) {
      for (size_t i; (i = next++) < order.size();) {
        const ExpertSliceMap::Expert& ex = m.at(order[i].first, order[i].second);
        const uint64_t off = ex.parts.front().offset;  // an expert's six tensors are adjacent
        benchmark::DoNotOptimize(f.read(bufs[t].data(), off, ex.bytes, "bench expert"));
      }
    };
    std::vector<std::thread> th;
    for (int t = 1; t < inflight; ++t) th.emplace_back(work, t);
    work(0);
    for (auto& t : th) t.join();
    bytes += order.size() * kExpertBytes;
  }
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
  st.SetLabel(std::string(f.direct() ? "O_DIRECT" : "buffered+DONTNEED (O_DIRECT refused)") + ", cache dropped by " +
              R.how_dropped);
}
BENCHMARK(BM_RawDirect)
    ->ArgNames({"random", "inflight"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({0, 4})
    ->Args({1, 4})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_RawUring(benchmark::State& st) {
#ifdef DS41_URING
  Released& R = released();
  if (!R.src) return st.SkipWithError(R.error.c_str());
  const bool random = st.range(0) != 0;
  const unsigned depth = static_cast<unsigned>(st.range(1));
  const uint64_t chunk = static_cast<uint64_t>(st.range(2)) << 10;
  const ExpertSliceMap& m = R.src->slices();
  const int fd = ::open(R.file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) return st.SkipWithError("O_DIRECT refused");
  const uint64_t span = align_up(kExpertBytes) + kDirectAlign;
  std::vector<AlignedBuf> bufs;
  for (int i = 0; i < 64; ++i) bufs.emplace_back(span);
  UringReader ring(depth);
  uint64_t bytes = 0;
  for (auto _ : st) {
    st.PauseTiming();
    R.drop();
    const auto order = pick(random, fresh_seed());
    std::vector<UringReader::Request> reqs;
    for (size_t i = 0; i < order.size(); ++i) {
      const ExpertSliceMap::Expert& ex = m.at(order[i].first, order[i].second);
      const uint64_t off = align_down(ex.parts.front().offset);
      const uint64_t end = ex.parts.front().offset + ex.bytes;  // the last expert's span runs past the file's end
      reqs.push_back({fd, off, align_up(end) - off, bufs[i].data(), end - off});
    }
    st.ResumeTiming();
    ring.read_all(reqs, chunk, "bench expert");
    bytes += order.size() * kExpertBytes;
  }
  ::close(fd);
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
  st.SetLabel("io_uring O_DIRECT, cache dropped by " + R.how_dropped);
#else
  st.SkipWithError("built without liburing");
#endif
}
BENCHMARK(BM_RawUring)
    ->ArgNames({"random", "depth", "chunk_kib"})
    ->Args({1, 1, 18432})
    ->Args({1, 4, 18432})
    ->Args({1, 16, 1024})
    ->Args({1, 64, 256})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

StreamOptions released_options(int readers, long capacity, bool convert_on_readers) {
  StreamOptions o;
  o.convert_on_readers = convert_on_readers;
  o.capacity_experts = capacity;
  o.direct_io = true;
  o.readers = readers;
  o.staging_bytes = 2 * kActive * (kExpertBytes + 2 * kDirectAlign);  // two layers' worth in flight
  return o;
}

void BM_ReleasedStore(benchmark::State& st) {
  Released& R = released();
  if (!R.src) return st.SkipWithError(R.error.c_str());
  const bool prefetch = st.range(0) != 0;
  const int readers = static_cast<int>(st.range(1));
  const bool convert = st.range(2) != 0;
  ExpertCache<HostBackend> cache(R.src, released_options(readers, kActive, convert));
  DirectFile raw(R.file, DirectFile::Mode::kDirect);
  AlignedBuf buf(kExpertBytes + 2 * kDirectAlign);
  double raw_s = 0, store_s = 0;
  for (auto _ : st) {
    st.PauseTiming();
    // the reference in the same conditions: 64 other random experts read raw (O_DIRECT, 1 in flight)
    R.drop();
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& [l, e] : pick(true, fresh_seed())) {
      const ExpertSliceMap::Expert& ex = R.src->slices().at(l, e);
      benchmark::DoNotOptimize(raw.read(buf.data(), ex.parts.front().offset, ex.bytes, "bench expert"));
    }
    raw_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    R.drop();
    cache.clear();
    const auto order = pick(true, fresh_seed());
    st.ResumeTiming();
    const auto t1 = std::chrono::steady_clock::now();
    for (size_t g = 0; g < order.size(); g += kActive) {
      if (prefetch)
        for (size_t i = g + kActive; i < std::min(order.size(), g + 2 * kActive); ++i)
          cache.prefetch(order[i].first, {order[i].second});
      for (size_t i = g; i < std::min(order.size(), g + kActive); ++i)
        benchmark::DoNotOptimize(cache.get(order[i].first, order[i].second).w1.view().data);
    }
    store_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  const ExpertCounters k = cache.counters();
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(k.bytes_read), benchmark::Counter::kIsRate);
  const double raw_rate = static_cast<double>(st.iterations()) * 64 * kExpertBytes / raw_s;
  st.counters["raw_bytes/s"] = raw_rate;  // the interleaved raw random reads
  st.counters["of_raw"] = static_cast<double>(k.bytes_read) / store_s / raw_rate;
  st.counters["prefetch_hit_rate"] = k.prefetch_hit_rate();
  const double it = static_cast<double>(st.iterations());
  st.counters["read_s/it"] = k.read_seconds / it;  // summed over reading threads
  st.counters["wait_s/it"] = k.wait_seconds / it;
  st.counters["convert_s/it"] = k.convert_seconds / it;
  st.counters["reader_convert_s/it"] = k.reader_convert_seconds / it;
  st.SetLabel(std::string(cache.direct_io() ? "O_DIRECT" : "buffered+DONTNEED") + ", ring " +
              std::to_string(cache.staging_slots()) + " slots, cache dropped by " + R.how_dropped);
}
BENCHMARK(BM_ReleasedStore)
    ->ArgNames({"prefetch", "readers", "convert_on_readers"})
    ->Args({0, 1, 0})
    ->Args({1, 1, 0})
    ->Args({1, 2, 0})
    ->Args({1, 4, 0})
    ->Args({1, 2, 1})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ReleasedConvert(benchmark::State& st) {
  Released& R = released();
  if (!R.src) return st.SkipWithError(R.error.c_str());
  const ExpertSliceMap::Expert& ex = R.src->slices().at(0, 0);
  const gguf::PosixFile f(R.file);
  std::vector<uint8_t> raw(ex.bytes);
  std::vector<const uint8_t*> parts;
  uint64_t at = 0;
  for (const ExpertSliceMap::Slice& sl : ex.parts) {
    f.read_at(raw.data() + at, sl.bytes, sl.offset, "bench expert");
    parts.push_back(raw.data() + at);
    at += sl.bytes;
  }
  const bool copy = st.range(0) != 0;
  ExpertWeights<HostBackend> w;
  std::array<std::vector<float>, 3> scales;
  double decode_s = 0, pack_s = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    if (copy) {  // decode() to HostTensors (a copy of the codes), then Matrix::assign packs
      const std::array<HostTensor, 3> t = R.src->decode(0, 0, parts.data());
      const auto t1 = std::chrono::steady_clock::now();
      ExpertArena<HostBackend>::fill(w, t);
      decode_s += std::chrono::duration<double>(t1 - t0).count();
      pack_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    } else {  // the cache's path: views of the staged bytes packed straight into the weights
      std::array<MatrixView, 3> v;
      if (!R.src->views(0, 0, parts.data(), v, scales)) return st.SkipWithError("no views");
      const auto t1 = std::chrono::steady_clock::now();
      if (!ExpertArena<HostBackend>::fill_views(w, v)) return st.SkipWithError("not packable");
      decode_s += std::chrono::duration<double>(t1 - t0).count();
      pack_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    }
    benchmark::DoNotOptimize(w.w1.view().data);
  }
  const double it = static_cast<double>(st.iterations());
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(ex.bytes) * it, benchmark::Counter::kIsRate);
  st.counters["decode_ms"] = decode_s / it * 1e3;
  st.counters["upload_pack_ms"] = pack_s / it * 1e3;
  st.SetLabel(std::string(copy ? "decode + assign" : "views + fill_views") + ", fp4 expert, " +
              (w.w1.view().layout == WeightLayout::kPanels8 ? "panels" : "row-major"));
}
BENCHMARK(BM_ReleasedConvert)->ArgName("copy")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// One token through an expert with the backend's Linear (the model's kernels): h = silu(w1 x) *
/// (w3 x), y = w2 h.
float run_one(const ExpertWeights<HostBackend>& w, const std::vector<float>& x, std::vector<float>& h) {
  std::vector<float> g(kInter), u(kInter), y(kDim);
  HostBackend::linear(x.data(), 1, kDim, w.w1.view(), g.data(), kInter, OutRound::kF32);
  HostBackend::linear(x.data(), 1, kDim, w.w3.view(), u.data(), kInter, OutRound::kF32);
  for (long n = 0; n < kInter; ++n) h[n] = g[n] / (1.0f + std::exp(-g[n])) * u[n];
  HostBackend::linear(h.data(), 1, kInter, w.w2.view(), y.data(), kDim, OutRound::kF32);
  float s = 0;
  for (float v : y) s += v;
  return s;
}

void BM_ReleasedDecode(benchmark::State& st) {
  Released& R = released();
  if (!R.src) return st.SkipWithError(R.error.c_str());
  const int pct = static_cast<int>(st.range(0));
  const int readers = static_cast<int>(st.range(1));
  const bool convert = st.range(2) != 0;
  const bool own = st.range(3) != 0;
  const long budget = kLayers * kExperts * pct / 100;
  ExpertCache<HostBackend> cache(R.src, released_options(readers, budget, convert));
  std::mt19937_64 g(fresh_seed());  // other experts than the other configurations read (a host may cache the disk)
  std::vector<double> zipf(kExperts);
  for (int e = 0; e < kExperts; ++e) zipf[e] = 1.0 / (e + 1);
  std::discrete_distribution<int> pick_rank(zipf.begin(), zipf.end());
  std::vector<std::vector<int>> perm(kLayers, std::vector<int>(kExperts));  // rank -> expert, per layer
  for (auto& p : perm) {
    for (int e = 0; e < kExperts; ++e) p[e] = e;
    std::shuffle(p.begin(), p.end(), g);
  }
  auto route = [&](int l) {
    std::vector<int> s;
    while (static_cast<int>(s.size()) < kActive) {
      const int e = perm[l][pick_rank(g)];
      if (std::find(s.begin(), s.end(), e) == s.end()) s.push_back(e);
    }
    return s;
  };
  std::vector<float> x(kDim), h(kInter);
  for (long i = 0; i < kDim; ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  double compute_s = 0;
  auto step = [&] {
    std::vector<std::vector<int>> r(kLayers);
    for (int l = 0; l < kLayers; ++l) r[l] = route(l);
    for (int l = 0; l < kLayers; ++l) {
      // own: this layer's experts queued once it is routed (their reads overlap the first ones'
      // conversion and compute); then the next layer's (oracle: its actual experts; layer 0 of
      // the next step is not predicted)
      if (own) cache.prefetch(l, r[l]);
      if (l + 1 < kLayers) cache.prefetch(l + 1, r[l + 1]);
      float acc = 0;
      for (int e : r[l]) {
        const ExpertWeights<HostBackend>& w = cache.get(l, e);
        const auto t0 = std::chrono::steady_clock::now();
        acc += run_one(w, x, h);
        compute_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      benchmark::DoNotOptimize(acc);
    }
  };
  // warm-up (untimed): the cache filled to its steady state for this budget
  for (int s = 0; s < kWarmSteps; ++s) step();
  cache.reset_counters();
  compute_s = 0;
  R.drop();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : st)
    for (int s = 0; s < kSteps; ++s) step();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ExpertCounters k = cache.counters();
  uint64_t hits = 0, asked = 0;
  for (int l = 0; l < kLayers; ++l) hits += k.layer_hits[l], asked += k.layer_hits[l] + k.layer_misses[l];
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(k.bytes_read), benchmark::Counter::kIsRate);
  st.counters["hit_rate"] = asked ? static_cast<double>(hits) / static_cast<double>(asked) : 0.0;
  const double it = static_cast<double>(st.iterations());
  st.counters["read_s/it"] = k.read_seconds / it;
  st.counters["wait_s/it"] = k.wait_seconds / it;
  st.counters["convert_s/it"] = k.convert_seconds / it;
  st.counters["compute_s/it"] = compute_s / it;
  st.counters["reader_convert_s/it"] = k.reader_convert_seconds / it;
  st.counters["read_busy_s/it"] = k.read_busy_seconds / it;
  st.counters["hidden_share"] = k.hidden_share();
  st.counters["hidden_wall"] = k.hidden_share_wall();
  st.counters["tokens/s"] = static_cast<double>(kSteps) * it / wall;
  st.SetLabel(std::to_string(kSteps) + " steps x " + std::to_string(kLayers) + " layers x top-" +
              std::to_string(kActive) + " after " + std::to_string(kWarmSteps) + " warm-up steps, cache " +
              std::to_string(budget) + " experts (" + std::to_string(pct) + "%), " +
              (cache.direct_io() ? "O_DIRECT" : "buffered+DONTNEED") + ", page cache dropped by " + R.how_dropped);
}
BENCHMARK(BM_ReleasedDecode)
    ->ArgNames({"budget", "readers", "convert_on_readers", "own"})
    ->Args({10, 2, 0, 0})
    ->Args({10, 2, 0, 1})
    ->Args({25, 1, 0, 1})
    ->Args({25, 2, 0, 0})
    ->Args({25, 2, 0, 1})
    ->Args({25, 4, 0, 1})
    ->Args({25, 2, 1, 1})
    ->Args({50, 2, 0, 0})
    ->Args({50, 2, 0, 1})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
