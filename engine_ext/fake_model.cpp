#include "fake_model.h"
#include "hash.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace strata {

namespace {


inline float unit(uint64_t key, int v) {
    return float(mix64(key ^ (uint64_t(v) * 0x9e3779b97f4a7c15ULL)) >> 40) * (1.f / 16777216.f);
}

void spin_for(double us) {
    if (us <= 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(int64_t(us * 1000));
    while (std::chrono::steady_clock::now() < until) {
    }
}

constexpr char kMagic[8] = {'S', 'F', 'A', 'K', 'E', 'L', 'M', '1'};

}  // namespace

FakeWindowModel::FakeWindowModel(int vocab, uint64_t seed, int64_t context_limit, int order, float sharp,
                                 float history_weight, double cost_us_base, double cost_us_per_row,
                                 float copy_bias)
    : vocab_(vocab), seed_(seed), context_limit_(context_limit), order_(order), sharp_(sharp),
      history_weight_(history_weight), cost_us_base_(cost_us_base), cost_us_per_row_(cost_us_per_row),
      copy_bias_(copy_bias) {
    if (vocab < 2) throw ModelError("FakeLM: vocab must be >= 2");
    if (context_limit < 1) throw ModelError("FakeLM: context_limit must be >= 1");
    if (order < 1) throw ModelError("FakeLM: order must be >= 1");
    reset();
}

void FakeWindowModel::reset() {
    committed_.clear();
    history_hash_.assign(1, mix64(seed_));
    window_.clear();
    follower_.clear();
    open_ = false;
}

uint64_t FakeWindowModel::context_key(const int32_t* end) const {
    uint64_t h = 0x7f4a7c15ULL;
    for (int k = 0; k < order_; ++k) h = mix64(h ^ (uint64_t(uint32_t(end[-k])) + 1));
    return h;
}

void FakeWindowModel::index_committed(size_t f) {
    if (f >= size_t(order_)) follower_[context_key(&committed_[f - 1])] = committed_[f];
}

void FakeWindowModel::row_logits(const std::vector<int32_t>& seq, uint64_t history_hash, int32_t copy,
                                 float* out) const {
    uint64_t local = mix64(seed_ + 0x1234567ULL);
    const size_t n = seq.size();
    for (int k = 0; k < order_ && size_t(k) < n; ++k) local = mix64(local ^ (uint64_t(uint32_t(seq[n - 1 - k])) + 1));
    for (int v = 0; v < vocab_; ++v) out[v] = sharp_ * unit(local, v) + history_weight_ * unit(history_hash, v);
    if (copy >= 0) out[copy] += copy_bias_;
}

const float* FakeWindowModel::run(const int32_t* tokens, int T) {
    const auto t0 = std::chrono::steady_clock::now();
    if (open_) throw WindowError("run while a window is uncommitted (call commit first)");
    if (T < 1) throw WindowError("run needs at least one token");
    if (pos() + T > context_limit_)
        throw WindowError("window of " + std::to_string(T) + " rows at position " + std::to_string(pos()) +
                          " passes the context limit " + std::to_string(context_limit_));
    for (int i = 0; i < T; ++i)
        if (tokens[i] < 0 || tokens[i] >= vocab_)
            throw WindowError("token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
    window_.assign(tokens, tokens + T);
    logits_.resize(size_t(T) * vocab_);
    std::vector<int32_t> seq(committed_.end() - std::min<size_t>(committed_.size(), size_t(order_)), committed_.end());
    const int off = int(seq.size());  // seq[off + i] is window row i
    const int64_t pos0 = pos();
    seq.insert(seq.end(), tokens, tokens + T);
    uint64_t h = history_hash_.back();
    for (int i = 0; i < T; ++i) {
        h = mix64(h ^ (uint64_t(uint32_t(tokens[i])) + 0x51ULL));
        int32_t copy = -1;
        if (copy_bias_ != 0.f && pos0 + i + 1 >= order_) {
            // the most recent earlier occurrence of this row's context: first inside the window
            // (followers in the window), then among the committed tokens
            const uint64_t key = context_key(&seq[off + i]);
            for (int j = i - 1; j >= -1 && copy < 0; --j)
                if (pos0 + j + 1 >= order_ && off + j + 1 >= order_ && context_key(&seq[off + j]) == key)
                    copy = seq[off + j + 1];
            if (copy < 0) {
                auto it = follower_.find(key);
                if (it != follower_.end()) copy = it->second;
            }
        }
        std::vector<int32_t> upto(seq.begin(), seq.begin() + off + i + 1);
        row_logits(upto, h, copy, logits_.data() + size_t(i) * vocab_);
    }
    spin_for(cost_us_base_ + cost_us_per_row_ * T);
    open_ = true;
    ++runs_;
    rows_ += T;
    telemetry_ = WindowTelemetry{};
    telemetry_.run_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return logits_.data();
}

void FakeWindowModel::commit(int keep) {
    if (!open_) throw WindowError("commit without a run (or a second commit of the same window)");
    if (keep < 1 || keep > int(window_.size()))
        throw WindowError("keep " + std::to_string(keep) + " is out of range 1.." + std::to_string(window_.size()));
    for (int i = 0; i < keep; ++i) {
        committed_.push_back(window_[i]);
        history_hash_.push_back(mix64(history_hash_.back() ^ (uint64_t(uint32_t(window_[i])) + 0x51ULL)));
        index_committed(committed_.size() - 1);
    }
    open_ = false;
}

std::string FakeWindowModel::save_state() const {
    if (open_) throw WindowError("save_state with a window open (commit first)");
    std::string blob(kMagic, sizeof kMagic);
    const uint64_t n = committed_.size();
    blob.append(reinterpret_cast<const char*>(&n), sizeof n);
    blob.append(reinterpret_cast<const char*>(committed_.data()), n * sizeof(int32_t));
    return blob;
}

void FakeWindowModel::load_state(const std::string& blob) {
    if (open_) throw WindowError("load_state with a window open (commit first)");
    uint64_t n = 0;
    if (blob.size() < sizeof kMagic + sizeof n || std::memcmp(blob.data(), kMagic, sizeof kMagic) != 0)
        throw ModelError("state blob is not a FakeLM state");
    std::memcpy(&n, blob.data() + sizeof kMagic, sizeof n);
    if (blob.size() != sizeof kMagic + sizeof n + n * sizeof(int32_t)) throw ModelError("FakeLM state blob is truncated");
    std::vector<int32_t> toks(n);
    std::memcpy(toks.data(), blob.data() + sizeof kMagic + sizeof n, n * sizeof(int32_t));
    if (int64_t(n) > context_limit_) throw ModelError("FakeLM state is longer than the context limit");
    reset();
    for (int32_t t : toks) {
        committed_.push_back(t);
        history_hash_.push_back(mix64(history_hash_.back() ^ (uint64_t(uint32_t(t)) + 0x51ULL)));
        index_committed(committed_.size() - 1);
    }
}

}  // namespace strata
