#include "routing.h"

#include <algorithm>
#include <cmath>

namespace strata {

void route_topk(const float* logits, int n_experts, int k, bool renormalize, int* idx,
                float* weights) {
    float mx = logits[0];
    for (int e = 1; e < n_experts; ++e) mx = std::max(mx, logits[e]);
    std::vector<float> p(n_experts);
    float sum = 0.f;
    for (int e = 0; e < n_experts; ++e) {
        p[e] = std::exp(logits[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < n_experts; ++e) p[e] = p[e] / sum;
    // partial selection: k passes are fine for k <= ~16, E <= 1024
    std::vector<char> taken(n_experts, 0);
    for (int j = 0; j < k; ++j) {
        int best = -1;
        for (int e = 0; e < n_experts; ++e) {
            if (taken[e]) continue;
            if (best < 0 || p[e] > p[best]) best = e;
        }
        taken[best] = 1;
        idx[j] = best;
        weights[j] = p[best];
    }
    if (renormalize) {
        float s = 0.f;
        for (int j = 0; j < k; ++j) s += weights[j];
        for (int j = 0; j < k; ++j) weights[j] = weights[j] / s;
    }
}

std::vector<int> expert_union(const int* idx, int rows, int k) {
    std::vector<int> u(idx, idx + size_t(rows) * k);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    return u;
}

}  // namespace strata
