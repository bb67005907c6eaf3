#include "cpu/kernels.h"

namespace strata::cpu {

void add(float* x, const float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace strata::cpu
