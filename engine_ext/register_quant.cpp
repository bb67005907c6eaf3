// Python bindings of the quantized-weight area: block geometry, row dequantization and the
// multi-row dot kernels (the GGUF reader checks sizes with them; tests compare them with
// gguf-py and NumPy).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "cpu/quant/dot_int8.h"
#include "cpu/quant/formats.h"

namespace py = pybind11;
using namespace strata::quant;

namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;

Isa parse_isa(const std::string& s) {
    if (s == "auto") return Isa::kAuto;
    if (s == "scalar") return Isa::kScalar;
    if (s == "avx2") return Isa::kAvx2;
    if (s == "avx512") return Isa::kAvx512;
    throw py::value_error("unknown instruction set '" + s + "' (auto, scalar, avx2, avx512)");
}

// A format name from Python: ValueError (one line naming the known formats) when unknown.
QType parse_fmt(const std::string& fmt) {
    try {
        return parse_type(fmt);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
}

// The weight bytes must hold exactly rows whole rows of the format.
size_t checked_row_bytes(QType t, const Bytes& data, int64_t rows, int64_t cols) {
    if (rows < 0) throw py::value_error("rows must be >= 0");
    size_t rb;
    try {
        rb = row_bytes(t, cols);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
    if (size_t(data.size()) != rb * size_t(rows))
        throw py::value_error(std::string(type_name(t)) + ": " + std::to_string(data.size()) + " bytes for " +
                              std::to_string(rows) + " x " + std::to_string(cols) + " weights, expected " +
                              std::to_string(rb * size_t(rows)));
    return rb;
}

}  // namespace

void register_quant(py::module_& m) {
    register_cpu_kernels();
    m.def("quant_set_activations", [](const std::string& mode) {
        if (mode != "int8" && mode != "f32") throw py::value_error("activations must be 'int8' or 'f32', not '" + mode + "'");
        set_exact_activations(mode == "f32");
    }, py::arg("mode"),
       "engine matmuls over block formats: 'int8' activations (default, fast) or 'f32' (exact: bit-identical "
       "to the dequantized model stored as F32)");
    m.def("quant_activations", [] { return std::string(exact_activations() ? "f32" : "int8"); });
    m.def("quant_activation_block", [](const std::string& fmt) {
        const QType t = parse_fmt(fmt);
        return (uses_int8_activations(t) && !exact_activations()) ? activation_block(t) : 0;
    }, py::arg("fmt"),
       "how the engine's matmul over this format sees its input rows: int8 per block of this many values "
       "(0: as f32)");
    m.def("quant_quantize_activation", [](const F32& x, int block, bool sums) {
        if (block != 32 && block != 256) throw py::value_error("block must be 32 or 256");
        if (sums && block != 32) throw py::value_error("block sums (Q8_1) are for 32-blocks only");
        if (x.ndim() != 1 || x.size() % block != 0)
            throw py::value_error("x must be one row of a whole number of " + std::to_string(block) + "-blocks");
        const int cols = int(x.size());
        py::array_t<int8_t> q(cols);
        F32 d(cols / block);
        const float* xp = x.data();
        int8_t* qp = q.mutable_data();
        float* dp = d.mutable_data();
        F32 s(sums ? cols / block : 0);
        float* sp = sums ? s.mutable_data() : nullptr;
        {
            py::gil_scoped_release nogil;
            quantize_activation(xp, cols, block, qp, dp, nullptr, sp);
        }
        if (sums) return py::tuple(py::make_tuple(q, d, s));
        return py::tuple(py::make_tuple(q, d));
    }, py::arg("x"), py::arg("block"), py::arg("sums") = false,
       "(q, d): the int8 activations and per-block scales the dot kernels use for one row; with sums=True "
       "(32-blocks) (q, d, s) with the Q8_1 block sums the Q5_1 kernels use");
    m.def("quant_activation_sums", [](const std::string& fmt) {
        const QType t = parse_fmt(fmt);
        return activation_sums(t) && !exact_activations();
    }, py::arg("fmt"),
       "whether the engine's matmul over this format also uses each activation block's Q8_1 sum (Q5_1's min term)");
    m.def("quant_formats", [] {
        py::dict out;
        for (QType t : kSupportedTypes) {
            const Geometry g = geometry(t);
            out[type_name(t)] = py::make_tuple(int(t), g.block_elems, g.block_bytes);
        }
        return out;
    }, "name -> (ggml type id, weights per block, bytes per block) of every weight format the kernels compute with");
    m.def("quant_isas", [] {
        std::vector<std::string> out{"scalar"};
        if (isa_available(Isa::kAvx2)) out.push_back("avx2");
        if (isa_available(Isa::kAvx512)) out.push_back("avx512");
        return out;
    }, "instruction sets of the dot kernels in this build, narrowest first");
    m.def("quant_dequantize", [](const std::string& fmt, const Bytes& data, int64_t rows, int64_t cols) {
        const QType t = parse_fmt(fmt);
        const size_t rb = checked_row_bytes(t, data, rows, cols);
        F32 out({rows, cols});
        const uint8_t* src = data.data();
        float* dst = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            for (int64_t r = 0; r < rows; ++r) dequantize_row(t, src + size_t(r) * rb, cols, dst + r * cols);
        }
        return out;
    }, py::arg("fmt"), py::arg("data"), py::arg("rows"), py::arg("cols"),
       "rows x cols f32 weights from the raw bytes of a tensor in a GGUF block format");
    m.def("quant_dot", [](const std::string& fmt, const Bytes& data, int64_t rows, int64_t cols, const F32& X,
                          const std::string& isa) {
        const QType t = parse_fmt(fmt);
        const size_t rb = checked_row_bytes(t, data, rows, cols);
        const Isa which = parse_isa(isa);
        if (!isa_available(which)) throw py::value_error("instruction set '" + isa + "' is not in this build");
        if (X.ndim() != 2 || X.shape(1) != cols) throw py::value_error("X must be (T, cols)");
        const int T = int(X.shape(0));
        if (T < 1 || T > kMaxDotRows) throw py::value_error("X must have 1..16 rows");
        F32 Y({int64_t(T), rows});
        const float* x = X.data();
        float* y = Y.mutable_data();
        const uint8_t* w = data.data();
        {
            py::gil_scoped_release nogil;
            dot_rows(t, x, T, int(cols), w, rb, int(cols), y, int(rows), 0, int(rows), which);
        }
        return Y;
    }, py::arg("fmt"), py::arg("data"), py::arg("rows"), py::arg("cols"), py::arg("x"), py::arg("isa") = "auto",
       "Y[t, r] = dot(x[t], W[r]) with the multi-row kernel (T = 1..16)");
}
