#include <algorithm>
#include <vector>

#include "cpu/activation.h"
#include "cpu/kernels.h"
#include "cpu/math.h"

namespace strata::cpu {

// Per output: acc = 0, fma over the K taps oldest first, then SiLU. Channels go in vectors: the
// taps are transposed once per call (wt[j][c]) so that every load is contiguous.
void causal_conv(const ConvArgs& a) {
    namespace S = simd;
    const int K = a.K, C = a.channels;
    thread_local std::vector<float> wt;
    wt.resize(size_t(K) * C);
    for (int c = 0; c < C; ++c)
        for (int j = 0; j < K; ++j) wt[size_t(j) * C + c] = a.w[size_t(c) * K + j];
    auto src_row = [&](int t, int j) {
        int src = t - (K - 1) + j;
        return src >= 0 ? a.x + size_t(src) * a.ldx : a.hist + size_t(K - 1 + src) * C;
    };
    for (int t = 0; t < a.n; ++t) {
        float* out = a.out + size_t(t) * C;
        int c = 0;
        for (; c + S::kLanes <= C; c += S::kLanes) {
            S::vf acc = S::zero();
            for (int j = 0; j < K; ++j)
                acc = S::fma(S::load(wt.data() + size_t(j) * C + c), S::load(src_row(t, j) + c), acc);
            S::store(out + c, silu_v(acc));
        }
        for (; c < C; ++c) {
            float acc = 0.f;
            for (int j = 0; j < K; ++j) acc = STRATA_FMA(wt[size_t(j) * C + c], src_row(t, j)[c], acc);
            out[c] = silu_1(acc);
        }
    }
    if (a.x_rows)
        for (int t = 0; t < a.n; ++t) std::copy_n(a.x + size_t(t) * a.ldx, C, a.x_rows + size_t(t) * C);
}

}  // namespace strata::cpu
