// instances/host_linear.cpp — the host backend's Linear (host_gemv::linear and every kernel it
// runs), compiled once for ds41's own tests, examples, benchmarks and Python module, which define
// DS41_HOST_LINEAR_SEPARATE and see only its declaration (backend/host/gemv.hpp says why). Not part
// of the library: an engine that includes ds41 compiles the function inline, as every header.
#ifndef DS41_HOST_LINEAR_SEPARATE
#define DS41_HOST_LINEAR_SEPARATE 1
#endif
#define DS41_HOST_LINEAR_DEFINITION 1
#include "ds41/backend/host/gemv.hpp"
