// Gated DeltaNet mixer: fused (qwen3_next) or split (qwen3_5) projections, causal depthwise
// conv + SiLU, L2-normalised q/k, the gated delta rule per value head, gated RMSNorm with z,
// output projection. State: the recurrence S and the conv history, committed only.
//
// A window never mutates the committed state: its rows run from it into scratch (S_scr,
// hist_scr). commit(T) adopts the scratch; commit(keep < T) folds exactly the kept rows'
// inputs (kept per row during the run) into the committed state, at commit (eager) or at the
// next run / save (lazy).
#pragma once
#include <vector>

#include "layers/layer.h"
#include "weights.h"

namespace strata {

class GdnLayer : public Mixer {
public:
    GdnLayer(const LayerEnv& env, WeightLoader& w, int layer, bool lazy_fold);
    void run(const float* h, int n, int64_t p0, int row0, float* out) override;
    void begin_window(int T, bool keep_rows) override;
    bool commit(int keep) override;
    bool flush() override;
    size_t state_bytes(int64_t pos) const override;
    void save(StateWriter& w, int64_t pos) const override;
    void load(StateReader& r, int64_t pos) override;
    void reset() override;
    size_t weight_bytes() const override;

private:
    void fold(int keep);
    int file_head(int h) const;
    void build_split_perm();
    void build_perm_copies();
    void untile_value_heads();
    void canonical_from_fused(const float* raw, float* P, int n);
    // hist_out = the last K-1 rows of [hist (K-1 rows); n rows at x (stride ldx)]
    void advance_history(const float* hist, const float* x, int ldx, int n, float* hist_out);
    LayerEnv env_;
    bool lazy_;
    int key_dim_, value_dim_, conv_dim_;
    Linear qkvz_, ba_;          // fused (qwen3_next)
    Linear qkv_, z_, b_, a_;    // split (qwen3_5)
    bool ba_fused_ = false;     // split q/k/v and z but fused b/a (qwen3next GGUF files)
    Linear out_;
    std::vector<int> perm_;     // split projections: canonical [q|k|v|z|b|a] index -> output index
    // perm_ as strided copies (offsets in columns; src/dst head strides): one copy_many per run,
    // which a GPU backend does where the data is. Empty where perm_ is (or the layout is unusual
    // and perm_ takes the host path).
    struct PermCopy {
        int src, shs, dst, dhs, heads, dim;
    };
    std::vector<PermCopy> perm_copies_;
    std::vector<float> conv_w_; // [conv_dim][K]
    std::vector<float> A_, dt_bias_, norm_w_;
    // committed state
    std::vector<float> S_;      // [nv][dk][dv]
    std::vector<float> hist_;   // [K-1][conv_dim] oldest first
    // the open window's state (row 0 reads S, writes S_scr)
    std::vector<float> S_scr_, hist_scr_;
    // per-row inputs of the open window (keep_rows): pre-conv rows and step inputs
    std::vector<float> pre_;    // [rows][conv_dim]
    std::vector<float> qs_, ks_, vs_, dec_, beta_;
    int T_ = 0;
    bool keep_rows_ = false;
    int pending_ = 0;           // lazy: rows of the last window still to fold
    // every array above on the backend's device (a GPU keeps them there between windows)
    Attached dev_conv_w_, dev_A_, dev_dt_, dev_norm_, dev_S_, dev_hist_, dev_S_scr_, dev_hist_scr_;
    Attached dev_pre_, dev_q_, dev_k_, dev_v_, dev_dec_, dev_beta_;
};

}  // namespace strata
