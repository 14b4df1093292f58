// ds41/io/safetensors_reader.hpp — safetensors reading: one file's header (SafetensorsFile) and a
// checkpoint directory of shards listed by model.safetensors.index.json, or one model.safetensors
// (SafetensorsShards), with one tensor index. Tensor data is never read here: callers read what
// they need with pread (SafetensorsShards::read).
//
// File layout: 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [b, e]}, ...}, then the data;
// offsets are relative to the byte after the header. Every malformed input is a ds41::Error naming
// the file and, where there is one, the tensor (docs/SAFETENSORS.md lists them).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::safetensors {

/// Every dtype the safetensors format names (sub-byte F4/F6 are not: ds41 refuses them by name).
enum class Dtype { kBool, kU8, kI8, kF8_E4M3, kF8_E5M2, kF8_E8M0, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64 };

struct DtypeName {
  const char* name;
  Dtype dtype;
  int size;
};
inline constexpr DtypeName kDtypes[] = {
    {"BOOL", Dtype::kBool, 1},   {"U8", Dtype::kU8, 1},     {"I8", Dtype::kI8, 1},
    {"F8_E4M3", Dtype::kF8_E4M3, 1}, {"F8_E5M2", Dtype::kF8_E5M2, 1}, {"F8_E8M0", Dtype::kF8_E8M0, 1},
    {"I16", Dtype::kI16, 2},     {"U16", Dtype::kU16, 2},   {"F16", Dtype::kF16, 2},
    {"BF16", Dtype::kBF16, 2},   {"I32", Dtype::kI32, 4},   {"U32", Dtype::kU32, 4},
    {"F32", Dtype::kF32, 4},     {"I64", Dtype::kI64, 8},   {"U64", Dtype::kU64, 8},
    {"F64", Dtype::kF64, 8},
};
inline const char* dtype_name(Dtype d) {
  for (const DtypeName& n : kDtypes)
    if (n.dtype == d) return n.name;
  return "?";
}
inline int dtype_size(Dtype d) {
  for (const DtypeName& n : kDtypes)
    if (n.dtype == d) return n.size;
  return 0;
}
inline bool parse_dtype(const std::string& s, Dtype* out) {
  for (const DtypeName& n : kDtypes)
    if (s == n.name) {
      *out = n.dtype;
      return true;
    }
  return false;
}

/// The largest header accepted (the format's own reader refuses more than 100 MB too).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<long> shape;  // row-major, as the state_dict has it
  uint64_t offset = 0;      // absolute byte offset in its file
  uint64_t bytes = 0;
  int shard = 0;

  long numel() const {
    long n = 1;
    for (long d : shape) n *= d;
    return n;
  }
};

/// An open file for positional reads; errors name the file.
class File {
 public:
  File() = default;
  explicit File(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DS41_CHECK(fd_ >= 0, "safetensors ", path, ": cannot open (", std::strerror(errno), ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      const bool dir = S_ISDIR(st.st_mode);
      ::close(fd_);
      fd_ = -1;
      fail("safetensors ", path, dir ? ": is a directory, not a file" : ": cannot stat or not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Exactly n bytes at `offset`; throws naming the file and `what` when they are not there.
  void read_at(void* dst, uint64_t n, uint64_t offset, const std::string& what) const {
    DS41_CHECK(offset <= size_ && n <= size_ - offset, "safetensors ", path_, ": ", what, " [", offset, ", ",
               offset + n, ") lies past the end of the file (", size_, " bytes)");
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      DS41_CHECK(r > 0, "safetensors ", path_, ": read of ", what, " at ", offset, " failed (",
                 r < 0 ? std::strerror(errno) : "unexpected end of file", ")");
      p += r;
      n -= static_cast<uint64_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// Parses a safetensors header (the JSON text) for a file of `file_size` bytes whose header is
/// `header.size()` bytes: the tensor infos (absolute offsets), sorted by offset, and __metadata__.
/// `path` only names the file in errors. Shared by SafetensorsFile and the fuzz target.
inline std::vector<TensorInfo> parse_header(const std::string& path, const std::string& header, uint64_t file_size,
                                            nlohmann::json* metadata = nullptr) {
  using json = nlohmann::json;
  const std::string where = "safetensors " + path;
  // duplicate top-level names: nlohmann keeps the last silently, so count keys as they are parsed
  std::set<std::string> seen;
  std::string dup;
  json h;
  try {
    h = json::parse(header, [&](int depth, json::parse_event_t ev, json& v) {
      if (ev == json::parse_event_t::key && depth == 1 && v.is_string()) {
        const std::string k = v.get<std::string>();
        if (!seen.insert(k).second && dup.empty()) dup = k;
      }
      return true;
    });
  } catch (const json::exception& e) {
    fail(where, ": header is not JSON (", e.what(), ")");
  }
  DS41_CHECK(dup.empty(), where, ": tensor '", dup, "' appears twice in the header");
  DS41_CHECK(h.is_object(), where, ": header is not a JSON object");
  const uint64_t data_start = 8 + header.size();
  DS41_CHECK(data_start <= file_size, where, ": header [8, ", data_start, ") lies past the end of the file (", file_size,
             " bytes)");
  const uint64_t data_size = file_size - data_start;
  std::vector<TensorInfo> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      DS41_CHECK(v.is_object(), where, ": '__metadata__' is not an object");
      if (metadata) *metadata = v;
      continue;
    }
    const std::string t = where + ": tensor '" + name + "'";
    DS41_CHECK(v.is_object(), t, ": entry is not an object");
    auto d = v.find("dtype");
    DS41_CHECK(d != v.end() && d->is_string(), t, ": 'dtype' is missing or not a string");
    TensorInfo ti;
    ti.name = name;
    DS41_CHECK(parse_dtype(d->get<std::string>(), &ti.dtype), t, ": unknown dtype \"", d->get<std::string>(), "\"");
    auto s = v.find("shape");
    DS41_CHECK(s != v.end() && s->is_array() && s->size() <= 8, t, ": 'shape' is missing or not a list of at most 8 dims");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& x : *s) {
      DS41_CHECK(x.is_number_integer() && !x.is_boolean() && (x.is_number_unsigned() || x.get<int64_t>() >= 0), t,
                 ": 'shape' is not a list of non-negative integers (", s->dump(), ")");
      const uint64_t dim = x.get<uint64_t>();
      DS41_CHECK(dim < (1ull << 40), t, ": dimension ", dim, " is too large");
      if (dim != 0 && numel > (1ull << 62) / dim) overflow = true;
      numel *= dim;
      ti.shape.push_back(static_cast<long>(dim));
    }
    DS41_CHECK(!overflow, t, ": shape ", s->dump(), " has too many elements");
    auto o = v.find("data_offsets");
    DS41_CHECK(o != v.end() && o->is_array() && o->size() == 2 && (*o)[0].is_number_unsigned() &&
                   (*o)[1].is_number_unsigned(),
               t, ": 'data_offsets' is not [begin, end] with non-negative integers");
    const uint64_t b = (*o)[0].get<uint64_t>(), e = (*o)[1].get<uint64_t>();
    DS41_CHECK(b <= e, t, ": data_offsets [", b, ", ", e, "] has begin > end");
    const uint64_t want = numel * static_cast<uint64_t>(dtype_size(ti.dtype));
    DS41_CHECK(e - b == want, t, ": data_offsets [", b, ", ", e, "] hold ", e - b, " bytes, but ", dtype_name(ti.dtype),
               " ", s->dump(), " needs ", want);
    DS41_CHECK(e <= data_size, t, ": data_offsets [", b, ", ", e, "] lie past the end of the file (the data has ",
               data_size, " bytes)");
    ti.offset = data_start + b;
    ti.bytes = e - b;
    out.push_back(std::move(ti));
  }
  std::sort(out.begin(), out.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
  });
  for (size_t i = 1; i < out.size(); ++i)
    DS41_CHECK(out[i].offset >= out[i - 1].offset + out[i - 1].bytes || out[i - 1].bytes == 0, where, ": tensor '",
               out[i].name, "' overlaps tensor '", out[i - 1].name, "' (data [", out[i].offset - data_start, ", ...) and [",
               out[i - 1].offset - data_start, ", ", out[i - 1].offset - data_start + out[i - 1].bytes, "))");
  return out;
}

/// One .safetensors file: its tensor infos and an open descriptor for positional reads.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : file_(path) {
    const std::string where = "safetensors " + path;
    DS41_CHECK(file_.size() >= 8, where, ": truncated header: the file has ", file_.size(),
               " bytes, the header length alone needs 8");
    uint8_t len[8];
    file_.read_at(len, 8, 0, "header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    DS41_CHECK(n > 0, where, ": header length is 0");
    DS41_CHECK(n <= kMaxHeaderBytes, where, ": header length ", n, " is larger than the ", kMaxHeaderBytes,
               " bytes accepted");
    DS41_CHECK(n <= file_.size() - 8, where, ": truncated header: header length ", n, " but the file has only ",
               file_.size() - 8, " bytes after the length");
    std::string header(n, '\0');
    file_.read_at(header.data(), n, 8, "header");
    tensors_ = parse_header(path, header, file_.size(), &metadata_);
  }
  const std::string& path() const { return file_.path(); }
  const File& file() const { return file_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  File file_;
  std::vector<TensorInfo> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

/// A checkpoint directory: DIR/model.safetensors.index.json and the shards its weight_map names,
/// or a single DIR/model.safetensors. One tensor index over all of them.
///
/// Checks: the index is a JSON object with an object 'weight_map' of name → file name (a plain
/// name inside DIR); every shard it names exists and parses; every tensor it names is in that
/// shard; every tensor of a shard is in the weight_map under that shard; no tensor is in two
/// shards. 'metadata.total_size' is informational and not compared (docs/SAFETENSORS.md).
class SafetensorsShards {
 public:
  using Progress = std::function<void(const std::string&)>;
  static constexpr const char* kIndexName = "model.safetensors.index.json";
  static constexpr const char* kSingleName = "model.safetensors";

  explicit SafetensorsShards(const std::string& dir, const Progress& progress = {}) : dir_(dir) {
    struct stat st {};
    DS41_CHECK(::stat(dir.c_str(), &st) == 0, "safetensors ", dir, ": no such checkpoint directory");
    DS41_CHECK(S_ISDIR(st.st_mode), "safetensors ", dir, ": not a directory (a checkpoint is a directory)");
    const std::string index = file_path(kIndexName);
    if (::access(index.c_str(), F_OK) != 0) {
      const std::string single = file_path(kSingleName);
      DS41_CHECK(::access(single.c_str(), F_OK) == 0, "safetensors ", dir, ": neither ", kIndexName, " nor ",
                 kSingleName, " is in the directory");
      if (progress) progress("indexing " + single);
      open_shard(kSingleName);
      for (const TensorInfo& t : files_[0]->tensors()) add(t, 0);
      return;
    }
    index_path_ = index;
    nlohmann::json j = read_json(index);
    const std::string where = "safetensors " + index;
    DS41_CHECK(j.is_object(), where, ": not a JSON object");
    auto wm = j.find("weight_map");
    DS41_CHECK(wm != j.end() && wm->is_object(), where, ": 'weight_map' is missing or not an object");
    if (auto m = j.find("metadata"); m != j.end()) DS41_CHECK(m->is_object(), where, ": 'metadata' is not an object");
    std::map<std::string, std::string> want;  // tensor → shard file, from the index
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      DS41_CHECK(it.value().is_string(), where, ": weight_map entry of tensor '", it.key(), "' is not a file name");
      const std::string f = it.value().get<std::string>();
      DS41_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", where,
                 ": weight_map entry of tensor '", it.key(), "' = \"", f, "\" is not a file name in the directory");
      want[it.key()] = f;
    }
    std::set<std::string> shard_names;
    for (const auto& [name, f] : want) shard_names.insert(f);
    for (const std::string& f : shard_names) {
      const std::string p = file_path(f);
      if (::access(p.c_str(), F_OK) != 0) {
        std::string example;
        for (const auto& [name, g] : want)
          if (g == f) {
            example = name;
            break;
          }
        fail(where, ": shard missing: ", p, " (named for tensor '", example, "')");
      }
      if (progress) progress("indexing " + p);
      open_shard(f);
      const int s = static_cast<int>(files_.size()) - 1;
      for (const TensorInfo& t : files_[s]->tensors()) {
        auto w = want.find(t.name);
        DS41_CHECK(w != want.end(), "safetensors ", p, ": tensor '", t.name, "' is not in the weight_map of ", index);
        DS41_CHECK(w->second == f, "safetensors ", p, ": tensor '", t.name, "' is in this shard, but the weight_map of ",
                   index, " puts it in ", file_path(w->second));
        add(t, s);
      }
    }
    for (const auto& [name, f] : want)
      DS41_CHECK(index_.count(name), "safetensors ", file_path(f), ": missing tensor '", name, "' (the weight_map of ",
                 index, " puts it in this shard)");
  }

  const std::string& dir() const { return dir_; }
  /// The index file, or "" for a single model.safetensors.
  const std::string& index_path() const { return index_path_; }
  int shard_count() const { return static_cast<int>(files_.size()); }
  const SafetensorsFile& shard(int i) const { return *files_.at(i); }
  const std::map<std::string, TensorInfo>& tensors() const { return index_; }
  const TensorInfo* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &it->second;
  }
  /// Bytes [offset, offset+n) of shard `s` into dst.
  void read(int s, void* dst, uint64_t n, uint64_t offset, const std::string& what) const {
    files_.at(s)->file().read_at(dst, n, offset, what);
  }
  std::string file_path(const std::string& name) const {
    return dir_.empty() || dir_.back() == '/' ? dir_ + name : dir_ + "/" + name;
  }

  /// A JSON file read whole (index, config.json); errors name it.
  static nlohmann::json read_json(const std::string& path) {
    File f(path);
    DS41_CHECK(f.size() <= kMaxHeaderBytes, "safetensors ", path, ": ", f.size(), " bytes is too large for a JSON file");
    std::string text(f.size(), '\0');
    if (!text.empty()) f.read_at(text.data(), text.size(), 0, "JSON text");
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("safetensors ", path, ": not JSON (", e.what(), ")");
    }
  }

 private:
  void open_shard(const std::string& name) { files_.push_back(std::make_unique<SafetensorsFile>(file_path(name))); }
  void add(TensorInfo t, int s) {
    t.shard = s;
    DS41_CHECK(!index_.count(t.name), "safetensors ", files_[s]->path(), ": tensor '", t.name,
               "' also appears in shard ", files_[index_.at(t.name).shard]->path());
    index_.emplace(t.name, std::move(t));
  }

  std::string dir_, index_path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorInfo> index_;
};

}  // namespace ds41::safetensors
#include "../core/fp_exact_end.hpp"
