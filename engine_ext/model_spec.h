// Normalised architecture description (built by app/strata/config.py) and the tensor table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

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
    std::string dtype;  // a weight format name (format.h): F32 | BF16 | F16 | Q8_0 ...
    std::vector<int64_t> shape;
};

}  // namespace strata
