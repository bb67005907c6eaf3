// AVX-512 VNNI kernels of the int8-activation path (dot_int8.h), 64 weight bytes at a time.
// They compute exactly the integers of the scalar and AVX2 kernels (every int32 lane sums the
// same four products, with the same scales) and then the same float steps in the same order, so
// every instruction set gives the same bits and a row's result does not depend on T.
//
// VNNI's vpdpbusd multiplies unsigned by signed bytes. Q4_K and Q5_K weights are unsigned codes
// already (vpmaddubsw, then vpdpwssd applies the 16-bit scales); Q6_K's signed codes q - 32 meet
// activations offset to unsigned (x + 128), whose share, sum of scale x 128 x (q - 32), depends
// on the weights only and is taken off once per super-block for all input rows. Q8_0 and
// Q5_0 weights are signed: they are offset to unsigned (w + 128, q5 + 16 without the -16) and the
// accumulator starts at -offset x (sum of each 4 activations), also precomputed per row; IQ4_XS
// looks its levels up as level + 128 the same way. Q5_1's codes are unsigned already; its min term
// (min x the activation block's Q8_1 sum) is a float sum in block order, as in the other kernels.
//
// The activation rows are laid out for the kernels once per call: Q4_K / Q5_K's sub-blocks of each 256
// are reordered 0,2,1,3,4,6,5,7 so that one 64-byte load matches the low (or high) nibbles of 64
// weight bytes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "blocks.h"
#include "dot_int8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define STRATA_VNNI 1
#endif

namespace strata::quant {

#ifdef STRATA_VNNI
namespace {

// Prefetch distance in the weight stream: rows are contiguous, and the hardware streamers stop
// at 4 KiB pages.
constexpr int kPrefetchBytes = 4096;

// One activation row in the layouts the kernels read.
struct Row {
    const int8_t* q;        // quantized values (Q4_K / Q5_K: reordered sub-blocks, see above)
    const float* d;         // one scale per activation block
    const int32_t* corr;    // Q8_0 / Q5_0 / IQ4_XS: -offset * (sum of each 4 values)
    const uint8_t* xu;      // Q6_K: q + 128 as unsigned bytes
    const int16_t* bsum32;  // Q4_K / Q5_K: sums of each 32 values, natural order
    const float* s;         // Q5_1: the Q8_1 block sums
};

// lane i + lane i+8, then i + i+4, then (0+2, 1+3), then 0+1: the tree of the scalar lanes_sum32.
inline float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
inline float hsum8(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
// int32 lanes of a 512-bit sum over two 32-weight chunks, folded into the 8 lanes of one chunk.
inline __m256i fold(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
inline void prefetch_span(const uint8_t* p, int bytes) {
    for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + o), _MM_HINT_T0);
}
inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// ---- Q8_0, Q5_0 and Q5_1: 32-weight blocks, two per register --------------------------------
// Float lanes as the scalar code: block b in lane group b % 4, one FMA per block and lane in block
// order; acc0 holds groups 0|1 (even pairs), acc1 groups 2|3 (odd pairs), so two FMA chains run
// at once. Rows are walked in spans of 8 blocks; input rows in groups of up to 4 whose
// accumulators stay in registers (a weight row is decoded again per group, from L1).
enum Kind32 { kQ8_0 = 0, kQ5_0 = 1, kQ5_1 = 2 };
template <int kKind>
struct Q8Pairs {
    static constexpr bool kFive = kKind != kQ8_0;
    static constexpr int kB = kKind == kQ8_0 ? 34 : kKind == kQ5_0 ? 22 : 24;  // bytes per block
    static constexpr int kHigh = kKind == kQ5_1 ? 4 : 2;  // where the fifth bits start (Q5_x)
    // Weights of blocks p, p+1 (or p alone) as unsigned bytes: w + 128 (Q8_0), q5 = w + 16 (Q5_0),
    // the code q5 itself (Q5_1).
    static inline __m512i decode(const uint8_t* p, bool two) {
        if (!kFive) {
            __m512i w = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
            if (two) w = _mm512_inserti64x4(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kB + 2)), 1);
            return _mm512_xor_si512(w, _mm512_set1_epi8(char(0x80)));
        }
        uint64_t hbits = load_u32(p + kHigh);
        __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kHigh + 4)));
        if (two) {
            hbits |= uint64_t(load_u32(p + kB + kHigh)) << 32;
            const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kB + kHigh + 4));
            v = _mm512_inserti32x4(_mm512_inserti32x4(v, q1, 2), q1, 3);
        }
        // 128-bit lanes 1 and 3 take the high nibbles
        v = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
        return _mm512_or_si512(v, _mm512_maskz_mov_epi8(__mmask64(hbits), _mm512_set1_epi8(0x10)));
    }
    // The f16 scales of n <= 8 blocks from p (each gathered dword starts at a block; its high
    // half, the block's next two bytes, is dropped).
    static inline __m256 scales(const uint8_t* p, int n) {
        // assembled in general registers (the vector shuffle ports are busy with the products)
        uint64_t lo = 0, hi = 0;
        for (int i = 0; i < 4; ++i)
            if (i < n) lo |= uint64_t(load_u16(p + i * kB)) << (16 * i);
        for (int i = 4; i < 8; ++i)
            if (i < n) hi |= uint64_t(load_u16(p + i * kB)) << (16 * (i - 4));
        return _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128(int64_t(lo)), int64_t(hi), 1));
    }
};

inline __m512i pair_index(int k) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * k)), _mm256_set1_epi32(2 * k + 1), 1);
}

// Q5_1's min term of n <= 8 blocks: the products min x sum (one IEEE multiply each, as the scalar
// code's) added to the running sum one block at a time, in block order.
inline float add_mins(float run, __m256 mins, __m256 sums, int n) {
    alignas(32) float p[8];
    _mm256_store_ps(p, _mm256_mul_ps(mins, sums));
    for (int i = 0; i < n; ++i) run = run + p[i];
    return run;
}

template <int kKind, int TB>
void q8_rows_tb(const uint8_t* W, size_t rb, int nb, const Row* xa, float* Y, int ldy, int r0, int r1) {
    using P = Q8Pairs<kKind>;
    constexpr int kB = P::kB;
    constexpr bool kOffset = kKind != kQ5_1;  // signed weights: the accumulators start at -offset x sums
    const __m512i p0 = pair_index(0), p1 = pair_index(1), p2 = pair_index(2), p3 = pair_index(3);
    // the int32 accumulator of blocks b, b+1 of input row t: the offset correction, or zero
    auto start = [xa](int t, int b) {
        return kOffset ? _mm512_loadu_si512(xa[t].corr + size_t(b) * 8) : _mm512_setzero_si512();
    };
    for (int r = r0; r < r1; ++r) {
        const uint8_t* row = W + size_t(r) * rb;
        __m512 acc[TB], acc1[TB];
        float mins[TB];
        for (int t = 0; t < TB; ++t) {
            acc[t] = acc1[t] = _mm512_setzero_ps();
            mins[t] = 0.f;
        }
        int b0 = 0;
        for (; b0 + 8 <= nb; b0 += 8) {
            const uint8_t* blk = row + size_t(b0) * kB;
            prefetch_span(blk, 8 * kB);
            const __m256 dw = P::scales(blk, 8);
            const __m512i w0 = P::decode(blk, true), w1 = P::decode(blk + 2 * kB, true),
                          w2 = P::decode(blk + 4 * kB, true), w3 = P::decode(blk + 6 * kB, true);
            const __m256 mw = kKind == kQ5_1 ? P::scales(blk + 2, 8) : _mm256_setzero_ps();
            for (int t = 0; t < TB; ++t) {
                const __m512 s = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_loadu_ps(xa[t].d + b0)));
                const int8_t* xq = xa[t].q + size_t(b0) * 32;
                __m512 a = acc[t], b = acc1[t];
                a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start(t, b0), w0, _mm512_loadu_si512(xq))),
                                    _mm512_permutexvar_ps(p0, s), a);
                b = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start(t, b0 + 2), w1, _mm512_loadu_si512(xq + 64))),
                                    _mm512_permutexvar_ps(p1, s), b);
                a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start(t, b0 + 4), w2, _mm512_loadu_si512(xq + 128))),
                                    _mm512_permutexvar_ps(p2, s), a);
                b = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start(t, b0 + 6), w3, _mm512_loadu_si512(xq + 192))),
                                    _mm512_permutexvar_ps(p3, s), b);
                acc[t] = a;
                acc1[t] = b;
                if (kKind == kQ5_1) mins[t] = add_mins(mins[t], mw, _mm256_loadu_ps(xa[t].s + b0), 8);
            }
        }
        if (b0 < nb) {  // a partial span: 1-7 blocks
            const int n = nb - b0;
            const uint8_t* blk = row + size_t(b0) * kB;
            const __mmask8 m8 = __mmask8((1u << n) - 1u);
            const __m256 dw = P::scales(blk, n);
            for (int k = 0; 2 * k < n; ++k) {
                const bool two = 2 * k + 1 < n;
                const __m512i w = P::decode(blk + 2 * k * kB, two);
                const __m512i pk = pair_index(k);
                for (int t = 0; t < TB; ++t) {
                    const __m512 s = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_maskz_loadu_ps(m8, xa[t].d + b0)));
                    const int8_t* xq = xa[t].q + size_t(b0 + 2 * k) * 32;
                    __m512& a = (k & 1) ? acc1[t] : acc[t];
                    if (two) {
                        const __m512i i = _mm512_dpbusd_epi32(start(t, b0 + 2 * k), w, _mm512_loadu_si512(xq));
                        a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_permutexvar_ps(pk, s), a);
                    } else {  // the last block of an odd count: the upper lanes stay as they are
                        const __m512i c = kOffset ? _mm512_maskz_loadu_epi32(0x00ff, xa[t].corr + size_t(b0 + 2 * k) * 8)
                                                   : _mm512_setzero_si512();
                        const __m512i i = _mm512_dpbusd_epi32(c, w, _mm512_maskz_loadu_epi8(0xffffffffull, xq));
                        a = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_permutexvar_ps(pk, s), a, 0x00ff);
                    }
                }
            }
            if (kKind == kQ5_1) {
                const __m256 mw = P::scales(blk + 2, n);
                for (int t = 0; t < TB; ++t) mins[t] = add_mins(mins[t], mw, _mm256_maskz_loadu_ps(m8, xa[t].s + b0), n);
            }
        }
        for (int t = 0; t < TB; ++t) {
            const float y = hsum16(_mm512_add_ps(acc[t], acc1[t]));
            Y[size_t(t) * ldy + r] = kKind == kQ5_1 ? y + mins[t] : y;  // (no + 0.f: it would turn -0 into +0)
        }
    }
}

// 16-bit lane m of a 512-bit register covers weights 2m, 2m+1 of 64: the index vector that gives
// lane m the scale at `lo` + m / span (then the same pattern from `hi` for lanes 16-31 when
// hi >= 0).
inline __m512i scale_index(int lo, int hi, int span) {
    alignas(64) int16_t v[32];
    for (int m = 0; m < 32; ++m) v[m] = int16_t(hi >= 0 && m >= 16 ? hi + (m - 16) / span : lo + m / span);
    return _mm512_load_si512(v);
}

// ---- Q4_K / Q5_K: 256-weight super-blocks, 6-bit scales and mins ------------------------
// Q5_K adds 32 bytes of fifth bits before the nibbles: bit j of byte i belongs to weight i of
// sub-block j.
template <bool kFive, int TB>
void q4_k_rows_tb(const uint8_t* W, size_t rb, int nb, const Row* xa, float* Y, int ldy, int r0, int r1) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // sub-blocks in one register: (0,2) (1,3) (4,6) (5,7), 16 lanes each
    const __m512i iA = scale_index(0, 2, 64), iB = scale_index(1, 3, 64), iC = scale_index(4, 6, 64),
                  iD = scale_index(5, 7, 64);
    for (int r = r0; r < r1; ++r) {
        const uint8_t* row = W + size_t(r) * rb;
        __m256 acc[TB];
        float smin[TB];
        for (int t = 0; t < TB; ++t) {
            acc[t] = _mm256_setzero_ps();
            smin[t] = 0.f;
        }
        for (int s = 0; s < nb; ++s) {
            constexpr int kBytes = kFive ? 176 : 144;
            const uint8_t* blk = row + size_t(s) * kBytes;
            const uint8_t* qs = blk + (kFive ? 48 : 16);
            prefetch_span(blk, kBytes);
            // the 6-bit scales and mins of k_scales_mins, kept in registers
            const uint32_t a0 = load_u32(blk + 4), a1 = load_u32(blk + 8), a2 = load_u32(blk + 12);
            const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
            const uint64_t sc8 = (a0 & lo6) | uint64_t((a2 & lo4) | (((a0 >> 6) & lo2) << 4)) << 32;
            const uint64_t mn8 = (a1 & lo6) | uint64_t(((a2 >> 4) & lo4) | (((a1 >> 6) & lo2) << 4)) << 32;
            const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc8))));
            const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(mn8)));
            const __m512i sA = _mm512_permutexvar_epi16(iA, s16), sB = _mm512_permutexvar_epi16(iB, s16),
                          sC = _mm512_permutexvar_epi16(iC, s16), sD = _mm512_permutexvar_epi16(iD, s16);
            const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
            __m512i wA = _mm512_and_si512(q0, low4), wB = _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4);
            __m512i wC = _mm512_and_si512(q1, low4), wD = _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4);
            if (kFive) {  // sub-blocks (0,2) (1,3) (4,6) (5,7): bits (0,2) (1,3) (4,6) (5,7) of qh
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)));
                const __m512i b16 = _mm512_set1_epi8(0x10);
                auto bits = [&](int lo, int hi) {
                    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << lo)), _mm256_set1_epi8(char(1 << hi)), 1);
                    return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, sel), b16);
                };
                wA = _mm512_or_si512(wA, bits(0, 2));
                wB = _mm512_or_si512(wB, bits(1, 3));
                wC = _mm512_or_si512(wC, bits(4, 6));
                wD = _mm512_or_si512(wD, bits(5, 7));
            }
            const float d = half_to_float(load_u16(blk)), dmin = half_to_float(load_u16(blk + 2));
            for (int t = 0; t < TB; ++t) {
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                // two independent chains (integer sums: the grouping does not change them)
                __m512i i = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(wA, _mm512_loadu_si512(x)), sA);
                __m512i i2 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(wB, _mm512_loadu_si512(x + 64)), sB);
                i = _mm512_dpwssd_epi32(i, _mm512_maddubs_epi16(wC, _mm512_loadu_si512(x + 128)), sC);
                i2 = _mm512_dpwssd_epi32(i2, _mm512_maddubs_epi16(wD, _mm512_loadu_si512(x + 192)), sD);
                i = _mm512_add_epi32(i, i2);
                // sum of mins x (sums of each 32 activations)
                __m128i ms = _mm_madd_epi16(m16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(xa[t].bsum32 + size_t(s) * 8)));
                ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, _MM_SHUFFLE(1, 0, 3, 2)));
                ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, _MM_SHUFFLE(2, 3, 0, 1)));
                const int msum = _mm_cvtsi128_si32(ms);
                const float dx = xa[t].d[s];
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(i)), _mm256_set1_ps(d * dx), acc[t]);
                smin[t] = smin[t] + (dmin * dx) * float(msum);
            }
        }
        for (int t = 0; t < TB; ++t) Y[size_t(t) * ldy + r] = hsum8(acc[t]) - smin[t];
    }
}

// ---- Q6_K: 4 + 2 bit codes, int8 scales per 16 weights -----------------------------------
template <int TB>
void q6_k_rows_tb(const uint8_t* W, size_t rb, int nb, const Row* xa, float* Y, int ldy, int r0, int r1) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(0x03);
    const __m512i off32 = _mm512_set1_epi8(32), x80 = _mm512_set1_epi8(char(0x80));
    // high bits of weights 0-63 of a half: bits 0-1 (chunk 0) and 2-3 (chunk 1); 64-127: 4-5, 6-7
    const __m512i shA = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i shB = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    const __m512i iA0 = scale_index(0, -1, 8), iB0 = scale_index(4, -1, 8), iA1 = scale_index(8, -1, 8),
                  iB1 = scale_index(12, -1, 8);
    for (int r = r0; r < r1; ++r) {
        const uint8_t* row = W + size_t(r) * rb;
        __m256 acc[TB];
        for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
        for (int s = 0; s < nb; ++s) {
            const uint8_t* blk = row + size_t(s) * 210;
            prefetch_span(blk, 210);
            const __m512i sc = _mm512_castsi256_si512(
                _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192))));
            const __m512i sA[2] = {_mm512_permutexvar_epi16(iA0, sc), _mm512_permutexvar_epi16(iA1, sc)};
            const __m512i sB[2] = {_mm512_permutexvar_epi16(iB0, sc), _mm512_permutexvar_epi16(iB1, sc)};
            __m512i wA[2], wB[2];
            for (int h = 0; h < 2; ++h) {
                const __m512i l = _mm512_loadu_si512(blk + 64 * h);
                const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
                const __m512i hA = _mm512_and_si512(_mm512_srlv_epi16(hb, shA), low2);
                const __m512i hB = _mm512_and_si512(_mm512_srlv_epi16(hb, shB), low2);
                // signed codes q - 32 (the activations come offset to unsigned instead)
                wA[h] = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(l, low4), _mm512_slli_epi16(hA, 4)), off32);
                wB[h] = _mm512_sub_epi8(
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), _mm512_slli_epi16(hB, 4)), off32);
            }
            // the offset's share, the same for every input row: sum of scale x 128 x (q - 32)
            __m512i cw = _mm512_setzero_si512(), cw2 = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {
                cw = _mm512_dpwssd_epi32(cw, _mm512_maddubs_epi16(x80, wA[h]), sA[h]);
                cw2 = _mm512_dpwssd_epi32(cw2, _mm512_maddubs_epi16(x80, wB[h]), sB[h]);
            }
            cw = _mm512_add_epi32(cw, cw2);
            const float d = half_to_float(load_u16(blk + 208));
            for (int t = 0; t < TB; ++t) {
                const uint8_t* xu = xa[t].xu + size_t(s) * kQK;  // x + 128
                __m512i i = _mm512_setzero_si512(), i2 = _mm512_setzero_si512();  // two chains
                for (int h = 0; h < 2; ++h) {
                    i = _mm512_dpwssd_epi32(i, _mm512_maddubs_epi16(_mm512_loadu_si512(xu + 128 * h), wA[h]), sA[h]);
                    i2 = _mm512_dpwssd_epi32(i2, _mm512_maddubs_epi16(_mm512_loadu_si512(xu + 128 * h + 64), wB[h]), sB[h]);
                }
                i = _mm512_sub_epi32(_mm512_add_epi32(i, i2), cw);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(i)), _mm256_set1_ps(d * xa[t].d[s]), acc[t]);
            }
        }
        for (int t = 0; t < TB; ++t) Y[size_t(t) * ldy + r] = hsum8(acc[t]);
    }
}

// ---- IQ4_XS: 4-bit indices into 16 signed levels, 6-bit scales per 32 weights -----------
// The levels are looked up offset to unsigned (level + 128, the offset taken off through the
// activations' sums of 4 as for Q8_0); the sub-block scale multiplies the exact int32 lane sums.
template <int TB>
void iq4_xs_rows_tb(const uint8_t* W, size_t rb, int nb, const Row* xa, float* Y, int ldy, int r0, int r1) {
    alignas(16) uint8_t levels_u8[16];
    for (int i = 0; i < 16; ++i) levels_u8[i] = uint8_t(kIq4Levels[i] + 128);
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(levels_u8)));
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int r = r0; r < r1; ++r) {
        const uint8_t* row = W + size_t(r) * rb;
        __m256 acc[TB];
        for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
        for (int s = 0; s < nb; ++s) {
            const uint8_t* blk = row + size_t(s) * 136;
            prefetch_span(blk, 136);
            const uint16_t sh = load_u16(blk + 2);
            __m512i wu[4], sc[4];
            for (int k = 0; k < 4; ++k) {  // sub-blocks 2k, 2k+1: bytes 32k..32k+31
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 8 + 32 * k));
                const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                // 128-bit lanes lo(2k) hi(2k) lo(2k+1) hi(2k+1): weights 0-15, 16-31 of each sub-block
                const __m512i idx = _mm512_shuffle_i64x2(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                                         _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                                         _MM_SHUFFLE(3, 1, 2, 0));
                wu[k] = _mm512_shuffle_epi8(table, idx);
                int ls[2];
                for (int h = 0; h < 2; ++h) {
                    const int j = 2 * k + h;
                    ls[h] = (((blk[4 + (j >> 1)] >> (4 * (j & 1))) & 0x0f) | (((sh >> (2 * j)) & 3) << 4)) - 32;
                }
                sc[k] = _mm512_inserti64x4(_mm512_set1_epi32(ls[0]), _mm256_set1_epi32(ls[1]), 1);
            }
            const float d = half_to_float(load_u16(blk));
            for (int t = 0; t < TB; ++t) {
                const int8_t* x = xa[t].q + size_t(s) * kQK;
                const int32_t* c = xa[t].corr + size_t(s) * (kQK / 4);
                __m512i i = _mm512_setzero_si512(), i2 = _mm512_setzero_si512();
                for (int k = 0; k < 4; k += 2) {
                    i = _mm512_add_epi32(i, _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_loadu_si512(c + 16 * k), wu[k],
                                                                                   _mm512_loadu_si512(x + 64 * k)), sc[k]));
                    i2 = _mm512_add_epi32(i2, _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_loadu_si512(c + 16 * k + 16), wu[k + 1],
                                                                                     _mm512_loadu_si512(x + 64 * k + 64)), sc[k + 1]));
                }
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold(_mm512_add_epi32(i, i2))), _mm256_set1_ps(d * xa[t].d[s]), acc[t]);
            }
        }
        for (int t = 0; t < TB; ++t) Y[size_t(t) * ldy + r] = hsum8(acc[t]);
    }
}

// Input rows in groups of up to 4 whose accumulators stay in registers. With more than 4 input
// rows, weight rows go in chunks of about 8 KiB that every group reads while they are in L1.
template <template <int> class K>
void rows_in_groups(const uint8_t* W, size_t rb, int nb, const Row* xa, int T, float* Y, int ldy, int r0, int r1) {
    const int chunk = T <= 4 ? r1 - r0 : std::max(1, int(8192 / rb));
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        const int c1 = std::min(r1, c0 + chunk);
        for (int t0 = 0; t0 < T; t0 += 4) {
            const Row* x = xa + t0;
            float* y = Y + size_t(t0) * ldy;
            switch (std::min(4, T - t0)) {
                case 1: K<1>::run(W, rb, nb, x, y, ldy, c0, c1); break;
                case 2: K<2>::run(W, rb, nb, x, y, ldy, c0, c1); break;
                case 3: K<3>::run(W, rb, nb, x, y, ldy, c0, c1); break;
                default: K<4>::run(W, rb, nb, x, y, ldy, c0, c1); break;
            }
        }
    }
}
template <int TB>
struct Q8Kernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        q8_rows_tb<kQ8_0, TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};
template <int TB>
struct Q5Kernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        q8_rows_tb<kQ5_0, TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};
template <int TB>
struct Q51Kernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        q8_rows_tb<kQ5_1, TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};
template <int TB>
struct Q4KKernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        q4_k_rows_tb<false, TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};
template <int TB>
struct Q5KKernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        q4_k_rows_tb<true, TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};
template <int TB>
struct Iq4XsKernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        iq4_xs_rows_tb<TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};
template <int TB>
struct Q6KKernel {
    static void run(const uint8_t* W, size_t rb, int nb, const Row* x, float* y, int ldy, int r0, int r1) {
        q6_k_rows_tb<TB>(W, rb, nb, x, y, ldy, r0, r1);
    }
};

}  // namespace

bool dot_rows_int8_vnni(QType qt, const float* X, int T, int ldx, const uint8_t* W, size_t rb, int cols, float* Y,
                        int ldy, int r0, int r1) {
    if (!uses_int8_activations(qt)) return false;
    const bool k45 = qt == QType::Q4_K || qt == QType::Q5_K;
    const int block = activation_block(qt);
    // Per-thread scratch: the engine calls this from its pool threads over row ranges.
    thread_local std::vector<int8_t> q, qk;
    thread_local std::vector<float> d;
    thread_local std::vector<int16_t> bsum, b32;
    thread_local std::vector<uint8_t> xub;
    thread_local std::vector<int32_t> corr;
    thread_local std::vector<float> sums;
    const size_t n = size_t(T) * cols;
    q.resize(n + 64);
    d.resize(size_t(T) * (cols / block));
    const bool with_sums = activation_sums(qt);
    if (with_sums) sums.resize(size_t(T) * (cols / block));
    Row xa[kMaxDotRows];
    const __m512i ones = _mm512_set1_epi8(1);
    if (k45) {
        bsum.resize(n / 16);
        qk.resize(n);
        b32.resize(n / 32);
    }
    if (qt == QType::Q6_K) xub.resize(n);
    const bool offset = qt == QType::Q8_0 || qt == QType::Q5_0 || qt == QType::IQ4_XS;  // signed weights
    if (offset) corr.resize(n / 4 + 16);
    for (int t = 0; t < T; ++t) {
        int8_t* qt_ = q.data() + size_t(t) * cols;
        float* dt = d.data() + size_t(t) * (cols / block);
        int16_t* bt = k45 ? bsum.data() + size_t(t) * (cols / 16) : nullptr;
        float* st = with_sums ? sums.data() + size_t(t) * (cols / block) : nullptr;
        quantize_activation(X + size_t(t) * ldx, cols, block, qt_, dt, bt, st);
        Row& rw = xa[t];
        rw = {qt_, dt, nullptr, nullptr, bt, st};
        if (offset) {
            const int shift = qt == QType::Q5_0 ? 4 : 7;  // offsets 16 and 128
            int32_t* c = corr.data() + size_t(t) * (cols / 4);
            for (int i = 0; i < cols; i += 64) {
                const __mmask64 m = cols - i >= 64 ? ~__mmask64(0) : (__mmask64(1) << (cols - i)) - 1;
                const __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_maskz_loadu_epi8(m, qt_ + i));
                const __m512i v = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s4, shift));
                _mm512_mask_storeu_epi32(c + i / 4, __mmask16(cols - i >= 64 ? 0xffff : (1u << ((cols - i) / 4)) - 1), v);
            }
            rw.corr = c;
        } else if (qt == QType::Q6_K) {
            uint8_t* u = xub.data() + size_t(t) * cols;
            for (int i = 0; i < cols; i += 64)  // cols is a whole number of 256-blocks
                _mm512_storeu_si512(u + i, _mm512_xor_si512(_mm512_loadu_si512(qt_ + i), _mm512_set1_epi8(char(0x80))));
            rw.xu = u;
        } else if (k45) {  // Q4_K / Q5_K: sub-blocks 0,2,1,3,4,6,5,7 of every 256
            int8_t* k = qk.data() + size_t(t) * cols;
            int16_t* s32 = b32.data() + size_t(t) * (cols / 32);
            for (int g = 0; g < cols / 32; ++g) s32[g] = int16_t(bt[2 * g] + bt[2 * g + 1]);
            rw.bsum32 = s32;
            static constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
            for (int s = 0; s < cols; s += kQK)
                for (int j = 0; j < 8; ++j) std::memcpy(k + s + 32 * j, qt_ + s + 32 * kOrder[j], 32);
            rw.q = k;
        }
    }
    switch (qt) {
        case QType::Q8_0: rows_in_groups<Q8Kernel>(W, rb, cols / kQ8, xa, T, Y, ldy, r0, r1); break;
        case QType::Q5_0: rows_in_groups<Q5Kernel>(W, rb, cols / kQ8, xa, T, Y, ldy, r0, r1); break;
        case QType::Q5_1: rows_in_groups<Q51Kernel>(W, rb, cols / kQ8, xa, T, Y, ldy, r0, r1); break;
        case QType::Q4_K: rows_in_groups<Q4KKernel>(W, rb, cols / kQK, xa, T, Y, ldy, r0, r1); break;
        case QType::Q5_K: rows_in_groups<Q5KKernel>(W, rb, cols / kQK, xa, T, Y, ldy, r0, r1); break;
        case QType::IQ4_XS: rows_in_groups<Iq4XsKernel>(W, rb, cols / kQK, xa, T, Y, ldy, r0, r1); break;
        default: rows_in_groups<Q6KKernel>(W, rb, cols / kQK, xa, T, Y, ldy, r0, r1); break;
    }
    return true;
}

#else

bool dot_rows_int8_vnni(QType, const float*, int, int, const uint8_t*, size_t, int, float*, int, int, int) {
    return false;
}

#endif

}  // namespace strata::quant
