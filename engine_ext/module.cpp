// strata._engine: one pybind11 module; each area registers its own bindings.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_model(py::module_& m);    // register_model.cpp: Engine, load, state, errors
void register_decode(py::module_& m);   // register_decode.cpp: drafters, sampler, decode loop
void register_stream(py::module_& m);   // register_stream.cpp: expert pack reader, cache, IO
void register_ops(py::module_& m);      // register_ops.cpp: single backend ops (per-op test)
void register_kernels(py::module_& m);  // register_kernels.cpp: standalone prefill kernels (tests)
void register_quant(py::module_& m);    // register_quant.cpp: GGUF block formats and their kernels
#ifdef STRATA_WEBGPU
void register_webgpu(py::module_& m);   // webgpu/register_webgpu.cpp: WebGPU device, kernels, backend
#endif

PYBIND11_MODULE(_engine, m) {
    m.doc() = "strata native engine";
    register_model(m);
    register_decode(m);
    register_stream(m);
    register_ops(m);
    register_kernels(m);
    register_quant(m);
#ifdef STRATA_WEBGPU
    register_webgpu(m);
#endif
}
