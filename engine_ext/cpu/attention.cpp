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

// Exact: one task per (row, KV head), attention_row for the q heads that share that KV head (one
// fixed order per output element, nothing depends on the other rows), then the optional gate.
void attention(ThreadPool& pool, const AttentionArgs& a, bool prefill) {
    if (prefill && a.n > kDecodeRows) return attention_prefill(pool, a);
    const int n = a.n, nh = a.n_heads, hd = a.head_dim, nkv = a.n_kv;
    const int rep = nh / nkv, ld = nh * hd;
    auto task = [&](int i) {
        const int t = i / nkv, g = i % nkv;
        const size_t off = size_t(t) * ld + size_t(g) * rep * hd;
        attention_row(a.q + off, a.k_cells, a.v_cells, nkv * hd, a.out + off, a.p0 + t, hd, g, rep, a.scale);
        if (a.gate)
            for (int j = 0; j < rep * hd; ++j) a.out[off + j] *= sigmoidf_(a.gate[off + j]);
    };
    if (int64_t(n) * nh * (a.p0 + n) * hd > 20000)
        pool.parallel_for(n * nkv, task);
    else
        for (int i = 0; i < n * nkv; ++i) task(i);
}

}  // namespace strata::cpu
