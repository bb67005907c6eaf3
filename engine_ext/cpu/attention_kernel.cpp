// Causal GQA attention for a block of query rows (prefill).
//
// The KV head's keys are transposed once per call into blocks of L = kLanes cells
// (KT[block][d][lane]), so one broadcast of q[d] times one vector load scores L cells at once,
// with no horizontal sums; every K and V row is read once per call for all the q heads of the
// group and all the rows of the block. Queries are handled in tiles of about 16 (rows x heads of
// the group): scores for the tile, a vectorised max / exp / sum per query, then P V with the
// output accumulators for 4 queries x up to 4 vectors of head_dim held in registers.
#include "cpu/attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/prefill_simd.h"

namespace strata::cpu {

namespace {
namespace S = simd;
constexpr int L = S::kLanes;
constexpr int kTileQueries = 16;  // queries (row, q head) scored together
constexpr int kGroup = 4;         // queries whose P V accumulators share each V load
constexpr int kDV = 4;            // vectors of head_dim accumulated at once

struct Scratch {
    std::vector<float> kt, scores, sums, row_scores;
    std::vector<const float*> qs, ps;
    std::vector<float*> outs;
    float* grow(std::vector<float>& v, size_t n) {
        if (v.size() < n + 16) v.resize(n + 16);
        uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
        return v.data() + ((64 - p % 64) % 64) / sizeof(float);
    }
};
thread_local Scratch scratch;

// KT[(b * hd + d) * L + l] = K[b * L + l][d]; cells past n_cells are 0.
void transpose_keys(const float* K, int ldkv, int64_t n_cells, int hd, float* KT) {
    const int64_t blocks = (n_cells + L - 1) / L;
    for (int64_t b = 0; b < blocks; ++b) {
        float* dst = KT + size_t(b) * hd * L;
        const int n = int(std::min<int64_t>(L, n_cells - b * L));
        if (n < L) std::memset(dst, 0, sizeof(float) * hd * L);
        for (int l = 0; l < n; ++l) {
            const float* k = K + size_t(b * L + l) * ldkv;
            for (int d = 0; d < hd; ++d) dst[d * L + l] = k[d];
        }
    }
}

// Scores of up to kGroup queries against NB consecutive key blocks: each broadcast of q[d]
// feeds NB FMAs, so loads stay below FMAs.
template <int NB>
void score_blocks(const float* const* qs, int g, const float* kt, int hd, S::vf scale, float* out, int64_t lds) {
    S::vf acc[kGroup][NB];
    for (int i = 0; i < kGroup; ++i)
        for (int b = 0; b < NB; ++b) acc[i][b] = S::zero();
    for (int d = 0; d < hd; ++d) {
        S::vf k[NB];
        for (int b = 0; b < NB; ++b) k[b] = S::load(kt + (size_t(b) * hd + d) * L);
        for (int i = 0; i < g; ++i) {
            S::vf q = S::set1(qs[i][d]);
            for (int b = 0; b < NB; ++b) acc[i][b] = S::fma(q, k[b], acc[i][b]);
        }
    }
    for (int i = 0; i < g; ++i)
        for (int b = 0; b < NB; ++b) S::store(out + i * lds + b * L, S::mul(acc[i][b], scale));
}

// scores[q][j] = scale * <Q_q, K_j> for j < n_blocks * L.
void score_tile(const float* const* qs, int nq, const float* KT, int64_t n_blocks, int hd, float scale,
                float* scores, int64_t lds) {
    const S::vf vscale = S::set1(scale);
    for (int q0 = 0; q0 < nq; q0 += kGroup) {
        const int g = std::min(kGroup, nq - q0);
        int64_t b = 0;
        for (; b + 2 <= n_blocks; b += 2)
            score_blocks<2>(qs + q0, g, KT + size_t(b) * hd * L, hd, vscale, scores + q0 * lds + b * L, lds);
        if (b < n_blocks)
            score_blocks<1>(qs + q0, g, KT + size_t(b) * hd * L, hd, vscale, scores + q0 * lds + b * L, lds);
    }
}

// In place: p[j] = exp(s[j] - max) for j < n, 0 for j in [n, padded); returns the sum.
float softmax_weights(float* s, int64_t n, int64_t padded) {
    const int64_t full = n / L * L;
    S::vf mx = S::set1(-INFINITY);
    for (int64_t j = 0; j < full; j += L) mx = S::max(mx, S::load(s + j));
    float m = S::hmax(mx);
    for (int64_t j = full; j < n; ++j) m = std::max(m, s[j]);
    for (int64_t j = n; j < std::min(padded, full + L); ++j) s[j] = -INFINITY;
    S::vf sum = S::zero(), vm = S::set1(m);
    for (int64_t j = 0; j < full; j += L) {
        S::vf p = S::exp(S::sub(S::load(s + j), vm));
        S::store(s + j, p);
        sum = S::add(sum, p);
    }
    float total = S::hsum(sum);
    if (full < padded) {  // the ragged block: exp over the vector, then exact zeros past n
        S::vf p = S::exp(S::sub(S::load(s + full), vm));
        alignas(64) float tmp[L];
        S::store(tmp, p);
        for (int64_t j = full; j < full + L; ++j) {
            float w = j < n ? tmp[j - full] : 0.f;
            s[j] = w;
            total += w;
        }
        std::fill(s + std::min(full + L, padded), s + padded, 0.f);  // blocks only longer rows of the tile see
    }
    return total;
}

// One block of kDV vectors of head_dim for exactly G queries, with compile-time bounds so that
// the G x kDV accumulators stay in registers (the general loop below keeps them in memory).
// Same order per element as the general loop: fma over j in order from zero.
template <int G>
void weighted_block(const float* const* ps, const float* sums, float* const* outs, const float* V, int ldkv,
                    int64_t n, int d0) {
    const float* p[G];
    for (int i = 0; i < G; ++i) p[i] = ps[i];
    S::vf acc[G][kDV];
    for (int i = 0; i < G; ++i)
        for (int v = 0; v < kDV; ++v) acc[i][v] = S::zero();
    for (int64_t j = 0; j < n; ++j) {
        const float* vj = V + size_t(j) * ldkv + d0;
        S::vf vv[kDV];
        for (int v = 0; v < kDV; ++v) vv[v] = S::load(vj + v * L);
        S::vf w[G];
        for (int i = 0; i < G; ++i) w[i] = S::set1(p[i][j]);
        for (int i = 0; i < G; ++i)
            for (int v = 0; v < kDV; ++v) acc[i][v] = S::fma(w[i], vv[v], acc[i][v]);
    }
    for (int i = 0; i < G; ++i) {
        S::vf inv = S::set1(1.0f / sums[i]);
        for (int v = 0; v < kDV; ++v) S::store(outs[i] + d0 + v * L, S::mul(acc[i][v], inv));
    }
}

// out_q = sum_j p_q[j] V_j / sums[q] for a group of up to kGroup queries sharing cells [0, n).
void weighted_values(const float* const* ps, const float* sums, float* const* outs, int g, const float* V,
                     int ldkv, int64_t n, int hd) {
    const int dvec = hd / L * L;
    for (int d0 = 0; d0 < dvec; d0 += kDV * L) {
        const int nv = std::min(kDV, (dvec - d0) / L);
        if (nv == kDV) {  // g queries, 1 <= g <= kGroup (the q heads of a KV head in a decode row: often 2)
            static_assert(kGroup == 4, "one weighted_block per group size");
            if (g == 4) weighted_block<4>(ps, sums, outs, V, ldkv, n, d0);
            else if (g == 3) weighted_block<3>(ps, sums, outs, V, ldkv, n, d0);
            else if (g == 2) weighted_block<2>(ps, sums, outs, V, ldkv, n, d0);
            else weighted_block<1>(ps, sums, outs, V, ldkv, n, d0);
            continue;
        }
        S::vf acc[kGroup][kDV];
        for (int i = 0; i < kGroup; ++i)
            for (int v = 0; v < kDV; ++v) acc[i][v] = S::zero();
        for (int64_t j = 0; j < n; ++j) {
            const float* vj = V + size_t(j) * ldkv + d0;
            S::vf vv[kDV];
            for (int v = 0; v < nv; ++v) vv[v] = S::load(vj + v * L);
            for (int i = 0; i < g; ++i) {
                S::vf p = S::set1(ps[i][j]);
                for (int v = 0; v < nv; ++v) acc[i][v] = S::fma(p, vv[v], acc[i][v]);
            }
        }
        for (int i = 0; i < g; ++i) {
            S::vf inv = S::set1(1.0f / sums[i]);
            for (int v = 0; v < nv; ++v) S::store(outs[i] + d0 + v * L, S::mul(acc[i][v], inv));
        }
    }
    for (int d = dvec; d < hd; ++d)  // head_dim not a multiple of the vector width
        for (int i = 0; i < g; ++i) {
            float a = 0.f;
            for (int64_t j = 0; j < n; ++j) a = std::fma(ps[i][j], V[size_t(j) * ldkv + d], a);
            outs[i][d] = a / sums[i];
        }
}
}  // namespace

void attention_causal(const float* Q, int ldq, const float* K, const float* V, int ldkv, float* O, int ldo,
                      int n_rows, int64_t pos0, int head_dim, int kv_head, int q_per_kv, float scale) {
    if (n_rows <= 0 || head_dim <= 0 || q_per_kv <= 0) return;
    const int hd = head_dim, rep = q_per_kv;
    const int64_t n_cells = pos0 + n_rows;
    const int64_t n_blocks = (n_cells + L - 1) / L, padded = n_blocks * L;
    K += size_t(kv_head) * hd;
    V += size_t(kv_head) * hd;
    float* KT = scratch.grow(scratch.kt, size_t(padded) * hd);
    transpose_keys(K, ldkv, n_cells, hd, KT);

    const int rows_per_tile = std::max(1, kTileQueries / rep);
    float* scores = scratch.grow(scratch.scores, size_t(rows_per_tile) * rep * padded);
    const size_t tile_q = size_t(rows_per_tile) * rep;
    auto& qs = scratch.qs;
    auto& ps = scratch.ps;
    auto& outs = scratch.outs;
    auto& sums = scratch.sums;
    if (qs.size() < tile_q) {
        qs.resize(tile_q);
        ps.resize(tile_q);
        outs.resize(tile_q);
        sums.resize(tile_q);
    }
    for (int t0 = 0; t0 < n_rows; t0 += rows_per_tile) {
        const int rows = std::min(rows_per_tile, n_rows - t0), nq = rows * rep;
        // the tile's last row sees the most cells; earlier rows mask their tails
        const int64_t tile_cells = pos0 + t0 + rows, tile_blocks = (tile_cells + L - 1) / L;
        for (int r = 0; r < rows; ++r)
            for (int h = 0; h < rep; ++h) {
                const int q = r * rep + h, head = kv_head * rep + h;
                qs[q] = Q + size_t(t0 + r) * ldq + size_t(head) * hd;
                outs[q] = O + size_t(t0 + r) * ldo + size_t(head) * hd;
            }
        score_tile(qs.data(), nq, KT, tile_blocks, hd, scale, scores, padded);
        for (int q = 0; q < nq; ++q) {
            const int64_t visible = pos0 + t0 + q / rep + 1;
            float* s = scores + size_t(q) * padded;
            sums[q] = softmax_weights(s, visible, tile_blocks * L);
            ps[q] = s;
        }
        for (int q0 = 0; q0 < nq; q0 += kGroup) {
            const int g = std::min(kGroup, nq - q0);
            const int64_t cells = pos0 + t0 + (q0 + g - 1) / rep + 1;  // the group's longest row
            weighted_values(ps.data() + q0, sums.data() + q0, outs.data() + q0, g, V, ldkv, cells, hd);
        }
    }
}

void attention_rows(const float* Q, int ldq, const float* K, const float* V, int ldkv, float* O, int ldo,
                    int n_rows, int64_t pos0, int head_dim, int kv_head, int q_per_kv, float scale) {
    if (n_rows <= 0 || head_dim <= 0 || q_per_kv <= 0 || pos0 < 0) return;
    const int hd = head_dim, rep = q_per_kv;
    const int64_t cells = pos0 + n_rows, stride = (cells + L - 1) / L * L;
    K += size_t(kv_head) * hd;
    V += size_t(kv_head) * hd;
    // scores of query (t, h) at scores + (t * rep + h) * stride, for cells [0, cells): the keys
    // are read in place as the rows of a matrix, each once for all the queries. A row's scores
    // past its own position (the window's later keys) are computed and never used; every score
    // is the same dot_f32 product whatever the other queries (dot_rows_f32's contract).
    float* scores = scratch.grow(scratch.row_scores, size_t(n_rows) * rep * stride);
    if (n_rows == 1)  // the group's q heads are contiguous rows of hd floats
        dot_rows_f32(Q, rep, hd, K, ldkv, hd, scores, int(stride), 0, int(cells));
    else  // one head at a time over the rows: wide tiles across the rows
        for (int h = 0; h < rep; ++h)
            dot_rows_f32(Q + size_t(h) * hd, n_rows, ldq, K, ldkv, hd, scores + size_t(h) * stride,
                         int(rep * stride), 0, int(cells));
    const S::vf vscale = S::set1(scale);
    float sums[kGroup];
    const float* ps[kGroup];
    float* outs[kGroup];
    for (int t = 0; t < n_rows; ++t) {
        const int64_t n = pos0 + t + 1, padded = (n + L - 1) / L * L;
        for (int h0 = 0; h0 < rep; h0 += kGroup) {
            const int g = std::min(kGroup, rep - h0);
            for (int i = 0; i < g; ++i) {
                float* s = scores + (size_t(t) * rep + h0 + i) * stride;
                int64_t j = 0;
                for (; j + L <= n; j += L) S::store(s + j, S::mul(S::load(s + j), vscale));
                for (; j < n; ++j) s[j] *= scale;
                sums[i] = softmax_weights(s, n, padded);
                ps[i] = s;
                outs[i] = O + size_t(t) * ldo + size_t(h0 + i) * hd;
            }
            weighted_values(ps, sums, outs, g, V, ldkv, n, hd);
        }
    }
}

void attention_row(const float* q, const float* K, const float* V, int ldkv, float* o, int64_t pos, int head_dim,
                   int kv_head, int q_per_kv, float scale) {
    attention_rows(q, 0, K, V, ldkv, o, 0, 1, pos, head_dim, kv_head, q_per_kv, scale);
}

}  // namespace strata::cpu
