#include "cpu/cpu_backend.h"

#include <cstring>

#include "cpu/kernels.h"
#include "cpu/matmul.h"

namespace strata {

bool CpuBackend::supports(Op op, WFormat f) const {
    if (op == Op::Matmul) return cpu_format_kernels(f).matmul_range != nullptr;
    if (op == Op::Embed) return cpu_format_kernels(f).row_to_f32 != nullptr;
    return true;
}

void CpuBackend::embed(const MatView& W, const int32_t* ids, int n, float* out) { cpu::embed(W, ids, n, out); }
void CpuBackend::rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps) {
    cpu::rmsnorm(x, out, rows, heads, dim, w, eps);
}
void CpuBackend::gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps) {
    cpu::gated_rmsnorm(x, z, rows, heads, dim, w, eps);
}
void CpuBackend::matmul(const std::vector<MatJob>& jobs) { matmul_jobs(pool_, jobs, prefill_); }
void CpuBackend::rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half) {
    cpu::rotary(x, rows, heads, p0, inv_freq, half);
}
void CpuBackend::attention(const AttentionArgs& a) { cpu::attention(pool_, a, prefill_); }
void CpuBackend::causal_conv(const ConvArgs& a) { cpu::causal_conv(a); }
void CpuBackend::gdn_inputs(const GdnInputsArgs& a) { cpu::gdn_inputs(a); }
void CpuBackend::gdn_step(const GdnStepArgs& a) { cpu::gdn_step(pool_, a); }
void CpuBackend::router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx,
                             float* weights) {
    cpu::router_topk(logits, n, n_experts, k, renormalize, idx, weights);
}
void CpuBackend::gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) {
    cpu::gather(src, ld_src, idx, n, cols, dst, ld_dst);
}
void CpuBackend::swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) { cpu::swiglu(g, u, out, rows, n); }
void CpuBackend::moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H,
                             const float* shared, const float* shared_gate, float* out) {
    cpu::moe_combine(D, slot, w, n, k, H, shared, shared_gate, out);
}
void CpuBackend::add(float* x, const float* y, size_t n) { cpu::add(x, y, n); }

void CpuBackend::copy(RowsC src, RowsF dst, int rows, int heads, int dim) {
    for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
            std::memcpy(dst.p + size_t(r) * dst.ld + size_t(h) * dst.hs, src.p + size_t(r) * src.ld + size_t(h) * src.hs,
                        sizeof(float) * size_t(dim));
}

}  // namespace strata
