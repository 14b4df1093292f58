// tests/temp_dir.hpp — what the file-writing tests share: a temporary directory removed with
// everything in it, and the message of the ds41::Error a call throws.
#pragma once
#include <doctest/doctest.h>
#include <stdlib.h>
#include <filesystem>
#include <string>
#include <system_error>
#include "ds41/core/error.hpp"

namespace ds41::testing {

/// A fresh directory PREFIX-XXXXXX under `root` (default: the system temp dir), removed with
/// everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "ds41", std::filesystem::path root = {}) {
    if (root.empty()) root = std::filesystem::temp_directory_path();
    std::string t = (root / (prefix + "-XXXXXX")).string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

/// The message of the ds41::Error `f` throws ("" when it does not throw).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace ds41::testing
