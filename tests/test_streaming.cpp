// Streamed experts' read path: O_DIRECT (or its buffered + DONTNEED fallback) gives the same
// resident bits as buffered pread, over GGUF shards and a safetensors checkpoint, with several
// reads in flight and a ring sized in bytes; a file that ends early and a budget below one
// layer's step are ds41::Errors naming what went wrong. The host panel packing (its word-at-a-time
// path and its AVX2 transposes) writes the same bytes as the element-at-a-time packer it replaced.
#include <doctest/doctest.h>
#include <sys/types.h>
#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include "ds41/backend/host/panels.hpp"
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "temp_dir.hpp"

namespace test_streaming {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
namespace fs = std::filesystem;

namespace {

/// A fresh directory on disk (/var/tmp when it exists: /tmp may be tmpfs, which refuses
/// O_DIRECT; the tests pass either way), removed with everything in it (tests/temp_dir.hpp).
struct TempDir : testing::TempDir {
  explicit TempDir(fs::path root = {})
      : testing::TempDir("ds41-streaming", !root.empty()                ? root
                                           : fs::is_directory("/var/tmp") ? fs::path("/var/tmp")
                                                                          : fs::temp_directory_path()) {}
};
using testing::error_of;

const golden::Golden& tiny() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  return g;
}

using HB = HostBackend;

template <class Buf>
bool same_buffer(const Buf& a, const Buf& b) {
  return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0);
}

bool same_matrix(const Matrix<HB>& a, const Matrix<HB>& b) {
  return same_buffer(a.payload, b.payload) && same_buffer(a.scales, b.scales) && a.v.rows == b.v.rows &&
         a.v.cols == b.v.cols && a.v.format == b.v.format;
}

/// Every expert of every layer through a buffered cache and a direct one (3 readers, a ring sized
/// in bytes, the next two experts prefetched before each get()): the same bits.
long compare_direct_with_buffered(ExpertCache<HB>& buffered, ExpertCache<HB>& direct) {
  const ExpertSliceMap& m = buffered.slices();
  long compared = 0;
  for (int l = 0; l < m.layers(); ++l) {
    for (int e = 0; e < m.experts(); ++e) {
      for (int d = 1; d <= 2; ++d) {
        const int i = l * m.experts() + e + d;
        if (i < m.layers() * m.experts()) direct.prefetch(i / m.experts(), {i % m.experts()});
      }
      const ExpertWeights<HB>& a = buffered.get(l, e);
      const ExpertWeights<HB>& b = direct.get(l, e);
      CHECK_MESSAGE(same_matrix(a.w1, b.w1), "layer ", l, " expert ", e, " w1");
      CHECK_MESSAGE(same_matrix(a.w2, b.w2), "layer ", l, " expert ", e, " w2");
      CHECK_MESSAGE(same_matrix(a.w3, b.w3), "layer ", l, " expert ", e, " w3");
      ++compared;
    }
  }
  return compared;
}

StreamOptions direct_options(uint64_t per_expert, bool convert_on_readers = false) {
  StreamOptions o;
  o.convert_on_readers = convert_on_readers;
  o.capacity_experts = 2;
  o.direct_io = true;
  o.readers = 3;
  o.staging_bytes = 4 * (per_expert + 4 * kDirectAlign);  // 4 slots when the parts need alignment slack
  return o;
}

/// host_panels::pack before it moved whole words (kept here as the reference): every element
/// placed on its own into a zeroed payload.
void pack_elementwise(const MatrixView& src, std::vector<uint8_t>& payload, std::vector<float>& scales) {
  payload.assign(host_panels::payload_bytes(src.format, src.rows, src.cols), 0);
  scales.assign(host_panels::scale_buffer_count(src.format, src.rows, src.cols), 0.0f);
  const long pb = panel_bytes(src.format, src.cols), rb = row_major_row_bytes(src.format, src.cols);
  const auto* in = static_cast<const uint8_t*>(src.data);
  for (int r = 0; r < src.rows; ++r) {
    uint8_t* panel = payload.data() + (r / kPanelRows) * pb;
    const uint8_t* row = in + r * rb;
    const int i = r % kPanelRows;
    switch (src.format) {
      case WeightFormat::kF32:
      case WeightFormat::kBF16:
        for (long b = 0; b < rb; b += 4) std::memcpy(panel + b * kPanelRows + 4 * i, row + b, rb - b < 4 ? rb - b : 4);
        break;
      case WeightFormat::kFp8Block32:
        for (int k = 0; k < src.cols; ++k) panel[(k / 4) * 32 + panel_code_byte(i, k % 4)] = row[k];
        break;
      case WeightFormat::kFp4Block32:
        for (int k = 0; k < src.cols; ++k) {
          const uint8_t code = (k & 1) ? row[k / 2] >> 4 : row[k / 2] & 0xF;
          panel[(k / 8) * 32 + fp4_panel_code_byte(i, k % 8)] |= static_cast<uint8_t>(k % 8 >= 4 ? code << 4 : code);
        }
        break;
      case WeightFormat::kGgmlBlocks: FAIL("GGUF blocks have their own panels (core/ggml_panels.hpp)"); break;
    }
  }
  const long kblocks = (src.cols + 31) / 32;
  if (src.format == WeightFormat::kFp8Block32) {
    std::memcpy(scales.data(), src.scales, host_panels::scale_count(src.format, src.rows, src.cols) * sizeof(float));
    auto* flags = reinterpret_cast<uint8_t*>(scales.data() + host_panels::scale_count(src.format, src.rows, src.cols));
    for (int r = 0; r < src.rows; ++r)
      for (int k = 0; k < src.cols; ++k)
        if (e4m3_code_is_subnormal(in[static_cast<long>(r) * rb + k])) flags[(r / kPanelRows) * kblocks + k / 32] = 1;
  }
  if (src.format == WeightFormat::kFp4Block32) {
    auto* e8 = reinterpret_cast<uint8_t*>(scales.data());
    for (int r = 0; r < src.rows; ++r)
      for (long kb = 0; kb < kblocks; ++kb)
        f32_to_e8m0(src.scales[r * kblocks + kb], &e8[((r / kPanelRows) * kblocks + kb) * kPanelRows + r % kPanelRows]);
  }
}

/// A packable row-major matrix of random bytes: fp8 without NaN codes (some subnormal), fp4 with
/// power-of-two scales.
struct RandomMatrix {
  std::vector<uint8_t> payload;
  std::vector<float> scales;
  MatrixView view;
  RandomMatrix(WeightFormat f, int rows, int cols, uint64_t seed) {
    std::mt19937_64 g(seed);
    payload.resize(static_cast<size_t>(rows * row_major_row_bytes(f, cols)));
    for (uint8_t& b : payload) {
      b = static_cast<uint8_t>(g());
      if (f == WeightFormat::kFp8Block32 && (b & 0x7F) == 0x7F) b = 0x05;  // NaN -> a subnormal
    }
    const long kblocks = (cols + 31) / 32;
    if (f == WeightFormat::kFp8Block32) scales.resize(static_cast<size_t>((rows + 31) / 32 * kblocks));
    if (f == WeightFormat::kFp4Block32) scales.resize(static_cast<size_t>(rows * kblocks));
    for (float& s : scales) s = std::ldexp(1.0f, static_cast<int>(g() % 40) - 20);
    view.format = f;
    view.rows = rows;
    view.cols = cols;
    view.data = payload.data();
    view.scales = scales.empty() ? nullptr : scales.data();
  }
};

}  // namespace

TEST_CASE("host panels: pack (word at a time and AVX2 transposes) writes the element-wise packer's bytes") {
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32,
                                  WeightFormat::kFp4Block32};
  long compared = 0;
  for (WeightFormat f : formats)
    for (int rows : {1, 3, 7, 8, 9, 16, 17, 31, 40, 65})
      for (int cols : {1, 2, 3, 5, 6, 8, 14, 31, 32, 33, 62, 64, 66, 70, 128, 130, 256, 258, 262}) {
        if (f == WeightFormat::kFp4Block32 && cols % 2) continue;  // fp4 rows are whole bytes
        CAPTURE(static_cast<int>(f));
        CAPTURE(rows);
        CAPTURE(cols);
        const RandomMatrix m(f, rows, cols, static_cast<uint64_t>(rows * 1000 + cols * 7 + static_cast<int>(f)));
        REQUIRE(host_panels::packable(m.view));
        std::vector<uint8_t> want_payload;
        std::vector<float> want_scales;
        pack_elementwise(m.view, want_payload, want_scales);
        // garbage in the outputs first: pack must write every byte
        std::vector<uint8_t> payload(want_payload.size(), 0xA5), scalar(want_payload.size(), 0x5A);
        std::vector<float> scales(want_scales.size(), std::nanf(""));
        const MatrixView v = host_panels::pack(m.view, payload.data(), scales.data());
        host_panels::detail::pack_payload(f, rows, cols, static_cast<const uint8_t*>(m.view.data), scalar.data(), false);
        CHECK(payload == want_payload);
        CHECK(scalar == want_payload);
        CHECK(scales.size() == want_scales.size());  // bf16/f32 have none: no memcmp of a null data()
        CHECK((scales.empty() || std::memcmp(scales.data(), want_scales.data(), scales.size() * sizeof(float)) == 0));
        CHECK(v.layout == WeightLayout::kPanels8);
        CHECK(v.data == payload.data());
        ++compared;
      }
  CHECK(compared > 250);
}

TEST_CASE("streaming: O_DIRECT expert reads give the same bits as buffered pread (GGUF, 2 shards)") {
  // on disk, and on tmpfs where there is one (/dev/shm: O_DIRECT refused, buffered + DONTNEED)
  std::vector<fs::path> roots{""};
  if (fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0) roots.push_back("/dev/shm");
  for (const fs::path& root : roots) {
  CAPTURE(root.string());
  TempDir dir(root);
  const golden::Golden& g = tiny();
  const auto paths = gguf::write_model(g.config, golden::regenerate_weights(g), dir.file("tiny"), 2);
  GgufWeights w(paths[0]);
  ExpertCache<HB> buffered(w, {.capacity_experts = 2});
  ExpertCache<HB> direct(w, direct_options(buffered.slices().max_expert_bytes()));
  MESSAGE("O_DIRECT in use: ", std::string(direct.direct_io() ? "yes" : "no (refused: buffered + DONTNEED)"), "; ring ",
          direct.staging_slots(), " slots of ", direct.staging_slot_bytes(), " bytes");
  CHECK(!buffered.direct_io());
  CHECK(direct.staging_slots() >= 3);
  const long n = compare_direct_with_buffered(buffered, direct);
  CHECK(n == static_cast<long>(g.config.n_layers) * g.config.n_routed_experts);
  const ExpertCounters k = direct.counters();
  CHECK(k.bytes_read >= static_cast<uint64_t>(n) * direct.slices().max_expert_bytes() / 2);
  CHECK(k.prefetch_hits > 0);
  CHECK(k.read_seconds > 0);
  REQUIRE(k.layer_hits.size() == static_cast<size_t>(g.config.n_layers));
  uint64_t asked = 0;
  for (int l = 0; l < g.config.n_layers; ++l) asked += k.layer_hits[l] + k.layer_misses[l];
  CHECK(asked == static_cast<uint64_t>(n));
  }
}

TEST_CASE("streaming: O_DIRECT expert reads give the same bits as buffered pread (safetensors checkpoint; "
          "converted on the calling thread and on the reader threads)") {
  const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json");
  SafetensorsWeights w(DS41_GOLDEN_DIR "/ds41_tiny_fp8_ckpt", g.config.max_seq_len, g.config.engram);
  for (bool convert : {false, true}) {
    CAPTURE(convert);
    ExpertCache<HB> buffered(w, {.capacity_experts = 2});
    ExpertCache<HB> direct(w, direct_options(buffered.slices().max_expert_bytes(), convert));
    MESSAGE("O_DIRECT in use: ", std::string(direct.direct_io() ? "yes" : "no (refused: buffered + DONTNEED)"));
    CHECK(compare_direct_with_buffered(buffered, direct) == static_cast<long>(g.config.n_layers) * g.config.n_routed_experts);
    // convert_on_readers: prefetched experts were converted on the reader threads and swapped in
    CHECK((direct.counters().reader_convert_seconds > 0) == convert);
  }
}

TEST_CASE("streaming: packing straight from the staged bytes (ExpertSource::views) gives decode()'s bits") {
  const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json");
  SafetensorsWeights w(DS41_GOLDEN_DIR "/ds41_tiny_fp8_ckpt", g.config.max_seq_len, g.config.engram);
  const SafetensorsExpertSource src(w);
  const ExpertSliceMap& m = src.slices();
  long compared = 0;
  for (int l = 0; l < m.layers(); ++l)
    for (int e = 0; e < m.experts(); ++e) {
      const ExpertSliceMap::Expert& ex = m.at(l, e);
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<const uint8_t*> parts;
      for (const ExpertSliceMap::Slice& sl : ex.parts) {
        bytes.emplace_back(sl.bytes);
        gguf::PosixFile(src.shard_paths().at(sl.shard)).read_at(bytes.back().data(), sl.bytes, sl.offset, "test");
        parts.push_back(bytes.back().data());
      }
      std::array<MatrixView, 3> v;
      std::array<std::vector<float>, 3> scales;
      REQUIRE(src.views(l, e, parts.data(), v, scales));
      ExpertWeights<HB> a, b;
      // without the vector kernels (the portable build) nothing is packed: fill_views declines
      // and the cache takes decode()
      REQUIRE(ExpertArena<HB>::fill_views(a, v) == host_gemv::kVectorised);
      if (!host_gemv::kVectorised) continue;
      ExpertArena<HB>::fill(b, src.decode(l, e, parts.data()));
      CHECK_MESSAGE(same_matrix(a.w1, b.w1), "layer ", l, " expert ", e, " w1");
      CHECK_MESSAGE(same_matrix(a.w2, b.w2), "layer ", l, " expert ", e, " w2");
      CHECK_MESSAGE(same_matrix(a.w3, b.w3), "layer ", l, " expert ", e, " w3");
      CHECK((a.w1.v.layout == b.w1.v.layout && a.w1.v.host_scaled_decode == b.w1.v.host_scaled_decode));
      ++compared;
    }
  CHECK(compared == (host_gemv::kVectorised ? static_cast<long>(g.config.n_layers) * g.config.n_routed_experts : 0));
}

TEST_CASE("streaming: a shard that ends early is an error naming the file and the expert") {
  TempDir dir;
  const golden::Golden& g = tiny();
  const auto paths = gguf::write_model(g.config, golden::regenerate_weights(g), dir.file("tiny"), 1);
  GgufWeights w(paths[0]);
  for (bool direct : {false, true}) {
    CAPTURE(direct);
    StreamOptions o;
    o.capacity_experts = 2;
    o.direct_io = direct;
    ExpertCache<HB> cache(w, o);
    const int L = g.config.n_layers - 1, E = g.config.n_routed_experts - 1;
    const ExpertSliceMap::Slice last = cache.slices().at(L, E).parts.back();  // blk.L.ffn_up_exps, expert E
    CHECK(error_of([&] { cache.get(0, 0); }).empty());
    REQUIRE(::truncate(paths[0].c_str(), static_cast<off_t>(last.offset + last.bytes / 2)) == 0);
    const std::string e = error_of([&] { cache.get(L, E); });
    CHECK(e.find(paths[0]) != std::string::npos);
    CHECK(e.find("expert " + std::to_string(E) + " of layer " + std::to_string(L)) != std::string::npos);
    CHECK(e.find("short read") != std::string::npos);
    MESSAGE(e);
    // the cache stays usable for experts still in the file
    CHECK(error_of([&] { cache.get(0, 1); }).empty());
    // put the bytes back for the next round
    fs::remove(paths[0]);
    gguf::write_model(g.config, golden::regenerate_weights(g), dir.file("tiny"), 1);
  }
}

TEST_CASE("streaming: a cache budget below one layer's step is an error") {
  TempDir dir;
  const golden::Golden& g = tiny();
  const auto paths = gguf::write_model(g.config, golden::regenerate_weights(g), dir.file("tiny"), 1);
  GgufWeights w(paths[0]);
  const uint64_t per = ExpertCache<HB>(w, {.capacity_experts = 1}).slices().max_expert_bytes();
  REQUIRE(g.config.n_activated_experts >= 2);
  // a byte budget for one expert fewer than a step routes to
  ExpertCache<HB> small(w, {.capacity_bytes = per * (g.config.n_activated_experts - 1)});
  CHECK(small.capacity() == g.config.n_activated_experts - 1);
  const std::string e = error_of([&] { StreamedExperts<HB>(w.config(), w, 0, small); });
  CHECK(e.find("n_activated_experts") != std::string::npos);
  CHECK(e.find("needs " + std::to_string(g.config.n_activated_experts)) != std::string::npos);
  MESSAGE(e);
  const std::string m = error_of([&] { Model<HB, StreamedExperts<HB>> model(w.config(), w, small); });
  CHECK(m.find("n_activated_experts") != std::string::npos);
  // below one expert
  const std::string z = error_of([&] { ExpertCache<HB> c(w, {.capacity_bytes = per - 1}); });
  CHECK(z.find("at least one expert") != std::string::npos);
  // exactly a step's worth is accepted
  ExpertCache<HB> enough(w, {.capacity_bytes = per * g.config.n_activated_experts});
  CHECK(error_of([&] { StreamedExperts<HB>(w.config(), w, 0, enough); }).empty());
}

TEST_CASE("streaming: weights that cannot stream (an in-memory WeightSet) are refused, saying why") {
  // model/ streams through WeightSource::expert_source() / row_source() (io/ implements them for
  // its formats); a WeightSet has neither
  const golden::Golden& g = tiny();
  const WeightSet w = golden::regenerate_weights(g);
  CHECK(w.expert_source() == nullptr);
  CHECK(w.row_source("layers.0.engram.", 4, g.config.head_dim) == nullptr);
  const std::string e = error_of([&] { ExpertCache<HB> c(w, {.capacity_experts = 2}); });
  CHECK(e.find("cannot stream their routed experts") != std::string::npos);
  const std::string r = error_of([&] { RowReaderTable<HB> t(w, "layers.0.engram.", 4, g.config.head_dim); });
  CHECK(r.find("cannot be read by rows") != std::string::npos);
}

}  // namespace test_streaming
