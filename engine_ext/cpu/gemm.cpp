// Prefill GEMM: a GotoBLAS-style loop nest, simplified to what prefill shapes need (T up to a
// few hundred rows, K and N up to a few thousand).
//
//   for each K block of kKC:                 pack X[:, block] as MR-row panels  (A, k-major)
//     for each panel of NR output features:  pack W[panel, block] transposed    (B, k-major)
//       for each MR-row panel of X:          MR x NR accumulators in registers, one FMA per
//                                            (row, vector of features) per k, then add to Y
//
// B (kKC x NR floats) stays in L1 while every row panel of A streams past it from L2, so each
// weight is read from memory once per call however many rows there are; the accumulators never
// leave the registers inside a K block and no horizontal sums are needed.
#include "cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/prefill_simd.h"

namespace strata::cpu {

namespace {
namespace S = simd;

#if defined(__AVX512F__)
constexpr int kMR = 8, kNV = 2;   // 8 rows x 32 features: 16 of 32 zmm registers accumulate
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kMR = 6, kNV = 2;   // 6 rows x 16 features: 12 of 16 ymm registers accumulate
#else
constexpr int kMR = 4, kNV = 1;
#endif
constexpr int kNR = kNV * S::kLanes;
constexpr int kKC = 128;          // B panel: 128 x 32 floats = 16 KiB, half of a 32 KiB L1

struct Scratch {
    std::vector<float> a, b;
    float* grow(std::vector<float>& v, size_t n) {
        if (v.size() < n + 16) v.resize(n + 16);
        uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
        return v.data() + ((64 - p % 64) % 64) / sizeof(float);
    }
};
thread_local Scratch scratch;

// A panels: for row panel p, element (k, m) at A[(p * kc + k) * kMR + m]; rows past T are 0.
void pack_rows(const float* X, int T, int ldx, int k0, int kc, float* A) {
    for (int t0 = 0, p = 0; t0 < T; t0 += kMR, ++p) {
        float* dst = A + size_t(p) * kc * kMR;
        int rows = std::min(kMR, T - t0);
        if (rows < kMR) std::memset(dst, 0, sizeof(float) * kc * kMR);
        for (int m = 0; m < rows; ++m) {
            const float* src = X + size_t(t0 + m) * ldx + k0;
            for (int k = 0; k < kc; ++k) dst[k * kMR + m] = src[k];
        }
    }
}

inline float widen(float w) { return w; }
inline float widen(uint16_t w) { return S::bf16_to_f32(w); }

// B panel: element (k, j) at B[k * kNR + j] = W[n + j][k0 + k]; features past n1 are 0.
template <class WT>
void pack_features(const WT* W, int ldw, int n, int cols, int k0, int kc, float* B) {
    if (cols < kNR) std::memset(B, 0, sizeof(float) * kc * kNR);
    for (int j = 0; j < cols; ++j) {
        const WT* src = W + size_t(n + j) * ldw + k0;
        for (int k = 0; k < kc; ++k) B[k * kNR + j] = widen(src[k]);
    }
}

// One kMR x kNR tile over one K block. first: Y = acc (+ bias), else Y += acc.
void micro_kernel(const float* A, const float* B, int kc, float* Y, int ldy, int rows, int cols, bool first,
                  const float* bias) {
    S::vf acc[kMR][kNV];
    for (int m = 0; m < kMR; ++m)
        for (int v = 0; v < kNV; ++v) acc[m][v] = S::zero();
    for (int k = 0; k < kc; ++k) {
        S::vf b[kNV];
        for (int v = 0; v < kNV; ++v) b[v] = S::load(B + k * kNR + v * S::kLanes);
        const float* a = A + k * kMR;
        for (int m = 0; m < kMR; ++m) {
            S::vf x = S::set1(a[m]);
            for (int v = 0; v < kNV; ++v) acc[m][v] = S::fma(x, b[v], acc[m][v]);
        }
    }
    alignas(64) float tile[kNR];
    for (int m = 0; m < rows; ++m) {
        float* y = Y + size_t(m) * ldy;
        if (cols == kNR) {
            for (int v = 0; v < kNV; ++v) {
                float* yv = y + v * S::kLanes;
                S::vf r = acc[m][v];
                if (!first) r = S::add(S::load(yv), r);
                else if (bias) r = S::add(r, S::load(bias + v * S::kLanes));
                S::store(yv, r);
            }
        } else {
            for (int v = 0; v < kNV; ++v) S::store(tile + v * S::kLanes, acc[m][v]);
            for (int j = 0; j < cols; ++j) y[j] = first ? (bias ? tile[j] + bias[j] : tile[j]) : y[j] + tile[j];
        }
    }
}

template <class WT>
void gemm_t(const float* X, int T, int ldx, const WT* W, int ldw, int K, const float* bias, float* Y, int ldy,
            int n0, int n1) {
    if (T <= 0 || n1 <= n0) return;
    if (K <= 0) {
        for (int t = 0; t < T; ++t)
            for (int n = n0; n < n1; ++n) Y[size_t(t) * ldy + n] = bias ? bias[n] : 0.f;
        return;
    }
    const int panels = (T + kMR - 1) / kMR;
    float* A = scratch.grow(scratch.a, size_t(panels) * kMR * kKC);
    float* B = scratch.grow(scratch.b, size_t(kNR) * kKC);
    for (int k0 = 0; k0 < K; k0 += kKC) {
        const int kc = std::min(kKC, K - k0);
        pack_rows(X, T, ldx, k0, kc, A);
        for (int n = n0; n < n1; n += kNR) {
            const int cols = std::min(kNR, n1 - n);
            pack_features(W, ldw, n, cols, k0, kc, B);
            for (int p = 0; p < panels; ++p) {
                const int t0 = p * kMR;
                micro_kernel(A + size_t(p) * kc * kMR, B, kc, Y + size_t(t0) * ldy + n, ldy,
                             std::min(kMR, T - t0), cols, k0 == 0, bias ? bias + n : nullptr);
            }
        }
    }
}
}  // namespace

void gemm_f32(const float* X, int T, int ldx, const float* W, int ldw, int K, const float* bias, float* Y,
              int ldy, int n0, int n1) {
    gemm_t(X, T, ldx, W, ldw, K, bias, Y, ldy, n0, n1);
}

void gemm_bf16(const float* X, int T, int ldx, const uint16_t* W, int ldw, int K, const float* bias, float* Y,
               int ldy, int n0, int n1) {
    gemm_t(X, T, ldx, W, ldw, K, bias, Y, ldy, n0, n1);
}

int gemm_feature_block() { return kNR; }
const char* gemm_isa() { return S::kIsa; }

}  // namespace strata::cpu
