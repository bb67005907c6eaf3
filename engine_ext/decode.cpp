#include "decode.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Priors of the controller, before anything is measured.
constexpr double kPriorWeight = 2.0;      // in windows
constexpr double kPositionWeight = 4.0;   // how strongly a position leans on its bucket's pool
constexpr double kPriorRowCost = 0.25;    // extra cost of a row relative to a T=1 window
constexpr double kCountCap = 128.0;       // counts are halved above this: recent windows matter more
constexpr int kExploreEvery = 64;         // a one-token draft every N windows that would not draft
constexpr int64_t kReliableSamples = 8;   // windows of one T after which its own estimate is trusted
constexpr int64_t kBaseSamples = 2;       // single-row windows measured before any draft
constexpr double kDraftMargin = 1.05;     // E/C of a draft must beat T = 1's by 5 %
constexpr int64_t kGrowSamples = 4;       // windows of a T before windows up to 2T are tried
constexpr double kLineWeight = 2.0;       // weight of the fitted line in a measured T's estimate
// the loss budget, in single-row windows (see LengthController)
constexpr double kBudgetStart = 2.0;
constexpr double kBudgetShare = 0.01;
constexpr double kBudgetCap = 64.0;

// Acceptance before any window of a bucket was seen: a long match is a likelier copy than a short
// one (short matches of code are mostly idioms the model continues differently).
constexpr double kPriorAccept[LengthController::kBuckets] = {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};

}  // namespace

// ---------------------------------------------------------------- controller

int LengthController::bucket(int match_len) {
    if (match_len < 4) return 0;
    if (match_len < 6) return 1;
    if (match_len < 8) return 2;
    if (match_len < 12) return 3;
    if (match_len < 16) return 4;
    if (match_len < 24) return 5;
    return 6;
}

void LengthController::reset() {
    for (auto& r : acc_) r.fill(0);
    for (auto& r : tri_) r.fill(0);
    acc_pool_.fill(0);
    tri_pool_.fill(0);
    for (auto& r : cost_ring_) r.fill(0);
    cost_est_.fill(0);
    cost_table_.fill(0);
    cost_n_.fill(0);
    since_explore_ = 0;
    budget_ = 0;
    budget_started_ = false;
}

void LengthController::begin_generation() {
    since_explore_ = 0;
    budget_started_ = false;  // set from cost(1) at the next decision
}

double LengthController::budget_us() const {
    return budget_started_ ? budget_ : kBudgetStart * cost(1);
}

double LengthController::acceptance(int b, int i) const {
    const double pooled = (acc_pool_[b] + kPriorAccept[b] * kPriorWeight) / (tri_pool_[b] + kPriorWeight);
    return (acc_[b][i] + kPositionWeight * pooled) / (tri_[b][i] + kPositionWeight);
}

double LengthController::line_cost(int T) const {
    // c(T) = a + b (T - 1) fitted (weighted least squares) to every measured T, the slope shrunk
    // toward a prior row cost so that a few noisy windows cannot swing it
    // only lengths measured a few times: one stalled window of a new T must not tilt the line
    int64_t min_n = 1;
    for (int t = 1; t <= kMaxT; ++t)
        if (cost_n_[t] >= kGrowSamples) min_n = kGrowSamples;
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int t = 1; t <= kMaxT; ++t) {
        if (cost_n_[t] < min_n) continue;
        const double w = double(std::min<int64_t>(cost_n_[t], kReliableSamples));
        const double x = double(t - 1);
        sw += w;
        sx += w * x;
        sy += w * cost_est_[t];
        sxx += w * x * x;
        sxy += w * x * cost_est_[t];
    }
    if (sw == 0) return 1.0 + kPriorRowCost * double(T - 1);  // nothing measured: relative units
    double a, b;
    const double var = sxx - sx * sx / sw;
    if (var <= 1e-9) {
        // one distinct T measured: its cost, and the prior's row cost relative to it
        const double x0 = sx / sw, y0 = sy / sw;
        a = y0 / (1.0 + kPriorRowCost * x0);
        b = kPriorRowCost * a;
    } else {
        const double y_mean = sy / sw, x_mean = sx / sw;
        const double b_fit = (sxy - sx * sy / sw) / var;
        const double a_fit = y_mean - b_fit * x_mean;
        const double prior_b = kPriorRowCost * std::max(a_fit, 1e-9);
        b = (b_fit * var + prior_b * kPriorWeight) / (var + kPriorWeight);
        a = y_mean - b * x_mean;
    }
    return std::max(a + std::max(b, 0.0) * double(T - 1), 1e-9);
}

double LengthController::cost(int T) const {
    T = std::clamp(T, 1, kMaxT);
    return cost_table_[T] > 0 ? cost_table_[T] : estimate_cost(T);
}

void LengthController::refresh_costs() {
    for (int T = 1; T <= kMaxT; ++T) cost_table_[T] = estimate_cost(T);
}

double LengthController::estimate_cost(int T) const {
    // Multi-row windows of a MoE model need the union of the rows' experts, so cost is not a line
    // in T: each T leans on its own measured cost as its windows accumulate, and on the line
    // through all measurements before that.
    if (cost_n_[T] >= kReliableSamples) return cost_est_[T];
    const double line = line_cost(T);
    if (!cost_n_[T]) return line;
    // A T tried only a few times is taken at its better guess: one window that a busy machine (or
    // a cold read) slowed down would otherwise price that T out for good, never to be measured
    // again; the loss budget pays for the retries when the T really is expensive.
    if (cost_n_[T] < kGrowSamples) return std::min(cost_est_[T], line);
    const double w = double(std::min<int64_t>(cost_n_[T], kReliableSamples));
    return (w * cost_est_[T] + kLineWeight * line) / (w + kLineWeight);
}

double LengthController::expected_keep(int match_len, int drafts) const {
    const int b = bucket(match_len);
    double q = 1, e = 1;
    for (int i = 0; i < std::min(drafts, kMaxDraft); ++i) {
        q *= acceptance(b, i);
        e += q;
    }
    return e;
}

int LengthController::draft_cap(int available) const {
    // the base cost first: until single-row windows are measured nothing can be compared with them
    if (cost_n_[1] < kBaseSamples) return 0;
    // Longer windows only as their cost becomes known: up to twice the longest window measured
    // kGrowSamples times, so one optimistic guess cannot send a run of 16-row windows.
    int known = 1;
    for (int t = 1; t <= kMaxT; ++t)
        if (cost_n_[t] >= kGrowSamples) known = t;
    available = std::min({available, kMaxDraft, 2 * known - 1});
    // a window whose worst case (every draft rejected) does not fit in the loss budget is not sent
    const double c1 = cost(1), budget = budget_us();
    int d = 0;
    while (d < available && cost(d + 2) - c1 <= budget) ++d;
    // exploration sends one draft while the budget easily pays for it
    return std::max(d, available > 0 && cost(2) - c1 <= 0.5 * budget ? 1 : 0);
}

int LengthController::choose(int match_len, int available) {
    const int cap = draft_cap(available);
    if (cap <= 0) return 0;
    const double c1 = cost(1);
    const double budget = budget_us();
    const int b = bucket(match_len);
    double q = 1, e = 1;
    // drafting must beat single-row windows by a margin: estimates are noisy, and a wrong "yes"
    // costs more than a wrong "no"
    double best = kDraftMargin * e / c1;
    int best_d = 0;
    for (int d = 1; d <= cap; ++d) {
        const double c = cost(d + 1);
        if (c - c1 > budget) break;  // its worst case does not fit in what drafting may still lose
        q *= acceptance(b, d - 1);
        e += q;
        const double r = e / c;
        if (r > best) {
            best = r;
            best_d = d;
        }
    }
    if (best_d == 0 && ++since_explore_ >= kExploreEvery && cost(2) - c1 <= 0.5 * budget) {
        since_explore_ = 0;
        return 1;  // keep the estimate of this bucket alive, while the budget easily pays for it
    }
    return best_d;
}

void LengthController::observe_drafts(int match_len, int observed, int accepted) {
    const int b = bucket(match_len);
    for (int i = 0; i < std::min(observed, kMaxDraft); ++i) {
        const double hit = i < accepted ? 1.0 : 0.0;
        acc_[b][i] += hit;
        tri_[b][i] += 1;
        acc_pool_[b] += hit;
        tri_pool_[b] += 1;
        if (tri_[b][i] > kCountCap) {
            acc_[b][i] *= 0.5;
            tri_[b][i] *= 0.5;
        }
    }
    if (tri_pool_[b] > kCountCap) {
        acc_pool_[b] *= 0.5;
        tri_pool_[b] *= 0.5;
    }
}

void LengthController::observe_cost(int T, double us) {
    if (T < 1 || T > kMaxT || !(us > 0)) return;
    auto& ring = cost_ring_[T];
    ring[size_t(cost_n_[T] % kCostRing)] = us;
    ++cost_n_[T];
    const int n = int(std::min<int64_t>(cost_n_[T], kCostRing));
    double tmp[kCostRing];
    std::copy(ring.begin(), ring.begin() + n, tmp);
    // the minimum of a few, then the lower quartile
    const int k = n < 4 ? 0 : n / 4;
    std::nth_element(tmp, tmp + k, tmp + n);
    cost_est_[T] = tmp[k];
    refresh_costs();  // once per window, so that the decisions only look costs up
}

void LengthController::observe_window(int T, int keep) {
    if (T < 1 || cost_n_[1] == 0) return;
    const double c1 = cost(1);
    if (!budget_started_) {
        budget_ = kBudgetStart * c1;
        budget_started_ = true;
    }
    const double cT = cost(T);
    budget_ += kBudgetShare * cT;
    if (T > 1) budget_ += double(keep) * c1 - cT;
    budget_ = std::min(budget_, kBudgetCap * c1);
}

// ---------------------------------------------------------------- decoder

Decoder::Decoder(std::shared_ptr<WindowModel> model) : model_(std::move(model)) {
    if (!model_) throw std::invalid_argument("Decoder needs a model");
    history_.clear();
    pending_.clear();
}

void Decoder::reset() {
    model_->reset();
    history_.clear();
    pending_.clear();
    for (auto& d : drafters_) d.reset();
    copy_.clear();
}

void Decoder::set_state(std::vector<int32_t> history, std::vector<int32_t> pending) {
    if (pending.size() > history.size() ||
        !std::equal(pending.begin(), pending.end(), history.end() - pending.size()))
        throw std::invalid_argument("decoder state: pending tokens must be the tail of the history");
    if (int64_t(history.size() - pending.size()) != model_->pos())
        throw WindowError("decoder state: " + std::to_string(history.size() - pending.size()) +
                          " committed tokens, but the engine holds " + std::to_string(model_->pos()));
    history_ = std::move(history);
    pending_ = std::move(pending);
    for (auto& d : drafters_) d.reset();
}

void Decoder::add_document(std::vector<int32_t> tokens) {
    if (tokens.empty()) return;
    documents_.push_back(std::move(tokens));
    if (auto& d = drafters_[int(DrafterKind::suffix)]) d->add_document(documents_.back().data(), documents_.back().size());
}

Drafter* Decoder::drafter(DrafterKind kind) {
    auto& d = drafters_[int(kind)];
    if (kind == DrafterKind::none) return nullptr;
    if (d && d->tokens().size() > history_.size()) d.reset();
    if (!d) {
        d = make_drafter(kind);
        for (const auto& doc : documents_) d->add_document(doc.data(), doc.size());
    }
    const size_t have = d->tokens().size();
    if (have < history_.size()) d->append(history_.data() + have, history_.size() - have);
    return d.get();
}

Draft Decoder::peek_draft(DrafterKind kind, int max_tokens, int min_match) {
    Drafter* d = drafter(kind);
    return d ? d->propose(max_tokens, min_match) : Draft{};
}

bool Decoder::is_stop(int32_t t) const {
    return std::find(settings_.stop_ids.begin(), settings_.stop_ids.end(), t) != settings_.stop_ids.end();
}

int32_t Decoder::copy_token(CopyIndex::Walk w) const {
    if (copy_.empty()) return -1;
    const int32_t t = copy_.predict(w);
    const auto& skip = settings_.copy_skip;
    return std::find(skip.begin(), skip.end(), t) != skip.end() ? -1 : t;
}

void Decoder::stop(const std::string& reason) {
    if (active_ && gen_.stop_reason.empty()) gen_.stop_reason = reason;
    active_ = false;
}

std::vector<int32_t> Decoder::start(const std::vector<int32_t>& prompt, const DecodeSettings& s, WindowTelemetry* tel) {
    if (s.max_new < 0) throw std::invalid_argument("max_new must be >= 0");
    if (s.min_match < 1) throw std::invalid_argument("min_match must be >= 1");
    if (s.max_draft > LengthController::kMaxDraft)
        throw std::invalid_argument("max_draft must be at most " + std::to_string(LengthController::kMaxDraft));
    WindowModel& m = *model_;
    if (int64_t(history_.size() - pending_.size()) != m.pos())
        throw WindowError("decoder is out of sync with the engine: the engine holds " + std::to_string(m.pos()) +
                          " tokens, the session " + std::to_string(history_.size() - pending_.size()) +
                          " (was the engine used directly? call reset)");
    std::vector<int32_t> input(pending_);
    input.insert(input.end(), prompt.begin(), prompt.end());
    if (input.empty()) throw std::invalid_argument("nothing to decode from: the prompt is empty and no turn came before");
    const int64_t limit = m.context_limit();
    if (m.pos() + int64_t(input.size()) > limit)
        throw WindowError("prompt of " + std::to_string(input.size()) + " tokens does not fit: " +
                          std::to_string(m.pos()) + " of the context limit " + std::to_string(limit) +
                          " are in use");
    const int V = m.vocab();
    for (int32_t t : input)
        if (t < 0 || t >= V)
            throw std::invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary (" +
                                        std::to_string(V) + ")");
    for (int32_t t : s.forced)
        if (t < 0 || t >= V) throw std::invalid_argument("forced token id " + std::to_string(t) + " is outside the vocabulary");
    settings_ = s;
    if (!s.forced.empty()) settings_.max_new = int(std::min<size_t>(size_t(s.max_new), s.forced.size()));
    gen_ = DecodeResult{};
    active_ = false;
    sampler_.reset(s.sampling);
    controller_.begin_generation();

    // prefill, chunked; only the last row's logits matter
    const auto t_prefill = Clock::now();
    // the copy bias copies from the session as it stands now, this prompt included; the source
    // stays fixed for the generation, so every row's prediction depends on its own tokens alone
    copy_.clear();
    if (s.sampling.copy_bias != 0.f && s.max_new > 0) {
        std::vector<int32_t> source(history_);
        source.insert(source.end(), prompt.begin(), prompt.end());
        copy_.build(source.data(), source.size());
    }
    walk_ = copy_.start();
    const int64_t prefill_pos0 = m.pos();
    std::vector<int32_t> out;
    size_t fed = 0;  // input tokens committed so far
    auto account = [&] {
        // the session is what the engine holds plus what is still pending
        const size_t from_prompt = fed > pending_.size() ? fed - pending_.size() : 0;
        history_.insert(history_.end(), prompt.begin(), prompt.begin() + from_prompt);
        // pending tokens are already the tail of history_; once fed they are simply committed
        pending_.erase(pending_.begin(), pending_.begin() + std::min(fed, pending_.size()));
    };
    try {
        for (size_t off = 0; off < input.size(); off += kPrefillChunk) {
            const int n = int(std::min<size_t>(kPrefillChunk, input.size() - off));
            // only the chunk's last row is ever sampled: skip the LM head for the others
            const float* last = m.run_last(input.data() + off, n);
            if (off + n == input.size() && s.max_new > 0) {
                // sample before commit: the logits stay valid until the next run
                out.push_back(s.forced.empty()
                                  ? sampler_.sample(last, V, m.pos() + n, nullptr, 0, copy_token(walk_))
                                  : s.forced[0]);
            }
            m.commit(n);
            fed += size_t(n);
        }
    } catch (...) {
        account();  // a failed chunk leaves the earlier chunks committed: keep the session in sync
        throw;
    }
    account();
    // index the prompt now: it is prompt processing, and the first window would otherwise pay for
    // all of it
    if (s.drafter != DrafterKind::none && s.max_draft != 0 && settings_.max_new > 1) drafter(s.drafter);
    gen_.prefill_us = us_since(t_prefill);
    gen_.n_prefill = int64_t(input.size());
    WindowTelemetry t{};
    t.pos0 = prefill_pos0;
    t.window_us = gen_.prefill_us;
    if (settings_.max_new == 0) {
        gen_.stop_reason = "max_new";
    } else {
        const int32_t first = out.front();
        sampler_.accept(first);
        history_.push_back(first);
        walk_ = copy_.advance(walk_, first);
        pending_.assign(1, first);
        gen_.tokens.push_back(first);
        t.emitted = 1;  // T = 0: no decode window, the token came from the prefill
        if (is_stop(first)) gen_.stop_reason = "eos";
        else if (settings_.max_new == 1) gen_.stop_reason = "max_new";
        else if (m.pos() >= limit) gen_.stop_reason = "context";
    }
    active_ = gen_.stop_reason.empty();
    if (tel) *tel = t;
    return out;
}

std::vector<int32_t> Decoder::step(WindowTelemetry* tel) {
    if (!active_) throw WindowError("no generation in progress (call start first)");
    WindowModel& m = *model_;
    const DecodeSettings& s = settings_;
    const int V = m.vocab();
    const int remaining = s.max_new - int(gen_.tokens.size());
    const int64_t pos0 = m.pos();
    const int64_t room = m.context_limit() - pos0;
    const auto t0 = Clock::now();
    const int t_cap = int(std::min<int64_t>({int64_t(remaining), room, int64_t(LengthController::kMaxT)}));
    const bool drafting = s.drafter != DrafterKind::none && s.max_draft != 0;
    std::vector<int32_t> window(1, pending_.back());
    Draft d;
    int n_draft = 0;
    if (drafting && t_cap > 1) {
        if (s.max_draft > 0) {
            d = drafter(s.drafter)->propose(std::min(s.max_draft, t_cap - 1), s.min_match);
            n_draft = int(d.tokens.size());
        } else if (const int cap = controller_.draft_cap(t_cap - 1); cap > 0) {
            // adaptive: the first step gives the match length, which is all the controller needs;
            // the drafter then walks only as far as the controller will send (most windows where
            // drafts fail send none, and a long walk thrown away is what made them slower)
            Drafter* dr = drafter(s.drafter);
            d = dr->propose(1, s.min_match);
            if (!d.tokens.empty()) {
                n_draft = controller_.choose(d.match_len, cap);
                if (n_draft > 1) {
                    d = dr->propose(n_draft, s.min_match);
                    if (int(d.tokens.size()) < n_draft) n_draft = controller_.choose(d.match_len, int(d.tokens.size()));
                }
            }
        }
        window.insert(window.end(), d.tokens.begin(), d.tokens.begin() + n_draft);
    }
    const int T = int(window.size());
    // row i's context is the session (its walk ends with the root, window[0]) and the drafts
    // before it
    CopyIndex::Walk row_walk = walk_;
    const auto t_run = Clock::now();
    const float* logits = m.run(window.data(), T);
    std::vector<int32_t> outs;
    bool eos = false;
    int matched = 0;
    for (int i = 0; i < T; ++i) {
        if (i > 0) row_walk = copy_.advance(row_walk, window[size_t(i)]);
        const int32_t o = s.forced.empty()
                              ? sampler_.sample(logits + size_t(i) * V, V, pos0 + i + 1, window.data() + 1, i,
                                                copy_token(row_walk))
                              : s.forced[gen_.tokens.size() + size_t(i)];
        outs.push_back(o);
        const bool hit = i + 1 < T && o == window[i + 1];
        if (hit) ++matched;
        if (is_stop(o)) {
            eos = true;
            break;
        }
        if (!hit) break;
    }
    const int keep = int(outs.size());
    m.commit(keep);
    const double run_commit_us = us_since(t_run);
    for (int32_t o : outs) sampler_.accept(o);
    history_.insert(history_.end(), outs.begin(), outs.end());
    for (int32_t o : outs) walk_ = copy_.advance(walk_, o);
    pending_.assign(1, outs.back());
    gen_.tokens.insert(gen_.tokens.end(), outs.begin(), outs.end());

    WindowTelemetry t = m.last_telemetry();
    t.pos0 = pos0;
    t.T = T;
    t.n_drafted = n_draft;
    t.n_accept = keep - 1;
    t.keep = keep;
    t.emitted = keep;
    t.match_len = d.match_len;
    t.drafter = drafting ? int(s.drafter) : 0;
    t.window_us = us_since(t0);
    controller_.observe_cost(T, run_commit_us);  // the drafter's lookup is paid whatever D is
    controller_.observe_window(T, keep);
    if (n_draft > 0) {
        // positions up to the first mismatch have a verdict; an EOS hides the ones after it
        const int observed = std::min(n_draft, eos ? matched : matched + 1);
        controller_.observe_drafts(d.match_len, observed, matched);
    }
    if (eos) gen_.stop_reason = "eos";
    else if (int(gen_.tokens.size()) >= s.max_new) gen_.stop_reason = "max_new";
    else if (m.pos() >= m.context_limit()) gen_.stop_reason = "context";
    active_ = gen_.stop_reason.empty();
    if (tel) *tel = t;
    return outs;
}

DecodeResult Decoder::generate(const std::vector<int32_t>& prompt, const DecodeSettings& s,
                               const WindowCallback& cb) {
    WindowTelemetry t;
    std::vector<int32_t> out = start(prompt, s, &t);
    if (!out.empty() && cb && !cb(out, t)) stop();
    while (active_) {
        out = step(&t);
        if (cb && !cb(out, t)) stop();
    }
    return gen_;
}

}  // namespace strata
