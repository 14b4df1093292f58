// ds41/backend/host_threads.hpp — a small persistent thread pool for the host backend.
//
// Decode streams every active weight once per token, so the host backend is memory-bound and
// needs all cores reading at once to reach the machine's bandwidth. Threads are started once (a
// Linear is ~1 ms; spawning threads per call would cost a visible fraction of that). Between jobs a
// worker first spins for a short while (a decode step issues a job every few tens of microseconds,
// and a futex wake-up costs about as much as a small job), then parks on a condition variable; the
// caller likewise spins briefly for the workers to finish before it sleeps. Work is handed out in
// chunks from an atomic counter, so a slow core does not hold the others up.
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
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace ds41 {

class HostThreadPool {
 public:
  /// `threads` counts the calling thread: a pool of 1 runs everything inline.
  explicit HostThreadPool(int threads) {
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
    using B = std::remove_reference_t<Body>;
    {
      std::lock_guard<std::mutex> lock(m_);
      invoke_ = [](void* b, long begin, long end) { (*static_cast<B*>(b))(begin, end); };
      body_ = static_cast<void*>(&body);
      n_ = n;
      grain_ = grain;
      next_.store(0, std::memory_order_relaxed);
      error_ = nullptr;
      active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);  // publishes the job to spinning workers
    }
    cv_start_.notify_all();
    work_chunks();
    for (int spin = 0; spin < kSpins && active_.load(std::memory_order_acquire) != 0; ++spin) pause();
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_done_.wait(lock, [this] { return active_.load(std::memory_order_acquire) == 0; });
      invoke_ = nullptr;
      body_ = nullptr;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
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

  void work_chunks() {
    in_job() = true;
    for (;;) {
      long begin = next_.fetch_add(grain_, std::memory_order_relaxed);
      if (begin >= n_) break;
      try {
        invoke_(body_, begin, std::min(n_, begin + grain_));
      } catch (...) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_, std::memory_order_relaxed);  // stop handing out chunks
      }
    }
    in_job() = false;
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
  std::exception_ptr error_;
};

}  // namespace ds41
