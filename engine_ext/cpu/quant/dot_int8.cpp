#include "dot_int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "blocks.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define STRATA_INT8_AVX2 1
#endif

namespace strata::quant {

bool uses_int8_activations(QType t) {
    return t == QType::Q8_0 || t == QType::Q5_0 || t == QType::Q5_1 || t == QType::Q4_K || t == QType::Q5_K ||
           t == QType::Q6_K || t == QType::IQ4_XS;
}

int activation_block(QType t) { return (t == QType::Q8_0 || t == QType::Q5_0 || t == QType::Q5_1) ? kQ8 : kQK; }

bool activation_sums(QType t) { return t == QType::Q5_1; }

// Activation rows are quantized as llama.cpp's CPU backend quantizes them for the same weight
// type, so that both engines multiply the same integers by the same scales:
// - 32-blocks (the Q8_0 / Q5_0 partner, ggml's x86 quantize_row_q8_0): d = amax / 127 stored
//   as f16 (round to nearest even) and used as that f16 value; q = round-half-even(x * (127 /
//   amax)), computed from the f32 amax, not from the rounded d. The Q5_1 partner (ggml's x86
//   quantize_row_q8_1) is the same blocks plus s = f16(amax / 127 * sum of q), the f32 scale
//   times the integer sum, rounded once.
// - 256-blocks (the K-quant partner, ggml's Q8_K reference): max = the first value of largest
//   magnitude, iscale = -127 / max, q = min(127, round-half-even(iscale * x)), d = 1 / iscale
//   (f32). When max > 0, q and d both carry the opposite sign of x.
// The AVX-512 loops do the scalar steps 16 values at a time with the same IEEE results (max
// ignores NaN as std::max(amax, |x|) does, the clamp sends NaN to -127 as the scalar code).
struct BlockScale {
    float mul;  // q = rne(x * mul)
    float d;    // the scale the dot products use
    float d32;  // 32-blocks: that scale before its f16 rounding (the Q8_1 sum's factor)
};

static BlockScale block_scale(const float* xb, int block, float amax) {
    if (block == kQ8) {
        const float d32 = amax / 127.0f;
        return {amax != 0.f ? 127.0f / amax : 0.f, half_to_float(float_to_half(d32)), d32};
    }
    if (!(amax > 0.f)) return {0.f, 0.f, 0.f};
    int i = 0;
    while (!(std::fabs(xb[i]) == amax)) ++i;  // the first of largest magnitude, as ggml's scan
    const float iscale = -127.0f / xb[i];
    return {iscale, 1.0f / iscale, 0.f};
}

// ggml's Q8_1 block sum: the f32 scale times the exact integer sum, rounded to f16.
static float q8_1_sum(const int8_t* q, float d32) {
    int s = 0;
    for (int i = 0; i < kQ8; ++i) s += q[i];
    return half_to_float(float_to_half(d32 * float(s)));
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
static BlockScale quantize_block16(const float* xb, int block, int8_t* q, float* d) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < block; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), m);
    const BlockScale sc = block_scale(xb, block, _mm512_reduce_max_ps(m));
    *d = sc.d;
    const __m512 vmul = _mm512_set1_ps(sc.mul);
    const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
    for (int i = 0; i < block; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + i), vmul);
        __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
    return sc;
}
#define STRATA_QUANTIZE16 1
#endif

// Round half to even: std::nearbyint in the default rounding mode, as _MM_FROUND_TO_NEAREST_INT.
static inline float round_half_even(float v) { return std::nearbyint(v); }

void quantize_activation(const float* x, int cols, int block, int8_t* q, float* d, int16_t* bsum16, float* sum32) {
    for (int b = 0; b < cols / block; ++b) {
        const float* xb = x + size_t(b) * block;
#ifdef STRATA_QUANTIZE16
        const BlockScale sc = quantize_block16(xb, block, q + size_t(b) * block, d + b);
#else
        float amax = 0.f;
        for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const BlockScale sc = block_scale(xb, block, amax);
        d[b] = sc.d;
        for (int i = 0; i < block; ++i) {
            const float v = round_half_even(xb[i] * sc.mul);
            q[size_t(b) * block + i] = int8_t(std::min(127.f, std::max(-127.f, v)));
        }
#endif
        if (sum32 && block == kQ8) sum32[b] = q8_1_sum(q + size_t(b) * block, sc.d32);
    }
    if (bsum16)
        for (int g = 0; g < cols / 16; ++g) {
            int s = 0;
            for (int i = 0; i < 16; ++i) s += q[size_t(g) * 16 + i];
            bsum16[g] = int16_t(s);
        }
}

namespace {

// ---- the shared float part: 8 lanes, fixed final tree ----------------------------------
struct Lanes {
    float v[8];
};
inline float lanes_sum(const float* v) {  // the tree of the AVX2 finish: (i + i+4), pairs, last two
    const float s0 = v[0] + v[4], s1 = v[1] + v[5], s2 = v[2] + v[6], s3 = v[3] + v[7];
    const float t0 = s0 + s2, t1 = s1 + s3;
    return t0 + t1;
}
// Q8_0 / Q5_0: block b goes to lane group b % 4 (8 lanes each); groups are summed
// (g0 + g2) + (g1 + g3) per lane, then by the 8-lane tree: the order of two 512-bit accumulators
// (groups 0|1 and 2|3) added, then reduced lane i + lane i+8 first.
inline float lanes_sum32(const float* g) {
    float h[8];
    for (int i = 0; i < 8; ++i) h[i] = (g[i] + g[16 + i]) + (g[8 + i] + g[24 + i]);
    return lanes_sum(h);
}

// One quantized activation row.
struct Act {
    const int8_t* q;
    const float* d;
    const int16_t* bsum16;
    const float* s;  // Q5_1: the Q8_1 block sums
};

// ================================ scalar =================================================
// isum[l] accumulates lane l = elements 4l..4l+3 of each 32-weight group, as the SIMD code.
inline void lane_dot32(const int* w, const int8_t* x, int scale_lo, int scale_hi, int32_t* isum) {
    for (int l = 0; l < 8; ++l) {
        const int sc = l < 4 ? scale_lo : scale_hi;  // 16-weight halves may differ (Q6_K)
        int s = 0;
        for (int e = 4 * l; e < 4 * l + 4; ++e) s += w[e] * int(x[e]);
        isum[l] += s * sc;
    }
}
inline void lanes_fma(float* acc, const int32_t* isum, float dd) {
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(float(isum[l]), dd, acc[l]);
}

struct ScalarKernels {
    // Q8_0 / Q5_0: 32 float lanes, block b in lanes 8*(b % 4).. (lanes_sum32).
    static void q8_0(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        for (int t = 0; t < T; ++t) {
            float acc[32] = {};
            for (int b = 0; b < nb; ++b) {
                const uint8_t* blk = row + size_t(b) * 34;
                const float dd = half_to_float(load_u16(blk)) * xa[t].d[b];
                int w[32];
                for (int i = 0; i < 32; ++i) w[i] = int8_t(blk[2 + i]);
                int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                lane_dot32(w, xa[t].q + size_t(b) * 32, 1, 1, isum);
                lanes_fma(acc + 8 * (b & 3), isum, dd);
            }
            y[t] = lanes_sum32(acc);
        }
    }
    static void q5_0(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        for (int t = 0; t < T; ++t) {
            float acc[32] = {};
            for (int b = 0; b < nb; ++b) {
                const uint8_t* blk = row + size_t(b) * 22;
                const float dd = half_to_float(load_u16(blk)) * xa[t].d[b];
                int w[32];
                for (int i = 0; i < 32; ++i) w[i] = q5_0_value(blk, i);
                int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                lane_dot32(w, xa[t].q + size_t(b) * 32, 1, 1, isum);
                lanes_fma(acc + 8 * (b & 3), isum, dd);
            }
            y[t] = lanes_sum32(acc);
        }
    }
    // Q5_1: unsigned codes, the same lanes as Q5_0; the min term m * s is a separate float sum in
    // block order, added last (ggml: hsum + summs).
    static void q5_1(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        for (int t = 0; t < T; ++t) {
            float acc[32] = {};
            float mins = 0.f;
            for (int b = 0; b < nb; ++b) {
                const uint8_t* blk = row + size_t(b) * 24;
                const float dd = half_to_float(load_u16(blk)) * xa[t].d[b];
                int w[32];
                for (int i = 0; i < 32; ++i) w[i] = q5_1_code(blk, i);
                int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                lane_dot32(w, xa[t].q + size_t(b) * 32, 1, 1, isum);
                lanes_fma(acc + 8 * (b & 3), isum, dd);
                mins = mins + half_to_float(load_u16(blk + 2)) * xa[t].s[b];
            }
            y[t] = lanes_sum32(acc) + mins;
        }
    }
    // Q4_K and Q5_K share everything but the fifth bit.
    template <bool kFive>
    static void q45_k(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        constexpr int kBytes = kFive ? 176 : 144;
        for (int t = 0; t < T; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float smin = 0.f;
            for (int s = 0; s < nb; ++s) {
                const uint8_t* blk = row + size_t(s) * kBytes;
                const uint8_t* qh = blk + 16;
                const uint8_t* qs = blk + (kFive ? 48 : 16);
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int msum = 0;
                for (int j = 0; j < 8; ++j) {
                    int sc, mn;
                    k_scale_min(blk + 4, j, &sc, &mn);
                    int w[32];
                    for (int i = 0; i < 32; ++i) {
                        w[i] = (qs[32 * (j >> 1) + i] >> (4 * (j & 1))) & 0x0f;
                        if (kFive) w[i] |= ((qh[i] >> j) & 1) << 4;
                    }
                    lane_dot32(w, x + 32 * j, sc, sc, isum);
                    msum += mn * (xa[t].bsum16[size_t(s) * 16 + 2 * j] + xa[t].bsum16[size_t(s) * 16 + 2 * j + 1]);
                }
                const float dx = xa[t].d[s];
                lanes_fma(acc, isum, half_to_float(load_u16(blk)) * dx);
                smin = smin + (half_to_float(load_u16(blk + 2)) * dx) * float(msum);
            }
            y[t] = lanes_sum(acc) - smin;
        }
    }
    static void q6_k(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        for (int t = 0; t < T; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int s = 0; s < nb; ++s) {
                const uint8_t* blk = row + size_t(s) * 210;
                const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int half = 0; half < 2; ++half)
                    for (int qd = 0; qd < 4; ++qd) {
                        const uint8_t* lo = blk + 64 * half + 32 * (qd & 1);
                        const uint8_t* hi = blk + 128 + 32 * half;
                        const int base = 128 * half + 32 * qd;
                        int w[32];
                        for (int i = 0; i < 32; ++i)
                            w[i] = (((lo[i] >> (4 * (qd >> 1))) & 0x0f) | (((hi[i] >> (2 * qd)) & 3) << 4)) - 32;
                        lane_dot32(w, x + base, sc[base / 16], sc[base / 16 + 1], isum);
                    }
                lanes_fma(acc, isum, half_to_float(load_u16(blk + 208)) * xa[t].d[s]);
            }
            y[t] = lanes_sum(acc);
        }
    }
    static void iq4_xs(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        for (int t = 0; t < T; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int s = 0; s < nb; ++s) {
                const uint8_t* blk = row + size_t(s) * 136;
                const uint16_t sh = load_u16(blk + 2);
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                int32_t isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int j = 0; j < 8; ++j) {
                    const int ls = ((blk[4 + (j >> 1)] >> (4 * (j & 1))) & 0x0f) | (((sh >> (2 * j)) & 3) << 4);
                    const uint8_t* g = blk + 8 + 16 * j;
                    int w[32];
                    for (int i = 0; i < 16; ++i) {
                        w[i] = kIq4Levels[g[i] & 0x0f];
                        w[16 + i] = kIq4Levels[g[i] >> 4];
                    }
                    lane_dot32(w, x + 32 * j, ls - 32, ls - 32, isum);
                }
                lanes_fma(acc, isum, half_to_float(load_u16(blk)) * xa[t].d[s]);
            }
            y[t] = lanes_sum(acc);
        }
    }
};

#ifdef STRATA_INT8_AVX2
// ================================ AVX2 (also the AVX-512 build) ==========================
inline float hsum8(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// int32 lanes of sum(u8 w * s8 x) over 4 consecutive bytes, times a 16-bit scale per 16 weights.
inline __m256i dot32(__m256i uw, __m256i sx, __m256i scale16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(uw, sx), scale16);
}

struct Avx2Kernels {
    // acc[4t + b % 4] takes block b (the scalar code's 32 lanes).
    static void q8_0(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        __m256 acc[4 * kMaxDotRows];
        for (int t = 0; t < 4 * T; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i ones = _mm256_set1_epi16(1);
        for (int b = 0; b < nb; ++b) {
            const uint8_t* blk = row + size_t(b) * 34;
            const float dw = half_to_float(load_u16(blk));
            const __m256i w = load32(blk + 2);
            const __m256i uw = _mm256_sign_epi8(w, w);
            for (int t = 0; t < T; ++t) {
                const __m256i sx = _mm256_sign_epi8(load32(xa[t].q + size_t(b) * 32), w);
                const __m256i isum = dot32(uw, sx, ones);
                __m256& a = acc[4 * t + (b & 3)];
                a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * xa[t].d[b]), a);
            }
        }
        for (int t = 0; t < T; ++t) {
            const __m256* g = acc + 4 * t;
            y[t] = hsum8(_mm256_add_ps(_mm256_add_ps(g[0], g[2]), _mm256_add_ps(g[1], g[3])));
        }
    }
    // The 32 five-bit codes (0..31) of a Q5_0 / Q5_1 block from its high-bit word and nibbles.
    static inline __m256i q5_codes(const uint8_t* qh_bytes, const uint8_t* nibbles) {
        // byte i of the spread high bits: bit i of qh, selected by shuffling qh's bytes into place
        const __m256i bytesel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bitsel = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
        uint32_t qh;
        std::memcpy(&qh, qh_bytes, 4);
        const __m128i q16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles));
        const __m256i q = _mm256_setr_m128i(q16, _mm_srli_epi16(q16, 4));
        const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
        const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), bytesel);
        const __m256i hbit = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bitsel), bitsel),
                                              _mm256_set1_epi8(0x10));
        return _mm256_or_si256(lo, hbit);
    }
    static void q5_0(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        __m256 acc[4 * kMaxDotRows];
        for (int t = 0; t < 4 * T; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i ones = _mm256_set1_epi16(1);
        for (int b = 0; b < nb; ++b) {
            const uint8_t* blk = row + size_t(b) * 22;
            const float dw = half_to_float(load_u16(blk));
            const __m256i w = _mm256_sub_epi8(q5_codes(blk + 2, blk + 6), _mm256_set1_epi8(16));
            const __m256i uw = _mm256_sign_epi8(w, w);
            for (int t = 0; t < T; ++t) {
                const __m256i sx = _mm256_sign_epi8(load32(xa[t].q + size_t(b) * 32), w);
                __m256& a = acc[4 * t + (b & 3)];
                a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot32(uw, sx, ones)), _mm256_set1_ps(dw * xa[t].d[b]), a);
            }
        }
        for (int t = 0; t < T; ++t) {
            const __m256* g = acc + 4 * t;
            y[t] = hsum8(_mm256_add_ps(_mm256_add_ps(g[0], g[2]), _mm256_add_ps(g[1], g[3])));
        }
    }
    // Q5_1: unsigned codes straight into vpmaddubsw; the min term as the scalar kernel's.
    static void q5_1(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        __m256 acc[4 * kMaxDotRows];
        float mins[kMaxDotRows];
        for (int t = 0; t < 4 * T; ++t) acc[t] = _mm256_setzero_ps();
        for (int t = 0; t < T; ++t) mins[t] = 0.f;
        const __m256i ones = _mm256_set1_epi16(1);
        for (int b = 0; b < nb; ++b) {
            const uint8_t* blk = row + size_t(b) * 24;
            const float dw = half_to_float(load_u16(blk)), mw = half_to_float(load_u16(blk + 2));
            const __m256i w = q5_codes(blk + 4, blk + 8);
            for (int t = 0; t < T; ++t) {
                __m256& a = acc[4 * t + (b & 3)];
                const __m256i isum = dot32(w, load32(xa[t].q + size_t(b) * 32), ones);
                a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * xa[t].d[b]), a);
                mins[t] = mins[t] + mw * xa[t].s[b];
            }
        }
        for (int t = 0; t < T; ++t) {
            const __m256* g = acc + 4 * t;
            y[t] = hsum8(_mm256_add_ps(_mm256_add_ps(g[0], g[2]), _mm256_add_ps(g[1], g[3]))) + mins[t];
        }
    }
    template <bool kFive>
    static void q45_k(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        constexpr int kBytes = kFive ? 176 : 144;
        __m256 acc[kMaxDotRows];
        float smin[kMaxDotRows];
        for (int t = 0; t < T; ++t) {
            acc[t] = _mm256_setzero_ps();
            smin[t] = 0.f;
        }
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        for (int s = 0; s < nb; ++s) {
            const uint8_t* blk = row + size_t(s) * kBytes;
            const uint8_t* qs = blk + (kFive ? 48 : 16);
            uint8_t sc[8], mn[8];
            k_scales_mins(blk + 4, sc, mn);
            __m256i w[8], scv[8];
            const __m256i qh = kFive ? load32(blk + 16) : _mm256_setzero_si256();
            for (int g = 0; g < 4; ++g) {
                const __m256i q = load32(qs + 32 * g);
                w[2 * g] = _mm256_and_si256(q, low4);
                w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            }
            for (int j = 0; j < 8; ++j) {
                if (kFive) {
                    const __m256i bit = _mm256_set1_epi8(char(1 << j));
                    const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                                                       _mm256_set1_epi8(0x10));
                    w[j] = _mm256_or_si256(w[j], h);
                }
                scv[j] = _mm256_set1_epi16(int16_t(sc[j]));
            }
            const float d = half_to_float(load_u16(blk)), dmin = half_to_float(load_u16(blk + 2));
            for (int t = 0; t < T; ++t) {
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                __m256i isum = _mm256_setzero_si256();
                for (int j = 0; j < 8; ++j) isum = _mm256_add_epi32(isum, dot32(w[j], load32(x + 32 * j), scv[j]));
                const int16_t* bs = xa[t].bsum16 + size_t(s) * 16;
                int msum = 0;
                for (int j = 0; j < 8; ++j) msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
                const float dx = xa[t].d[s];
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * dx), acc[t]);
                smin[t] = smin[t] + (dmin * dx) * float(msum);
            }
        }
        for (int t = 0; t < T; ++t) y[t] = hsum8(acc[t]) - smin[t];
    }
    static void q6_k(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        __m256 acc[kMaxDotRows];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
        const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03), off32 = _mm256_set1_epi8(32);
        for (int s = 0; s < nb; ++s) {
            const uint8_t* blk = row + size_t(s) * 210;
            const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
            __m256i w[8], uw[8], scv[8];
            for (int half = 0; half < 2; ++half) {
                const __m256i l0 = load32(blk + 64 * half), l1 = load32(blk + 64 * half + 32);
                const __m256i h = load32(blk + 128 + 32 * half);
                for (int qd = 0; qd < 4; ++qd) {
                    const __m256i l = (qd & 1) ? l1 : l0;
                    const __m256i lo = (qd >> 1) ? _mm256_and_si256(_mm256_srli_epi16(l, 4), low4) : _mm256_and_si256(l, low4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * qd), low2);
                    const int k = 4 * half + qd, base = 128 * half + 32 * qd;
                    // signed q - 32: |q - 32| times x with q's sign, as for Q8_0 (no offset term)
                    w[k] = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), off32);
                    uw[k] = _mm256_sign_epi8(w[k], w[k]);
                    scv[k] = _mm256_setr_m128i(_mm_set1_epi16(sc[base / 16]), _mm_set1_epi16(sc[base / 16 + 1]));
                }
            }
            const float d = half_to_float(load_u16(blk + 208));
            for (int t = 0; t < T; ++t) {
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                __m256i isum = _mm256_setzero_si256();
                for (int k = 0; k < 8; ++k)
                    isum = _mm256_add_epi32(isum, dot32(uw[k], _mm256_sign_epi8(load32(x + 32 * k), w[k]), scv[k]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * xa[t].d[s]), acc[t]);
            }
        }
        for (int t = 0; t < T; ++t) y[t] = hsum8(acc[t]);
    }
    static void iq4_xs(const uint8_t* row, int nb, const Act* xa, int T, float* y) {
        __m256 acc[kMaxDotRows];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
        const __m128i table128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels));
        const __m256i table = _mm256_setr_m128i(table128, table128);
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        for (int s = 0; s < nb; ++s) {
            const uint8_t* blk = row + size_t(s) * 136;
            const uint16_t sh = load_u16(blk + 2);
            __m256i w[8], uw[8], scv[8];
            for (int j = 0; j < 8; j += 2) {
                const __m256i v = load32(blk + 8 + 16 * j);
                const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                w[j] = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
                w[j + 1] = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
            }
            for (int j = 0; j < 8; ++j) {
                const int ls = ((blk[4 + (j >> 1)] >> (4 * (j & 1))) & 0x0f) | (((sh >> (2 * j)) & 3) << 4);
                uw[j] = _mm256_sign_epi8(w[j], w[j]);
                scv[j] = _mm256_set1_epi16(int16_t(ls - 32));
            }
            const float d = half_to_float(load_u16(blk));
            for (int t = 0; t < T; ++t) {
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                __m256i isum = _mm256_setzero_si256();
                for (int j = 0; j < 8; ++j)
                    isum = _mm256_add_epi32(isum, dot32(uw[j], _mm256_sign_epi8(load32(x + 32 * j), w[j]), scv[j]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * xa[t].d[s]), acc[t]);
            }
        }
        for (int t = 0; t < T; ++t) y[t] = hsum8(acc[t]);
    }
};
#endif

template <class K>
void run_rows(QType qt, const Act* xa, int T, const uint8_t* W, size_t rb, int cols, float* Y, int ldy, int r0,
              int r1) {
    float y[kMaxDotRows];
    for (int r = r0; r < r1; ++r) {
        const uint8_t* row = W + size_t(r) * rb;
        switch (qt) {
            case QType::Q8_0: K::q8_0(row, cols / kQ8, xa, T, y); break;
            case QType::Q5_0: K::q5_0(row, cols / kQ8, xa, T, y); break;
            case QType::Q5_1: K::q5_1(row, cols / kQ8, xa, T, y); break;
            case QType::Q4_K: K::template q45_k<false>(row, cols / kQK, xa, T, y); break;
            case QType::Q5_K: K::template q45_k<true>(row, cols / kQK, xa, T, y); break;
            case QType::Q6_K: K::q6_k(row, cols / kQK, xa, T, y); break;
            case QType::IQ4_XS: K::iq4_xs(row, cols / kQK, xa, T, y); break;
            default: return;
        }
        for (int t = 0; t < T; ++t) Y[size_t(t) * ldy + r] = y[t];
    }
}

}  // namespace

void dot_rows_int8(QType qt, const float* X, int T, int ldx, const uint8_t* W, size_t rb, int cols, float* Y,
                   int ldy, int r0, int r1, Isa isa) {
    if (isa == Isa::kAvx512 && dot_rows_int8_vnni(qt, X, T, ldx, W, rb, cols, Y, ldy, r0, r1)) return;
    const int block = activation_block(qt);
    // Per-thread scratch: the engine calls this from its pool threads over row ranges.
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> d;
    thread_local std::vector<int16_t> bsum;
    thread_local std::vector<float> sums;
    q.resize(size_t(T) * cols);
    d.resize(size_t(T) * (cols / block));
    bsum.resize(size_t(T) * (cols / 16));
    const bool with_sums = activation_sums(qt);
    if (with_sums) sums.resize(size_t(T) * (cols / block));
    Act xa[kMaxDotRows];
    for (int t = 0; t < T; ++t) {
        int8_t* qt_ = q.data() + size_t(t) * cols;
        float* dt = d.data() + size_t(t) * (cols / block);
        int16_t* bt = block == kQK ? bsum.data() + size_t(t) * (cols / 16) : nullptr;
        float* st = with_sums ? sums.data() + size_t(t) * (cols / block) : nullptr;
        quantize_activation(X + size_t(t) * ldx, cols, block, qt_, dt, bt, st);
        xa[t] = {qt_, dt, bt, st};
    }
#ifdef STRATA_INT8_AVX2
    if (isa != Isa::kScalar) {
        run_rows<Avx2Kernels>(qt, xa, T, W, rb, cols, Y, ldy, r0, r1);
        return;
    }
#endif
    (void)isa;
    run_rows<ScalarKernels>(qt, xa, T, W, rb, cols, Y, ldy, r0, r1);
}

}  // namespace strata::quant
