// ds41/backend/host/threads.hpp — a small persistent thread pool for the host backend.
//
// Decode streams every active weight once per token, so the host backend is memory-bound and
// needs all cores reading at once to reach the machine's bandwidth. Threads are started once (a
// Linear is ~1 ms; spawning threads per call would cost a visible fraction of that). Between jobs a
// worker first spins for a short while (a decode step issues a job every few tens of microseconds,
// and a futex wake-up costs about as much as a small job), then parks on a condition variable; the
// caller likewise spins briefly for the workers to finish before it sleeps. Work is handed out in
// chunks from an atomic counter, so a slow core does not hold the others up; run_owned instead
// gives each thread a contiguous share of the items and lets a thread done with its own take
// chunks from the back of the others' (a streaming kernel then reads one run of memory per
// thread and can prefetch across its chunks).
//
// Results never depend on the split: every caller gives the pool items whose outputs are
// independent (one Linear output row block, one for_each item), each computed whole by one thread
// in its fixed order.
//
// The thread count is DS41_HOST_THREADS from the environment when set, else the hardware's.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {

class HostThreadPool {
 public:
  /// `threads` counts the calling thread: a pool of 1 runs everything inline.
  explicit HostThreadPool(int threads)
      : shares_(std::make_unique<Share[]>(static_cast<size_t>(std::max(1, threads)))) {
    for (int i = 1; i < threads; ++i)
      workers_.emplace_back([this, i] {
        slot() = i;
        worker_loop();
      });
  }
  ~HostThreadPool() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
  }
  HostThreadPool(const HostThreadPool&) = delete;
  HostThreadPool& operator=(const HostThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Which thread of a job runs the calling code: 0 outside the pool's workers (the caller, or
  /// any thread running a job inline), i for worker i (1 .. threads() - 1). Two items of one job
  /// never run at once under the same index, so a job may give each index its own scratch.
  static int thread_index() { return slot(); }

  /// body(begin, end) over [0, n) in chunks of `grain` items, on the workers and the caller; returns
  /// when all chunks are done and rethrows the first exception a chunk threw. Runs inline when the
  /// pool has no workers, when called from inside a job (nested), or while another thread's job holds
  /// the pool.
  template <class Body>
  void run(long n, long grain, Body&& body) {
    if (n <= 0) return;
    grain = std::max(1L, grain);
    std::unique_lock<std::mutex> submit(submit_, std::defer_lock);
    if (workers_.empty() || n <= grain || in_job() || !submit.try_lock()) {
      body(0L, n);
      return;
    }
    run_job(body, n, grain, false);
  }

  /// body(begin, end, share_end) over [0, n) in chunks of `grain` items, like run(), but each of
  /// the threads() threads owns the share [i·n/threads(), (i+1)·n/threads()) and takes it front
  /// to back; a thread done with its share takes chunks from the back of the others'. share_end
  /// is where the run of items the calling thread is taking ends as far as is known when the
  /// chunk is handed out (its share's unclaimed end, or `end` for a chunk taken from another's
  /// back): a hint for prefetching the items after `end`, which another thread may yet take.
  template <class Body>
  void run_owned(long n, long grain, Body&& body) {
    if (n <= 0) return;
    grain = std::max(1L, grain);
    std::unique_lock<std::mutex> submit(submit_, std::defer_lock);
    if (n > kMaxOwnedItems) {  // past what a share's packed bounds hold: chunks handed out in turn
      run(n, grain, [&body](long begin, long end) { body(begin, end, end); });
      return;
    }
    if (workers_.empty() || n <= grain || in_job() || !submit.try_lock()) {
      body(0L, n, n);
      return;
    }
    const int parts = threads();
    for (int i = 0; i < parts; ++i)
      shares_[i].range.store(pack(n * i / parts, n * (i + 1) / parts), std::memory_order_relaxed);
    auto chunks = [&body, grain, parts, this](long, long) {
      // (a share two threads took as their own would still be split right: take() is atomic)
      const int own = std::min(slot(), parts - 1);
      for (;;) {  // the own share from the front
        long begin, end, share_end;
        if (!take(shares_[own].range, grain, true, begin, end, share_end)) break;
        body(begin, end, share_end);
      }
      for (int k = 1; k < parts; ++k) {  // then the others' from the back
        auto& range = shares_[(own + k) % parts].range;
        long begin, end, share_end;
        while (take(range, grain, false, begin, end, share_end)) body(begin, end, end);
      }
    };
    run_job(chunks, 1, 1, true);  // every thread runs chunks() once: it takes its items itself
  }

  /// The pool every HostBackend call shares.
  static HostThreadPool& global() {
    static HostThreadPool pool(default_threads());
    return pool;
  }
  static int default_threads() {
    if (const char* env = std::getenv("DS41_HOST_THREADS")) {
      int n = std::atoi(env);
      if (n >= 1) return n;
    }
    return std::max(1u, std::thread::hardware_concurrency());
  }

 private:
  static int& slot() {
    thread_local int index = 0;
    return index;
  }
  static bool& in_job() {
    thread_local bool flag = false;
    return flag;
  }

  /// Publishes a job, runs it on the caller too and waits for the workers: job(begin, end) for
  /// each chunk of `grain` items of [0, n) handed out in turn, or, per_thread, once per thread.
  template <class Job>
  void run_job(Job& job, long n, long grain, bool per_thread) {
    {
      std::lock_guard<std::mutex> lock(m_);
      invoke_ = [](void* j, long begin, long end) { (*static_cast<Job*>(j))(begin, end); };
      body_ = static_cast<void*>(&job);
      n_ = n;
      grain_ = grain;
      per_thread_ = per_thread;
      next_.store(0, std::memory_order_relaxed);
      error_ = nullptr;
      active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);  // publishes the job to spinning workers
    }
    cv_start_.notify_all();
    work_chunks();
    finish_job();
  }

  /// Waits for the workers to finish the current job, then rethrows its first exception.
  void finish_job() {
    for (int spin = 0; spin < kSpins && active_.load(std::memory_order_acquire) != 0; ++spin) pause();
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_done_.wait(lock, [this] { return active_.load(std::memory_order_acquire) == 0; });
      invoke_ = nullptr;
      body_ = nullptr;
      per_thread_ = false;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  void work_chunks() {
    in_job() = true;
    for (;;) {
      // run_owned: every thread runs the job's one body once (it takes its chunks itself)
      long begin = per_thread_ ? 0 : next_.fetch_add(grain_, std::memory_order_relaxed);
      if (begin >= n_) break;
      try {
        invoke_(body_, begin, std::min(n_, begin + grain_));
      } catch (...) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_, std::memory_order_relaxed);  // stop handing out chunks
        for (int i = 0; i < threads(); ++i) shares_[i].range.store(0, std::memory_order_relaxed);
      }
      if (per_thread_) break;
    }
    in_job() = false;
  }

  // run_owned's shares: [front, back) packed as front | back << 32, one cache line each
  static constexpr long kMaxOwnedItems = 0x7FFFFFFFL;
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  static uint64_t pack(long front, long back) {
    return static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32;
  }
  /// Takes up to `grain` items from the front (or the back) of a share: [begin, end), and
  /// share_end = the share's back after the take. False when the share is empty.
  static bool take(std::atomic<uint64_t>& range, long grain, bool front, long& begin, long& end, long& share_end) {
    uint64_t cur = range.load(std::memory_order_relaxed);
    for (;;) {
      const long f = static_cast<long>(cur & 0xFFFFFFFFu), b = static_cast<long>(cur >> 32);
      if (f >= b) return false;
      begin = front ? f : std::max(f, b - grain);
      end = front ? std::min(b, f + grain) : b;
      const uint64_t next = front ? pack(end, b) : pack(f, begin);
      if (range.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
        share_end = front ? b : begin;
        return true;
      }
    }
  }

  /// Spin iterations before sleeping: ~30-60 µs of pause instructions.
  static constexpr int kSpins = 4000;
  static void pause() {
#if defined(__x86_64__) || defined(_M_X64)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
  }

  void worker_loop() {
    unsigned long seen = 0;
    for (;;) {
      for (int spin = 0; spin < kSpins && generation_.load(std::memory_order_acquire) == seen; ++spin) pause();
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_start_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
        if (stop_) return;
        seen = generation_.load(std::memory_order_relaxed);
      }
      work_chunks();
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(m_);  // the caller checks active_ under this lock before sleeping
        cv_done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex submit_;  // one job at a time
  std::mutex m_;
  std::condition_variable cv_start_, cv_done_;
  std::atomic<unsigned long> generation_{0};
  bool stop_ = false;
  // the current job
  void (*invoke_)(void*, long, long) = nullptr;
  void* body_ = nullptr;
  long n_ = 0, grain_ = 1;
  std::atomic<long> next_{0};
  std::atomic<int> active_{0};
  bool per_thread_ = false;  // the job is run_owned's: each thread runs the body once
  std::unique_ptr<Share[]> shares_;  // one per thread
  std::exception_ptr error_;
};

}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
