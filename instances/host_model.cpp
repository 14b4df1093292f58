// instances/host_model.cpp — Model<HostBackend> (resident experts) compiled once for ds41's own
// tests, tools, benchmarks and Python module (model/model_instances.hpp says why). Not part of the
// library: an engine instantiates Model in its own translation units.
#define DS41_HOST_MODELS_DEFINITION 1
#include "ds41/backend/host.hpp"
#include "ds41/model/model.hpp"

namespace ds41 {
template class Model<HostBackend>;
template Model<HostBackend>::Model(const ModelConfig&, const WeightSource&);
}  // namespace ds41
