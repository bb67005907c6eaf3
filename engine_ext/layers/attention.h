// Gated attention: q/k RMSNorm, partial rotary, GQA over positional KV cells, sigmoid output
// gate. Its state is the KV cells below the committed position; cells past it are scratch that
// a later window rewrites before causal attention can read them, so commit is free.
#pragma once
#include <vector>

#include "layers/layer.h"
#include "weights.h"

namespace strata {

class AttentionLayer : public Mixer {
public:
    AttentionLayer(const LayerEnv& env, WeightLoader& w, int layer, const std::vector<float>& inv_freq);
    void run(const float* h, int n, int64_t p0, int row0, float* out) override;
    void begin_window(int, bool) override {}
    bool commit(int) override { return false; }
    size_t state_bytes(int64_t pos) const override;
    void save(StateWriter& w, int64_t pos) const override;
    void load(StateReader& r, int64_t pos) override;
    void reset() override {}
    size_t weight_bytes() const override;

private:
    void ensure_cells(int64_t need);
    LayerEnv env_;
    const std::vector<float>& inv_freq_;
    Linear q_, k_, v_, o_;
    std::vector<float> qn_, kn_;
    std::vector<float> kc_, vc_;  // [cells][n_kv*head_dim]
    int64_t cells_ = 0;
    Attached kc_dev_, vc_dev_, qn_dev_, kn_dev_;  // the cells and norms on the backend's device
};

}  // namespace strata
