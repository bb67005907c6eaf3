#include "routing_moce.h"

#include <algorithm>
#include <vector>

#include "routing.h"

namespace strata {

namespace {

// Softmax exactly as route_topk computes it (same operations, same order).
void softmax(const float* logits, int n, std::vector<float>& p) {
    float mx = logits[0];
    for (int e = 1; e < n; ++e) mx = std::max(mx, logits[e]);
    p.resize(size_t(n));
    float sum = 0.f;
    for (int e = 0; e < n; ++e) {
        p[size_t(e)] = std::exp(logits[e] - mx);
        sum += p[size_t(e)];
    }
    for (int e = 0; e < n; ++e) p[size_t(e)] = p[size_t(e)] / sum;
}

// Highest score among the untaken (and allowed) experts; ties go to the lower id. -1 if none.
int best_of(const std::vector<float>& score, const std::vector<char>& taken, const uint8_t* allowed) {
    int best = -1;
    for (int e = 0; e < int(score.size()); ++e) {
        if (taken[size_t(e)] || (allowed && !allowed[e])) continue;
        if (best < 0 || score[size_t(e)] > score[size_t(best)]) best = e;
    }
    return best;
}

void finish(const std::vector<float>& p, int k, bool renormalize, int* idx, float* weights) {
    for (int j = 0; j < k; ++j) weights[j] = p[size_t(idx[j])];
    if (renormalize) {
        float s = 0.f;
        for (int j = 0; j < k; ++j) s += weights[j];
        for (int j = 0; j < k; ++j) weights[j] = weights[j] / s;
    }
}

}  // namespace

void route_topk_cache_aware(const float* logits, int n_experts, int k, bool renormalize, int protect,
                            float bonus, const uint8_t* ready, int* idx, float* weights) {
    std::vector<float> p;
    softmax(logits, n_experts, p);
    std::vector<char> taken(size_t(n_experts), 0);
    protect = std::max(0, std::min(protect, k));
    for (int j = 0; j < protect; ++j) {
        idx[j] = best_of(p, taken, nullptr);
        taken[size_t(idx[j])] = 1;
    }
    std::vector<float> score(p);
    const float mult = std::exp(bonus);
    if (ready)
        for (int e = 0; e < n_experts; ++e)
            if (ready[e]) score[size_t(e)] *= mult;
    for (int j = protect; j < k; ++j) {
        idx[j] = best_of(score, taken, nullptr);
        taken[size_t(idx[j])] = 1;
    }
    finish(p, k, renormalize, idx, weights);
}

void route_topk_budget(const float* logits, int n_experts, int k, bool renormalize,
                       const uint8_t* eligible, int* idx, float* weights) {
    std::vector<float> p;
    softmax(logits, n_experts, p);
    std::vector<char> taken(size_t(n_experts), 0);
    int j = 0;
    for (; j < k; ++j) {
        const int e = best_of(p, taken, eligible);
        if (e < 0) break;
        idx[j] = e;
        taken[size_t(e)] = 1;
    }
    const int chosen = j;
    if (chosen == 0) {  // nothing eligible at all: behave exactly (cannot happen with root anchors)
        route_topk(logits, n_experts, k, renormalize, idx, weights);
        return;
    }
    for (; j < k; ++j) idx[j] = idx[chosen - 1];
    finish(p, chosen, renormalize, idx, weights);
    for (j = chosen; j < k; ++j) weights[j] = 0.f;
}

void route_window(const float* logits, int rows, int n_experts, int k, bool renormalize,
                  const RoutingOptions& opt, const uint8_t* ready, int* idx, float* weights) {
    for (int t = 0; t < rows; ++t) {
        const float* l = logits + size_t(t) * n_experts;
        int* ix = idx + size_t(t) * k;
        float* w = weights + size_t(t) * k;
        const bool draft = t > 0;
        if (draft && opt.hard_budget) {
            std::vector<uint8_t> eligible(size_t(n_experts), 0);
            const int anchors = opt.budget_anchors < 0 ? k : std::min(opt.budget_anchors, k);
            for (int j = 0; j < anchors; ++j) eligible[size_t(idx[j])] = 1;  // the root row's experts
            if (ready)
                for (int e = 0; e < n_experts; ++e) eligible[size_t(e)] |= ready[e];
            route_topk_budget(l, n_experts, k, renormalize, eligible.data(), ix, w);
        } else if (opt.cache_aware) {
            const int protect = draft && opt.draft_protect >= 0 ? opt.draft_protect : opt.protect;
            const float bonus = draft && !std::isnan(opt.draft_bonus) ? opt.draft_bonus : opt.bonus;
            route_topk_cache_aware(l, n_experts, k, renormalize, protect, bonus, ready, ix, w);
        } else {
            route_topk(l, n_experts, k, renormalize, ix, w);
        }
    }
}

}  // namespace strata
