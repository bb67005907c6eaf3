#include <stdexcept>
#include <string>

#include "cpu/kernels.h"
#include "cpu/matmul.h"

namespace strata::cpu {

void embed(const MatView& W, const int32_t* ids, int n, float* out) {
    auto fn = cpu_format_kernels(W.format).row_to_f32;
    if (!fn)
        throw std::runtime_error(std::string("embed: the cpu backend cannot read ") + format_info(W.format).name +
                                 " rows");
    for (int t = 0; t < n; ++t) fn(W, ids[t], out + size_t(t) * W.cols);
}

}  // namespace strata::cpu
