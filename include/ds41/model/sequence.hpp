// ds41/model/sequence.hpp — SequenceT: one sequence's state as the caller owns it (the model's
// make_sequence() makes one; any number may be alive at once; destroying one frees everything it
// holds), and its rewind machinery.
//
//   state     per layer: the window ring, the compressed KV and index keys (kv / index sources),
//             the compressor's open group; the shared slots handed down the stack (the compressed
//             KV and index keys published last, top-k, candidates); the engram token history;
//             the position.
//   rewind    checkpoint() opens an undo record; while it is open every step saves, before it
//             writes them, the ring rows and open-group slots it overwrites (the only state a step
//             overwrites: the compressed KV, the index keys and the engram history are written
//             once per position, past the sequence's length), and the shared slots as they were
//             at its start. rollback() puts them back, newest first, so a slot overwritten twice
//             gets its oldest content; truncate(n) undoes only the steps at positions >= n;
//             commit() drops the record. Nothing is ever recomputed: no token is replayed.
//   snapshot  snapshot() writes the whole state to bytes (only what is valid at the sequence's
//             length); Model::restore() makes a sequence of them that continues with the same
//             bits as the one that never stopped.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "attention.hpp"
#include "engram.hpp"
#include "shared_slots.hpp"
#include "undo_record.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B, class ExpertStore, class Table>
class Model;
template <class B>
struct SequenceBytes;

/// One sequence's state (see the file comment). Made by Model::make_sequence(); movable, not
/// copyable (snapshot() is the copy). Every call checks that the sequence is used with the model
/// that made it.
template <class B>
class SequenceT {
 public:
  using Attn = CompressedAttnT<B>;

  SequenceT() = default;
  SequenceT(SequenceT&&) noexcept = default;
  SequenceT& operator=(SequenceT&&) noexcept = default;
  SequenceT(const SequenceT&) = delete;
  SequenceT& operator=(const SequenceT&) = delete;

  /// Tokens in the sequence: the next token goes to this position.
  long length() const { return pos_; }
  /// Whether the sequence was made by a model (a default-constructed one was not).
  bool valid() const { return owner_ != nullptr; }
  /// Whether a step failed half-way on it: its state is then unusable (only destruction, reset()
  /// or rollback() to an open checkpoint make it usable again).
  bool broken() const { return broken_; }
  bool has_checkpoint() const { return undo_ != nullptr; }
  long checkpoint_length() const { return undo_ ? checkpoint_pos_ : -1; }

  /// Open an undo record at the current length (one at a time).
  void checkpoint() {
    check_usable("checkpoint");
    DS41_CHECK(!undo_, "sequence: checkpoint() while the checkpoint at length ", checkpoint_pos_,
               " is still open; commit() or rollback() it first");
    undo_ = std::make_unique<UndoRecord<B>>();
    checkpoint_pos_ = pos_;
  }
  /// Back to the length of the open checkpoint, exactly as it was; the checkpoint closes.
  void rollback() {
    DS41_CHECK(valid(), "sequence: rollback() on a sequence no model made");
    DS41_CHECK(undo_, "sequence: rollback() with no open checkpoint (call checkpoint() before the speculative step)");
    rewind_to(checkpoint_pos_);
    undo_.reset();
    broken_ = false;
  }
  /// Keep what was decoded since the checkpoint; the checkpoint closes.
  void commit() {
    DS41_CHECK(valid(), "sequence: commit() on a sequence no model made");
    DS41_CHECK(undo_, "sequence: commit() with no open checkpoint");
    undo_.reset();
  }
  /// Back to length n. Exact, never by replaying tokens, so only where the state still holds
  /// what length n had: n = 0 (an empty sequence), n = length(), or a length at or after the
  /// open checkpoint's (the checkpoint stays open). Anything else is refused with the reason.
  void truncate(long n) {
    check_usable("truncate");
    DS41_CHECK(n >= 0 && n <= pos_, "sequence: truncate(", n, ") outside [0, ", pos_, "] (the length now)");
    if (n == pos_) return;
    if (n == 0) return reset();
    DS41_CHECK(undo_ && n >= checkpoint_pos_, "sequence: truncate(", n, ") cannot be restored exactly: ",
               undo_ ? "it is before the open checkpoint at length " + std::to_string(checkpoint_pos_)
                     : std::string("no checkpoint is open"),
               ", and positions ", n, "..", pos_ - 1,
               " have overwritten the window ring rows and the compressor's open group that length ", n,
               " needs (ds41 never replays tokens; open a checkpoint() before steps you may take back)");
    rewind_to(n);
  }
  /// Empty the sequence (length 0), keeping its buffers; closes any checkpoint.
  void reset() {
    DS41_CHECK(valid(), "sequence: reset() on a sequence no model made");
    pos_ = 0;
    prompt_len_ = 0;
    shared_.reset();
    undo_.reset();
    broken_ = false;
  }

 private:
  template <class, class, class>
  friend class Model;
  template <class>
  friend struct SequenceBytes;

  void check_usable(const char* what) const {
    DS41_CHECK(valid(), "sequence: ", what, "() on a sequence no model made (use model.make_sequence())");
    DS41_CHECK(!broken_, "sequence: ", what, "() on a sequence whose last step failed half-way; reset() it",
               undo_ ? " or rollback() to its checkpoint" : "");
  }
  void rewind_to(long n) {
    if (n == 0) return reset();
    SharedSlots<B> at = undo_->undo_from(n);
    shared_ = std::move(at);
    pos_ = n;
  }

  const void* owner_ = nullptr;  // the model that made it
  long pos_ = 0;
  long prompt_len_ = 0;          // the length of its prefill (its first step)
  bool broken_ = false;
  std::vector<typename Attn::State> layers_;
  std::vector<typename Attn::State> dspark_;  // each DSpark stage's window ring (a model with a draft head)
  SharedSlots<B> shared_;
  EngramHasher hasher_;
  std::unique_ptr<UndoRecord<B>> undo_;
  long checkpoint_pos_ = 0;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
