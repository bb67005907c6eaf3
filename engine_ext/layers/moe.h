// The feed-forward block: a dense SwiGLU MLP, or a sparse MoE (softmax router, top-k, SwiGLU
// experts reached through the ExpertStore, optional shared expert with a sigmoid gate).
// Stateless across windows.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "expert_store.h"
#include "layers/layer.h"
#include "routing_moce.h"
#include "telemetry.h"
#include "weights.h"

namespace strata {

// What one window's MoE blocks share with the engine.
struct MoeWindow {
    ExpertStore* store = nullptr;
    const RoutingOptions* routing = nullptr;
    bool has_drafts = false;          // rows 1.. are drafts (decode-size window)
    WindowTelemetry* tele = nullptr;  // approximate flag
    std::vector<std::vector<int>>* union_per_moe = nullptr;  // experts used, per MoE layer
    std::vector<int64_t>* expert_bytes = nullptr;  // stored bytes of one expert, per MoE layer
    // (MoE layer, ids) of layers whose experts the backend chose itself (Backend::moe_experts):
    // the ids arrive with the window's results, for the telemetry
    std::vector<std::pair<int, std::shared_ptr<std::vector<int>>>>* late_ids = nullptr;
};

class FfnBlock {
public:
    FfnBlock(const LayerEnv& env, WeightLoader& w, int layer, int moe_index);
    // Read-ahead target: the next MoE block of the model (null for the last one).
    void set_next_moe(const FfnBlock* next) { next_ = next; }
    bool moe() const { return moe_index_ >= 0; }
    // Stored bytes of the non-expert weights every run reads (router, shared expert, dense MLP).
    size_t dense_weight_bytes() const;
    // out = the block of h. With `then`, the block may also do the residual add and norm that
    // follow it (Backend::moe_combine_add_rmsnorm): true when it did, then out is unspecified.
    bool run(const float* h, int n, float* out, MoeWindow& win, const Backend::AddNorm* then = nullptr);

private:
    void run_block(const float* h, int n, float* out, MoeWindow& win);
    // moe_combine into out, with the add and norm of then_ where there is one
    void combine(const float* D, const int* slot, const float* wts, int n, float* out, const float* sg);
    const Backend::AddNorm* then_ = nullptr;  // run's `then`, for the one call
    bool then_done_ = false;
    void dense(const float* h, int n, float* out);
    // The routed experts through Backend::moe_experts (every expert resident); false: the host path.
    bool run_on_device(const float* h, int n, const int* idx, const float* wts, float* out, const float* sg,
                       float* shg, const float* shu, MoeWindow& win);
    // The pairs of `a` (resident experts, or a window's acquired streamed ones) through
    // Backend::moe_experts into scratch GU/D, then the shared expert's down projection and the
    // combine; false: the backend cannot (nothing done), the host path runs.
    bool run_routed(Backend::MoeExpertsArgs a, const float* wts, float* out, const float* sg, float* shg,
                    const float* shu);
    LayerEnv env_;
    int layer_;
    int moe_index_;     // index among MoE layers, -1: dense MLP
    Linear gate_, up_, down_;  // dense MLP or shared expert
    bool has_shared_ = false;
    Linear router_, shared_gate_;
    const FfnBlock* next_ = nullptr;
    std::vector<ExpertView> views_;      // reused per run (no allocation once warm)
    std::vector<MatJob> jobs1_, jobs2_;
    std::vector<int> slots_;  // 0, 1, 2, ...: moe_combine's slots when D rows are the pairs
};

}  // namespace strata
