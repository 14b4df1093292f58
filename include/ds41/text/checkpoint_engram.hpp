// ds41/text/checkpoint_engram.hpp — a released checkpoint's engram hash parameters, derived from
// its tokenizer as engram.py derives them (engram_params.hpp), with the spec from the checkpoint's
// config (safetensors::checkpoint_args_file). What ds41-decode --checkpoint and the Python module's
// Model.from_checkpoint do for a checkpoint without a golden.
#pragma once
#include <string>
#include "../io/safetensors_weights.hpp"
#include "engram_params.hpp"

namespace ds41::text {

template <class Tok>
EngramHashParams derive_checkpoint_engram(const std::string& dir, const Tok& tok) {
  const std::string cfg = safetensors::checkpoint_args_file(dir);
  return derive_engram_params(engram_spec_from_config(safetensors::SafetensorsShards::read_json(cfg), cfg), tok);
}

}  // namespace ds41::text
