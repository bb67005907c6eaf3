// Cache-aware routing (MoCE): opt-in modes that trade exactness for fewer cold expert reads.
// Kept apart from routing.h so that the exact default path (route_topk) is untouched: with
// every option off, route_window() is route_topk() per row. Any active mode changes the model,
// so the engine must mark the window's output approximate (RoutingOptions::approximate()).
#pragma once
#include <cmath>
#include <cstdint>

namespace strata {

struct RoutingOptions {
    bool cache_aware = false;   // protect + bonus on every row (drafts may override below)
    int protect = 0;            // the natural top-j are always kept
    float bonus = 0.f;          // ready experts' scores are multiplied by exp(bonus)
    int draft_protect = -1;     // draft rows (1..T-1); -1: same as protect
    float draft_bonus = NAN;    // draft rows; NaN: same as bonus
    bool hard_budget = false;   // draft rows choose only among the root's anchors + ready experts
    int budget_anchors = -1;    // how many of the root row's experts (rank order) are anchors; -1: all k
    bool root_only_readahead = false;  // predict the next layer from the root row only (exact)
    bool approximate() const { return cache_aware || hard_budget; }
};

// One row, cache-aware: keep the natural top-`protect` by probability; fill the remaining ranks
// by p[e] * (ready[e] ? exp(bonus) : 1); the weights are the real probabilities of the chosen
// experts (the multiplier undone), renormalised over them when `renormalize`.
void route_topk_cache_aware(const float* logits, int n_experts, int k, bool renormalize, int protect,
                            float bonus, const uint8_t* ready, int* idx, float* weights);

// One draft row under the hard budget: only experts with eligible[e] != 0 may be chosen (top-k
// by probability among them). Fallback when fewer than k are eligible: the eligible ones, then
// the remaining ranks repeat the last chosen expert with weight 0 (no new expert is read).
void route_topk_budget(const float* logits, int n_experts, int k, bool renormalize,
                       const uint8_t* eligible, int* idx, float* weights);

// A whole window: row 0 is the root, rows 1.. are drafts. `ready` (n_experts) marks experts
// resident and ready now; it may be null when no mode needs it. idx/weights are [rows][k].
void route_window(const float* logits, int rows, int n_experts, int k, bool renormalize,
                  const RoutingOptions& opt, const uint8_t* ready, int* idx, float* weights);

}  // namespace strata
