// Python bindings of the standalone prefill kernels (engine_ext/cpu/gemm.*, attention_kernel.*),
// so their tests can compare them with NumPy directly. Single-threaded here: the engine's
// callers do the threading split.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "cpu/attention_kernel.h"
#include "cpu/gemm.h"

namespace py = pybind11;

namespace {
using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;

void need_2d(const py::array& a, const char* what) {
    if (a.ndim() != 2) throw py::value_error(std::string(what) + " must be 2-D, got " + std::to_string(a.ndim()) + "-D");
}

// Y = X W^T + bias over output features [n0, n1) (the rest of Y is 0); W float32 or bf16 bits
// as uint16.
py::array_t<float> gemm(F32 X, py::array W, py::object bias, int n0, int n1) {
    need_2d(X, "X");
    need_2d(W, "W");
    const int T = int(X.shape(0)), K = int(X.shape(1)), N = int(W.shape(0));
    if (W.shape(1) != K) throw py::value_error("W has " + std::to_string(W.shape(1)) + " columns, X has " +
                                               std::to_string(K));
    if (n1 < 0) n1 = N;
    if (n0 < 0 || n1 > N || n0 > n1) throw py::value_error("feature range [n0, n1) outside [0, N)");
    F32 b;
    if (!bias.is_none()) {
        b = F32::ensure(bias);
        if (!b || b.ndim() != 1 || b.shape(0) != N) throw py::value_error("bias must be a vector of N floats");
    }
    py::array_t<float> Y({T, N});
    std::fill(Y.mutable_data(), Y.mutable_data() + size_t(T) * N, 0.f);
    const float* bp = bias.is_none() ? nullptr : b.data();
    if (py::isinstance<py::array_t<uint16_t>>(W) && W.dtype().kind() == 'u') {
        auto w = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>::ensure(W);
        py::gil_scoped_release nogil;
        strata::cpu::gemm_bf16(X.data(), T, K, w.data(), K, K, bp, Y.mutable_data(), N, n0, n1);
    } else if (W.dtype().kind() == 'f') {
        auto w = F32::ensure(W);
        py::gil_scoped_release nogil;
        strata::cpu::gemm_f32(X.data(), T, K, w.data(), K, K, bp, Y.mutable_data(), N, n0, n1);
    } else {
        throw py::type_error("W must be float32 or uint16 (bf16 bits)");
    }
    return Y;
}

// Q: [T, n_heads * head_dim] rows at positions pos0 .. pos0 + T - 1; K, V: [pos0 + T, n_kv * head_dim].
py::array_t<float> attention(F32 Q, F32 K, F32 V, int64_t pos0, int n_heads, int n_kv_heads, float scale) {
    need_2d(Q, "Q");
    need_2d(K, "K");
    need_2d(V, "V");
    if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads)
        throw py::value_error("n_heads must be a positive multiple of n_kv_heads");
    const int T = int(Q.shape(0));
    if (Q.shape(1) % n_heads) throw py::value_error("Q columns are not a multiple of n_heads");
    const int hd = int(Q.shape(1) / n_heads), kw = n_kv_heads * hd;
    if (pos0 < 0 || K.shape(0) < pos0 + T || K.shape(1) != kw || V.shape(0) != K.shape(0) || V.shape(1) != kw)
        throw py::value_error("K and V must be [>= pos0 + T, n_kv_heads * head_dim]");
    py::array_t<float> O({T, n_heads * hd});
    {
        py::gil_scoped_release nogil;
        for (int g = 0; g < n_kv_heads; ++g)
            strata::cpu::attention_causal(Q.data(), n_heads * hd, K.data(), V.data(), kw, O.mutable_data(),
                                          n_heads * hd, T, pos0, hd, g, n_heads / n_kv_heads, scale);
    }
    return O;
}
}  // namespace

void register_kernels(py::module_& m) {
    auto k = m.def_submodule("kernels", "standalone CPU prefill kernels (for tests and benchmarks)");
    k.def("gemm", &gemm, py::arg("X"), py::arg("W"), py::arg("bias") = py::none(), py::arg("n0") = 0,
          py::arg("n1") = -1, "Y = X @ W.T (+ bias) for output features [n0, n1); W float32 or bf16 bits (uint16)");
    k.def("attention_causal", &attention, py::arg("Q"), py::arg("K"), py::arg("V"), py::arg("pos0"),
          py::arg("n_heads"), py::arg("n_kv_heads"), py::arg("scale"),
          "causal GQA attention of T query rows at positions pos0.. over cached K/V cells");
    k.def("gemm_feature_block", &strata::cpu::gemm_feature_block);
    k.attr("isa") = strata::cpu::gemm_isa();
}
