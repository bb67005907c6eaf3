#include "cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cpu/gemm.h"
#include "cpu/math.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define STRATA_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define STRATA_AVX2 1
#endif

namespace strata {

#ifdef STRATA_AVX512

// Fully unrolled loops over a tile's rows: the accumulators are then named registers from their
// zeroing to the sums (without it GCC keeps them on the stack around the column loop: 16 zeroing
// stores, 16 stores and 16 loads per 4x4 tile, which weigh at 128 columns). Same operations.
#define STRATA_UNROLL _Pragma("GCC unroll 16")

namespace {

inline __m512 loadw(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 loadw(const uint16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 loadw_mask(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 loadw_mask(const uint16_t* p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The horizontal sum of one accumulator, in one fixed tree: lane i + lane i+8, then j + j+4,
// then (0+2, 1+3), then 0+1 (the pairs _mm512_reduce_add_ps uses, written out so that the
// transposed form below provably matches it).
inline float hsum16(__m512 v) {
    __m512 s8 = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s4 = _mm512_add_ps(s8, _mm512_shuffle_f32x4(s8, s8, _MM_SHUFFLE(1, 1, 1, 1)));
    __m512 s2 = _mm512_add_ps(s4, _mm512_shuffle_ps(s4, s4, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_cvtss_f32(_mm512_add_ps(s2, _mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(1, 1, 1, 1))));
}

// hsum16 of 16 accumulators at once, the same tree per element (float addition commutes, so
// only the pairing matters): 15 vector adds instead of 16 scalar reductions. v[4i + t] in,
// lane 4t + i of the result out.
inline __m512 hsum16x16(const __m512* v) {
    __m512 p[8], q[4], r[2];
    STRATA_UNROLL for (int k = 0; k < 8; ++k)  // lanes 0-7: v[2k] i + i+8; lanes 8-15: v[2k+1]
        p[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    STRATA_UNROLL for (int m = 0; m < 4; ++m)  // block b: v[4m + b], j + j+4
        q[m] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    STRATA_UNROLL for (int n = 0; n < 2; ++n)  // per block: 0+2, 1+3 of q[2n], then of q[2n+1]
        r[n] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * n], q[2 * n + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(q[2 * n], q[2 * n + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// What a tile prefetches of the weight stream while it computes (see matmul_range_t).
//   kPfShift: its own lines, kPrefetchShift bytes further on (8 KiB: 4 rows of a 512-column f32
//             matrix), one prefetch per line it reads, into L1: the tiles of the last 1-7 rows
//             of a range;
//   kPfShare: `n` lines from `p` on, spread evenly over its column steps, into L2: the tiles
//             of a block of 8 weight rows, which share the prefetch of the block two ahead.
enum PfMode : int { kPfNone = 0, kPfShift = 1, kPfShare = 2 };
struct Prefetch {
    const char* p = nullptr;
    int n = 0;
};
constexpr size_t kPrefetchShift = 8192;
constexpr int kPrefetchAheadRows = 16;  // kPfShare: two 8-row blocks ahead

// One 16-column chunk of a tile: every accumulator takes its product (see tile). A function
// that is always inlined, not a lambda over the tile's locals, so that with STRATA_UNROLL the
// accumulators are registers from their zeroing to the sums.
template <int RB, int TB, typename WT>
__attribute__((always_inline)) inline void chunk(__m512 (&acc)[RB][TB], const float* const* xr, const WT* const* w,
                                                 int k) {
    __m512 x[TB];
    STRATA_UNROLL for (int t = 0; t < TB; ++t) {
        x[t] = _mm512_loadu_ps(xr[t] + k);
        // keep wide tiles' inputs in registers: loaded once per step, used by every weight
        // row (the compiler would fold a reload into each FMA and run out of load slots)
        if (RB > 1 && TB >= 2) __asm__("" : "+v"(x[t]));
    }
    STRATA_UNROLL for (int i = 0; i < RB; ++i) {
        __m512 wv = loadw(w[i] + k);
        if (TB > 1) __asm__("" : "+v"(wv));  // one load per weight vector, not one per FMA
        STRATA_UNROLL for (int t = 0; t < TB; ++t) acc[i][t] = _mm512_fmadd_ps(wv, x[t], acc[i][t]);
    }
}

// RB weight rows x TB input rows. The per-element order: one accumulator takes the 16-chunks
// 0,1,2.. in order (a masked tail last); result = hsum16(acc). One accumulator
// per output (not two) lets a tile hold 16 outputs in the 32 registers, so every weight vector
// loaded feeds 4 input rows and every input vector 4 weight rows.
template <int RB, int TB, int PF, typename WT>
inline void tile(const float* X, int ldx, const WT* W, int ldw, int cols, const float* bias,
                 float* Y, int ldy, int r, Prefetch pf = {}) {
    __m512 acc[RB][TB];
    STRATA_UNROLL for (int i = 0; i < RB; ++i)
        STRATA_UNROLL for (int t = 0; t < TB; ++t) acc[i][t] = _mm512_setzero_ps();
    const WT* w[RB];
    STRATA_UNROLL for (int i = 0; i < RB; ++i) w[i] = W + size_t(r + i) * ldw;
    const float* xr[TB];
    STRATA_UNROLL for (int t = 0; t < TB; ++t) xr[t] = X + size_t(t) * ldx;
    constexpr int HINT = PF == kPfShare ? _MM_HINT_T1 : _MM_HINT_T0;
    const int steps = cols / 32;
    const int per = PF == kPfShare && steps > 0 ? (pf.n + steps - 1) / steps : 0;
    int k = 0;
    for (; k + 32 <= cols; k += 32) {
        if constexpr (PF == kPfShift) {
            STRATA_UNROLL for (int i = 0; i < RB; ++i) {
                const char* q = reinterpret_cast<const char*>(w[i] + k + kPrefetchShift / sizeof(WT));
                _mm_prefetch(q, _mm_hint(HINT));
                if (sizeof(WT) == 4) _mm_prefetch(q + 64, _mm_hint(HINT));
            }
        } else if constexpr (PF == kPfShare) {
            for (int j = 0; j < per && pf.n > 0; ++j, --pf.n, pf.p += 64) _mm_prefetch(pf.p, _mm_hint(HINT));
        }
        chunk<RB, TB>(acc, xr, w, k);
        chunk<RB, TB>(acc, xr, w, k + 16);
    }
    if (k + 16 <= cols) {
        chunk<RB, TB>(acc, xr, w, k);
        k += 16;
    }
    if constexpr (PF == kPfShare)
        for (; pf.n > 0; --pf.n, pf.p += 64) _mm_prefetch(pf.p, _mm_hint(HINT));
    if (k < cols) {
        __mmask16 m = __mmask16((1u << (cols - k)) - 1u);
        STRATA_UNROLL for (int i = 0; i < RB; ++i) {
            __m512 wv = loadw_mask(w[i] + k, m);
            STRATA_UNROLL for (int t = 0; t < TB; ++t)
                acc[i][t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, X + size_t(t) * ldx + k), acc[i][t]);
        }
    }
    if constexpr (RB == 4 && TB == 4) {
        __m512 v[16];
        STRATA_UNROLL for (int i = 0; i < 4; ++i)
            STRATA_UNROLL for (int t = 0; t < 4; ++t) v[4 * i + t] = acc[i][t];
        alignas(64) float sums[16];
        _mm512_store_ps(sums, hsum16x16(v));
        STRATA_UNROLL for (int t = 0; t < 4; ++t) {
            __m128 s = _mm_load_ps(sums + 4 * t);
            if (bias) s = _mm_add_ps(s, _mm_loadu_ps(bias + r));
            _mm_storeu_ps(Y + size_t(t) * ldy + r, s);
        }
    } else {
        STRATA_UNROLL for (int i = 0; i < RB; ++i)
            STRATA_UNROLL for (int t = 0; t < TB; ++t) {
                float s = hsum16(acc[i][t]);
                if (bias) s += bias[r + i];
                Y[size_t(t) * ldy + r + i] = s;
            }
    }
}

// kPrefetch false: no software prefetch (operands that are already in cache, such as the keys
// of a decode attention row).
template <typename WT, bool kPrefetch = true>
void matmul_range_t(const float* X, int T, int ldx, const WT* W, int ldw, int cols,
                    const float* bias, float* Y, int ldy, int r0, int r1) {
    constexpr PfMode kShift = kPrefetch ? kPfShift : kPfNone, kShare = kPrefetch ? kPfShare : kPfNone;
    // Weight rows outer, input rows inner: each block of 8 weight rows is read from memory once
    // and reused from L1 for every input row (input rows in 4x4 tiles, the last 1-3 in 4x2 /
    // 8x1 tiles: 8-16 independent FMA chains, enough to hide the FMA latency).
    //
    // Prefetch (the hardware streamers alone stop at 4 KB pages): a window of T >= 4 rows reads
    // a block of weight rows once, then computes on it for T/4 passes. Prefetching only in the
    // reading pass would leave memory idle for the other passes and add the reads to the
    // compute instead of hiding them under it; so the block's tile calls share the prefetch of
    // the block two ahead (the rows of a range are one contiguous stream), each a slice spread
    // over its column steps: memory runs at the pace of the compute.
    // Measured on cold 1536x512 f32 (one thread): T=16 0.25 -> 0.21 ms, T=2 0.12 -> 0.10 ms.
    // T < 4 (decode) takes the same scheme: its tiles used to prefetch their own lines 8 KiB
    // on, i.e. 4 rows ahead, so half of each block's rows were requested only when they were
    // read and the stream ran latency-bound (the cold 32000x512 head took longer at T=2 and 3
    // than at T=4). Sequential lines of the block two ahead: head T=1 4.50 -> 3.15 ms, T=2
    // 5.88 -> 2.84 ms, T=3 6.19 -> 2.57 ms (bench/matmul_ab.py, one thread, loaded machine).
    const size_t rb = size_t(ldw) * sizeof(WT);
    const char* const stream_end = reinterpret_cast<const char*>(W) + size_t(r1) * rb;
    const int groups4 = T / 4, groups2 = (T % 4) / 2, singles = T % 2;
    const int calls = 2 * groups4 + 2 * groups2 + singles;  // tile calls per 8-row block
    const Prefetch sh{};
    int r = r0;
    if constexpr (kPrefetch) {
        // the stream starts cold: the blocks below prefetch two ahead, so fetch the second
        // block now (the first is read at once)
        const char* p = reinterpret_cast<const char*>(W) + size_t(r0 + 8) * rb;
        const char* e = std::min(stream_end, p + 8 * rb);
        for (; p < e; p += 64) _mm_prefetch(p, _MM_HINT_T1);
    }
    for (; r + 8 <= r1; r += 8) {
        const char* pf0 = reinterpret_cast<const char*>(W) + size_t(r + kPrefetchAheadRows) * rb;
        int lines = pf0 < stream_end ? int(std::min<size_t>(8 * rb, size_t(stream_end - pf0)) / 64) : 0;
        int c = 0;
        auto share = [&]() {
            Prefetch p{pf0 + size_t(lines) * c / calls * 64, int(size_t(lines) * (c + 1) / calls - size_t(lines) * c / calls)};
            ++c;
            return p;
        };
        int t = 0;
        for (; t + 4 <= T; t += 4) {
            tile<4, 4, kShare>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, share());
            tile<4, 4, kShare>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r + 4, share());
        }
        for (; t + 2 <= T; t += 2) {
            tile<4, 2, kShare>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, share());
            tile<4, 2, kShare>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r + 4, share());
        }
        for (; t < T; ++t)
            tile<8, 1, kShare>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, share());
    }
    for (; r + 4 <= r1; r += 4) {
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tile<4, 4, kShift>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, sh);
        for (; t + 2 <= T; t += 2)
            tile<4, 2, kShift>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, sh);
        for (; t < T; ++t) tile<4, 1, kShift>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, sh);
    }
    for (; r < r1; ++r) {
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tile<1, 4, kShift>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, sh);
        for (; t + 2 <= T; t += 2)
            tile<1, 2, kShift>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, sh);
        for (; t < T; ++t) tile<1, 1, kShift>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r, sh);
    }
}

}  // namespace

float dot_f32(const float* a, const float* b, int n) {
    float y;
    tile<1, 1, kPfNone>(a, 0, b, 0, n, nullptr, &y, 0, 0);
    return y;
}

#undef STRATA_UNROLL

#elif defined(STRATA_AVX2)

// AVX2: 8-lane chunks; acc0 takes chunks 0,2,4.., acc1 chunks 1,3,5..; a leftover full chunk
// goes to acc0, a zero-padded tail to acc1; result = hsum(acc0 + acc1) in one fixed order.
namespace {

// How far ahead of the weight stream to prefetch into L2 (8 KiB measured best here).
constexpr size_t kPrefetchBytes = 8192;

inline __m256 loadw(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 loadw(const uint16_t* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <typename WT>
inline __m256 loadw_tail(const WT* p, int n) {
    alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; ++i) {
        if constexpr (std::is_same<WT, float>::value)
            tmp[i] = p[i];
        else
            tmp[i] = bf16_to_f32(p[i]);
    }
    return _mm256_load_ps(tmp);
}
inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 sh = _mm_movehl_ps(lo, lo);
    lo = _mm_add_ps(lo, sh);
    sh = _mm_shuffle_ps(lo, lo, 0x55);
    return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}

template <int RB, int TB, typename WT>
inline void tile(const float* X, int ldx, const WT* W, int ldw, int cols, const float* bias,
                 float* Y, int ldy, int r) {
    __m256 a0[RB][TB], a1[RB][TB];
    for (int i = 0; i < RB; ++i)
        for (int t = 0; t < TB; ++t) {
            a0[i][t] = _mm256_setzero_ps();
            a1[i][t] = _mm256_setzero_ps();
        }
    const WT* w[RB];
    for (int i = 0; i < RB; ++i) w[i] = W + size_t(r + i) * ldw;
    const size_t pf = kPrefetchBytes / sizeof(WT);
    int k = 0;
    for (; k + 16 <= cols; k += 16) {
        for (int i = 0; i < RB; ++i) _mm_prefetch(reinterpret_cast<const char*>(w[i] + k + pf), TB == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
        for (int i = 0; i < RB; ++i) {
            __m256 wa = loadw(w[i] + k), wb = loadw(w[i] + k + 8);
            for (int t = 0; t < TB; ++t) {
                a0[i][t] = _mm256_fmadd_ps(wa, _mm256_loadu_ps(X + size_t(t) * ldx + k), a0[i][t]);
                a1[i][t] = _mm256_fmadd_ps(wb, _mm256_loadu_ps(X + size_t(t) * ldx + k + 8), a1[i][t]);
            }
        }
    }
    if (k + 8 <= cols) {
        for (int i = 0; i < RB; ++i) {
            __m256 wa = loadw(w[i] + k);
            for (int t = 0; t < TB; ++t)
                a0[i][t] = _mm256_fmadd_ps(wa, _mm256_loadu_ps(X + size_t(t) * ldx + k), a0[i][t]);
        }
        k += 8;
    }
    if (k < cols) {
        int n = cols - k;
        for (int i = 0; i < RB; ++i) {
            __m256 wa = loadw_tail(w[i] + k, n);
            for (int t = 0; t < TB; ++t)
                a1[i][t] = _mm256_fmadd_ps(wa, loadw_tail(X + size_t(t) * ldx + k, n), a1[i][t]);
        }
    }
    for (int i = 0; i < RB; ++i)
        for (int t = 0; t < TB; ++t) {
            float s = hsum(_mm256_add_ps(a0[i][t], a1[i][t]));
            if (bias) s += bias[r + i];
            Y[size_t(t) * ldy + r + i] = s;
        }
}

template <typename WT>
void matmul_range_t(const float* X, int T, int ldx, const WT* W, int ldw, int cols,
                    const float* bias, float* Y, int ldy, int r0, int r1) {
    int r = r0;
    if (T == 1) {
        for (; r + 4 <= r1; r += 4) tile<4, 1>(X, ldx, W, ldw, cols, bias, Y, ldy, r);
        for (; r < r1; ++r) tile<1, 1>(X, ldx, W, ldw, cols, bias, Y, ldy, r);
        return;
    }
    for (; r + 2 <= r1; r += 2) {
        int t = 0;
        for (; t + 2 <= T; t += 2)
            tile<2, 2>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r);
        for (; t < T; ++t)
            tile<2, 1>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r);
    }
    for (; r < r1; ++r)
        for (int t = 0; t < T; ++t)
            tile<1, 1>(X + size_t(t) * ldx, ldx, W, ldw, cols, bias, Y + size_t(t) * ldy, ldy, r);
}

}  // namespace

float dot_f32(const float* a, const float* b, int n) {
    float y;
    tile<1, 1>(a, 0, b, 0, n, nullptr, &y, 0, 0);
    return y;
}

#else  // scalar fallback: its own fixed order, two accumulators of 16 lanes each

namespace {
inline float ldw(const float* p) { return *p; }
inline float ldw(const uint16_t* p) { return bf16_to_f32(*p); }

template <typename WT>
float dot_one(const float* x, const WT* w, int cols) {
    float a0[16] = {0}, a1[16] = {0};
    int k = 0;
    for (; k + 32 <= cols; k += 32)
        for (int l = 0; l < 16; ++l) {
            a0[l] = STRATA_FMA(ldw(w + k + l), x[k + l], a0[l]);
            a1[l] = STRATA_FMA(ldw(w + k + 16 + l), x[k + 16 + l], a1[l]);
        }
    if (k + 16 <= cols) {
        for (int l = 0; l < 16; ++l) a0[l] = STRATA_FMA(ldw(w + k + l), x[k + l], a0[l]);
        k += 16;
    }
    for (int l = 0; k + l < cols; ++l) a1[l] = STRATA_FMA(ldw(w + k + l), x[k + l], a1[l]);
    float s[16];
    for (int l = 0; l < 16; ++l) s[l] = a0[l] + a1[l];
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; ++l) s[l] = s[l] + s[l + h];
    return s[0];
}

template <typename WT>
void matmul_range_t(const float* X, int T, int ldx, const WT* W, int ldw_, int cols,
                    const float* bias, float* Y, int ldy, int r0, int r1) {
    for (int r = r0; r < r1; ++r)
        for (int t = 0; t < T; ++t) {
            float s = dot_one(X + size_t(t) * ldx, W + size_t(r) * ldw_, cols);
            if (bias) s += bias[r];
            Y[size_t(t) * ldy + r] = s;
        }
}
}  // namespace

float dot_f32(const float* a, const float* b, int n) { return dot_one(a, b, n); }

#endif

void dot_rows_f32(const float* X, int T, int ldx, const float* W, int ldw, int cols, float* Y, int ldy, int r0,
                  int r1) {
#ifdef STRATA_AVX512
    if (T > 0 && r1 > r0) matmul_range_t<float, false>(X, T, ldx, W, ldw, cols, nullptr, Y, ldy, r0, r1);
#else
    if (T > 0 && r1 > r0) matmul_range_t<float>(X, T, ldx, W, ldw, cols, nullptr, Y, ldy, r0, r1);
#endif
}

namespace {

// Prefill jobs of more rows than this take the packed GEMM. Smaller ones (most expert jobs of a
// prefill: 256 rows x top-k / experts = 16-32 rows each) take the tile kernel, which reads the
// weights in place: the GEMM would transpose every weight panel per call for only a few row
// panels (26% of a 256-token prefill's time went to that packing). 64 measured best here.
constexpr int kGemmMinRows = 64;

template <typename WT>
void matmul_range_fmt(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y, int ldy,
                      int r0, int r1) {
    int ldw = int(W.row_bytes / sizeof(WT));
    matmul_range_t(X, T, ldx, static_cast<const WT*>(W.data), ldw, W.cols, bias, Y, ldy, r0, r1);
}

void gemm_range_f32(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y, int ldy, int r0,
                    int r1) {
    cpu::gemm_f32(X, T, ldx, static_cast<const float*>(W.data), int(W.row_bytes / 4), W.cols, bias, Y, ldy, r0, r1);
}
void gemm_range_bf16(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y, int ldy, int r0,
                     int r1) {
    cpu::gemm_bf16(X, T, ldx, static_cast<const uint16_t*>(W.data), int(W.row_bytes / 2), W.cols, bias, Y, ldy, r0,
                   r1);
}

void row_f32(const MatView& W, int row, float* out) {
    std::memcpy(out, W.row(row), sizeof(float) * W.cols);
}
void row_bf16(const MatView& W, int row, float* out) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(W.row(row));
    for (int i = 0; i < W.cols; ++i) out[i] = bf16_to_f32(p[i]);
}
void row_f16(const MatView& W, int row, float* out) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(W.row(row));
    for (int i = 0; i < W.cols; ++i) out[i] = f16_to_f32(p[i]);
}

struct FormatTable {
    CpuFormatKernels k[kFormatCount];
    FormatTable() {
        const int gb = cpu::gemm_feature_block();
        k[int(WFormat::F32)] = {matmul_range_fmt<float>, row_f32, gemm_range_f32, gb};
        k[int(WFormat::BF16)] = {matmul_range_fmt<uint16_t>, row_bf16, gemm_range_bf16, gb};
        k[int(WFormat::F16)] = {nullptr, row_f16, nullptr, 4};  // matrices are converted to f32 at load
    }
};
FormatTable& table() {
    static FormatTable t;
    return t;
}

}  // namespace

void register_cpu_format(WFormat f, const CpuFormatKernels& k) { table().k[int(f)] = k; }
const CpuFormatKernels& cpu_format_kernels(WFormat f) { return table().k[int(f)]; }

void matmul_range(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y,
                  int ldy, int r0, int r1) {
    if (T <= 0 || r1 <= r0) return;
    auto fn = cpu_format_kernels(W.format).matmul_range;
    if (!fn)
        throw std::runtime_error(std::string("matmul: the cpu backend has no kernel for ") +
                                 format_info(W.format).name + " weights");
    fn(X, T, ldx, W, bias, Y, ldy, r0, r1);
}

void matmul_jobs(ThreadPool& pool, const std::vector<MatJob>& jobs, bool prefill) {
    // Split every job into blocks of output rows; the block size depends only on the job's
    // shape and the thread count (never on which rows are computed together). In prefill mode,
    // jobs of more than kGemmMinRows rows take the format's GEMM kernel when it has one.
    struct Task {
        int job, r0, r1;
    };
    thread_local std::vector<Task> tasks;
    thread_local std::vector<const float*> xs;
    thread_local std::vector<int> lds;
    thread_local std::vector<char> gemm;
    tasks.clear();
    xs.assign(jobs.size(), nullptr);
    lds.assign(jobs.size(), 0);
    gemm.assign(jobs.size(), 0);
    int64_t total = 0;
    for (const auto& j : jobs) total += int64_t(j.W.rows) * j.W.cols * std::max(1, j.T);
    int nthreads = pool.size();
    // aim for ~4 tasks per thread overall, blocks of a multiple of the kernel's row block
    for (int ji = 0; ji < int(jobs.size()); ++ji) {
        const auto& j = jobs[ji];
        if (j.T <= 0 || j.W.rows <= 0) continue;
        const CpuFormatKernels& fk = cpu_format_kernels(j.W.format);
        gemm[ji] = prefill && j.T > kGemmMinRows && fk.gemm_range != nullptr;
        const int gran = gemm[ji] ? fk.gemm_block : 4;
        int64_t work = int64_t(j.W.rows) * j.W.cols * std::max(1, j.T);
        int nb = 1;
        if (nthreads > 1 && total > 32768) {
            nb = int((work * nthreads * 4 + total - 1) / total);
            nb = std::max(1, std::min(nb, (j.W.rows + gran - 1) / gran));
        }
        int per = ((j.W.rows + nb - 1) / nb + gran - 1) / gran * gran;
        for (int r = 0; r < j.W.rows; r += per) tasks.push_back({ji, r, std::min(j.W.rows, r + per)});
    }
    if (tasks.empty()) return;
    // Inputs are read once per weight row: keep them 64-byte aligned with a stride of whole
    // cache lines (unaligned rows make every vector load a split load). Copies are tiny (T rows).
    // The GEMM packs its inputs itself.
    auto aligned = [](const MatJob& j) {
        return (reinterpret_cast<uintptr_t>(j.X) % 64 == 0) && (j.T == 1 || j.ldx % 16 == 0);
    };
    size_t need = 0;
    for (size_t ji = 0; ji < jobs.size(); ++ji) {
        const auto& j = jobs[ji];
        if (!gemm[ji] && !aligned(j)) need += size_t(j.T) * ((j.W.cols + 15) / 16 * 16) + 16;
    }
    thread_local std::vector<float> xbuf;
    if (need > 0 && xbuf.size() < need + 16) xbuf.resize(need + 16);
    float* base = xbuf.empty() ? nullptr : xbuf.data();
    if (base) base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 / sizeof(float);
    for (size_t ji = 0; ji < jobs.size(); ++ji) {
        const auto& j = jobs[ji];
        if (gemm[ji] || aligned(j)) {
            xs[ji] = j.X;
            lds[ji] = j.ldx;
            continue;
        }
        int ld = (j.W.cols + 15) / 16 * 16;
        for (int t = 0; t < j.T; ++t)
            std::memcpy(base + size_t(t) * ld, j.X + size_t(t) * j.ldx, sizeof(float) * j.W.cols);
        xs[ji] = base;
        lds[ji] = ld;
        base += size_t(j.T) * ld;
    }
    const Task* tk0 = tasks.data();
    const float* const* xs0 = xs.data();
    const int* lds0 = lds.data();
    const char* gemm0 = gemm.data();
    auto fn = [&](int i) {
        const Task& tk = tk0[i];
        const MatJob& j = jobs[tk.job];
        if (gemm0[tk.job])
            cpu_format_kernels(j.W.format).gemm_range(xs0[tk.job], j.T, lds0[tk.job], j.W, j.bias, j.Y, j.ldy, tk.r0,
                                                      tk.r1);
        else
            matmul_range(xs0[tk.job], j.T, lds0[tk.job], j.W, j.bias, j.Y, j.ldy, tk.r0, tk.r1);
    };
    const int ntasks = int(tasks.size());
    if (nthreads == 1 || total <= 32768 || ntasks == 1) {
        for (int i = 0; i < ntasks; ++i) fn(i);
    } else {
        pool.parallel_for(ntasks, fn);
    }
}

}  // namespace strata
