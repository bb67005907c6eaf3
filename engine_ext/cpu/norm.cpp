#include <cmath>

#include "cpu/activation.h"
#include "cpu/kernels.h"
#include "cpu/math.h"

namespace strata::cpu {

// Sum of squares in double, one fixed order: the norm of a row never depends on other rows.
void rmsnorm_row(const float* x, const float* w, float eps, int n, float* out) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    float inv = 1.0f / std::sqrt(float(ss / n) + eps);
    for (int i = 0; i < n; ++i) out[i] = (x[i] * inv) * w[i];
}

void rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps) {
    for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
            rmsnorm_row(x.p + size_t(r) * x.ld + size_t(h) * x.hs, w, eps, dim,
                        out.p + size_t(r) * out.ld + size_t(h) * out.hs);
}

void gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps) {
    for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h) {
            float* o = x.p + size_t(r) * x.ld + size_t(h) * x.hs;
            const float* zz = z.p + size_t(r) * z.ld + size_t(h) * z.hs;
            rmsnorm_row(o, w, eps, dim, o);
            mul_silu(o, zz, dim);
        }
}

}  // namespace strata::cpu
