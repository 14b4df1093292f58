# Third-party dependencies, found as installed packages (scripts/setup.sh installs the Debian
# ones): nlohmann/json (the library's golden I/O), doctest (tests), Google Benchmark (bench/),
# CUDA Toolkit with CCCL (CUB/Thrust) when DS41_ENABLE_CUDA is on.
#
# A tree that travels to a machine without these packages can point CMake at vendored copies:
#   -DDS41_THIRD_PARTY_DIR=<dir> with <dir>/nlohmann/json.hpp and <dir>/doctest/doctest.h.
find_package(Threads REQUIRED)
set(DS41_THIRD_PARTY_DIR "" CACHE PATH "Optional folder with vendored nlohmann/ and doctest/ headers")

find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  if(DS41_THIRD_PARTY_DIR AND EXISTS "${DS41_THIRD_PARTY_DIR}/nlohmann/json.hpp")
    add_library(nlohmann_json INTERFACE)
    add_library(nlohmann_json::nlohmann_json ALIAS nlohmann_json)
    target_include_directories(nlohmann_json INTERFACE "${DS41_THIRD_PARTY_DIR}")
  else()
    message(FATAL_ERROR "nlohmann/json not found: install nlohmann-json3-dev (scripts/setup.sh does) "
                        "or pass -DDS41_THIRD_PARTY_DIR")
  endif()
endif()

if(DS41_BUILD_TESTS)
  find_package(doctest QUIET)
  if(NOT doctest_FOUND)
    if(DS41_THIRD_PARTY_DIR AND EXISTS "${DS41_THIRD_PARTY_DIR}/doctest/doctest.h")
      add_library(doctest INTERFACE)
      add_library(doctest::doctest ALIAS doctest)
      target_include_directories(doctest INTERFACE "${DS41_THIRD_PARTY_DIR}")
    else()
      message(FATAL_ERROR "doctest not found: install doctest-dev (scripts/setup.sh does) or pass -DDS41_THIRD_PARTY_DIR")
    endif()
  endif()
endif()

if(DS41_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(WARNING "Google Benchmark not found (libbenchmark-dev): bench/ is skipped")
    set(DS41_BUILD_BENCHMARKS OFF)
  endif()
endif()

# The optional text layer (include/ds41/text/: tokenizer, Engram token map, chat format, sampler):
# PCRE2 (8-bit; Debian libpcre2-dev) for the pre-tokenizer's \p{...} and lookahead regexes, and
# utf8proc (libutf8proc-dev) for NFKC/NFD. Only ds41::text links them: an engine that brings its own
# tokenizer links ds41::ds41 alone and needs neither.
option(DS41_ENABLE_TEXT "Build ds41::text and what uses it (tokenizer tools, text tests) when PCRE2 and utf8proc are found" ON)
find_path(DS41_PCRE2_INCLUDE_DIR pcre2.h)
find_library(DS41_PCRE2_LIBRARY pcre2-8)
find_path(DS41_UTF8PROC_INCLUDE_DIR utf8proc.h)
find_library(DS41_UTF8PROC_LIBRARY utf8proc)
if(NOT DS41_ENABLE_TEXT)
  set(DS41_HAVE_TEXT OFF)
elseif(DS41_PCRE2_INCLUDE_DIR AND DS41_PCRE2_LIBRARY AND DS41_UTF8PROC_INCLUDE_DIR AND DS41_UTF8PROC_LIBRARY)
  set(DS41_HAVE_TEXT ON)
else()
  set(DS41_HAVE_TEXT OFF)
  message(WARNING "ds41: PCRE2 (libpcre2-dev) or utf8proc (libutf8proc-dev) not found: ds41::text, "
                  "ds41-tokenize and the text tests are skipped (scripts/setup.sh installs both)")
endif()
