// Lossless seeded sampling. The token chosen for a row is a deterministic function of the row's
// logits, the output history that row sees, and its absolute position: Gumbel-max with noise from
// a counter-based generator keyed by (seed, position, token). Verification of sampled drafts is
// then plain equality, and the output is the same whatever the window shape.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace strata {

struct SamplingParams {
    float temperature = 0.f;         // <= 0: greedy (argmax, lowest id on ties)
    int top_k = 0;                   // 0: off
    float top_p = 1.f;               // >= 1: off
    float repetition_penalty = 1.f;  // 1: off (positive logits / p, negative * p)
    float presence_penalty = 0.f;    // subtracted once from every token already generated
    float frequency_penalty = 0.f;   // subtracted per occurrence
    float copy_bias = 0.f;           // added to the logit of the token the copy index predicts (0: off)
    uint64_t seed = 0;
    bool has_penalties() const {
        return repetition_penalty != 1.f || presence_penalty != 0.f || frequency_penalty != 0.f;
    }
};

// The uniform in (0, 1) and the Gumbel noise of (seed, position, token); exposed for tests.
double counter_uniform(uint64_t seed, int64_t position, int32_t token);
double gumbel_noise(uint64_t seed, int64_t position, int32_t token);

class Sampler {
public:
    explicit Sampler(SamplingParams p = {}) : p_(p) {}
    const SamplingParams& params() const { return p_; }
    // Start a generation: penalties count the tokens generated from here on.
    void reset(const SamplingParams& p);
    // Penalty state: counts of the tokens generated so far (committed outputs).
    void accept(int32_t token) { ++counts_[token]; }
    const std::unordered_map<int32_t, int>& counts() const { return counts_; }
    // Chooses the token at absolute `position` from one row of logits. `pending` are output tokens
    // this row sees that are not accepted yet (the drafts before it in the window). `copy` is the
    // token the copy index predicts for this row (-1: none); copy_bias is added to its logit after
    // the penalties.
    int32_t sample(const float* logits, int vocab, int64_t position, const int32_t* pending = nullptr,
                   int n_pending = 0, int32_t copy = -1);

private:
    SamplingParams p_;
    std::unordered_map<int32_t, int> counts_;
    std::vector<float> work_;
    std::vector<int32_t> cand_;
};

}  // namespace strata
