#include "cpu/kernels.h"
#include "routing.h"

namespace strata::cpu {

// Per row, the exact reference routing (routing.h): rows never interact.
void router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx, float* weights) {
    for (int t = 0; t < n; ++t)
        route_topk(logits + size_t(t) * n_experts, n_experts, k, renormalize, idx + size_t(t) * k,
                   weights + size_t(t) * k);
}

}  // namespace strata::cpu
