// Multi-row dot kernels over GGUF blocks. A row of W is walked in spans of up to 256 weights
// (one K-quant block, eight Q8_0 blocks, or 256 plain floats); each span is decoded once into
// an L1 buffer and then multiplied into every one of the T input rows. Each output element
// gets the same operations in the same order whatever T is, so a row's result never depends
// on the window it ran in.
#include <algorithm>
#include <stdexcept>

#include "blocks.h"
#include "dot_int8.h"
#include "formats.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define STRATA_QUANT_AVX2 1
#endif
#if defined(__AVX512F__)
#define STRATA_QUANT_AVX512 1
#endif

namespace strata::quant {

namespace {

constexpr int kSpan = 256;

// Decodes span `s` of a row into buf; returns how many weights it holds.
inline int decode_span(QType t, const uint8_t* row, int cols, int s, float* buf) {
    const int start = s * kSpan;
    const int len = std::min(kSpan, cols - start);
    switch (t) {
        case QType::F32:
            std::memcpy(buf, row + size_t(start) * 4, size_t(len) * 4);
            break;
        case QType::F16:
            for (int i = 0; i < len; ++i) buf[i] = half_to_float(load_u16(row + 2 * size_t(start + i)));
            break;
        case QType::BF16:
            for (int i = 0; i < len; ++i) buf[i] = bf16_bits_to_float(load_u16(row + 2 * size_t(start + i)));
            break;
        case QType::Q5_0: {
            const uint8_t* b = row + size_t(start / kQ8) * 22;
            for (int k = 0; k < len / kQ8; ++k) decode_q5_0(b + 22 * k, buf + kQ8 * k);
            break;
        }
        case QType::Q5_1: {
            const uint8_t* b = row + size_t(start / kQ8) * 24;
            for (int k = 0; k < len / kQ8; ++k) decode_q5_1(b + 24 * k, buf + kQ8 * k);
            break;
        }
        case QType::Q8_0: {
            const uint8_t* b = row + size_t(start / kQ8) * 34;
            for (int k = 0; k < len / kQ8; ++k) decode_q8_0(b + 34 * k, buf + kQ8 * k);
            break;
        }
        case QType::Q4_K: decode_q4_k(row + size_t(s) * 144, buf); break;
        case QType::Q5_K: decode_q5_k(row + size_t(s) * 176, buf); break;
        case QType::Q6_K: decode_q6_k(row + size_t(s) * 210, buf); break;
        case QType::IQ4_XS: decode_iq4_xs(row + size_t(s) * 136, buf); break;
    }
    return len;
}

// ---- scalar: four accumulators over element index mod 4 -------------------------------
struct ScalarIsa {
    using Acc = float;
    static Acc zero() { return 0.0f; }
    static float finish(Acc a) { return a; }
    template <int TB>
    static void span(const float* w, int len, const float* const* x, Acc* run) {
        for (int t = 0; t < TB; ++t) {
            float a[4] = {0, 0, 0, 0};
            for (int i = 0; i < len; ++i) a[i & 3] = __builtin_fmaf(w[i], x[t][i], a[i & 3]);
            run[t] = run[t] + ((a[0] + a[1]) + (a[2] + a[3]));
        }
    }
};

#ifdef STRATA_QUANT_AVX2
// ---- AVX2: four 8-lane accumulators over interleaved 8-wide chunks ---------------------
struct Avx2Isa {
    using Acc = __m256;
    static Acc zero() { return _mm256_setzero_ps(); }
    static float finish(Acc v) {
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
    static __m256i tail_mask(int n) {
        alignas(32) static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 8 - n));
    }
    template <int TB>
    static void span(const float* w, int len, const float* const* x, Acc* run) {
        __m256 a[TB][4];
        for (int t = 0; t < TB; ++t)
            for (int k = 0; k < 4; ++k) a[t][k] = _mm256_setzero_ps();
        const int full = len / 8, tail = len % 8;
        for (int c = 0; c < full; ++c) {
            const __m256 wv = _mm256_loadu_ps(w + 8 * c);
            for (int t = 0; t < TB; ++t)
                a[t][c & 3] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + 8 * c), a[t][c & 3]);
        }
        if (tail) {
            const __m256i m = tail_mask(tail);
            const __m256 wv = _mm256_maskload_ps(w + 8 * full, m);
            for (int t = 0; t < TB; ++t)
                a[t][full & 3] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x[t] + 8 * full, m), a[t][full & 3]);
        }
        for (int t = 0; t < TB; ++t)
            run[t] = _mm256_add_ps(run[t], _mm256_add_ps(_mm256_add_ps(a[t][0], a[t][1]),
                                                         _mm256_add_ps(a[t][2], a[t][3])));
    }
};
#endif

#ifdef STRATA_QUANT_AVX512
// ---- AVX-512: four 16-lane accumulators over interleaved 16-wide chunks ----------------
struct Avx512Isa {
    using Acc = __m512;
    static Acc zero() { return _mm512_setzero_ps(); }
    static float finish(Acc v) { return _mm512_reduce_add_ps(v); }
    template <int TB>
    static void span(const float* w, int len, const float* const* x, Acc* run) {
        __m512 a[TB][4];
        for (int t = 0; t < TB; ++t)
            for (int k = 0; k < 4; ++k) a[t][k] = _mm512_setzero_ps();
        const int full = len / 16, tail = len % 16;
        for (int c = 0; c < full; ++c) {
            const __m512 wv = _mm512_loadu_ps(w + 16 * c);
            for (int t = 0; t < TB; ++t)
                a[t][c & 3] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[t] + 16 * c), a[t][c & 3]);
        }
        if (tail) {
            const __mmask16 m = __mmask16((1u << tail) - 1);
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + 16 * full);
            for (int t = 0; t < TB; ++t)
                a[t][full & 3] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x[t] + 16 * full), a[t][full & 3]);
        }
        for (int t = 0; t < TB; ++t)
            run[t] = _mm512_add_ps(run[t], _mm512_add_ps(_mm512_add_ps(a[t][0], a[t][1]),
                                                         _mm512_add_ps(a[t][2], a[t][3])));
    }
};
#endif

// Rows of X are taken four at a time (register blocking only: every row's operations are
// the same whichever group it lands in).
template <class I>
void dot_rows_isa(QType qt, const float* X, int T, int ldx, const uint8_t* W, size_t rb, int cols,
                  float* Y, int ldy, int r0, int r1) {
    alignas(64) float buf[kSpan];
    const int spans = (cols + kSpan - 1) / kSpan;
    typename I::Acc run[kMaxDotRows];
    const float* xs[kMaxDotRows];
    for (int r = r0; r < r1; ++r) {
        const uint8_t* row = W + size_t(r) * rb;
        for (int t = 0; t < T; ++t) run[t] = I::zero();
        for (int s = 0; s < spans; ++s) {
            const int len = decode_span(qt, row, cols, s, buf);
            for (int t = 0; t < T; ++t) xs[t] = X + size_t(t) * ldx + size_t(s) * kSpan;
            int t = 0;
            for (; t + 4 <= T; t += 4) I::template span<4>(buf, len, xs + t, run + t);
            switch (T - t) {
                case 3: I::template span<3>(buf, len, xs + t, run + t); break;
                case 2: I::template span<2>(buf, len, xs + t, run + t); break;
                case 1: I::template span<1>(buf, len, xs + t, run + t); break;
                default: break;
            }
        }
        for (int t = 0; t < T; ++t) Y[size_t(t) * ldy + r] = I::finish(run[t]);
    }
}

}  // namespace

bool isa_available(Isa isa) {
    switch (isa) {
        case Isa::kAuto:
        case Isa::kScalar: return true;
#ifdef STRATA_QUANT_AVX2
        case Isa::kAvx2: return true;
#endif
#ifdef STRATA_QUANT_AVX512
        case Isa::kAvx512: return true;
#endif
        default: return false;
    }
}

Isa best_isa() {
#if defined(STRATA_QUANT_AVX512)
    return Isa::kAvx512;
#elif defined(STRATA_QUANT_AVX2)
    return Isa::kAvx2;
#else
    return Isa::kScalar;
#endif
}

void dot_rows(QType t, const float* X, int T, int ldx, const uint8_t* W, size_t rb, int cols, float* Y,
              int ldy, int r0, int r1, Isa isa) {
    if (T < 0 || T > kMaxDotRows) throw std::invalid_argument("dot_rows: T must be 0..16, got " + std::to_string(T));
    if (!is_supported(int(t))) throw std::invalid_argument("dot_rows: unsupported weight format");
    if (rb < row_bytes(t, cols)) throw std::invalid_argument("dot_rows: row stride shorter than a row");
    if (isa == Isa::kAuto) isa = best_isa();
    if (!isa_available(isa)) throw std::invalid_argument("dot_rows: instruction set not in this build");
    if (uses_int8_activations(t)) {
        dot_rows_int8(t, X, T, ldx, W, rb, cols, Y, ldy, r0, r1, isa);
        return;
    }
    switch (isa) {
#ifdef STRATA_QUANT_AVX512
        case Isa::kAvx512: dot_rows_isa<Avx512Isa>(t, X, T, ldx, W, rb, cols, Y, ldy, r0, r1); return;
#endif
#ifdef STRATA_QUANT_AVX2
        case Isa::kAvx2: dot_rows_isa<Avx2Isa>(t, X, T, ldx, W, rb, cols, Y, ldy, r0, r1); return;
#endif
        case Isa::kScalar: dot_rows_isa<ScalarIsa>(t, X, T, ldx, W, rb, cols, Y, ldy, r0, r1); return;
        default: throw std::invalid_argument("dot_rows: instruction set not in this build");
    }
}

}  // namespace strata::quant
