// ds41/backend/host/buffer.hpp — an owning, zero-initialised host array: 64-byte aligned, and
// 2 MiB aligned with transparent huge pages requested when it is 2 MiB or larger.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {

template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    // aligned operator new (throws std::bad_alloc): an application's allocator hooks see it
    const size_t align = bytes >= kHugePage ? kHugePage : 64;
    void* p = ::operator new(bytes, std::align_val_t(align));
    p_ = std::unique_ptr<T, Free>(static_cast<T*>(p), Free{align});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Large buffers (weights, the KV ring) are streamed: 2 MiB pages spare the page walks that
    // 4 KiB pages cost every 4 KiB of every stream. Only a hint: the kernel may decline.
    if (align == kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
    std::memset(p, 0, bytes);
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_.get()[i]; }
  const T& operator[](size_t i) const { return p_.get()[i]; }

 private:
  struct Free {
    size_t align = 64;
    void operator()(T* p) const { ::operator delete(p, std::align_val_t(align)); }
  };
  static constexpr size_t kHugePage = size_t{2} << 20;
  std::unique_ptr<T, Free> p_;
  size_t n_ = 0;
};

}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
