// Prefill GEMM (windows of T > 16 rows): Y = X W^T (+ bias) with a register-blocked micro-kernel
// over packed panels. Rows of W are output features (a row-major [N][K] weight, as checkpoints
// store them). Checked against a reference with a tolerance, not bit-identical to the decode
// matmul: the design allows prefill its own reduction order. Each output element still has one
// fixed order (K in blocks of kGemmKC, one FMA chain per block, blocks added in order), so the
// result never depends on T, on the other rows or on how the caller splits [0, N).
//
// Threading: the caller splits the output features [0, N) into ranges (multiples of
// gemm_feature_block() keep every panel full) and calls one range per thread; one call is
// single-threaded. Scratch is per thread and only grows.
#pragma once
#include <cstdint>

namespace strata::cpu {

// Y[t*ldy + n] = sum_k X[t*ldx + k] * W[n*ldw + k] (+ bias[n] when bias != nullptr)
// for t in [0, T), n in [n0, n1). X: T rows of K floats; W: rows of K values.
void gemm_f32(const float* X, int T, int ldx, const float* W, int ldw, int K, const float* bias, float* Y,
              int ldy, int n0, int n1);
// The same with bf16 weights (the top 16 bits of an f32), widened to f32 while packing.
void gemm_bf16(const float* X, int T, int ldx, const uint16_t* W, int ldw, int K, const float* bias, float* Y,
               int ldy, int n0, int n1);

// Output features per micro-kernel panel; ranges that are multiples of it have no ragged panel.
int gemm_feature_block();
// The instruction set the kernels were compiled for: "avx512", "avx2" or "scalar".
const char* gemm_isa();

}  // namespace strata::cpu
