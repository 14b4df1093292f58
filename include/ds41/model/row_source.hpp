// ds41/model/row_source.hpp — RowSource, where an engram table's rows lie on disk: the interface
// RowReaderTable (row_reader_table.hpp) reads through. The formats implement it in io/
// (io/gguf_sources.hpp: GgufRowSource; io/safetensors_sources.hpp: SafetensorsRowSource) and hand
// it out through WeightSource::row_source(), so model/ never includes io/.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "../core/numeric.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// Where an engram table's rows live: read_row(r) fills row r's hd e4m3 codes and hd/32 e8m0
/// scale bytes and returns the bytes it read. GGUF: one DS41_FP8_ROW row (codes then scales, one
/// pread); safetensors: engram.embed.weight's row and engram.embed.scale's row (two preads).
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual uint64_t read_row(long r, uint8_t* codes, uint8_t* scales) const = 0;
  /// Row r's hd values in f32, what the table holds (the lookup rounds them to bf16, as the
  /// reference's ParallelEngramEmbedding does); returns the bytes it read. The default: read_row's
  /// codes times their block's scale, exact (an e4m3 value times a power of two). A source whose
  /// rows are not codes and scales (GGUF Q8_0 and K-quant tables: ggml's values) overrides it.
  virtual uint64_t read_values(long r, int hd, float* v) const {
    std::vector<uint8_t> raw(static_cast<size_t>(hd) + hd / 32);
    const uint64_t n = read_row(r, raw.data(), raw.data() + hd);
    const float* decode = e4m3_decode_table();  // e4m3_decode's bits, one lookup a code
    for (int d0 = 0; d0 < hd; d0 += 32) {  // hd is whole blocks of 32 (ModelConfig::validate)
      const float s = e8m0_to_f32(raw[hd + d0 / 32]);
      for (int d = d0; d < d0 + 32; ++d) v[d] = decode[raw[d]] * s;
    }
    return n;
  }
  /// "FILE: tensor 'NAME'" of the table, for messages.
  virtual std::string where() const = 0;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
