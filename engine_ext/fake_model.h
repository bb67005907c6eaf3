// A deterministic stand-in for the engine, for tests and the model-free benchmark. Row logits are
// a pure function of the committed history plus the row's window prefix (a sharp term keyed by the
// last few tokens, a copy bias toward what followed the last earlier occurrence of those tokens,
// so text repeats and drafts get accepted, and a weak term keyed by the whole history, so a wrong
// history shows), and the window rules are enforced like the real engine.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "window_model.h"

namespace strata {

class FakeWindowModel final : public WindowModel {
public:
    FakeWindowModel(int vocab, uint64_t seed, int64_t context_limit, int order = 3, float sharp = 8.f,
                    float history_weight = 1.f, double cost_us_base = 0, double cost_us_per_row = 0,
                    float copy_bias = 0.f);
    const float* run(const int32_t* tokens, int T) override;
    void commit(int keep) override;
    int64_t pos() const override { return int64_t(committed_.size()); }
    int64_t context_limit() const override { return context_limit_; }
    int vocab() const override { return vocab_; }
    void reset() override;
    const WindowTelemetry& last_telemetry() const override { return telemetry_; }

    bool window_open() const { return open_; }
    const std::vector<int32_t>& committed() const { return committed_; }
    int64_t runs() const { return runs_; }
    int64_t rows() const { return rows_; }
    std::string save_state() const;
    void load_state(const std::string& blob);

private:
    void row_logits(const std::vector<int32_t>& seq, uint64_t history_hash, int32_t copy, float* out) const;
    uint64_t context_key(const int32_t* end_inclusive) const;  // the `order` tokens ending there
    void index_committed(size_t follower);                       // context before committed_[follower]

    int vocab_;
    uint64_t seed_;
    int64_t context_limit_;
    int order_;
    float sharp_, history_weight_;
    double cost_us_base_, cost_us_per_row_;
    float copy_bias_;  // added to the token that followed the most recent earlier occurrence of the context
    std::unordered_map<uint64_t, int32_t> follower_;
    std::vector<int32_t> committed_;
    std::vector<uint64_t> history_hash_;  // hash of committed_[0..i] for every i (index 0: empty)
    std::vector<int32_t> window_;
    std::vector<float> logits_;
    bool open_ = false;
    int64_t runs_ = 0, rows_ = 0;
    WindowTelemetry telemetry_;
};

}  // namespace strata
