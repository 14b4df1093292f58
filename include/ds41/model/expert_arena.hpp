// ds41/model/expert_arena.hpp — the expert cache's memory: where resident experts and staged
// raw bytes live.
//
//   ExpertLru     which (layer, expert) sits in which arena slot, least recently used first
//   ExpertArena   slots of backend-resident ExpertWeights, reused as experts come and go
//   alloc_staging host buffers for raw expert bytes: page-locked when the backend has
//                 B::alloc_pinned (CUDA), else plain
#pragma once
#include <array>
#include <iterator>
#include <list>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>
#include "../backend/host/buffer.hpp"
#include "moe.hpp"
#include "../backend/concept.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

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
  ExpertWeights<B>& slot(long slot) { return slots_.at(slot); }
  void fill(long slot, const std::array<HostTensor, 3>& w) { fill(slots_.at(slot), w); }
  static void fill(ExpertWeights<B>& ew, const std::array<HostTensor, 3>& w) {
    Matrix<B>* m[3] = {&ew.w1, &ew.w2, &ew.w3};
    for (int k = 0; k < 3; ++k) put(*m[k], w[k]);
  }
  /// Fills `ew` from row-major views straight into the backend's own layout (host panels).
  /// False where the backend has no such upload or a matrix stays row-major (not packable): `ew`
  /// may then be half-filled, and the caller converts to HostTensors and fill()s all three.
  static bool fill_views(ExpertWeights<B>& ew, const std::array<MatrixView, 3>& w) {
    if constexpr (PackedWeightUpload<B>) {
      Matrix<B>* m[3] = {&ew.w1, &ew.w2, &ew.w3};
      for (int k = 0; k < 3; ++k) {
        MatrixView out;
        if (!B::upload_linear_weights(w[k], m[k]->payload, m[k]->scales, out)) return false;  // ew half-filled: refill
        m[k]->v = out;
      }
      return true;
    } else {
      (void)ew, (void)w;
      return false;
    }
  }
  /// Exchange slot's weights with `w` (converted elsewhere); `w` gets the old buffers for reuse.
  void swap_in(long slot, ExpertWeights<B>& w) { std::swap(slots_.at(slot), w); }

 private:
  static void put(Matrix<B>& m, const HostTensor& t) { m.assign(t); }
  std::vector<ExpertWeights<B>> slots_;
};

/// Host staging memory: page-locked where the backend has PinnedStaging (CUDA), else plain.
template <class B>
auto alloc_staging(size_t n) {
  if constexpr (PinnedStaging<B>)
    return B::template alloc_pinned<uint8_t>(n);
  else
    return HostBuffer<uint8_t>(n);
}

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
