// ds41/model/row_source.hpp — RowSource, where an engram table's rows lie on disk: the interface
// RowReaderTable (row_reader_table.hpp) reads through. The formats implement it in io/
// (io/gguf_sources.hpp: GgufRowSource; io/safetensors_sources.hpp: SafetensorsRowSource) and hand
// it out through WeightSource::row_source(), so model/ never includes io/.
#pragma once
#include <cstdint>
#include <string>

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// Where an engram table's rows live: read_row(r) fills row r's hd e4m3 codes and hd/32 e8m0
/// scale bytes and returns the bytes it read. GGUF: one DS41_FP8_ROW row (codes then scales, one
/// pread); safetensors: engram.embed.weight's row and engram.embed.scale's row (two preads).
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual uint64_t read_row(long r, uint8_t* codes, uint8_t* scales) const = 0;
  /// "FILE: tensor 'NAME'" of the table, for messages.
  virtual std::string where() const = 0;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
