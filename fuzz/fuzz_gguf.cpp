// libFuzzer target: the GGUF reader must turn any file into an index of tensors or a ds41::Error —
// never a crash, an out-of-bounds read or a leak. Every tensor it indexes is then read.
#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "ds41/io/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // one scratch file per fuzzing process, removed when it exits
  static const struct Scratch {
    std::string path = "/tmp/ds41_fuzz_gguf_" + std::to_string(getpid()) + ".gguf";
    ~Scratch() { std::remove(path.c_str()); }
  } scratch;
  const std::string& path = scratch.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    ds41::gguf::GgufFile file(path);
    std::vector<uint8_t> buf;
    for (const auto& t : file.tensors()) {
      if (t.bytes > (1u << 24)) continue;  // keep each input cheap; bounds were validated on open
      buf.resize(t.bytes);
      file.file().read_at(buf.data(), t.bytes, t.offset, "tensor data");
    }
  } catch (const ds41::Error&) {
  }
  return 0;
}
