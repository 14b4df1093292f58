// ds41/model/own_sequence.hpp — the one-sequence convenience API of a Model: prefill / decode /
// release drive one sequence the model keeps itself (the reference's own way of running: one
// sequence per process). Everything goes through Model::extend, hence Model::step: this is sugar
// over the caller-owned sequences, not a second engine.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "../core/error.hpp"
#include "tap.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// torch.argmax of a row of n values: the index of the first maximum.
inline int32_t first_argmax(const float* row, long n) {
  int32_t best = 0;
  for (long v = 1; v < n; ++v)
    if (row[v] > row[best]) best = static_cast<int32_t>(v);
  return best;
}

struct StepResult {
  std::vector<float> logits;  // [vocab]: the logits of one position
  int32_t argmax = -1;        // first_argmax of them
};

/// Base of Model<…> (CRTP): the model's own sequence. `ModelT` provides make_sequence(),
/// extend() and the backend's release_graphs().
template <class ModelT, class Sequence, class B>
class OwnSequence {
 public:
  /// Next position of the model's own sequence (0 when none).
  long position() const { return seq_ ? seq_->length() : 0; }
  bool active() const { return seq_ != nullptr; }

  /// Start the model's own sequence with its prompt (positions 0..T-1).
  StepResult prefill(const std::vector<int32_t>& tokens, CaptureSink* sink = nullptr) {
    DS41_CHECK(!seq_, "prefill: a sequence is already in flight on this runtime (it serves one); call release() first");
    DS41_CHECK(!tokens.empty(), "prefill: empty prompt");
    B::release_graphs();  // graphs kept from the previous sequence are not reused across sequences
    seq_ = std::make_unique<Sequence>(self().make_sequence());
    try {
      return self().extend(*seq_, tokens, sink);
    } catch (...) {
      seq_.reset();  // a failed prefill leaves no half-started sequence behind
      throw;
    }
  }

  /// One token at the next position of the model's own sequence.
  StepResult decode(int32_t token, CaptureSink* sink = nullptr) {
    DS41_CHECK(seq_, "decode: no sequence in flight (decode before prefill, or after release)");
    const long before = seq_->length();
    try {
      return self().extend(*seq_, {token}, sink);
    } catch (...) {
      // bad input is refused before any work and leaves the sequence as it was; a failure inside
      // a step leaves a state nobody may reuse
      if (seq_->broken() || seq_->length() != before) seq_.reset();
      throw;
    }
  }

  /// Free everything the model's own sequence holds.
  void release() {
    B::release_graphs();  // captured graphs first: they reference the sequence's buffers
    seq_.reset();
  }

 protected:
  OwnSequence() = default;
  ~OwnSequence() = default;
  /// The model frees its own sequence before its other members (its buffers go back to the
  /// backend before the model trims the backend's memory).
  void drop_own_sequence() noexcept { seq_.reset(); }

 private:
  ModelT& self() { return static_cast<ModelT&>(*this); }
  std::unique_ptr<Sequence> seq_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
