// strata._engine: one pybind11 module; each area registers its own bindings.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_model(py::module_& m);    // register_model.cpp: Engine, load, state, errors
void register_decode(py::module_& m);   // register_decode.cpp: drafters, sampler, decode loop
void register_stream(py::module_& m);   // register_stream.cpp: expert pack reader, cache, IO
void register_quant(py::module_& m);    // register_quant.cpp: GGUF block formats and their kernels
void register_ops(py::module_& m);      // register_ops.cpp: single backend ops (per-op test)
void register_kernels(py::module_& m);  // register_kernels.cpp: standalone prefill kernels (tests)

PYBIND11_MODULE(_engine, m) {
    m.doc() = "strata native engine";
    register_model(m);
    register_decode(m);
    register_stream(m);
    register_quant(m);
    register_ops(m);
    register_kernels(m);
}
