// Scalar helpers shared by the CPU kernels.
#pragma once
#include <cmath>

namespace strata {

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
// softplus as torch defines it (beta 1, threshold 20)
inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

}  // namespace strata
