// Vectorised SiLU for the elementwise kernels (swiglu, gated rmsnorm, causal conv): one fixed
// function per element (the exp of prefill_simd.h, relative error ~2e-7), so a row's result
// never depends on the other rows, on T or on where the row sits in a vector.
#pragma once
#include "cpu/math.h"
#include "cpu/prefill_simd.h"

namespace strata::cpu {

inline simd::vf silu_v(simd::vf x) {
    namespace S = simd;
    return S::div(x, S::add(S::set1(1.f), S::exp(S::sub(S::zero(), x))));
}

// The scalar twin of silu_v for tails: the same steps on one lane.
inline float silu_1(float x) {
    alignas(64) float b[simd::kLanes] = {x};
    simd::store(b, silu_v(simd::load(b)));
    return b[0];
}

// o[i] = silu(g[i]) * u[i]
inline void silu_mul(const float* g, const float* u, float* o, int n) {
    namespace S = simd;
    int i = 0;
    for (; i + S::kLanes <= n; i += S::kLanes) S::store(o + i, S::mul(silu_v(S::load(g + i)), S::load(u + i)));
    for (; i < n; ++i) o[i] = silu_1(g[i]) * u[i];
}

// x[i] = x[i] * silu(z[i])
inline void mul_silu(float* x, const float* z, int n) {
    namespace S = simd;
    int i = 0;
    for (; i + S::kLanes <= n; i += S::kLanes) S::store(x + i, S::mul(S::load(x + i), silu_v(S::load(z + i))));
    for (; i < n; ++i) x[i] = x[i] * silu_1(z[i]);
}

}  // namespace strata::cpu
