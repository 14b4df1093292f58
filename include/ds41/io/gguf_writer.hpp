// ds41/io/gguf_writer.hpp — GGUF v3 writing (tests and tools): metadata and tensors collected in
// memory, then written as one file or as N shards in llama.cpp's gguf-split layout (every shard
// carries split.no / split.count / split.tensors.count; the first also holds all other metadata).
//
// Files are written under temporary names and renamed only when every shard is complete, so a
// failure leaves nothing partial behind.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>
#include "gguf_reader.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = kDefaultAlignment) : alignment_(alignment) {
    DS41_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf writer: alignment ", alignment,
               " is not a power of two");
    if (alignment != kDefaultAlignment) set("general.alignment", Value::u32(static_cast<uint32_t>(alignment)));
  }

  void set(const std::string& key, Value v) {
    for (auto& kv : kv_)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
    kv_.emplace_back(key, std::move(v));
  }
  /// Leaves `key` out of the file (a no-op when it is not set); returns whether it was set.
  bool erase(const std::string& key) {
    for (auto it = kv_.begin(); it != kv_.end(); ++it)
      if (it->first == key) {
        kv_.erase(it);
        return true;
      }
    return false;
  }
  /// A tensor of row-major `shape` whose bytes are already in `type`'s layout.
  void add_tensor(const std::string& name, const std::vector<long>& shape, TensorType type, std::vector<uint8_t> data) {
    Pending p;
    p.name = name;
    p.dims.assign(shape.rbegin(), shape.rend());
    p.type = type;
    const uint64_t want = tensor_bytes(type, p.dims, "gguf writer: tensor '" + name + "'");
    DS41_CHECK(data.size() == want, "gguf writer: tensor '", name, "' has ", data.size(), " bytes, type ",
               tensor_type_name(type), " needs ", want);
    for (const Pending& q : tensors_) DS41_CHECK(q.name != name, "gguf writer: tensor '", name, "' added twice");
    p.data = std::move(data);
    tensors_.push_back(std::move(p));
  }
  size_t tensor_count() const { return tensors_.size(); }

  /// One file at `path` (no split keys).
  void write_file(const std::string& path) const {
    std::vector<size_t> all(tensors_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const std::string tmp = path + ".tmp";
    try {
      write_one(tmp, all, -1, 1, true);
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
    DS41_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "gguf writer: cannot rename ", tmp, " to ", path);
  }

  /// `shards` files PREFIX-0000k-of-0000n.gguf, tensors kept in order and cut into runs of about
  /// equal bytes (each shard holds at least one tensor). Returns the paths, first shard first.
  std::vector<std::string> write_shards(const std::string& prefix, int shards) const {
    DS41_CHECK(shards >= 1 && static_cast<size_t>(shards) <= tensors_.size(), "gguf writer: cannot split ",
               tensors_.size(), " tensors into ", shards, " shards");
    uint64_t total = 0;
    for (const Pending& p : tensors_) total += p.data.size();
    std::vector<std::vector<size_t>> parts(shards);
    uint64_t acc = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      int s = total ? static_cast<int>(acc * shards / total) : 0;
      // leave at least one tensor for every later shard
      const int remaining_tensors = static_cast<int>(tensors_.size() - i);
      s = std::max(s, shards - remaining_tensors);
      for (int k = s - 1; k >= 0 && parts[k].empty(); --k) s = k;  // never leave a gap
      parts[s].push_back(i);
      acc += tensors_[i].data.size();
    }
    std::vector<std::string> paths, tmps;
    try {
      for (int s = 0; s < shards; ++s) {
        paths.push_back(shard_path(prefix, s, shards));
        tmps.push_back(paths.back() + ".tmp");
        write_one(tmps.back(), parts[s], s, shards, s == 0);
      }
    } catch (...) {
      for (const std::string& t : tmps) std::remove(t.c_str());
      throw;
    }
    for (int s = 0; s < shards; ++s)
      DS41_CHECK(std::rename(tmps[s].c_str(), paths[s].c_str()) == 0, "gguf writer: cannot rename ", tmps[s], " to ",
                 paths[s]);
    return paths;
  }

 private:
  struct Pending {
    std::string name;
    std::vector<uint64_t> dims;
    TensorType type;
    std::vector<uint8_t> data;
  };

  struct Out {
    std::FILE* f = nullptr;
    std::string path;
    uint64_t pos = 0;
    ~Out() {
      if (f) std::fclose(f);
    }
    void put(const void* p, size_t n) {
      DS41_CHECK(n == 0 || std::fwrite(p, 1, n, f) == n, "gguf writer: ", path, ": write failed");
      pos += n;
    }
    template <class T>
    void pod(T v) {
      put(&v, sizeof v);
    }
    void str(const std::string& s) {
      pod<uint64_t>(s.size());
      put(s.data(), s.size());
    }
    void pad(uint64_t a) {
      static const uint8_t zeros[256] = {};
      while (pos % a) put(zeros, std::min<uint64_t>(a - pos % a, sizeof zeros));
    }
  };

  static void put_value(Out& o, const Value& v) {
    switch (v.type) {
      case ValueType::kString: o.str(v.str); break;
      case ValueType::kArray:
        o.pod<uint32_t>(static_cast<uint32_t>(v.elem));
        o.pod<uint64_t>(v.arr.size());
        for (const Value& e : v.arr) {
          DS41_CHECK(e.type == v.elem, "gguf writer: array of ", value_type_name(v.elem), " holds a ",
                     value_type_name(e.type));
          put_value(o, e);
        }
        break;
      default: o.put(&v.bits, value_type_size(v.type)); break;  // little-endian hosts only
    }
  }

  void write_one(const std::string& path, const std::vector<size_t>& which, int split_no, int split_count,
                 bool all_meta) const {
    Out o;
    o.path = path;
    o.f = std::fopen(path.c_str(), "wb");
    DS41_CHECK(o.f, "gguf writer: cannot create ", path);
    std::vector<std::pair<std::string, Value>> kv;
    if (all_meta) kv = kv_;
    else if (alignment_ != kDefaultAlignment) kv.emplace_back("general.alignment", Value::u32(static_cast<uint32_t>(alignment_)));
    if (split_no >= 0) {
      kv.emplace_back("split.no", Value::scalar(ValueType::kU16, static_cast<uint64_t>(split_no)));
      kv.emplace_back("split.count", Value::scalar(ValueType::kU16, static_cast<uint64_t>(split_count)));
      kv.emplace_back("split.tensors.count", Value::i32(static_cast<int32_t>(tensors_.size())));
    }
    o.pod<uint32_t>(kMagic);
    o.pod<uint32_t>(kVersion);
    o.pod<uint64_t>(which.size());
    o.pod<uint64_t>(kv.size());
    for (const auto& [k, v] : kv) {
      o.str(k);
      o.pod<uint32_t>(static_cast<uint32_t>(v.type));
      put_value(o, v);
    }
    uint64_t off = 0;
    for (size_t i : which) {
      const Pending& p = tensors_[i];
      o.str(p.name);
      o.pod<uint32_t>(static_cast<uint32_t>(p.dims.size()));
      for (uint64_t d : p.dims) o.pod<uint64_t>(d);
      o.pod<uint32_t>(static_cast<uint32_t>(p.type));
      o.pod<uint64_t>(off);
      off += (p.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    o.pad(alignment_);
    for (size_t i : which) {
      o.put(tensors_[i].data.data(), tensors_[i].data.size());
      o.pad(alignment_);
    }
    DS41_CHECK(std::fflush(o.f) == 0, "gguf writer: ", path, ": flush failed");
  }

  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Pending> tensors_;
};

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
