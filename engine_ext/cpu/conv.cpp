#include "cpu/kernels.h"
#include "cpu/math.h"

namespace strata::cpu {

void causal_conv(const ConvArgs& a) {
    const int K = a.K, C = a.channels;
    for (int t = 0; t < a.n; ++t) {
        for (int c = 0; c < C; ++c) {
            const float* w = a.w + size_t(c) * K;
            float acc = 0.f;
            for (int j = 0; j < K; ++j) {
                int src = t - (K - 1) + j;
                float x = src >= 0 ? a.x[size_t(src) * a.ldx + c] : a.hist[size_t(K - 1 + src) * C + c];
                acc = STRATA_FMA(w[j], x, acc);
            }
            a.out[size_t(t) * C + c] = silu(acc);
        }
    }
}

}  // namespace strata::cpu
