// ds41/io/gguf.hpp — GGUF support in one include: reader (gguf_reader.hpp), writer
// (gguf_writer.hpp), the deepseek41 metadata per dialect (gguf_config.hpp) and tensor conversions (gguf_model.hpp), the name map
// (gguf_names.hpp), the file-backed WeightSource GgufWeights (gguf_weights.hpp) and DSpark draft files
// (gguf_draft.hpp).
#pragma once
#include "gguf_draft.hpp"
#include "gguf_model.hpp"
#include "gguf_names.hpp"
#include "gguf_reader.hpp"
#include "gguf_types.hpp"
#include "gguf_weights.hpp"
#include "gguf_writer.hpp"
