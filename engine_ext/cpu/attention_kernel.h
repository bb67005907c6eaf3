// Prefill attention (windows of T > 16 rows): causal softmax attention of a block of query rows
// over the cached K/V cells, grouped-query (several q heads share one KV head), with the scores
// and the exponentials vectorised. Checked against a reference with a tolerance; each output
// element has one fixed order over the cells, so it does not depend on the other rows.
//
// Threading: the caller splits the work over (KV head, block of query rows) and runs one call
// per task; a call is single-threaded. Scratch is per thread and only grows.
#pragma once
#include <cstdint>

namespace strata::cpu {

// For the q heads h in [kv_head * q_per_kv, (kv_head + 1) * q_per_kv) and query rows t in
// [0, n_rows), row t being at absolute position pos0 + t:
//   O[t, h] = sum_{j <= pos0 + t} softmax_j(scale * <Q[t, h], K[j]>) V[j]
// Q[t, h] is at Q + t * ldq + h * head_dim; O[t, h] at O + t * ldo + h * head_dim (f32).
// Cell j of the KV head is at K + j * ldkv + kv_head * head_dim (V alike); the cache must hold
// cells 0 .. pos0 + n_rows - 1 (the block's own keys included).
void attention_causal(const float* Q, int ldq, const float* K, const float* V, int ldkv, float* O, int ldo,
                      int n_rows, int64_t pos0, int head_dim, int kv_head, int q_per_kv, float scale);

// The same attention for ONE query row at position pos (decode windows), exact: every output
// element is one fixed function of its own row's q and of cells [0, pos], whatever the other
// rows of the window or the thread count. Scores are dot_f32 products (the keys are read in
// place as the rows of a matrix, every key once for the q_per_kv heads), times scale; then a
// vectorised max / exp / sum and the weighted values with one fixed order over the cells.
void attention_row(const float* q, const float* K, const float* V, int ldkv, float* o, int64_t pos, int head_dim,
                   int kv_head, int q_per_kv, float scale);

// attention_row for each of n_rows query rows (row t at position pos0 + t; q and o as in
// attention_causal), bit for bit: the rows' scores are taken together (each key read once for
// all of them, in wide tiles), everything else per row as attention_row does it.
void attention_rows(const float* Q, int ldq, const float* K, const float* V, int ldkv, float* O, int ldo,
                    int n_rows, int64_t pos0, int head_dim, int kv_head, int q_per_kv, float scale);

}  // namespace strata::cpu
