// ds41/io/gguf_reader.hpp — GGUF v3 reading: one file's header, metadata and tensor infos
// (GgufFile), and a model split across shards NAME-0000k-of-0000n.gguf with one tensor index
// (GgufShards), and typed reads of metadata that name the key in errors (MetaReader). Tensor data
// is never read here: callers read what they need with pread.
//
// Every error names the file and what is wrong with it.
#pragma once
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "gguf_types.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first (ggml ne), the reverse of the row-major shape
  TensorType type = TensorType::kF32;
  uint64_t offset = 0;  // absolute byte offset in its file
  uint64_t bytes = 0;
  int shard = 0;

  /// Row-major shape, as the reference's state_dict has it.
  std::vector<long> shape() const { return {dims.rbegin(), dims.rend()}; }
};

/// One GGUF file: parsed header, metadata, tensor infos; an open descriptor for positional reads.
class GgufFile {
 public:
  explicit GgufFile(const std::string& path) : file_(path) { parse(); }

  const std::string& path() const { return file_.path(); }
  const PosixFile& file() const { return file_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<std::string>& keys() const { return key_order_; }
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const Value* find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
  }

 private:
  /// Sequential reader over the file with bounds checks (the header is small; reads are buffered).
  struct Cursor {
    const PosixFile& f;
    uint64_t pos = 0;
    std::vector<uint8_t> buf;
    uint64_t buf_start = 0;

    void need(uint64_t n, const char* what) {
      DS41_CHECK(pos <= f.size() && n <= f.size() - pos, "gguf ", f.path(), ": truncated header: ", what, " at byte ",
                 pos, " needs ", n, " bytes, the file has ", f.size());
    }
    void read(void* dst, uint64_t n, const char* what) {
      need(n, what);
      auto* out = static_cast<uint8_t*>(dst);
      while (n > 0) {
        if (pos < buf_start || pos >= buf_start + buf.size()) {
          uint64_t chunk = std::min<uint64_t>(1 << 20, f.size() - pos);
          buf.resize(chunk);
          f.read_at(buf.data(), chunk, pos, what);
          buf_start = pos;
        }
        uint64_t take = std::min<uint64_t>(n, buf_start + buf.size() - pos);
        std::memcpy(out, buf.data() + (pos - buf_start), take);
        out += take;
        pos += take;
        n -= take;
      }
    }
    template <class T>
    T get(const char* what) {
      T v;
      read(&v, sizeof(T), what);
      return v;
    }
    std::string str(const char* what) {
      const uint64_t n = get<uint64_t>(what);
      DS41_CHECK(n <= f.size() - pos, "gguf ", f.path(), ": metadata length past the end: ", what, " at byte ",
                 pos - 8, " claims ", n, " bytes, only ", f.size() - pos, " remain");
      std::string s(n, '\0');
      read(s.data(), n, what);
      return s;
    }
  };

  Value read_value(Cursor& c, ValueType t, const std::string& key, int depth) {
    Value v;
    v.type = t;
    if (t == ValueType::kString) {
      v.str = c.str(("string value of '" + key + "'").c_str());
    } else if (t == ValueType::kArray) {
      DS41_CHECK(depth < 4, "gguf ", path(), ": metadata '", key, "' nests arrays deeper than 4");
      const uint32_t et = c.get<uint32_t>("array element type");
      DS41_CHECK(valid_value_type(et), "gguf ", path(), ": metadata '", key, "' has unknown array element type ", et);
      v.elem = static_cast<ValueType>(et);
      const uint64_t n = c.get<uint64_t>("array length");
      const uint64_t min_each = value_type_size(v.elem) ? value_type_size(v.elem) : 8;  // strings/arrays: >= 8
      DS41_CHECK(n <= (file_.size() - c.pos) / min_each, "gguf ", path(), ": metadata length past the end: array '",
                 key, "' claims ", n, " elements of ", value_type_name(v.elem), ", only ", file_.size() - c.pos,
                 " bytes remain");
      v.arr.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.arr.push_back(read_value(c, v.elem, key, depth + 1));
    } else {
      const size_t sz = value_type_size(t);
      uint64_t b = 0;
      c.read(&b, sz, ("value of '" + key + "'").c_str());
      v.bits = b;
      if (t == ValueType::kBool)
        DS41_CHECK(b <= 1, "gguf ", path(), ": metadata '", key, "' is a bool with byte value ", b);
    }
    return v;
  }

  void parse() {
    Cursor c{file_};
    const uint32_t magic = c.get<uint32_t>("magic");
    DS41_CHECK(magic == kMagic, "gguf ", path(), ": not a GGUF file (magic 0x", std::hex, magic, ")");
    version_ = c.get<uint32_t>("version");
    // gguf-py writes big-endian files (for s390x) with the same magic bytes and every number swapped:
    // version 3 reads as 0x03000000 here. Say so rather than report that number as a version.
    const uint32_t swapped = (version_ >> 24) | ((version_ >> 8) & 0xff00u) | ((version_ << 8) & 0xff0000u) |
                             (version_ << 24);
    DS41_CHECK(!(swapped >= 1 && swapped <= 3), "gguf ", path(), ": a big-endian GGUF (version ", swapped,
               " with its bytes swapped); ds41 reads little-endian GGUF files, as llama.cpp writes them");
    DS41_CHECK(version_ == 2 || version_ == 3, "gguf ", path(), ": unsupported GGUF version ", version_,
               " (2 and 3 are read)");
    const uint64_t n_tensors = c.get<uint64_t>("tensor count");
    const uint64_t n_kv = c.get<uint64_t>("metadata count");
    // each key/value takes at least 12 bytes, each tensor info at least 24: refuse absurd counts early
    DS41_CHECK(n_kv <= file_.size() / 12 && n_tensors <= file_.size() / 24, "gguf ", path(),
               ": truncated header: ", n_kv, " metadata entries and ", n_tensors, " tensors cannot fit in ",
               file_.size(), " bytes");
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = c.str("metadata key");
      const uint32_t t = c.get<uint32_t>("metadata value type");
      DS41_CHECK(valid_value_type(t), "gguf ", path(), ": metadata '", key, "' has unknown value type ", t);
      Value v = read_value(c, static_cast<ValueType>(t), key, 0);
      DS41_CHECK(!kv_.count(key), "gguf ", path(), ": metadata key '", key, "' appears twice");
      key_order_.push_back(key);
      kv_.emplace(std::move(key), std::move(v));
    }
    if (const Value* a = find("general.alignment")) {
      DS41_CHECK(a->type == ValueType::kU32, "gguf ", path(), ": 'general.alignment' has type ",
                 value_type_name(a->type), ", expected u32");
      alignment_ = a->bits;
      DS41_CHECK(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0, "gguf ", path(),
                 ": 'general.alignment' = ", alignment_, " is not a power of two");
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo ti;
      ti.name = c.str("tensor name");
      const uint32_t nd = c.get<uint32_t>("tensor dimension count");
      DS41_CHECK(nd >= 1 && nd <= 4, "gguf ", path(), ": tensor '", ti.name, "' has ", nd, " dimensions (1..4 allowed)");
      for (uint32_t d = 0; d < nd; ++d) ti.dims.push_back(c.get<uint64_t>("tensor dimension"));
      for (uint64_t d : ti.dims)
        DS41_CHECK(d > 0 && d < (1ull << 40), "gguf ", path(), ": tensor '", ti.name, "' has dimension ", d);
      const uint32_t t = c.get<uint32_t>("tensor type");
      DS41_CHECK(known_tensor_type(t), "gguf ", path(), ": tensor '", ti.name, "' has unknown or unsupported type ", t);
      ti.type = static_cast<TensorType>(t);
      ti.offset = c.get<uint64_t>("tensor offset");
      DS41_CHECK(ti.offset % alignment_ == 0, "gguf ", path(), ": tensor '", ti.name, "' offset ", ti.offset,
                 " is not a multiple of the alignment ", alignment_);
      ti.bytes = tensor_bytes(ti.type, ti.dims, "gguf " + path() + ": tensor '" + ti.name + "'");
      tensors_.push_back(std::move(ti));
    }
    data_offset_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;
    for (TensorInfo& ti : tensors_) {
      DS41_CHECK(ti.offset <= file_.size() && data_offset_ <= file_.size() - ti.offset &&
                     ti.bytes <= file_.size() - data_offset_ - ti.offset,
                 "gguf ", path(), ": tensor '", ti.name, "' offset past the file: data [", data_offset_ + ti.offset,
                 ", ", data_offset_ + ti.offset + ti.bytes, ") but the file has ", file_.size(), " bytes");
      ti.offset += data_offset_;
    }
  }

  PosixFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::map<std::string, Value> kv_;
  std::vector<std::string> key_order_;
  std::vector<TensorInfo> tensors_;
};

/// "PREFIX-00002-of-00003.gguf" for shard index 1 of 3 (llama.cpp's gguf-split naming).
inline std::string shard_path(const std::string& prefix, int index, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", index + 1, count);
  return prefix + buf;
}

/// A model in one or more GGUF files: the first shard's metadata and one tensor index over all.
class GgufShards {
 public:
  using Progress = std::function<void(const std::string&)>;

  explicit GgufShards(const std::string& first, const Progress& progress = {}) {
    if (progress) progress("indexing " + first);
    files_.push_back(std::make_unique<GgufFile>(first));
    int count = 1;
    if (const Value* v = files_[0]->find("split.count")) {
      DS41_CHECK(v->is_int() && v->as_i64() >= 1 && v->as_i64() <= 99999, "gguf ", first,
                 ": 'split.count' is not a shard count");
      count = static_cast<int>(v->as_i64());
    }
    if (count > 1) {
      const int no = split_no(*files_[0]);
      DS41_CHECK(no == 0, "gguf ", first, ": this is shard ", no + 1, " of ", count, "; open the first shard");
      const std::string tail = shard_path("", 0, count);
      DS41_CHECK(first.size() > tail.size() && first.compare(first.size() - tail.size(), tail.size(), tail) == 0,
                 "gguf ", first, ": 'split.count' = ", count, " but the name does not end in '", tail, "'");
      const std::string prefix = first.substr(0, first.size() - tail.size());
      for (int k = 1; k < count; ++k) {
        const std::string p = shard_path(prefix, k, count);
        if (::access(p.c_str(), F_OK) != 0) fail("gguf ", first, ": shard missing: ", p, " (shard ", k + 1, " of ", count, ")");
        if (progress) progress("indexing " + p);
        files_.push_back(std::make_unique<GgufFile>(p));
        DS41_CHECK(split_no(*files_.back()) == k, "gguf ", p, ": 'split.no' is ", split_no(*files_.back()),
                   ", expected ", k);
      }
    }
    for (size_t s = 0; s < files_.size(); ++s)
      for (TensorInfo ti : files_[s]->tensors()) {
        ti.shard = static_cast<int>(s);
        DS41_CHECK(!index_.count(ti.name), "gguf ", files_[s]->path(), ": tensor '", ti.name,
                   "' also appears in an earlier shard");
        index_.emplace(ti.name, std::move(ti));
      }
    if (const Value* v = files_[0]->find("split.tensors.count"))
      DS41_CHECK(v->is_int() && static_cast<size_t>(v->as_i64()) == index_.size(), "gguf ", first,
                 ": 'split.tensors.count' = ", v->as_i64(), " but the shards hold ", index_.size(), " tensors");
  }

  const GgufFile& shard(int i) const { return *files_.at(i); }
  int shard_count() const { return static_cast<int>(files_.size()); }
  /// Metadata lives in the first shard.
  const GgufFile& meta() const { return *files_[0]; }
  const std::string& path() const { return files_[0]->path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return index_; }
  const TensorInfo* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &it->second;
  }
  /// Bytes [offset, offset+n) of shard `s` into dst.
  void read(int s, void* dst, uint64_t n, uint64_t offset, const char* what) const {
    files_.at(s)->file().read_at(dst, n, offset, what);
  }
  std::vector<uint8_t> read_tensor(const TensorInfo& t) const {
    std::vector<uint8_t> out(t.bytes);
    read(t.shard, out.data(), t.bytes, t.offset, "tensor data");
    return out;
  }

 private:
  static int split_no(const GgufFile& f) {
    const Value* v = f.find("split.no");
    DS41_CHECK(v && v->is_int(), "gguf ", f.path(), ": missing key 'split.no' in a split model");
    return static_cast<int>(v->as_i64());
  }
  std::vector<std::unique_ptr<GgufFile>> files_;
  std::map<std::string, TensorInfo> index_;
};

/// Typed reads of the first shard's metadata; errors name the file and the key.
class MetaReader {
 public:
  explicit MetaReader(const GgufFile& f) : f_(f) {}
  const Value& req(const std::string& k) const {
    const Value* v = f_.find(k);
    DS41_CHECK(v, "gguf ", f_.path(), ": missing key '", k, "'");
    return *v;
  }
  int64_t integer(const std::string& k) const { return int_of(req(k), k); }
  double real(const std::string& k) const {
    const Value& v = req(k);
    DS41_CHECK(v.type == ValueType::kF32 || v.type == ValueType::kF64, "gguf ", f_.path(), ": key '", k,
               "' has type ", value_type_name(v.type), ", expected f32 or f64");
    return v.as_f64();
  }
  bool boolean(const std::string& k) const {
    const Value& v = req(k);
    DS41_CHECK(v.type == ValueType::kBool, "gguf ", f_.path(), ": key '", k, "' has type ", value_type_name(v.type),
               ", expected bool");
    return v.bits != 0;
  }
  std::string str(const std::string& k) const {
    const Value& v = req(k);
    DS41_CHECK(v.type == ValueType::kString, "gguf ", f_.path(), ": key '", k, "' has type ",
               value_type_name(v.type), ", expected string");
    return v.str;
  }
  /// Integer array as 64-bit integers (u64 elements above 2^63 are refused, never rounded).
  std::vector<int64_t> ints(const std::string& k) const {
    const Value& v = req(k);
    DS41_CHECK(v.type == ValueType::kArray, "gguf ", f_.path(), ": key '", k, "' has type ", value_type_name(v.type),
               ", expected an array of integers");
    std::vector<int64_t> out;
    out.reserve(v.arr.size());
    for (size_t i = 0; i < v.arr.size(); ++i) out.push_back(int_of(v.arr[i], k + "[" + std::to_string(i) + "]"));
    return out;
  }
  double real_or_first(const std::string& k) const {  // scalar, or an array holding one value per layer
    const Value& v = req(k);
    if (v.type != ValueType::kArray) return real(k);
    DS41_CHECK(!v.arr.empty() && (v.elem == ValueType::kF32 || v.elem == ValueType::kF64), "gguf ", f_.path(),
               ": key '", k, "' is not a float or a non-empty float array");
    for (const Value& e : v.arr)
      DS41_CHECK(e.as_f64() == v.arr[0].as_f64(), "gguf ", f_.path(), ": key '", k,
                 "' differs between layers; this library takes one value");
    return v.arr[0].as_f64();
  }

 private:
  int64_t int_of(const Value& v, const std::string& k) const {
    DS41_CHECK(v.is_int(), "gguf ", f_.path(), ": key '", k, "' has type ", value_type_name(v.type),
               ", expected an integer");
    DS41_CHECK(v.type != ValueType::kU64 || v.bits <= static_cast<uint64_t>(INT64_MAX), "gguf ", f_.path(), ": key '",
               k, "' = ", v.bits, " does not fit a signed 64-bit integer");
    return v.as_i64();
  }
  const GgufFile& f_;
};

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
