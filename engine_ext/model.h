// The strata engine: hybrid Gated DeltaNet / gated attention / MoE forward pass (CPU backend)
// with the window/commit contract and exact rollback.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "expert_store.h"
#include "routing_moce.h"
#include "threadpool.h"
#include "window_model.h"

namespace strata {

// Normalised architecture description (built by app/strata/config.py).
struct ModelSpec {
    std::string arch;              // qwen3_next | qwen3_5_moe | qwen3_moe
    int vocab = 0, hidden = 0, n_layers = 0;
    std::vector<int> layer_linear;  // 1 = Gated DeltaNet mixer, 0 = full attention
    std::vector<int> layer_moe;     // 1 = sparse MoE FFN, 0 = dense MLP
    int n_heads = 0, n_kv = 0, head_dim = 0, rot_dim = 0;
    double rope_theta = 10000.0;
    float eps = 1e-6f;
    bool attn_gated = true;        // q_proj also yields a sigmoid output gate
    bool attn_bias = false;
    bool norm_plus_one = true;     // RMSNorm weight is applied as (1 + w)
    int lin_nk = 0, lin_nv = 0, lin_dk = 0, lin_dv = 0, conv_k = 4;
    bool gdn_fused = true;         // qwen3_next in_proj_qkvz/in_proj_ba (grouped per key head)
    int n_experts = 0, top_k = 0;
    bool norm_topk = true;
    int moe_inter = 0, shared_inter = 0, inter = 0;
    bool tie = false;
    int64_t max_pos = 0;
};

// One tensor of the checkpoint: where its bytes live.
struct TensorRef {
    std::string name;   // canonical name (no "model." / "model.language_model." prefix)
    std::string path;
    int64_t offset = 0; // absolute byte offset in the file
    std::string dtype;  // F32 | BF16 | F16
    std::vector<int64_t> shape;
};

// Memory-maps checkpoint files and hands out typed views (f16 is converted to f32 once).
class WeightSource {
public:
    explicit WeightSource(const std::vector<TensorRef>& tensors);
    ~WeightSource();
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    MatView mat(const std::string& name, int rows, int cols);
    std::vector<float> vec(const std::string& name, int64_t n);      // any shape with n elements
    const TensorRef& ref(const std::string& name) const;

private:
    struct Mapping {
        void* ptr = nullptr;
        size_t size = 0;
    };
    const uint8_t* bytes(const TensorRef& t, size_t nbytes);
    // ModelError naming the tensor when it holds a NaN or Inf (checked once, at map time)
    void check_finite(const TensorRef& t, const uint8_t* p, int64_t n) const;
    std::vector<TensorRef> tensors_;
    std::unordered_map<std::string, size_t> index_;
    std::unordered_map<std::string, Mapping> maps_;
    std::vector<std::vector<uint8_t>> owned_;  // converted / realigned copies
};

// Every expert in memory (views into the mapped checkpoint).
class ResidentExpertStore : public ExpertStore {
public:
    ResidentExpertStore(std::shared_ptr<WeightSource> src, const ModelSpec& spec);
    void acquire_layer(int layer, const std::vector<int>& experts, const std::vector<int>& root,
                       std::vector<ExpertView>& out) override;
    void release_layer(int) override {}

private:
    std::shared_ptr<WeightSource> src_;
    std::vector<std::vector<ExpertView>> layers_;  // [layer][expert] (empty for dense layers)
};

struct Linear {
    MatView w;
    std::vector<float> bias;  // empty: none
    const float* b() const { return bias.empty() ? nullptr : bias.data(); }
};

struct EngineOptions {
    int threads = 0;          // 0: hardware concurrency
    std::string backend = "cpu";
    bool lazy_fold = false;
    int64_t ctx = 0;          // 0: max_position_embeddings
    std::string model_id;
    std::string config_json;
};

class Engine : public WindowModel {
public:
    Engine(const ModelSpec& spec, const std::vector<TensorRef>& tensors,
           std::shared_ptr<ExpertStore> store, const EngineOptions& opt);
    ~Engine() override;

    // WindowModel
    const float* run(const int32_t* tokens, int T) override;
    const float* run_last(const int32_t* tokens, int T) override { return run_ex(tokens, T, true); }
    void commit(int keep) override;
    int64_t pos() const override { return pos_; }
    int64_t context_limit() const override { return ctx_; }
    int vocab() const override { return spec_.vocab; }
    void reset() override;
    const WindowTelemetry& last_telemetry() const override { return tele_; }

    // run with logits for the last row only (prefill): returns 1 x vocab
    const float* run_ex(const int32_t* tokens, int T, bool last_only);
    bool window_open() const { return open_; }
    int last_rows() const { return last_rows_; }
    const ModelSpec& spec() const { return spec_; }
    const std::string& model_id() const { return opt_.model_id; }
    const std::string& config_json() const { return opt_.config_json; }
    bool lazy_fold() const { return opt_.lazy_fold; }
    int threads() const { return be_->threads(); }
    std::string backend() const { return be_->name(); }
    std::shared_ptr<ExpertStore> expert_store() const { return store_; }
    // Cache-aware routing (MoCE, routing_moce.h): off by default; any active mode marks windows
    // approximate. Set between windows only.
    void set_routing(const RoutingOptions& r) { routing_ = r; }
    const RoutingOptions& routing() const { return routing_; }

    std::string save_state();
    void load_state(const std::string& blob);

private:
    struct AttnLayer {
        Linear q, k, v, o;
        std::vector<float> qn, kn;
        std::vector<float> kc, vc;  // [cells][n_kv*head_dim]
        int64_t cells = 0;
    };
    struct GdnLayer {
        Linear qkvz, ba;          // fused (qwen3_next)
        Linear qkv, z, b, a;      // split (qwen3_5)
        Linear out;
        std::vector<int> perm;    // canonical [q|k|v|z|b|a] index -> fused projection index
        std::vector<float> conv_w;  // [conv_dim][K]
        std::vector<float> A, dt_bias, norm_w;
        // committed state
        std::vector<float> S;       // [nv][dk][dv]
        std::vector<float> hist;    // [K-1][conv_dim] oldest first
        // the open run's state (row 0 reads S, writes S_scr); commit adopts or folds
        std::vector<float> S_scr, hist_scr;
        // per-row inputs of the last window (rows <= kChunk): pre-conv rows and step inputs
        std::vector<float> pre;     // [rows][conv_dim]
        std::vector<float> qs, ks, vs, dec, beta;  // [rows][nv*dk] ... per value head
    };
    struct Mlp {
        Linear gate, up, down;
    };
    struct Layer {
        bool linear = false, moe = false;
        std::vector<float> in_norm, post_norm;
        AttnLayer attn;
        GdnLayer gdn;
        Mlp mlp;            // dense MLP or shared expert
        bool has_shared = false;
        Linear router, shared_gate;
        int moe_index = -1; // index among MoE layers
    };

    void forward_chunk(const int32_t* tokens, int n, int64_t p0, int row0, bool keep_rows,
                       float* logits, bool last_only);
    void attn_block(Layer& L, int li, const float* h, int n, int64_t p0, float* out);
    void gdn_block(Layer& L, const float* h, int n, int row0, bool keep_rows, float* out);
    void ffn_block(Layer& L, int li, const float* h, int n, float* out);
    void gdn_step(const float* Sin, float* S, const float* q, const float* k, const float* v,
                  float decay, float beta, float* out) const;
    void fold_rows(int keep);
    void flush_pending();
    void ensure_cells(AttnLayer& A, int64_t need);
    void check_tokens(const int32_t* tokens, int T) const;

    ModelSpec spec_;
    EngineOptions opt_;
    std::shared_ptr<WeightSource> src_;
    std::shared_ptr<ExpertStore> store_;
    std::unique_ptr<Backend> be_;
    std::vector<Layer> layers_;
    MatView embed_, head_;
    std::vector<float> final_norm_;
    std::vector<float> inv_freq_;
    int conv_dim_ = 0, key_dim_ = 0, value_dim_ = 0;
    int64_t ctx_ = 0;
    int n_moe_layers_ = 0;

    // window state
    int64_t pos_ = 0;
    bool open_ = false;
    int last_T_ = 0;
    int last_rows_ = 0;
    std::vector<int32_t> last_tokens_;
    int pending_fold_ = 0;  // lazy mode: rows of the last window still to fold
    RoutingOptions routing_;
    bool window_has_drafts_ = false;  // rows 1.. of this run are drafts (decode-size window)
    std::vector<std::vector<int>> run_union_;  // per MoE layer: experts used in this run
    std::vector<float> logits_;
    WindowTelemetry tele_;
    std::mutex mu_;
};

}  // namespace strata
