// The few vector operations the prefill kernels (gemm.cpp, attention_kernel.cpp) need, over
// one f32 vector type: AVX-512 where the compiler targets it, else AVX2+FMA, else a portable
// 8-lane struct the compiler vectorises as it can. Everything is inline and header-only so each
// kernel file stays self-contained.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace strata::cpu::simd {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr const char* kIsa = "avx512";
using vf = __m512;
inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float x) { return _mm512_set1_ps(x); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline float hmax(vf v) { return _mm512_reduce_max_ps(v); }
inline float hsum(vf v) { return _mm512_reduce_add_ps(v); }
// 16 bf16 values -> f32 (bf16 is the top half of an f32)
inline vf load_bf16(const uint16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline vf round_int(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^n for integral n in [-126, 127]
inline vf pow2i(vf n) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kLanes = 8;
constexpr const char* kIsa = "avx2";
using vf = __m256;
inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float x) { return _mm256_set1_ps(x); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline float hmax(vf v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
inline float hsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
inline vf load_bf16(const uint16_t* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline vf round_int(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf pow2i(vf n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
#else
constexpr int kLanes = 8;
constexpr const char* kIsa = "scalar";
struct vf {
    float v[8];
};
inline vf zero() { return vf{}; }
inline vf set1(float x) {
    vf r;
    for (int i = 0; i < 8; ++i) r.v[i] = x;
    return r;
}
inline vf load(const float* p) {
    vf r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
}
inline void store(float* p, vf a) { std::memcpy(p, a.v, sizeof a.v); }
#define STRATA_SIMD_LANEWISE(name, expr)      \
    inline vf name(vf a, vf b) {              \
        vf r;                                 \
        for (int i = 0; i < 8; ++i) r.v[i] = expr; \
        return r;                             \
    }
STRATA_SIMD_LANEWISE(add, a.v[i] + b.v[i])
STRATA_SIMD_LANEWISE(sub, a.v[i] - b.v[i])
STRATA_SIMD_LANEWISE(mul, a.v[i] * b.v[i])
STRATA_SIMD_LANEWISE(div, a.v[i] / b.v[i])
STRATA_SIMD_LANEWISE(max, a.v[i] > b.v[i] ? a.v[i] : b.v[i])
#undef STRATA_SIMD_LANEWISE
inline vf fma(vf a, vf b, vf c) {
    vf r;
    for (int i = 0; i < 8; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
}
inline float hmax(vf a) {
    float m = a.v[0];
    for (int i = 1; i < 8; ++i) m = a.v[i] > m ? a.v[i] : m;
    return m;
}
inline float hsum(vf a) {
    float s = 0.f;
    for (int i = 0; i < 8; ++i) s += a.v[i];
    return s;
}
inline vf load_bf16(const uint16_t* p) {
    vf r;
    for (int i = 0; i < 8; ++i) {
        uint32_t b = uint32_t(p[i]) << 16;
        std::memcpy(&r.v[i], &b, 4);
    }
    return r;
}
inline vf round_int(vf a) {
    vf r;
    for (int i = 0; i < 8; ++i) r.v[i] = std::nearbyint(a.v[i]);
    return r;
}
inline vf pow2i(vf n) {
    vf r;
    for (int i = 0; i < 8; ++i) {
        uint32_t b = uint32_t(int32_t(n.v[i]) + 127) << 23;
        std::memcpy(&r.v[i], &b, 4);
    }
    return r;
}
#endif

inline float bf16_to_f32(uint16_t h) {
    uint32_t b = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// e^x for every lane, relative error ~2e-7 over the range softmax uses (x <= 0 after the max is
// subtracted); x below -87 gives ~0 (callers that need an exact 0 mask it themselves).
// Range reduction x = n ln2 + r, |r| <= ln2/2, with ln2 split in two for an exact n ln2; then a
// degree-6 Taylor polynomial of e^r (Horner) and 2^n put into the exponent bits.
inline vf exp(vf x) {
    x = max(x, set1(-87.0f));
    x = sub(set1(0.f), max(sub(set1(0.f), x), set1(-88.0f)));  // min(x, 88)
    vf n = round_int(mul(x, set1(1.44269504088896341f)));
    vf r = fma(n, set1(-0.693145751953125f), x);
    r = fma(n, set1(-1.428606765330187045e-06f), r);
    vf p = set1(1.0f / 720.0f);
    p = fma(p, r, set1(1.0f / 120.0f));
    p = fma(p, r, set1(1.0f / 24.0f));
    p = fma(p, r, set1(1.0f / 6.0f));
    p = fma(p, r, set1(0.5f));
    p = fma(p, r, set1(1.0f));
    p = fma(p, r, set1(1.0f));
    return mul(p, pow2i(n));
}

}  // namespace strata::cpu::simd
