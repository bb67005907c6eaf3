#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/activation.h"
#include "cpu/kernels.h"
#include "cpu/math.h"

namespace strata::cpu {

void gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) {
    for (int i = 0; i < n; ++i)
        std::memcpy(dst + size_t(i) * ld_dst, src + size_t(idx[i]) * ld_src, sizeof(float) * cols);
}

void swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) {
    for (int r = 0; r < rows; ++r) {
        const float* gr = g.p + size_t(r) * g.ld;
        const float* ur = u.p + size_t(r) * u.ld;
        float* o = out.p + size_t(r) * out.ld;
        silu_mul(gr, ur, o, n);
    }
}

// Each row: its experts in its own rank order (one fma chain per element), then the gated
// shared expert.
void moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H, const float* shared,
                 const float* shared_gate, float* out) {
    thread_local std::vector<float> acc;  // no allocation per call
    acc.resize(size_t(H));
    for (int t = 0; t < n; ++t) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int j = 0; j < k; ++j) {
            float wj = w[size_t(t) * k + j];
            const float* d = D + size_t(slot[size_t(t) * k + j]) * H;
            for (int c = 0; c < H; ++c) acc[c] = STRATA_FMA(wj, d[c], acc[c]);
        }
        float* o = out + size_t(t) * H;
        if (shared) {
            const float* s = shared + size_t(t) * H;
            float gte = sigmoidf_(shared_gate[t]);
            for (int c = 0; c < H; ++c) o[c] = acc[c] + gte * s[c];
        } else {
            std::memcpy(o, acc.data(), sizeof(float) * H);
        }
    }
}

}  // namespace strata::cpu
