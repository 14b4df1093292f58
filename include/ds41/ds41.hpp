// ds41/ds41.hpp — umbrella header: the DeepSeek-V4.1-Flash block on the host backend.
//
//   #include <ds41/ds41.hpp>
//   ds41::Model<ds41::HostBackend> model(config, weights);
//   auto r = model.prefill(prompt);          // r.logits, r.argmax
//   r = model.decode(r.argmax);
#pragma once
#include "backend/host.hpp"
#include "model/model.hpp"
