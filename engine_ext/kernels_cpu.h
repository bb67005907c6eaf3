// CPU kernels. Every output element is computed by one fixed code path whatever the number of
// rows T, the tile shape or the thread count: batch invariance is a property of these kernels.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "expert_store.h"
#include "threadpool.h"

namespace strata {

float bf16_to_f32(uint16_t v);
float f16_to_f32(uint16_t v);

// Y[t*ldy + r] = dot(X[t*ldx ..], row r of W) (+ bias[r]) for rows r in [r0, r1), t in [0, T).
// The dot product of one output element has one fixed reduction order (two 16-lane
// accumulators over alternating chunks, one masked tail, one horizontal sum), independent of T.
void matmul_range(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y,
                  int ldy, int r0, int r1);

// One matrix product in a batch of products run together on the pool.
struct MatJob {
    const float* X = nullptr;
    int T = 0;
    int ldx = 0;
    MatView W;
    const float* bias = nullptr;
    float* Y = nullptr;
    int ldy = 0;
};
// Runs every job, splitting each over its output rows (never over the reduction axis).
void matmul_jobs(ThreadPool& pool, const std::vector<MatJob>& jobs);

// Fixed-order dot product of two f32 vectors (same scheme as matmul_range).
float dot_f32(const float* a, const float* b, int n);

// One row of a matrix as f32 (embedding lookup).
void row_to_f32(const MatView& W, int row, float* out);

// RMSNorm of one row: out = x / sqrt(mean(x^2) + eps) * w  (w already folded for 1+w variants)
void rmsnorm_row(const float* x, const float* w, float eps, int n, float* out);

// Fused multiply-add where the hardware has one (one rounding); a*b+c otherwise (a software
// fma would be very slow). Either way one fixed operation per build, so results stay bitwise
// reproducible on a machine.
#if defined(__FMA__) || defined(__aarch64__)
#define STRATA_FMA(a, b, c) std::fma((a), (b), (c))
#else
#define STRATA_FMA(a, b, c) ((a) * (b) + (c))
#endif

inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
inline float sigmoidf_(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

}  // namespace strata
