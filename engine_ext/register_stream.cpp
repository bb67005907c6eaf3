#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_stream(py::module_& m) { (void)m; }
