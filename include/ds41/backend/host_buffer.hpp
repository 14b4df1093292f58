// ds41/backend/host_buffer.hpp — an owning, 64-byte aligned, zero-initialised host array.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace ds41 {

template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    // aligned operator new (throws std::bad_alloc): an application's allocator hooks see it
    void* p = ::operator new(bytes, std::align_val_t(64));
    std::memset(p, 0, bytes);
    p_.reset(static_cast<T*>(p));
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_.get()[i]; }
  const T& operator[](size_t i) const { return p_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<T, Free> p_;
  size_t n_ = 0;
};

}  // namespace ds41
