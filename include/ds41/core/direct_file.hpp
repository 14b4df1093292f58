// ds41/core/direct_file.hpp — positional reads of large spans that bypass the page cache.
//
// In core/ (with the math) rather than io/ (the weight formats): it knows no format, only paths
// and byte ranges, and the expert cache (model/expert_cache.hpp) lays out its staging slots for
// its aligned spans, so model/ reads a format's files through it without including io/. (It is
// host code only; nothing DS41_HD includes it.) io/direct_reader.hpp is this header's old path.
//
//   DirectFile  one file opened twice: with O_DIRECT (when the file system accepts it) and
//               buffered. read() reads the block-aligned span covering [offset, offset + n) into
//               a block-aligned buffer and returns where the wanted bytes start inside it, so the
//               caller lays out its buffer with kDirectAlign slack on each side (span_bytes()).
//               Where O_DIRECT is refused (tmpfs refuses the open; some file systems refuse the
//               read with EINVAL) it falls back, for good, to buffered pread followed by
//               posix_fadvise(DONTNEED) on the range, so streamed bytes still do not pile up in
//               the page cache. Mode kBuffered is plain pread (the page cache is kept).
//
// Every failure is a ds41::Error naming the file and the caller's `what` (e.g. "expert 7 of
// layer 3"): a range past the end of the file, a read error, a read that returns fewer bytes.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include "error.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

/// O_DIRECT offsets, lengths and buffer addresses are multiples of this (the largest logical
/// block size in common use; 512-byte devices accept it too).
inline constexpr uint64_t kDirectAlign = 4096;

inline uint64_t align_down(uint64_t x, uint64_t a = kDirectAlign) { return x / a * a; }
inline uint64_t align_up(uint64_t x, uint64_t a = kDirectAlign) { return (x + a - 1) / a * a; }

/// Bytes an aligned read of [offset, offset + n) occupies in the destination buffer.
inline uint64_t span_bytes(uint64_t offset, uint64_t n) { return align_up(offset + n) - align_down(offset); }

class DirectFile {
 public:
  enum class Mode { kBuffered, kDirect };

  DirectFile() = default;
  DirectFile(const std::string& path, Mode mode) : path_(path), want_direct_(mode == Mode::kDirect) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DS41_CHECK(fd_ >= 0, path, ": cannot open (", std::strerror(errno), ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      close();
      fail(path, ": cannot stat (", std::strerror(err), ")");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (want_direct_) {
#ifdef O_DIRECT
      dfd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);  // -1 (EINVAL) on tmpfs: fall back
#endif
    }
  }
  DirectFile(DirectFile&& o) noexcept { *this = std::move(o); }
  DirectFile& operator=(DirectFile&& o) noexcept {
    if (this != &o) {
      close();
      path_ = std::move(o.path_);
      fd_ = o.fd_;
      dfd_ = o.dfd_;
      size_ = o.size_;
      want_direct_ = o.want_direct_;
      use_direct_ = o.use_direct_.load();
      o.fd_ = o.dfd_ = -1;
    }
    return *this;
  }
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  ~DirectFile() { close(); }

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  /// True while reads go through O_DIRECT (false after a fallback, or in kBuffered mode).
  bool direct() const { return dfd_ >= 0 && use_direct_.load(); }
  /// True when the page cache is bypassed one way or the other (O_DIRECT or DONTNEED).
  bool bypasses_cache() const { return want_direct_; }

  /// Reads [offset, offset + n) and returns a pointer to its first byte. `buf` must be
  /// kDirectAlign-aligned with room for span_bytes(offset, n); in buffered mode the bytes land
  /// at buf + offset % kDirectAlign all the same, so callers need one layout for both.
  uint8_t* read(uint8_t* buf, uint64_t offset, uint64_t n, const std::string& what) {
    DS41_CHECK(offset <= size_ && n <= size_ - offset, path_, ": ", what, ": bytes [", offset, ", ", offset + n,
               ") lie past the end of the file (", size_, " bytes when opened)");
    const uint64_t lead = offset % kDirectAlign;
    uint8_t* inner = buf + lead;
    if (direct()) {
      const uint64_t a = offset - lead, len = align_up(lead + n);
      const uint64_t need = lead + n;
      uint64_t got = 0;
      bool refused = false;
      while (got < need) {
        const ssize_t r = ::pread(dfd_, buf + got, len - got, static_cast<off_t>(a + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EINVAL && got == 0) {  // the file system accepted the open, not the read
          refused = true;
          break;
        }
        DS41_CHECK(r >= 0, path_, ": ", what, ": O_DIRECT read at ", a + got, " failed (", std::strerror(errno), ")");
        if (r == 0) break;
        got += static_cast<uint64_t>(r);
        if (got % kDirectAlign) break;  // a short read ends at the end of the file
      }
      if (!refused) {
        DS41_CHECK(got >= need, path_, ": ", what, ": short read: ", got >= lead ? got - lead : 0, " of ", n,
                   " bytes at offset ", offset, " (the file ends early: truncated after it was opened?)");
        return inner;
      }
      use_direct_ = false;  // for good; the descriptor stays open (other threads may be reading)
    }
    uint64_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, inner + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      DS41_CHECK(r >= 0, path_, ": ", what, ": read at ", offset + got, " failed (", std::strerror(errno), ")");
      DS41_CHECK(r > 0, path_, ": ", what, ": short read: ", got, " of ", n, " bytes at offset ", offset,
                 " (the file ends early: truncated after it was opened?)");
      got += static_cast<uint64_t>(r);
    }
#ifdef POSIX_FADV_DONTNEED
    if (want_direct_) ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
#endif
    return inner;
  }

 private:
  void close() {
    if (fd_ >= 0) ::close(fd_);
    if (dfd_ >= 0) ::close(dfd_);
    fd_ = dfd_ = -1;
  }
  std::string path_;
  int fd_ = -1, dfd_ = -1;
  uint64_t size_ = 0;
  bool want_direct_ = false;
  std::atomic<bool> use_direct_{true};
};

}  // namespace ds41
#include "fp_exact_end.hpp"
