// strata._engine: one pybind11 module; each area registers its own bindings.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_model(py::module_& m);    // register_model.cpp: Engine, load, state, errors
void register_decode(py::module_& m);   // register_decode.cpp: drafters, sampler, decode loop
void register_stream(py::module_& m);   // register_stream.cpp: expert pack reader, cache, IO
#ifdef STRATA_WEBGPU
void register_webgpu(py::module_& m);   // webgpu/register_webgpu.cpp: WebGPU device and kernels
#endif

PYBIND11_MODULE(_engine, m) {
    m.doc() = "strata native engine";
    register_model(m);
    register_decode(m);
    register_stream(m);
#ifdef STRATA_WEBGPU
    register_webgpu(m);
#endif
}
