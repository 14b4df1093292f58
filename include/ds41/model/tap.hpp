// ds41/model/tap.hpp — capture points: components hand named intermediate tensors to an optional
// sink (the golden checker, tests, debugging). With no sink attached a tap costs nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds41 {

enum class CapType { kF32, kBF16, kI32, kBool };

inline const char* cap_type_name(CapType t) {
  switch (t) {
    case CapType::kF32: return "f32";
    case CapType::kBF16: return "bf16";
    case CapType::kI32: return "i32";
    case CapType::kBool: return "bool";
  }
  return "?";
}

/// Receives host copies of captured tensors. Float captures come as float32, integer and bool
/// captures as int32. A sink that overrides float captures (teacher forcing: replace this run's
/// tensor by a reference one so that every component is measured on exact inputs) changes the
/// values in `*f32` and returns true; they are written back where the capture was taken.
class CaptureSink {
 public:
  virtual ~CaptureSink() = default;
  virtual void put(const std::string& name, const std::vector<long>& shape, CapType type,
                   const std::vector<float>* f32, const std::vector<int32_t>* i32) = 0;
  virtual bool override_f32(const std::string& name, std::vector<float>& values) {
    (void)name;
    (void)values;
    return false;
  }
};

/// A sink plus a name prefix ("layers.3."), bound to backend B for the download.
template <class B>
struct Tap {
  CaptureSink* sink = nullptr;
  std::string prefix;

  explicit operator bool() const { return sink != nullptr; }
  Tap sub(const std::string& p) const { return Tap{sink, prefix + p}; }

  static size_t count(const std::vector<long>& s) {
    size_t n = 1;
    for (long d : s) n *= static_cast<size_t>(d);
    return n;
  }
  void f32(const std::string& name, const float* p, const std::vector<long>& shape,
           CapType t = CapType::kBF16) const {
    if (!sink) return;
    std::vector<float> h(count(shape));
    B::download(h.data(), p, h.size());
    sink->put(prefix + name, shape, t, &h, nullptr);
    if (sink->override_f32(prefix + name, h)) B::upload(const_cast<float*>(p), h.data(), h.size());
  }
  void i32(const std::string& name, const int32_t* p, const std::vector<long>& shape,
           CapType t = CapType::kI32) const {
    if (!sink) return;
    std::vector<int32_t> h(count(shape));
    B::download(h.data(), p, h.size());
    sink->put(prefix + name, shape, t, nullptr, &h);
  }
  /// Host-resident integer data (tokens, hash rows computed on the host).
  void i32_host(const std::string& name, const std::vector<int32_t>& h, const std::vector<long>& shape) const {
    if (sink) sink->put(prefix + name, shape, CapType::kI32, nullptr, &h);
  }
};

}  // namespace ds41
