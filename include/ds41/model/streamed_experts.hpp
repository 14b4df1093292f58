// ds41/model/streamed_experts.hpp — the StreamedExperts ExpertStore policy: routed experts read
// on demand from GGUF shards or a safetensors checkpoint into a bounded cache shared by every
// layer of a model.
//
//   ExpertSliceMap  where expert e of layer l lives: the byte ranges of its matrices (and scales)
//   ExpertSource    a file format's slice map, reads and conversion: GgufExpertSource (each of
//                   w1/w2/w3 one slice of the merged blk.l.ffn_{gate,down,up}_exps) and
//                   SafetensorsExpertSource (six tensors: three weights, three scales)
//   StagingRing     slots of raw expert bytes (page-locked when the backend has B::alloc_pinned),
//                   sized in slots or in bytes; `readers` background threads serve prefetch
//                   requests into it, so several expert reads are in flight at once
//   DirectFile      (io/direct_reader.hpp) the reads: buffered pread by default; with
//                   direct_io, O_DIRECT into block-aligned slot layouts (each run of an expert's
//                   adjacent slices read as its aligned covering span, the inner part used), or
//                   pread + posix_fadvise(DONTNEED) where the file system refuses O_DIRECT
//   ExpertArena     slots of backend-resident ExpertWeights, reused as experts come and go
//   ExpertLru       which (layer, expert) sits in which arena slot, least recently used first
//   ExpertCache     the above, shared by all layers; counters: hits, misses, prefetch hits, bytes,
//                   per layer hits/misses, seconds spent reading and seconds the caller waited
//
// Prefetch: MoeT of layer L runs layer L+1's router on its own MoE input and hands the experts it
// names to StreamedExperts::prefetch, which queues their reads; when layer L+1 asks for one
// still in the ring (read or being read) that is a prefetch hit. The arena is touched only by
// the calling thread, and one expert is used at a time, so eviction never frees weights in use.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include "../backend/host_buffer.hpp"
#include "../io/direct_reader.hpp"
#include "../io/gguf_weights.hpp"
#include "../io/safetensors_weights.hpp"
#include "moe.hpp"

namespace ds41 {

struct StreamOptions {
  long capacity_experts = 0;    // arena slots; 0: derive from capacity_bytes
  uint64_t capacity_bytes = 0;  // arena budget in bytes (of stored expert bytes: one expert's slices)
  int staging_slots = 16;       // raw expert buffers for reads in flight or waiting to be used
  uint64_t staging_bytes = 0;   // when > 0: the staging ring in bytes (as many slots as fit, at least 1)
  bool background = true;       // prefetch reads on worker threads (false: read at prefetch time)
  int readers = 1;              // prefetch worker threads: expert reads in flight at once
  bool direct_io = false;       // bypass the page cache: O_DIRECT, else pread + fadvise(DONTNEED)
  bool convert_on_readers = false;  // host backends: prefetch threads also convert what they read
                                    // (decode + pack) into spare weights that get() swaps into the
                                    // arena; off: get() converts on the calling thread
};

struct ExpertCounters {
  uint64_t hits = 0;            // found in the arena
  uint64_t misses = 0;          // read synchronously when asked for
  uint64_t prefetch_hits = 0;   // found in the staging ring because a prefetch had started it
  uint64_t prefetch_issued = 0; // reads queued by prefetch
  uint64_t prefetch_dropped = 0;// predictions never used (their staging slot was recycled)
  uint64_t bytes_read = 0;      // bytes read from the shards for experts
  double read_seconds = 0;      // time spent in expert reads, summed over every reading thread
  double wait_seconds = 0;      // time get() spent waiting for reads (its own or a prefetch's)
  double convert_seconds = 0;   // time get() spent converting staged bytes into arena slots
  double reader_convert_seconds = 0;  // convert_on_readers: conversion time on the reader threads
  std::vector<uint64_t> layer_hits, layer_misses;  // per layer: arena hits; misses + prefetch hits
  double prefetch_hit_rate() const {
    const uint64_t asked = misses + prefetch_hits;
    return asked ? static_cast<double>(prefetch_hits) / static_cast<double>(asked) : 0.0;
  }
  /// Share of layer l's requests found resident in the arena.
  double hit_rate(int l) const {
    const uint64_t h = layer_hits.at(l), n = h + layer_misses.at(l);
    return n ? static_cast<double>(h) / static_cast<double>(n) : 0.0;
  }
  /// Share of the read time the caller did not wait for (hidden behind its compute).
  double hidden_share() const { return read_seconds > 0 ? std::max(0.0, 1.0 - wait_seconds / read_seconds) : 0.0; }
};

/// Where every routed expert's bytes live: per (layer, expert) the byte ranges ("slices") that
/// hold its three matrices (and their scales), read back to back into one staging buffer.
class ExpertSliceMap {
 public:
  struct Slice {
    int shard = 0;
    uint64_t offset = 0, bytes = 0;
  };
  struct Expert {
    std::vector<Slice> parts;  // GGUF: w1, w2, w3; safetensors: w1, w1 scale, w2, w2 scale, w3, w3 scale
    uint64_t bytes = 0;
  };

  ExpertSliceMap() = default;
  explicit ExpertSliceMap(int experts) : experts_(experts) {}
  void add_layer(std::vector<Expert> layer) { layers_.push_back(std::move(layer)); }
  const Expert& at(int layer, int e) const { return layers_.at(layer).at(e); }
  int layers() const { return static_cast<int>(layers_.size()); }
  int experts() const { return experts_; }
  uint64_t max_expert_bytes() const {
    uint64_t m = 0;
    for (const auto& l : layers_)
      for (const Expert& e : l) m = std::max(m, e.bytes);
    return m;
  }

 private:
  int experts_ = 0;
  std::vector<std::vector<Expert>> layers_;
};

/// What ExpertCache streams from: the slice map of a model's files, the files' paths (the cache
/// reads them itself), and the conversion of one expert's staged slices (parts[i]: the bytes of
/// slices().at(layer, e).parts[i]) into three HostTensors. Implementations: GgufExpertSource
/// (merged [E, rows, cols] tensors) and SafetensorsExpertSource (six tensors per expert).
/// decode() runs on the calling thread.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual const ExpertSliceMap& slices() const = 0;
  virtual std::vector<std::string> shard_paths() const = 0;
  virtual std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const = 0;
};

/// GGUF: llama.cpp stores a layer's routed experts as three merged [E, rows, cols] tensors, so
/// each of w1/w2/w3 is one contiguous slice (shard, offset, bytes, type) of blk.l.ffn_{gate,down,up}_exps.
class GgufExpertSource : public ExpertSource {
 public:
  GgufExpertSource(const GgufWeights& w) : shards_(w.shared_shards()) {
    const gguf::GgufShards& s = *shards_;
    const ModelConfig& c = w.config();
    map_ = ExpertSliceMap(c.n_routed_experts);
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<ExpertSliceMap::Expert> layer(c.n_routed_experts);
      for (int k = 0; k < 3; ++k) {
        const std::string name = gguf::blk(l, gguf::expert_tensor(k + 1));
        const gguf::TensorInfo* t = s.find(name);
        DS41_CHECK(t, "gguf ", s.path(), ": missing tensor '", name, "'");
        const std::vector<long> shape = t->shape();
        DS41_CHECK(shape.size() == 3 && shape[0] == c.n_routed_experts, "gguf ", s.path(), ": tensor '", name,
                   "' has shape ", shape_str({shape.begin(), shape.end()}), ", expected [", c.n_routed_experts, ", ...]");
        types_[k].push_back(t->type);
        shapes_[k].push_back({shape[1], shape[2]});
        for (int e = 0; e < c.n_routed_experts; ++e) {
          ExpertSliceMap::Slice sl;
          sl.shard = t->shard;
          sl.bytes = t->bytes / shape[0];
          sl.offset = t->offset + sl.bytes * e;
          layer[e].parts.push_back(sl);
          layer[e].bytes += sl.bytes;
        }
      }
      map_.add_layer(std::move(layer));
    }
  }
  const ExpertSliceMap& slices() const override { return map_; }
  std::vector<std::string> shard_paths() const override {
    std::vector<std::string> p;
    for (int i = 0; i < shards_->shard_count(); ++i) p.push_back(shards_->shard(i).path());
    return p;
  }
  std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const override {
    const ExpertSliceMap::Expert& ex = map_.at(layer, e);
    std::array<HostTensor, 3> out;
    for (int i = 0; i < 3; ++i)
      out[i] = gguf::decode_tensor(types_[i][layer], shapes_[i][layer], parts[i], ex.parts[i].bytes, gguf::Part::kWhole,
                                   "expert " + std::to_string(e) + " of layer " + std::to_string(layer));
    return out;
  }

 private:
  std::shared_ptr<const gguf::GgufShards> shards_;
  ExpertSliceMap map_;
  std::vector<gguf::TensorType> types_[3];  // per matrix, per layer
  std::vector<std::vector<long>> shapes_[3];
};

/// Safetensors: expert e of layer l is layers.l.ffn.experts.e.w{1,2,3}.weight, each with its
/// .scale when quantised (fp4: I8 + F8_E8M0; fp8: F8_E4M3 + F8_E8M0; bf16: the weight alone).
class SafetensorsExpertSource : public ExpertSource {
 public:
  SafetensorsExpertSource(const SafetensorsWeights& w) : shards_(w.shared_shards()) {
    const ModelConfig& c = w.config();
    map_ = ExpertSliceMap(c.n_routed_experts);
    const long shape[3][2] = {{c.moe_inter_dim, c.dim}, {c.dim, c.moe_inter_dim}, {c.moe_inter_dim, c.dim}};
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<ExpertSliceMap::Expert> layer(c.n_routed_experts);
      std::vector<std::array<SafetensorsWeights::Parts, 3>> parts(c.n_routed_experts);
      for (int e = 0; e < c.n_routed_experts; ++e)
        for (int k = 0; k < 3; ++k) {
          const std::string name = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w" +
                                   std::to_string(k + 1) + ".weight";
          SafetensorsWeights::Parts p = w.parts(name);
          const std::vector<long> want{shape[k][0], shape[k][1]};
          DS41_CHECK(p.shape == want, w.where(*p.weight), ": shape ", shape_str({p.shape.begin(), p.shape.end()}),
                     ", but config.json implies ", shape_str({want.begin(), want.end()}));
          for (const safetensors::TensorInfo* t : {p.weight, p.scale}) {
            if (!t) continue;
            layer[e].parts.push_back({t->shard, t->offset, t->bytes});
            layer[e].bytes += t->bytes;
          }
          parts[e][k] = std::move(p);
        }
      map_.add_layer(std::move(layer));
      parts_.push_back(std::move(parts));
    }
  }
  const ExpertSliceMap& slices() const override { return map_; }
  std::vector<std::string> shard_paths() const override {
    std::vector<std::string> p;
    for (int i = 0; i < shards_->shard_count(); ++i) p.push_back(shards_->shard(i).path());
    return p;
  }
  std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const override {
    std::array<HostTensor, 3> out;
    int at = 0;
    for (int k = 0; k < 3; ++k) {
      const SafetensorsWeights::Parts& p = parts_.at(layer).at(e)[k];
      const uint8_t* wb = parts[at++];
      const uint8_t* sb = p.scale ? parts[at++] : nullptr;
      out[k] = safetensors::decode_parts(*shards_, p, wb, sb);
    }
    return out;
  }

 private:
  std::shared_ptr<const safetensors::SafetensorsShards> shards_;
  ExpertSliceMap map_;
  std::vector<std::vector<std::array<SafetensorsWeights::Parts, 3>>> parts_;
};

/// (layer, expert) → arena slot, least recently used at the front.
class ExpertLru {
 public:
  using Key = std::pair<int, int>;
  explicit ExpertLru(long capacity = 0) : capacity_(capacity) {}
  long capacity() const { return capacity_; }
  long size() const { return static_cast<long>(where_.size()); }
  /// Slot of `k` (and mark it most recently used), or -1.
  long find(const Key& k) {
    auto it = where_.find(k);
    if (it == where_.end()) return -1;
    order_.splice(order_.end(), order_, it->second.second);
    return it->second.first;
  }
  bool contains(const Key& k) const { return where_.count(k) != 0; }
  /// A slot for `k`: a free one, else the least recently used one's (which is forgotten).
  long insert(const Key& k) {
    long slot;
    if (size() < capacity_) {
      slot = size();
    } else {
      const Key victim = order_.front();
      slot = where_.at(victim).first;
      where_.erase(victim);
      order_.pop_front();
    }
    order_.push_back(k);
    where_[k] = {slot, std::prev(order_.end())};
    return slot;
  }

 private:
  long capacity_;
  std::list<Key> order_;
  std::map<Key, std::pair<long, std::list<Key>::iterator>> where_;
};

/// Backend-resident expert slots; a slot's buffers are reused when the next expert has the same sizes.
template <class B>
class ExpertArena {
 public:
  explicit ExpertArena(long slots = 0) : slots_(slots) {}
  const ExpertWeights<B>& at(long slot) const { return slots_.at(slot); }
  void fill(long slot, const std::array<HostTensor, 3>& w) { fill(slots_.at(slot), w); }
  static void fill(ExpertWeights<B>& ew, const std::array<HostTensor, 3>& w) {
    Matrix<B>* m[3] = {&ew.w1, &ew.w2, &ew.w3};
    for (int k = 0; k < 3; ++k) put(*m[k], w[k]);
  }
  /// Exchange slot's weights with `w` (converted elsewhere); `w` gets the old buffers for reuse.
  void swap_in(long slot, ExpertWeights<B>& w) { std::swap(slots_.at(slot), w); }

 private:
  static void put(Matrix<B>& m, const HostTensor& t) { m.assign(t); }
  std::vector<ExpertWeights<B>> slots_;
};

/// Host staging memory: page-locked when the backend offers B::alloc_pinned (CUDA), else plain.
template <class B, class = void>
struct StagingAlloc {
  static HostBuffer<uint8_t> alloc(size_t n) { return HostBuffer<uint8_t>(n); }
};
template <class B>
struct StagingAlloc<B, std::void_t<decltype(B::template alloc_pinned<uint8_t>(size_t{1}))>> {
  static auto alloc(size_t n) { return B::template alloc_pinned<uint8_t>(n); }
};
template <class B>
auto alloc_staging(size_t n) {
  return StagingAlloc<B>::alloc(n);
}

/// The expert cache one model shares across its layers.
template <class B>
class ExpertCache {
 public:
  using Key = ExpertLru::Key;

  ExpertCache(const GgufWeights& w, const StreamOptions& o = {})
      : ExpertCache(std::make_shared<GgufExpertSource>(w), o) {}
  ExpertCache(const SafetensorsWeights& w, const StreamOptions& o = {})
      : ExpertCache(std::make_shared<SafetensorsExpertSource>(w), o) {}
  ExpertCache(std::shared_ptr<const ExpertSource> src, const StreamOptions& o = {})
      : src_(std::move(src)), opt_(o) {
    const ExpertSliceMap& map = src_->slices();
    const uint64_t per = map.max_expert_bytes();
    long cap = o.capacity_experts;
    if (cap <= 0 && o.capacity_bytes > 0) cap = static_cast<long>(o.capacity_bytes / std::max<uint64_t>(per, 1));
    DS41_CHECK(cap >= 1, "expert cache: capacity must hold at least one expert (", per, " bytes); got ",
               o.capacity_experts, " experts / ", o.capacity_bytes, " bytes");
    DS41_CHECK(o.staging_slots >= 1, "expert cache: staging_slots must be >= 1");
    DS41_CHECK(o.readers >= 1 && o.readers <= 64, "expert cache: readers must be in [1, 64], got ", o.readers);
    DS41_CHECK(!o.convert_on_readers || !B::kIsDevice, "expert cache: convert_on_readers is for host backends (",
               B::kName, " uploads on the calling thread)");
    for (const std::string& path : src_->shard_paths())
      files_.emplace_back(path, o.direct_io ? DirectFile::Mode::kDirect : DirectFile::Mode::kBuffered);
    // one slot holds any expert laid out as its runs' aligned spans, plus room to align the base
    for (int l = 0; l < map.layers(); ++l)
      for (int e = 0; e < map.experts(); ++e) {
        uint64_t b = 0;
        for (const Run& r : runs(map.at(l, e))) b += span_bytes(r.offset, r.bytes);
        slot_bytes_ = std::max(slot_bytes_, b);
      }
    slot_bytes_ += kDirectAlign;
    const long slots = o.staging_bytes > 0 ? std::max<long>(1, static_cast<long>(o.staging_bytes / slot_bytes_))
                                           : o.staging_slots;
    lru_ = ExpertLru(cap);
    arena_ = ExpertArena<B>(cap);
    for (long i = 0; i < slots; ++i) ring_.push_back(Staged{alloc_staging<B>(slot_bytes_)});
    counters_.layer_hits.assign(map.layers(), 0);
    counters_.layer_misses.assign(map.layers(), 0);
    if (o.background)
      for (int i = 0; i < o.readers; ++i) workers_.emplace_back([this] { serve(); });
  }
  ~ExpertCache() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  const ExpertSliceMap& slices() const { return src_->slices(); }
  long capacity() const { return lru_.capacity(); }
  /// True when the capacity came from StreamOptions::capacity_bytes (no capacity_experts given).
  bool budget_in_bytes() const { return opt_.capacity_experts <= 0; }
  /// Staging ring: slots and bytes per slot.
  long staging_slots() const { return static_cast<long>(ring_.size()); }
  uint64_t staging_slot_bytes() const { return slot_bytes_; }
  /// True when every shard is read with O_DIRECT (false: buffered, or a fallback happened).
  bool direct_io() const {
    for (const DirectFile& f : files_)
      if (!f.direct()) return false;
    return !files_.empty();
  }
  ExpertCounters counters() const {
    std::lock_guard<std::mutex> g(mu_);
    ExpertCounters c = counters_;
    c.bytes_read = bytes_read_.load();
    c.read_seconds = static_cast<double>(read_ns_.load()) * 1e-9;
    c.reader_convert_seconds = static_cast<double>(conv_ns_.load()) * 1e-9;
    return c;
  }
  void reset_counters() {
    std::lock_guard<std::mutex> g(mu_);
    const size_t L = counters_.layer_hits.size();
    counters_ = {};
    counters_.layer_hits.assign(L, 0);
    counters_.layer_misses.assign(L, 0);
    bytes_read_ = 0;
    read_ns_ = 0;
    conv_ns_ = 0;
  }
  /// Forget every resident expert (the arena's buffers are kept): the next get() of each reads again.
  void clear() { lru_ = ExpertLru(lru_.capacity()); }

  /// Expert e of `layer`, resident in backend memory until a later get() evicts it.
  const ExpertWeights<B>& get(int layer, int e) {
    const Key k{layer, e};
    DS41_CHECK(layer >= 0 && layer < slices().layers() && e >= 0 && e < slices().experts(), "expert cache: expert ",
               e, " of layer ", layer, " is outside the file's ", slices().layers(), " layers of ", slices().experts(),
               " experts");
    if (long slot = lru_.find(k); slot >= 0) {
      std::lock_guard<std::mutex> g(mu_);
      ++counters_.hits;
      ++counters_.layer_hits[layer];
      return arena_.at(slot);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(mu_);
    ++counters_.layer_misses[layer];
    int s = find_staged(k);
    if (s >= 0) {
      ++counters_.prefetch_hits;
      cv_.wait(lk, [&] { return ring_[s].state == State::kReady || ring_[s].state == State::kFree || ring_[s].key != k; });
      if (ring_[s].state != State::kReady || ring_[s].key != k) s = -1;  // its read failed: read (and report) here
    } else {
      ++counters_.misses;
    }
    if (s < 0) {
      cv_.wait(lk, [&] { return (s = free_slot(true)) >= 0; });
      ring_[s].key = k;
      ring_[s].state = State::kReading;
      lk.unlock();
      try {
        read_into(ring_[s], k);
      } catch (...) {
        lk.lock();
        ring_[s].state = State::kFree;
        cv_.notify_all();
        throw;
      }
      lk.lock();
      ring_[s].state = State::kReady;
    }
    ring_[s].state = State::kBusy;  // converting: no one may recycle it
    counters_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ring_[s].converted) {  // a reader thread converted it: swap it in
      lk.unlock();
      const long slot = lru_.insert(k);
      arena_.swap_in(slot, ring_[s].conv);
      lk.lock();
      ring_[s].converted = false;
      ring_[s].state = State::kFree;
      cv_.notify_all();
      return arena_.at(slot);
    }
    lk.unlock();
    long slot = -1;
    const auto t1 = std::chrono::steady_clock::now();
    try {
      std::array<HostTensor, 3> w = decode(ring_[s], k);  // ring slot kBusy: safe to read without the lock
      slot = lru_.insert(k);
      arena_.fill(slot, w);
    } catch (...) {
      if (slot >= 0) lru_ = ExpertLru(lru_.capacity());  // a half-filled slot must not be found later
      lk.lock();
      ring_[s].state = State::kFree;
      cv_.notify_all();
      throw;
    }
    lk.lock();
    counters_.convert_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    ring_[s].state = State::kFree;
    cv_.notify_all();
    return arena_.at(slot);
  }

  /// Start reading the experts of `layer` that are neither resident nor already staged.
  void prefetch(int layer, const std::vector<int>& experts) {
    for (int e : experts) {
      const Key k{layer, e};
      if (lru_.contains(k)) continue;
      std::unique_lock<std::mutex> lk(mu_);
      if (find_staged(k) >= 0) continue;
      const int s = free_slot(false);
      if (s < 0) continue;  // every slot busy: drop the hint rather than stall the layer
      ++counters_.prefetch_issued;
      ring_[s].key = k;
      if (!opt_.background) {
        ring_[s].state = State::kReading;
        lk.unlock();
        try {
          read_into(ring_[s], k);
        } catch (...) {  // not fatal: get() reads (and reports) again
          lk.lock();
          ring_[s].state = State::kFree;
          continue;
        }
        lk.lock();
        ring_[s].state = State::kReady;
        ring_[s].prefetched = true;
        continue;
      }
      ring_[s].state = State::kQueued;
      ring_[s].prefetched = true;
      queue_.push_back(s);
      cv_.notify_all();
    }
  }

 private:
  enum class State { kFree, kQueued, kReading, kReady, kBusy };
  using StagingBuf = decltype(alloc_staging<B>(0));
  struct Staged {
    StagingBuf buf;
    std::vector<const uint8_t*> parts;  // where each slice of `key` starts in buf after the read
    ExpertWeights<B> conv;              // convert_on_readers: `key` converted by a reader thread
    bool converted = false;
    Key key{-1, -1};
    State state = State::kFree;
    bool prefetched = false;
    uint64_t age = 0;
  };

  int find_staged(const Key& k) const {
    for (size_t i = 0; i < ring_.size(); ++i)
      if (ring_[i].state != State::kFree && ring_[i].state != State::kBusy && ring_[i].key == k) return static_cast<int>(i);
    return -1;
  }
  /// A free slot, else the oldest ready prefetch nobody asked for (it was mispredicted).
  int free_slot(bool) {
    int best = -1;
    for (size_t i = 0; i < ring_.size(); ++i) {
      if (ring_[i].state == State::kFree) {
        ring_[i].age = ++clock_;
        ring_[i].prefetched = false;
        ring_[i].converted = false;
        return static_cast<int>(i);
      }
      if (ring_[i].state == State::kReady && (best < 0 || ring_[i].age < ring_[best].age)) best = static_cast<int>(i);
    }
    if (best >= 0) {
      ++counters_.prefetch_dropped;
      ring_[best].age = ++clock_;
      ring_[best].prefetched = false;
      ring_[best].converted = false;
    }
    return best;
  }
  /// Adjacent slices of one shard, read as one span.
  struct Run {
    int shard = 0;
    uint64_t offset = 0, bytes = 0;
    size_t first = 0, count = 0;  // the slices it covers
  };
  static std::vector<Run> runs(const ExpertSliceMap::Expert& ex) {
    std::vector<Run> out;
    for (size_t i = 0; i < ex.parts.size(); ++i) {
      const auto& sl = ex.parts[i];
      if (!out.empty() && out.back().shard == sl.shard && out.back().offset + out.back().bytes == sl.offset) {
        out.back().bytes += sl.bytes;
        ++out.back().count;
      } else {
        out.push_back({sl.shard, sl.offset, sl.bytes, i, 1});
      }
    }
    return out;
  }
  void read_into(Staged& st, const Key& k) {
    const auto t0 = std::chrono::steady_clock::now();
    const ExpertSliceMap::Expert& ex = src_->slices().at(k.first, k.second);
    const uintptr_t raw = reinterpret_cast<uintptr_t>(st.buf.data());
    uint8_t* base = st.buf.data() + (align_up(raw) - raw);
    st.parts.assign(ex.parts.size(), nullptr);
    uint64_t at = 0;
    for (const Run& r : runs(ex)) {
      DS41_CHECK(r.shard >= 0 && r.shard < static_cast<int>(files_.size()), "expert cache: expert ", k.second,
                 " of layer ", k.first, " names shard ", r.shard, " of ", files_.size());
      const uint8_t* p = files_[r.shard].read(base + at, r.offset, r.bytes,
                                              "expert " + std::to_string(k.second) + " of layer " + std::to_string(k.first));
      for (size_t i = r.first; i < r.first + r.count; ++i) st.parts[i] = p + (ex.parts[i].offset - r.offset);
      at += span_bytes(r.offset, r.bytes);
    }
    bytes_read_ += ex.bytes;
    read_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
  std::array<HostTensor, 3> decode(const Staged& st, const Key& k) const {
    return src_->decode(k.first, k.second, st.parts.data());
  }
  void serve() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const int s = queue_.front();
      queue_.pop_front();
      if (ring_[s].state != State::kQueued) continue;
      ring_[s].state = State::kReading;
      const Key k = ring_[s].key;
      lk.unlock();
      try {
        read_into(ring_[s], k);
        if (opt_.convert_on_readers) {
          try {
            const auto t0 = std::chrono::steady_clock::now();
            ExpertArena<B>::fill(ring_[s].conv, decode(ring_[s], k));
            ring_[s].converted = true;
            conv_ns_ += static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
          } catch (...) {  // get() converts (and reports) on its own thread
            ring_[s].converted = false;
          }
        }
      } catch (...) {
        // a failed prefetch is not fatal: the slot is freed and get() reads (and reports) again
        lk.lock();
        ring_[s].state = State::kFree;
        cv_.notify_all();
        continue;
      }
      lk.lock();
      ring_[s].state = State::kReady;
      cv_.notify_all();
    }
  }

  std::shared_ptr<const ExpertSource> src_;
  StreamOptions opt_;
  std::vector<DirectFile> files_;  // one per shard; read() is safe from several threads
  uint64_t slot_bytes_ = 0;
  ExpertLru lru_;
  ExpertArena<B> arena_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Staged> ring_;
  std::deque<int> queue_;
  uint64_t clock_ = 0;
  bool stop_ = false;
  ExpertCounters counters_;
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> read_ns_{0};
  std::atomic<uint64_t> conv_ns_{0};
  std::vector<std::thread> workers_;
};

/// ExpertStore policy: one layer's view of a model-wide ExpertCache.
template <class B>
class StreamedExperts {
 public:
  using Cache = ExpertCache<B>;
  static constexpr bool kPrefetches = true;

  StreamedExperts() = default;
  StreamedExperts(const ModelConfig& c, const WeightSource&, int layer, Cache& cache) : cache_(&cache), layer_(layer) {
    DS41_CHECK(cache.slices().layers() == c.n_layers && cache.slices().experts() == c.n_routed_experts,
               "streamed experts: the cache's file has ", cache.slices().layers(), " layers of ",
               cache.slices().experts(), " experts, the config ", c.n_layers, " of ", c.n_routed_experts);
    if (cache.budget_in_bytes()) check_budget(cache, c.n_activated_experts);
  }
  /// One layer's step routes to `active` experts: a cache that cannot hold them is an error.
  /// Applied to byte budgets (StreamOptions::capacity_bytes) when a layer is built; an explicit
  /// capacity_experts below a step is allowed (it thrashes within the layer, and the golden tests
  /// use one to exercise eviction); callers that want the check for it too call this.
  static void check_budget(const Cache& cache, int active) {
    const uint64_t per = cache.slices().max_expert_bytes();
    DS41_CHECK(cache.capacity() >= active, "streamed experts: the expert cache holds ", cache.capacity(),
               " experts (", cache.capacity() * per, " bytes at ", per, " bytes per expert), but one layer's step needs ",
               active, " (n_activated_experts: ", static_cast<uint64_t>(active) * per, " bytes)");
  }
  void prefetch(const std::vector<int>& experts) { cache_->prefetch(layer_, experts); }
  const ExpertWeights<B>& get(int e) { return cache_->get(layer_, e); }

 private:
  Cache* cache_ = nullptr;
  int layer_ = 0;
};

}  // namespace ds41
