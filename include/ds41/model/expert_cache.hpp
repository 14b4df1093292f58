// ds41/model/expert_cache.hpp — ExpertCache: a model's routed experts read on demand from its
// files (an ExpertSource, expert_source.hpp, which the weights' format gives: io/) into a
// bounded, LRU-managed arena (expert_arena.hpp) shared by every layer.
//
//   StreamOptions   the budget (experts or bytes), the staging ring (slots or bytes), reader
//                   threads, direct I/O, conversion on the reader threads
//   StagingRing     slots of raw expert bytes (page-locked when the backend has B::alloc_pinned),
//                   sized in slots or in bytes; `readers` background threads serve prefetch
//                   requests into it, so several expert reads are in flight at once
//   DirectFile      (core/direct_file.hpp) the reads: buffered pread by default; with
//                   direct_io, O_DIRECT into block-aligned slot layouts (each run of an expert's
//                   adjacent slices read as its aligned covering span, the inner part used), or
//                   pread + posix_fadvise(DONTNEED) where the file system refuses O_DIRECT
//   ExpertCounters  hits, misses, prefetch hits, bytes, per layer hits/misses, seconds spent
//                   reading, converting and waiting
//
// Prefetch: MoeT of layer L runs layer L+1's router on its own MoE input and hands the experts it
// names to prefetch(), which queues their reads; when layer L+1 asks for one still in the ring
// (read or being read) that is a prefetch hit. The arena is touched only by the calling thread,
// and one expert is used at a time, so eviction never frees weights in use.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include "../core/direct_file.hpp"
#include "expert_arena.hpp"
#include "expert_source.hpp"

#include "../core/fp_exact_begin.hpp"
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
  double read_busy_seconds = 0; // wall time during which at least one expert read was in flight
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
  /// Summed over reading threads, so reads in flight together count more than once.
  double hidden_share() const { return read_seconds > 0 ? std::max(0.0, 1.0 - wait_seconds / read_seconds) : 0.0; }
  /// Share of the wall time the reads kept the disk busy during which the caller was not waiting
  /// (1 - wait / busy): overlapping reads count once.
  double hidden_share_wall() const {
    return read_busy_seconds > 0 ? std::max(0.0, 1.0 - wait_seconds / read_busy_seconds) : 0.0;
  }
};

/// The expert cache one model shares across its layers.
template <class B>
class ExpertCache {
 public:
  using Key = ExpertLru::Key;

  /// The routed experts of `w`'s files (WeightSource::expert_source: GgufWeights,
  /// SafetensorsWeights); weights that cannot stream (a WeightSet) are an error saying so.
  ExpertCache(const WeightSource& w, const StreamOptions& o = {}) : ExpertCache(streamable(w), o) {}
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
      for (int e = 0; e < map.experts(l); ++e) {
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
    {
      std::lock_guard<std::mutex> b(busy_mu_);
      c.read_busy_seconds = static_cast<double>(busy_ns_) * 1e-9;
    }
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
    {
      std::lock_guard<std::mutex> b(busy_mu_);
      busy_ns_ = 0;
    }
    conv_ns_ = 0;
  }
  /// Forget every resident expert (the arena's buffers are kept): the next get() of each reads again.
  void clear() { lru_ = ExpertLru(lru_.capacity()); }

  /// Expert e of `layer`, resident in backend memory until a later get() evicts it.
  const ExpertWeights<B>& get(int layer, int e) {
    const Key k{layer, e};
    DS41_CHECK(layer >= 0 && layer < slices().layers(), "expert cache: layer ", layer, " is outside the file's ",
               slices().layers(), " layers of experts");
    DS41_CHECK(e >= 0 && e < slices().experts(layer), "expert cache: expert ", e, " of layer ", layer,
               " is outside the layer's ", slices().experts(layer), " experts");
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
      slot = lru_.insert(k);
      convert(ring_[s], k, arena_.slot(slot));  // ring slot kBusy: safe to read without the lock
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
  static std::shared_ptr<const ExpertSource> streamable(const WeightSource& w) {
    std::shared_ptr<const ExpertSource> src = w.expert_source();
    DS41_CHECK(src, "expert cache: these weights cannot stream their routed experts (their WeightSource gives no "
               "expert_source(), as an in-memory WeightSet); stream from a GgufWeights or a SafetensorsWeights, or "
               "keep the experts resident (ResidentExperts)");
    return src;
  }
  enum class State { kFree, kQueued, kReading, kReady, kBusy };
  using StagingBuf = decltype(alloc_staging<B>(0));
  struct Staged {
    StagingBuf buf;
    std::vector<const uint8_t*> parts;  // where each slice of `key` starts in buf after the read
    ExpertWeights<B> conv;              // convert_on_readers: `key` converted by a reader thread
    std::array<std::vector<float>, 3> scales;  // convert(): the views' decoded block scales
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
  /// Marks a read in flight for its lifetime (read_busy_seconds: the union of the reads' intervals).
  struct BusyGuard {
    ExpertCache& c;
    explicit BusyGuard(ExpertCache& cache) : c(cache) {
      std::lock_guard<std::mutex> g(c.busy_mu_);
      if (c.in_flight_++ == 0) c.busy_since_ = std::chrono::steady_clock::now();
    }
    ~BusyGuard() {
      std::lock_guard<std::mutex> g(c.busy_mu_);
      if (--c.in_flight_ == 0)
        c.busy_ns_ += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::steady_clock::now() - c.busy_since_)
                                                .count());
    }
  };
  void read_into(Staged& st, const Key& k) {
    const BusyGuard busy(*this);
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
  /// The staged expert into `ew`: host backends pack straight from the staging slot where the
  /// source offers views (ExpertSource::views: no copy of the codes), else decode() + fill().
  void convert(Staged& st, const Key& k, ExpertWeights<B>& ew) const {
    if constexpr (!B::kIsDevice) {
      std::array<MatrixView, 3> v;
      if (src_->views(k.first, k.second, st.parts.data(), v, st.scales) && ExpertArena<B>::fill_views(ew, v)) return;
    }
    ExpertArena<B>::fill(ew, src_->decode(k.first, k.second, st.parts.data()));
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
            convert(ring_[s], k, ring_[s].conv);
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
  mutable std::mutex busy_mu_;  // guards the three below: the union of the reads' intervals
  int in_flight_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  uint64_t busy_ns_ = 0;
  std::atomic<uint64_t> conv_ns_{0};
  std::vector<std::thread> workers_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
