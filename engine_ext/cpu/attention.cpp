#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/attention_kernel.h"
#include "cpu/kernels.h"
#include "cpu/math.h"
#include "cpu/matmul.h"

namespace strata::cpu {

namespace {

// Prefill windows: the vectorised causal kernel, one task per (KV head, block of query rows),
// then the output gate.
void attention_prefill(ThreadPool& pool, const AttentionArgs& a) {
    constexpr int kRowBlock = 16;
    const int n = a.n, nh = a.n_heads, hd = a.head_dim, nkv = a.n_kv;
    const int rep = nh / nkv, ld = nh * hd, ldkv = nkv * hd;
    const int blocks = (n + kRowBlock - 1) / kRowBlock;
    pool.parallel_for(nkv * blocks, [&](int i) {
        // later row blocks see more cells: hand them out first
        const int b = blocks - 1 - i / nkv, g = i % nkv;
        const int t0 = b * kRowBlock, rows = std::min(kRowBlock, n - t0);
        attention_causal(a.q + size_t(t0) * ld, ld, a.k_cells, a.v_cells, ldkv, a.out + size_t(t0) * ld, ld, rows,
                         a.p0 + t0, hd, g, rep, a.scale);
        if (a.gate)
            for (int t = t0; t < t0 + rows; ++t)
                for (int hh = g * rep; hh < (g + 1) * rep; ++hh) {
                    float* o = a.out + size_t(t) * ld + size_t(hh) * hd;
                    const float* gt = a.gate + size_t(t) * ld + size_t(hh) * hd;
                    for (int d = 0; d < hd; ++d) o[d] *= sigmoidf_(gt[d]);
                }
    });
}

}  // namespace

// Exact: one task per (row, head), scores over cells [0, p] in one fixed order,
// max-subtracted softmax, weighted sum of values, optional sigmoid gate. Nothing depends on
// the other rows.
void attention(ThreadPool& pool, const AttentionArgs& a, bool prefill) {
    if (prefill && a.n > kDecodeRows) return attention_prefill(pool, a);
    const int n = a.n, nh = a.n_heads, hd = a.head_dim;
    const int rep = nh / a.n_kv;
    const size_t kw = size_t(a.n_kv) * hd;
    auto task = [&](int i) {
        int t = i / nh, hh = i % nh, g = hh / rep;
        int64_t p = a.p0 + t;
        const float* q = a.q + (size_t(t) * nh + hh) * hd;
        thread_local std::vector<float> sc;
        if (sc.size() < size_t(p) + 1) sc.resize(size_t(p) + 1);
        float mx = -INFINITY;
        for (int64_t j = 0; j <= p; ++j) {
            sc[j] = dot_f32(q, a.k_cells + size_t(j) * kw + size_t(g) * hd, hd) * a.scale;
            mx = std::max(mx, sc[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j <= p; ++j) {
            sc[j] = std::exp(sc[j] - mx);
            sum += sc[j];
        }
        float* o = a.out + (size_t(t) * nh + hh) * hd;
        std::fill(o, o + hd, 0.f);
        for (int64_t j = 0; j <= p; ++j) {
            const float* v = a.v_cells + size_t(j) * kw + size_t(g) * hd;
            float w = sc[j];
            for (int d = 0; d < hd; ++d) o[d] = STRATA_FMA(w, v[d], o[d]);
        }
        float inv = 1.0f / sum;
        for (int d = 0; d < hd; ++d) o[d] *= inv;
        if (a.gate) {
            const float* gt = a.gate + (size_t(t) * nh + hh) * hd;
            for (int d = 0; d < hd; ++d) o[d] *= sigmoidf_(gt[d]);
        }
    };
    if (int64_t(n) * nh * (a.p0 + n) * hd > 20000)
        pool.parallel_for(n * nh, task);
    else
        for (int i = 0; i < n * nh; ++i) task(i);
}

}  // namespace strata::cpu
