#include "sampler.h"
#include "hash.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata {

namespace {


// Higher value first, then lower id: a total order, so every selection below is deterministic.
struct ByValue {
    const float* x;
    bool operator()(int32_t a, int32_t b) const { return x[a] > x[b] || (x[a] == x[b] && a < b); }
};

}  // namespace

double counter_uniform(uint64_t seed, int64_t position, int32_t token) {
    // three rounds of a strong 64-bit mixer over the counter (seed, position, token)
    uint64_t h = mix64(seed ^ 0x243f6a8885a308d3ULL);
    h = mix64(h ^ (uint64_t(position) * 0x9e3779b97f4a7c15ULL));
    h = mix64(h ^ (uint64_t(uint32_t(token)) * 0xc2b2ae3d27d4eb4fULL));
    return (double(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // in (0, 1), never 0 or 1
}

double gumbel_noise(uint64_t seed, int64_t position, int32_t token) {
    return -std::log(-std::log(counter_uniform(seed, position, token)));
}

void Sampler::reset(const SamplingParams& p) {
    p_ = p;
    counts_.clear();
}

int32_t Sampler::sample(const float* logits, int vocab, int64_t position, const int32_t* pending,
                        int n_pending, int32_t copy) {
    const bool boost = p_.copy_bias != 0.f && copy >= 0 && copy < vocab;
    const bool penalize = p_.has_penalties() && (!counts_.empty() || n_pending > 0);
    const float* x = logits;
    if (penalize) {
        work_.assign(logits, logits + vocab);
        std::unordered_map<int32_t, int> seen(counts_);
        for (int i = 0; i < n_pending; ++i) ++seen[pending[i]];
        for (const auto& [t, c] : seen) {
            if (t < 0 || t >= vocab) continue;
            float v = work_[t];
            if (p_.repetition_penalty != 1.f) v = v > 0 ? v / p_.repetition_penalty : v * p_.repetition_penalty;
            v -= p_.presence_penalty + p_.frequency_penalty * float(c);
            work_[t] = v;
        }
        x = work_.data();
    }
    if (p_.temperature <= 0.f) {
        int32_t best = 0;
        for (int32_t t = 1; t < vocab; ++t)
            if (x[t] > x[best]) best = t;
        if (boost && copy != best) {
            // best is the argmax of every other token too; ties go to the lower id as above
            const float v = x[copy] + p_.copy_bias;
            if (v > x[best] || (v == x[best] && copy < best)) best = copy;
        }
        return best;
    }
    if (!penalize) work_.assign(logits, logits + vocab);
    const float inv_t = 1.f / p_.temperature;
    const float boosted = boost ? x[copy] + p_.copy_bias : 0.f;  // x may be work_ itself
    for (int t = 0; t < vocab; ++t) work_[t] = x[t] * inv_t;
    if (boost) work_[copy] = boosted * inv_t;
    const float* s = work_.data();

    cand_.resize(vocab);
    for (int t = 0; t < vocab; ++t) cand_[t] = t;
    int n = vocab;
    if (p_.top_k > 0 && p_.top_k < n) {
        std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), ByValue{s});
        n = p_.top_k;
    }
    if (p_.top_p < 1.f) {
        // nucleus: the smallest prefix (by probability) whose mass reaches top_p; grow the sorted
        // prefix geometrically so large vocabularies are not fully sorted
        double m = -std::numeric_limits<double>::infinity();
        for (int i = 0; i < n; ++i) m = std::max(m, double(s[cand_[i]]));
        double z = 0;
        for (int i = 0; i < n; ++i) z += std::exp(double(s[cand_[i]]) - m);
        const double target = std::max(0.0, double(p_.top_p)) * z;
        int k = std::min(n, 64);
        for (;;) {
            std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.begin() + n, ByValue{s});
            double cum = 0;
            int keep = 0;
            while (keep < k) {
                cum += std::exp(double(s[cand_[keep]]) - m);
                ++keep;
                if (cum >= target) break;
            }
            if (cum >= target || k == n) {
                n = std::max(keep, 1);
                break;
            }
            k = std::min(n, k * 4);
        }
    }
    int32_t best = -1;
    double best_score = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) {
        const int32_t t = cand_[i];
        const double score = double(s[t]) + gumbel_noise(p_.seed, position, t);
        if (best < 0 || score > best_score || (score == best_score && t < best)) {
            best = t;
            best_score = score;
        }
    }
    return best;
}

}  // namespace strata
