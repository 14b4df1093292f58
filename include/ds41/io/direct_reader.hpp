// ds41/io/direct_reader.hpp — the old path of core/direct_file.hpp (DirectFile: positional reads
// that bypass the page cache), kept for code that includes it.
#pragma once
#include "../core/direct_file.hpp"
