// release() leaves nothing behind: many prefill/decode/release cycles return the bytes the process
// holds through operator new (every allocation of the library: containers, buffers, states) to
// exactly their baseline. This binary replaces the global operator new/delete with counting ones.
#include <doctest/doctest.h>
#include <atomic>
#include <cstdlib>
#include <new>
#include "ds41/ds41.hpp"
#include "golden_checks.hpp"

namespace {
std::atomic<long long> g_live_bytes{0};
constexpr size_t kHeader = 64;  // keeps every alignment up to 64 and remembers the size

void* counted_alloc(size_t n, size_t align) {
  if (align < kHeader) align = kHeader;
  void* raw = std::aligned_alloc(align, (n + kHeader + align - 1) / align * align + align);
  if (!raw) throw std::bad_alloc();
  char* user = static_cast<char*>(raw) + align;
  reinterpret_cast<size_t*>(user - kHeader)[0] = n;
  reinterpret_cast<size_t*>(user - kHeader)[1] = align;
  g_live_bytes += static_cast<long long>(n);
  return user;
}
void counted_free(void* p) {
  if (!p) return;
  char* user = static_cast<char*>(p);
  size_t n = reinterpret_cast<size_t*>(user - kHeader)[0];
  size_t align = reinterpret_cast<size_t*>(user - kHeader)[1];
  g_live_bytes -= static_cast<long long>(n);
  std::free(user - align);
}
}  // namespace

void* operator new(size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
void* operator new[](size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
void* operator new(size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<size_t>(a)); }
// the nothrow forms too (std::get_temporary_buffer's): left to the runtime, a sanitizer's own
// allocator would hand out blocks that the counting delete below then frees as its own
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, alignof(std::max_align_t)); } catch (...) { return nullptr; }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, alignof(std::max_align_t)); } catch (...) { return nullptr; }
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, static_cast<size_t>(a)); } catch (...) { return nullptr; }
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, static_cast<size_t>(a)); } catch (...) { return nullptr; }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { counted_free(p); }

using namespace ds41;

TEST_CASE("host: live allocations return exactly to their baseline after many sequences") {
  const auto& g = testing::tiny_golden();
  Model<HostBackend> model(g.config, testing::tiny_weights());
  auto cycle = [&] {
    model.prefill(g.prompt_tokens);
    for (int32_t t : g.decode_tokens) model.decode(t);
    model.release();
  };
  cycle();  // first-use allocations (thread pools, static tables) happen here
  const long long before = g_live_bytes.load();
  for (int i = 0; i < 25; ++i) cycle();
  const long long after = g_live_bytes.load();
  // a sequence does hold memory while it runs (the counter sees the library's allocations)
  model.prefill(g.prompt_tokens);
  const long long during = g_live_bytes.load();
  model.release();
  const long long released = g_live_bytes.load();
  // (measured before any CHECK: doctest's own bookkeeping allocates)
  CAPTURE(before);
  CAPTURE(after);
  CHECK(after == before);
  CHECK(during > before);
  CHECK(released == before);
}

TEST_CASE("host: destroying every sequence returns the model to its baseline bytes") {
  const auto& g = testing::tiny_golden();
  Model<HostBackend> model(g.config, testing::tiny_weights());
  auto cycle = [&] {
    std::vector<Model<HostBackend>::Sequence> seqs;
    for (int i = 0; i < 3; ++i) seqs.push_back(model.make_sequence());
    for (auto& s : seqs) model.extend(s, g.prompt_tokens);
    seqs[0].checkpoint();
    model.extend(seqs[0], {g.decode_tokens[0], g.decode_tokens[1]});
    seqs[0].rollback();
    seqs[1].checkpoint();
    model.extend(seqs[1], {g.decode_tokens[0]});  // destroyed with its checkpoint open
    const std::vector<uint8_t> bytes = model.snapshot(seqs[2]);
    seqs.push_back(model.restore(bytes));
    model.extend(seqs.back(), {g.decode_tokens[0]});
  };
  cycle();  // first-use allocations happen here
  const long long before = g_live_bytes.load();
  for (int i = 0; i < 10; ++i) cycle();
  const long long after = g_live_bytes.load();
  auto kept = model.make_sequence();
  model.extend(kept, g.prompt_tokens);
  const long long during = g_live_bytes.load();
  kept = Model<HostBackend>::Sequence();
  const long long released = g_live_bytes.load();
  CAPTURE(before);
  CAPTURE(after);
  CHECK(after == before);
  CHECK(during > before);
  CHECK(released == before);
}
