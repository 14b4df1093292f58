// python/src/module.cpp — the extension module ds41._ds41: ds41's errors as the Python exception
// ds41.Error (a ValueError: bad input is what they report), and the model binding.
#include <nanobind/nanobind.h>
#include "ds41/core/error.hpp"

namespace nb = nanobind;

namespace ds41::python {
void bind_model(nb::module_& m);
}

NB_MODULE(_ds41, m) {
  m.doc() = "ds41: the DeepSeek-V4.1-Flash block, bit for bit with DeepSeek's reference (host backend)";
  nb::exception<ds41::Error>(m, "Error", PyExc_ValueError);
  ds41::python::bind_model(m);
}
