// The CPU kernels behind CpuBackend, one .cpp per op family (matmul.h has the matrix products).
// Every output element has one fixed code path whatever the row count or the thread count.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend.h"
#include "threadpool.h"

namespace strata::cpu {

// norm.cpp
void rmsnorm_row(const float* x, const float* w, float eps, int n, float* out);
void rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps);
void gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps);

// embed.cpp
void embed(const MatView& W, const int32_t* ids, int n, float* out);

// rotary.cpp
void rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half);

// attention.cpp (prefill: the vectorised causal kernel for more than kDecodeRows queries)
void attention(ThreadPool& pool, const AttentionArgs& a, bool prefill);

// conv.cpp
void causal_conv(const ConvArgs& a);

// gdn.cpp
void gdn_inputs(const GdnInputsArgs& a);
void gdn_step(ThreadPool& pool, const GdnStepArgs& a);

// router.cpp
void router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx, float* weights);

// moe.cpp
void gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst);
void swiglu(RowsC g, RowsC u, RowsF out, int rows, int n);
void moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H, const float* shared,
                 const float* shared_gate, float* out);

// elementwise.cpp
void add(float* x, const float* y, size_t n);

}  // namespace strata::cpu
