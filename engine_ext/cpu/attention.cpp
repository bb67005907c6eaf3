#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/attention_kernel.h"
#include "cpu/kernels.h"
#include "cpu/math.h"
#include "cpu/matmul.h"
#include "cpu/prefill_simd.h"

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

// o[i] *= sigmoid(g[i]), sigmoid through the vectorised exp (one fixed function per element).
void gate_sigmoid(float* o, const float* g, int n) {
    namespace S = simd;
    int i = 0;
    for (; i + S::kLanes <= n; i += S::kLanes) {
        S::vf e = S::exp(S::sub(S::zero(), S::load(g + i)));
        S::store(o + i, S::mul(S::load(o + i), S::div(S::set1(1.f), S::add(S::set1(1.f), e))));
    }
    for (; i < n; ++i) o[i] *= sigmoidf_(g[i]);
}

}  // namespace

// Exact: one task per (block of rows, KV head), attention_rows for the q heads that share that
// KV head (one fixed order per output element, nothing depends on the other rows), then the
// optional gate. Blocks of 4 rows: the scores take the 4-row tiles of dot_rows_f32.
void attention(ThreadPool& pool, const AttentionArgs& a, bool prefill) {
    if (prefill && a.n > kDecodeRows) return attention_prefill(pool, a);
    constexpr int kRowBlock = 4;
    const int n = a.n, nh = a.n_heads, hd = a.head_dim, nkv = a.n_kv;
    const int rep = nh / nkv, ld = nh * hd;
    const int blocks = (n + kRowBlock - 1) / kRowBlock;
    auto task = [&](int i) {
        const int b = i / nkv, g = i % nkv;
        const int t0 = b * kRowBlock, rows = std::min(kRowBlock, n - t0);
        const size_t off = size_t(t0) * ld + size_t(g) * rep * hd;
        attention_rows(a.q + off, ld, a.k_cells, a.v_cells, nkv * hd, a.out + off, ld, rows, a.p0 + t0, hd, g, rep,
                       a.scale);
        if (a.gate)
            for (int t = 0; t < rows; ++t)
                gate_sigmoid(a.out + off + size_t(t) * ld, a.gate + off + size_t(t) * ld, rep * hd);
    };
    if (int64_t(n) * nh * (a.p0 + n) * hd > 20000)
        pool.parallel_for(blocks * nkv, task);
    else
        for (int i = 0; i < blocks * nkv; ++i) task(i);
}

}  // namespace strata::cpu
