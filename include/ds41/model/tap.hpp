// ds41/model/tap.hpp — capture points: components hand named intermediate tensors to an optional
// sink (the golden checker, tests, debugging). With no sink attached a tap costs nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
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

/// The taps of a batched decode step, whose rows belong to different sequences: row r's part of
/// a capture [N, ...] goes to rows[r] as [1, ...], the shape a one-token step of that sequence
/// gives it. The same calls as Tap, so a component's code takes either.
template <class B>
struct RowTaps {
  std::vector<Tap<B>> rows;

  explicit operator bool() const {
    for (const Tap<B>& t : rows)
      if (t) return true;
    return false;
  }
  RowTaps sub(const std::string& p) const {
    RowTaps r;
    for (const Tap<B>& t : rows) r.rows.push_back(t.sub(p));
    return r;
  }
  void f32(const std::string& name, const float* p, const std::vector<long>& shape, CapType t = CapType::kBF16) const {
    each(shape, [&](long r, const std::vector<long>& one, size_t n) { rows[r].f32(name, p + r * n, one, t); });
  }
  void i32(const std::string& name, const int32_t* p, const std::vector<long>& shape, CapType t = CapType::kI32) const {
    each(shape, [&](long r, const std::vector<long>& one, size_t n) { rows[r].i32(name, p + r * n, one, t); });
  }

 private:
  template <class F>
  void each(const std::vector<long>& shape, F&& f) const {
    if (!*this) return;
    DS41_CHECK(!shape.empty() && shape[0] == static_cast<long>(rows.size()), "internal: a batched capture's ",
               "leading dimension is not the batch's rows");
    std::vector<long> one = shape;
    one[0] = 1;
    const size_t n = Tap<B>::count(one);
    for (long r = 0; r < shape[0]; ++r)
      if (rows[r]) f(r, one, n);
  }
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
