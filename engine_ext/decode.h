// The decode loop: draft -> run -> verify -> commit, one window at a time, against the
// WindowModel contract. Greedy and seeded-sampled output is identical to one-token decoding.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drafter.h"
#include "sampler.h"
#include "telemetry.h"
#include "window_model.h"

namespace strata {

struct DecodeSettings {
    int max_new = 256;
    SamplingParams sampling;
    DrafterKind drafter = DrafterKind::suffix;  // none: drafting off
    int max_draft = -1;                         // < 0: adaptive length controller; K >= 0: fixed
    int min_match = 4;
    std::vector<int32_t> stop_ids;              // EOS tokens: end the emitted prefix
    // Benchmark oracle: when set, output j is forced[j] instead of the sampled token (the model
    // still runs every window, so timings are real; acceptance follows the forced text).
    std::vector<int32_t> forced;
    // Tokens the copy bias never boosts (a session's control tokens: copying the marker that
    // follows a file in the prompt is not copying the file).
    std::vector<int32_t> copy_skip;
};

struct DecodeResult {
    std::vector<int32_t> tokens;  // every emitted token (an EOS included)
    std::string stop_reason;      // "eos" | "max_new" | "context" | "stopped"
    double prefill_us = 0;
    int64_t n_prefill = 0;        // input rows committed by the prefill (pending root + prompt)
};

// Picks the draft length of each window by the marginal rule (docs/decoding.md): with conditional
// acceptance a_i (estimated online per match-length bucket and draft position) and
// q_i = prod_{j<=i} a_j, E[keep](D) = sum_{i=0..D} q_i; among the candidate prefixes take the one
// with the best expected output per cost, which is where dE/dC stops beating E/C. Cost per T is
// measured from the windows themselves.
//
// A loss budget makes drafting never much slower than not drafting, whatever the estimates say:
// a generation starts with kBudgetStart windows' worth of time, earns a share kBudgetShare of every
// window's cost, and each drafted window adds what it saved (keep x cost(1) - cost(T), negative
// when its drafts were rejected). A window may draft only as far as its worst case (every draft
// rejected: cost(T) - cost(1)) fits in the budget, so a generation in which drafts keep failing
// loses at most kBudgetStart + kBudgetShare of its time, and one in which they pay drafts freely.
class LengthController {
public:
    static constexpr int kBuckets = 7;
    static constexpr int kMaxDraft = 15;
    static constexpr int kMaxT = kMaxDraft + 1;
    static int bucket(int match_len);
    // the draft length to use, 0..available
    int choose(int match_len, int available);
    // the most drafts choose() could take now (known costs, the loss budget): what to ask the
    // drafter for, so that it does not walk a long draft that cannot be sent
    int draft_cap(int available) const;
    // drafted: drafts in the window; observed: leading positions whose verdict is known;
    // accepted: leading drafts that matched the outputs
    void observe_drafts(int match_len, int observed, int accepted);
    void observe_cost(int T, double us);
    // a window of T rows kept `keep` of them: charges or credits the loss budget
    void observe_window(int T, int keep);
    // a new generation: the loss budget starts again (learned costs and acceptance are kept)
    void begin_generation();
    double acceptance(int bucket, int position) const;
    double cost(int T) const;  // estimated microseconds of a window of T rows
    double line_cost(int T) const;
    double expected_keep(int match_len, int drafts) const;
    double budget_us() const;  // what drafting may still lose in this generation
    int64_t cost_samples(int T) const { return cost_n_[T]; }
    void reset();

private:
    std::array<std::array<double, kMaxDraft>, kBuckets> acc_{}, tri_{};
    std::array<double, kBuckets> acc_pool_{}, tri_pool_{};
    // per T: the last kCostRing window costs and a low quantile of them (a busy machine only ever
    // adds time to a window, so the low quantile is the window's own cost; an average is not)
    static constexpr int kCostRing = 31;
    std::array<std::array<double, kCostRing>, kMaxT + 1> cost_ring_{};
    std::array<double, kMaxT + 1> cost_est_{};
    std::array<double, kMaxT + 1> cost_table_{};  // cost(T) as of the last measurement (0: none yet)
    double estimate_cost(int T) const;
    void refresh_costs();
    std::array<int64_t, kMaxT + 1> cost_n_{};
    int since_explore_ = 0;
    double budget_ = 0;          // in microseconds, once cost(1) is measured
    bool budget_started_ = false;
};

class Decoder {
public:
    // Called after each window with the state committed; return false to stop.
    using WindowCallback = std::function<bool(const std::vector<int32_t>& emitted, const WindowTelemetry& t)>;
    static constexpr int kPrefillChunk = 512;

    explicit Decoder(std::shared_ptr<WindowModel> model);
    WindowModel& model() { return *model_; }
    const std::shared_ptr<WindowModel>& model_ptr() const { return model_; }

    // Feeds the pending root (the last emitted token of a previous call, if any) and `prompt`,
    // then decodes up to max_new tokens. The last emitted token stays pending: the next call
    // feeds it first, so turns continue exactly where the previous one stopped.
    DecodeResult generate(const std::vector<int32_t>& prompt, const DecodeSettings& s, const WindowCallback& cb);

    // The same loop one window at a time (what a Python iterator drives). `start` prefills and
    // emits the first token (telemetry T = 0: no decode window ran); each `step` runs one window.
    // Both return the emitted tokens; `stop_reason()` is non-empty once the generation is over.
    std::vector<int32_t> start(const std::vector<int32_t>& prompt, const DecodeSettings& s, WindowTelemetry* t);
    std::vector<int32_t> step(WindowTelemetry* t);
    // End the generation early (between windows); the state is already committed.
    void stop(const std::string& reason = "stopped");
    bool active() const { return active_; }
    const std::string& stop_reason() const { return gen_.stop_reason; }
    const DecodeResult& result() const { return gen_; }

    // Every token of the session: the engine's committed tokens followed by the pending ones.
    const std::vector<int32_t>& history() const { return history_; }
    const std::vector<int32_t>& pending() const { return pending_; }
    // After the engine's state was restored: the session tokens it holds plus the pending ones.
    void set_state(std::vector<int32_t> history, std::vector<int32_t> pending);
    // Index earlier sessions' tokens for the suffix drafter (matches never span documents).
    void add_document(std::vector<int32_t> tokens);
    const std::vector<std::vector<int32_t>>& documents() const { return documents_; }
    // What the drafter would propose now (for tests and the model-free benchmark).
    Draft peek_draft(DrafterKind kind, int max_tokens, int min_match);
    void reset();  // engine reset + empty session (documents and learned costs are kept)
    LengthController& controller() { return controller_; }

private:
    Drafter* drafter(DrafterKind kind);  // synced with history_

    std::shared_ptr<WindowModel> model_;
    Sampler sampler_;
    CopyIndex copy_;        // the copy bias's source: the session when the generation started
    CopyIndex::Walk walk_;  // the copy index's walk over history_
    LengthController controller_;
    std::vector<int32_t> history_, pending_;
    std::vector<std::vector<int32_t>> documents_;
    std::unique_ptr<Drafter> drafters_[3];
    // the generation in progress
    DecodeSettings settings_;
    DecodeResult gen_;
    bool active_ = false;
    bool is_stop(int32_t t) const;
    // the copy index's token after a walk, -1 when the copy bias is off
    int32_t copy_token(CopyIndex::Walk w) const;
};

}  // namespace strata
