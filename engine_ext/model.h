// The strata engine: runs a window layer by layer over a backend and commits it. The layers
// (layers/) own their state and rollback; this file only orders them.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "expert_store.h"
#include "layers/layer.h"
#include "layers/moe.h"
#include "model_spec.h"
#include "routing_moce.h"
#include "scratch.h"
#include "weights.h"
#include "window_model.h"

namespace strata {

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

    // run with logits for the last row only (prefill): returns 1 x vocab. `out`: the logits go
    // there (rows x vocab floats, the caller's array) instead of the engine's own buffer.
    const float* run_ex(const int32_t* tokens, int T, bool last_only, float* out = nullptr);
    bool window_open() const { return open_; }
    int last_rows() const { return last_rows_; }
    const ModelSpec& spec() const { return spec_; }
    const std::string& model_id() const { return opt_.model_id; }
    const std::string& config_json() const { return opt_.config_json; }
    bool lazy_fold() const { return opt_.lazy_fold; }
    int threads() const { return be_->threads(); }
    std::string backend() const { return be_->name(); }
    std::vector<std::pair<std::string, double>> backend_counters() const { return be_->counters(); }
    std::shared_ptr<ExpertStore> expert_store() const { return store_; }
    // Cache-aware routing (MoCE, routing_moce.h): off by default; any active mode marks windows
    // approximate. Set between windows only.
    void set_routing(const RoutingOptions& r) { routing_ = r; }
    const RoutingOptions& routing() const { return routing_; }

    std::string save_state();
    void load_state(const std::string& blob);

private:
    // One decoder layer: RMSNorm -> mixer -> residual -> RMSNorm -> FFN -> residual.
    struct Block {
        std::vector<float> in_norm, post_norm;
        std::unique_ptr<Mixer> mixer;
        std::unique_ptr<FfnBlock> ffn;
    };

    void forward_pass(const int32_t* tokens, int n, int64_t p0, int row0, float* logits, bool last_only,
                      bool prefill);
    void begin_window(int T, bool keep_rows);
    void check_tokens(const int32_t* tokens, int T) const;

    ModelSpec spec_;
    EngineOptions opt_;
    std::shared_ptr<WeightSource> src_;
    std::shared_ptr<ExpertStore> store_;
    std::unique_ptr<Backend> be_;
    Scratch scratch_;  // every pass's temporaries (layers take scopes of it)
    std::vector<Block> blocks_;
    std::vector<StatefulLayer*> stateful_;  // every stateful layer, in layer order (blob order)
    MatView embed_, head_;
    std::vector<float> final_norm_;
    std::vector<float> inv_freq_;
    int64_t ctx_ = 0;
    int n_moe_layers_ = 0;

    // window state
    int64_t pos_ = 0;
    bool open_ = false;
    int last_T_ = 0;
    int last_rows_ = 0;
    bool last_kept_rows_ = false;
    std::vector<int32_t> last_tokens_;
    RoutingOptions routing_;
    bool window_has_drafts_ = false;  // rows 1.. of this run are drafts (decode-size window)
    std::vector<std::vector<int>> run_union_;  // per MoE layer: experts used in this run
    // the experts the backend chose itself (MoeWindow::late_ids), merged into run_union_
    std::vector<std::pair<int, std::shared_ptr<std::vector<int>>>> late_ids_;
    std::vector<int64_t> expert_bytes_;         // per MoE layer: stored bytes of one expert
    int64_t dense_bytes_ = 0;                   // every non-expert weight a run reads, but the embedding
    std::vector<float> logits_;
    WindowTelemetry tele_;
    // the scratch arena and the norm weights, attached to the backend (device copies on a GPU)
    Attached arena_;
    std::vector<std::unique_ptr<Attached>> attached_;
    std::mutex mu_;
};

}  // namespace strata
