// instances/host_model_streamed.cpp — Model<HostBackend> with its routed experts streamed through
// an ExpertCache (and the engram tables read row by row), compiled once for ds41's own binaries
// (model/model_instances.hpp; a file of its own so that the two models compile side by side).
#define DS41_HOST_MODELS_DEFINITION 1
#include "ds41/backend/host.hpp"
#include "ds41/model/model.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"

namespace ds41 {
template class Model<HostBackend, StreamedExperts<HostBackend>, RowReaderTable<HostBackend>>;
template Model<HostBackend, StreamedExperts<HostBackend>, RowReaderTable<HostBackend>>::Model(
    const ModelConfig&, const WeightSource&, ExpertCache<HostBackend>&);
}  // namespace ds41
