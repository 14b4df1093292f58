// ds41/io/uring_reader.hpp — several O_DIRECT reads in flight from one thread (io_uring).
//
//   UringReader  a ring of `depth` entries; read_all() submits positional reads (each split into
//                chunks of at most `chunk` bytes) keeping up to `depth` in flight, and returns
//                when every one has completed in full (short completions are resubmitted for the
//                rest; an error is a ds41::Error naming the file and the offset).
//
// Optional: compiled only where liburing is found (CMake defines DS41_HAVE_LIBURING for the
// targets that link it; kUringAvailable says which). The expert cache reads with its pool of
// reader threads (core/direct_file.hpp) either way: bench_streaming's BM_RawUring compares the two
// at the released expert size, and on this project's machines the ring did not read faster than
// as many threads (docs/STREAMING.md), so the cache does not use it.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "../core/error.hpp"

#if defined(DS41_HAVE_LIBURING) && __has_include(<liburing.h>)
#include <liburing.h>
#define DS41_URING 1
#endif

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

#ifdef DS41_URING
inline constexpr bool kUringAvailable = true;

class UringReader {
 public:
  struct Request {
    int fd = -1;
    uint64_t offset = 0, bytes = 0;
    uint8_t* buf = nullptr;  // O_DIRECT: offset, bytes and buf aligned to the logical block size
    uint64_t need = 0;       // bytes that must arrive (0: all); an aligned span may run past the end
  };

  explicit UringReader(unsigned depth = 8) : depth_(depth) {
    const int r = io_uring_queue_init(depth, &ring_, 0);
    DS41_CHECK(r == 0, "io_uring_queue_init(", depth, ") failed (", std::strerror(-r), ")");
  }
  ~UringReader() { io_uring_queue_exit(&ring_); }
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;

  /// Reads every request in full, at most `depth` chunks of at most `chunk` bytes in flight.
  void read_all(const std::vector<Request>& reqs, uint64_t chunk, const std::string& what) {
    struct Piece {
      int fd;
      uint64_t offset, bytes;
      uint8_t* buf;
      uint64_t need_end;  // the read must reach at least this offset (the file may end after it)
    };
    std::vector<Piece> todo;
    for (const Request& q : reqs) {
      const uint64_t need_end = q.offset + (q.need ? q.need : q.bytes);
      for (uint64_t at = 0; at < q.bytes; at += chunk) {
        const uint64_t n = std::min(chunk, q.bytes - at);
        todo.push_back({q.fd, q.offset + at, n, q.buf + at, std::min(q.offset + at + n, need_end)});
      }
    }
    std::vector<Piece> live(depth_);
    std::vector<unsigned> free_ids;
    for (unsigned i = 0; i < depth_; ++i) free_ids.push_back(depth_ - 1 - i);
    size_t next = 0;
    unsigned in_flight = 0;
    auto submit = [&](const Piece& p) {
      const unsigned id = free_ids.back();
      free_ids.pop_back();
      live[id] = p;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_read(sqe, p.fd, p.buf, static_cast<unsigned>(p.bytes), p.offset);
      io_uring_sqe_set_data64(sqe, id);
      ++in_flight;
    };
    while (next < todo.size() || in_flight > 0) {
      while (next < todo.size() && !free_ids.empty()) submit(todo[next++]);
      const int s = io_uring_submit_and_wait(&ring_, 1);
      DS41_CHECK(s >= 0 || s == -EINTR, what, ": io_uring submit failed (", std::strerror(-s), ")");
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        const unsigned id = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        --in_flight;
        Piece p = live[id];
        free_ids.push_back(id);
        DS41_CHECK(res >= 0, what, ": read of ", p.bytes, " bytes at ", p.offset, " failed (", std::strerror(-res), ")");
        if (res == 0) {  // the end of the file
          DS41_CHECK(p.offset >= p.need_end, what, ": short read at ", p.offset, " (the file ends early)");
          continue;
        }
        if (static_cast<uint64_t>(res) < p.bytes)
          submit({p.fd, p.offset + res, p.bytes - res, p.buf + res, p.need_end});
      }
    }
  }

 private:
  unsigned depth_;
  io_uring ring_{};
};
#else
inline constexpr bool kUringAvailable = false;
#endif

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
