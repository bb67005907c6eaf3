#include <cmath>
#include <vector>

#include "cpu/kernels.h"

namespace strata::cpu {

// Angles in f32 like the reference (float(pos) * inv_freq), rotate-half pairs (i, i + half).
void rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half) {
    std::vector<float> cs(half), sn(half);
    for (int r = 0; r < rows; ++r) {
        int64_t p = p0 + r;
        for (int i = 0; i < half; ++i) {
            float f = float(p) * inv_freq[i];
            cs[i] = std::cos(f);
            sn[i] = std::sin(f);
        }
        for (int h = 0; h < heads; ++h) {
            float* v = x.p + size_t(r) * x.ld + size_t(h) * x.hs;
            for (int i = 0; i < half; ++i) {
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * cs[i] - x2 * sn[i];
                v[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

}  // namespace strata::cpu
