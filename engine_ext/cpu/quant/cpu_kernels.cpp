// The GGUF block formats join the CPU backend through its per-format kernel table.
#include <algorithm>
#include <atomic>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/quant/formats.h"

namespace strata::quant {

namespace {

std::atomic<bool> g_exact{false};

// Exact mode: each weight row is dequantized (as gguf-py does) and dotted with the f32 kernel's
// own fixed-order dot, so the result is bit-identical to the same model stored as F32.
template <QType Q>
void matmul_range_exact(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y,
                        int ldy, int r0, int r1) {
    thread_local std::vector<float> row;
    row.resize(size_t(W.cols));
    for (int r = r0; r < r1; ++r) {
        dequantize_row(Q, W.row(r), W.cols, row.data());
        for (int t = 0; t < T; ++t) {
            float s = dot_f32(X + size_t(t) * ldx, row.data(), W.cols);
            if (bias) s += bias[r];
            Y[size_t(t) * ldy + r] = s;
        }
    }
}

template <QType Q>
void matmul_range_q(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y, int ldy,
                    int r0, int r1) {
    if (g_exact.load(std::memory_order_relaxed)) {
        matmul_range_exact<Q>(X, T, ldx, W, bias, Y, ldy, r0, r1);
        return;
    }
    // Windows of more than 16 rows (prefill chunks) run 16 rows at a time: every row's result is
    // the same whichever group of rows it is in.
    for (int t0 = 0; t0 < T; t0 += kMaxDotRows) {
        const int n = std::min(kMaxDotRows, T - t0);
        dot_rows(Q, X + size_t(t0) * ldx, n, ldx, static_cast<const uint8_t*>(W.data), W.row_bytes, W.cols,
                 Y + size_t(t0) * ldy, ldy, r0, r1);
    }
    if (bias)
        for (int t = 0; t < T; ++t)
            for (int r = r0; r < r1; ++r) Y[size_t(t) * ldy + r] += bias[r];
}

template <QType Q>
void row_to_f32_q(const MatView& W, int row, float* out) {
    dequantize_row(Q, W.row(row), W.cols, out);
}

template <QType Q>
CpuFormatKernels kernels() {
    return {matmul_range_q<Q>, row_to_f32_q<Q>};
}

}  // namespace

void set_exact_activations(bool exact) { g_exact.store(exact); }
bool exact_activations() { return g_exact.load(); }

void register_cpu_kernels() {
    register_cpu_format(WFormat::Q8_0, kernels<QType::Q8_0>());
    register_cpu_format(WFormat::Q5_0, kernels<QType::Q5_0>());
    register_cpu_format(WFormat::Q5_1, kernels<QType::Q5_1>());
    register_cpu_format(WFormat::Q4_K, kernels<QType::Q4_K>());
    register_cpu_format(WFormat::Q5_K, kernels<QType::Q5_K>());
    register_cpu_format(WFormat::Q6_K, kernels<QType::Q6_K>());
    register_cpu_format(WFormat::IQ4_XS, kernels<QType::IQ4_XS>());
}

}  // namespace strata::quant
