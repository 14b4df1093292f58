// ds41/model/model_instances.hpp — the host models ds41's own binaries share: Model<HostBackend>,
// resident and with streamed experts, compiled once (instances/host_model*.cpp, the CMake target
// ds41_host_models) instead of in every test, tool, benchmark and the Python module that runs
// one (g++ -O3: ~20 s of compile and ~0.6 MB of code each, session 44). Those binaries define
// DS41_HOST_MODELS_SEPARATE and see here explicit instantiation declarations, so the members that
// model.hpp defines out of the class are not compiled again. An engine that includes ds41 never
// defines it: its translation units instantiate Model as any template, nothing changes for them.
#pragma once
#if defined(DS41_HOST_MODELS_SEPARATE) && !defined(DS41_HOST_MODELS_DEFINITION)
#include "../backend/host.hpp"
#include "model.hpp"
#include "row_reader_table.hpp"
#include "streamed_experts.hpp"

namespace ds41 {

extern template class Model<HostBackend>;
extern template Model<HostBackend>::Model(const ModelConfig&, const WeightSource&);
extern template class Model<HostBackend, StreamedExperts<HostBackend>, RowReaderTable<HostBackend>>;
extern template Model<HostBackend, StreamedExperts<HostBackend>, RowReaderTable<HostBackend>>::Model(
    const ModelConfig&, const WeightSource&, ExpertCache<HostBackend>&);

}  // namespace ds41
#endif
