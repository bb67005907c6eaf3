// Exact top-k routing, as the reference defines it: softmax over all experts (f32),
// the k largest probabilities (ties: lower expert id first), optional renormalisation.
// Cache-aware (approximate) modes are added next to this function, never inside it.
#pragma once
#include <vector>

namespace strata {

// logits[E] -> idx[k] (rank order, largest first) and weights[k].
void route_topk(const float* logits, int n_experts, int k, bool renormalize, int* idx,
                float* weights);

// Sorted unique union of rows' selected experts (idx is [rows][k]).
std::vector<int> expert_union(const int* idx, int rows, int k);

}  // namespace strata
