#include "drafter.h"
#include "hash.h"

#include <algorithm>

namespace strata {

namespace {


inline uint64_t trigram_key(int32_t a, int32_t b, int32_t c) {
    return mix64(mix64(mix64(uint64_t(uint32_t(a)) + 0x9e3779b97f4a7c15ULL) ^ uint32_t(b)) ^
                 (uint64_t(uint32_t(c)) << 1));
}

// Context hashes are built from the last token backwards, one order at a time, so that every
// order of one end position costs O(1) more.
inline uint64_t extend_context(uint64_t h, int32_t token, int order) {
    return mix64(h ^ (uint64_t(uint32_t(token)) * 0x9e3779b97f4a7c15ULL) ^ (uint64_t(order) << 56));
}

inline uint64_t pair_key(uint64_t context, int32_t next) {
    return mix64(context + 0x632be59bd9b4e019ULL * (uint64_t(uint32_t(next)) + 1));
}

constexpr uint64_t kContextSeed = 0x5851f42d4c957f2dULL;

}  // namespace

// ---------------------------------------------------------------- baseline

void BaselineDrafter::reset() {
    seq_.clear();
    index_.clear();
}

void BaselineDrafter::append(const int32_t* tokens, size_t n) {
    for (size_t k = 0; k < n; ++k) {
        seq_.push_back(tokens[k]);
        const size_t end = seq_.size() - 1;
        if (end < 2) continue;
        Slots& s = index_[trigram_key(seq_[end - 2], seq_[end - 1], seq_[end])];
        if (s.n == kCandidates + 1) {
            std::copy(s.pos + 1, s.pos + s.n, s.pos);
            --s.n;
        }
        s.pos[s.n++] = int64_t(end);
    }
}

Draft BaselineDrafter::propose(int max_tokens, int min_match) const {
    Draft d;
    const int64_t n = int64_t(seq_.size());
    const int want = std::min(max_tokens, cap_);
    if (n < 4 || want <= 0) return d;
    auto it = index_.find(trigram_key(seq_[n - 3], seq_[n - 2], seq_[n - 1]));
    if (it == index_.end()) return d;
    const Slots& s = it->second;
    int64_t best_pos = -1;
    int best_len = 0;
    int seen = 0;
    // most recent first; the current end (n-1) is not a candidate
    for (int k = s.n - 1; k >= 0 && seen < kCandidates; --k) {
        const int64_t p = s.pos[k];
        if (p >= n - 1) continue;
        ++seen;
        int len = 0;
        while (len < kMaxBackward && p - len >= 0 && seq_[p - len] == seq_[n - 1 - len]) ++len;
        if (len > best_len) {  // strict: an equal length keeps the more recent candidate
            best_len = len;
            best_pos = p;
        }
    }
    if (best_pos < 0 || best_len < std::max(min_match, 3)) return d;
    d.match_len = best_len;
    for (int64_t q = best_pos + 1; q < n && int(d.tokens.size()) < want; ++q) d.tokens.push_back(seq_[q]);
    return d;
}

// ---------------------------------------------------------------- suffix

void SuffixDrafter::reset() {
    seq_.clear();
    pair_count_.clear();
    best_.clear();
}

void SuffixDrafter::count_at(const std::vector<int32_t>& seq, size_t end, int32_t next) {
    // every order's two keys first, and their slots prefetched, so that the ~2 x 24 reads of
    // scattered memory overlap instead of waiting one after another
    uint64_t ctx[kMaxOrder], pair[kMaxOrder];
    uint64_t h = kContextSeed;
    const int max_order = int(std::min<size_t>(kMaxOrder, end + 1));
    for (int order = 1; order <= max_order; ++order) {
        h = extend_context(h, seq[end + 1 - order], order);
        ctx[order - 1] = h;
        pair[order - 1] = pair_key(h, next);
        best_.prefetch(h);
        pair_count_.prefetch(pair[order - 1]);
    }
    for (int k = 0; k < max_order; ++k) {
        const uint32_t c = ++*pair_count_.emplace(pair[k], 0u).first;
        auto [b, fresh] = best_.emplace(ctx[k], Best{next, c});
        // the newest count wins ties, so "most frequent, then most recent" holds incrementally
        if (!fresh && c >= b->count) *b = Best{next, c};
    }
}

void SuffixDrafter::append(const int32_t* tokens, size_t n) {
    for (size_t k = 0; k < n; ++k) {
        if (!seq_.empty()) count_at(seq_, seq_.size() - 1, tokens[k]);
        seq_.push_back(tokens[k]);
    }
}

void SuffixDrafter::add_document(const int32_t* tokens, size_t n) {
    std::vector<int32_t> doc(tokens, tokens + n);
    for (size_t e = 0; e + 1 < n; ++e) count_at(doc, e, doc[e + 1]);
}

const SuffixDrafter::Best* SuffixDrafter::lookup(const std::vector<int32_t>& seq, int min_order,
                                                 int* order) const {
    const size_t n = seq.size();
    const int max_order = int(std::min<size_t>(kMaxOrder, n));
    uint64_t hashes[kMaxOrder + 1];
    uint64_t h = kContextSeed;
    for (int o = 1; o <= max_order; ++o) {
        h = extend_context(h, seq[n - o], o);
        hashes[o] = h;
    }
    // Every suffix of a counted context is counted too (count_at counts all orders of an end
    // position), so "has a continuation" is monotone in the order: binary search for the deepest,
    // a handful of probes instead of one per order (and one when nothing matches at all).
    int lo = std::max(min_order, 1);
    if (lo > max_order) return nullptr;
    const Best* found = best_.find(hashes[lo]);
    if (!found) return nullptr;
    int hi = max_order;  // invariant: order lo has a continuation; orders above hi are unknown/absent
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (const Best* b = best_.find(hashes[mid])) {
            lo = mid;
            found = b;
        } else {
            hi = mid - 1;
        }
    }
    *order = lo;
    return found;
}

Draft SuffixDrafter::propose(int max_tokens, int min_match) const {
    Draft d;
    const int want = std::min(max_tokens, kMaxDraft);
    if (seq_.empty() || want <= 0) return d;
    const size_t tail = std::min<size_t>(seq_.size(), kMaxOrder);
    std::vector<int32_t> ext(seq_.end() - tail, seq_.end());
    for (int k = 0; k < want; ++k) {
        int order = 0;
        const Best* b = lookup(ext, min_match, &order);
        if (!b) break;
        if (k == 0) d.match_len = order;
        d.tokens.push_back(b->token);
        ext.push_back(b->token);
    }
    return d;
}

// ---------------------------------------------------------------- copy index

namespace {

using Edges = std::vector<std::pair<int32_t, int32_t>>;

Edges::const_iterator edge(const Edges& e, int32_t token) {
    return std::lower_bound(e.begin(), e.end(), std::make_pair(token, INT32_MIN));
}

void set_edge(Edges& e, int32_t token, int32_t to) {
    const auto it = e.begin() + (edge(e, token) - e.cbegin());
    if (it != e.end() && it->first == token) it->second = to;
    else e.insert(it, {token, to});
}

}  // namespace

void CopyIndex::clear() {
    states_.clear();
    states_.shrink_to_fit();
    source_.clear();
    source_.shrink_to_fit();
    whole_ = 0;
}

int32_t CopyIndex::target(int32_t state, int32_t token) const {
    const Edges& e = states_[size_t(state)].next;
    const auto it = edge(e, token);
    return it != e.end() && it->first == token ? it->second : -1;
}

void CopyIndex::build(const int32_t* source, size_t n) {
    clear();
    source_.assign(source, source + n);
    states_.reserve(2 * n + 1);
    states_.emplace_back();  // the root: the empty string
    int32_t last = 0;
    std::vector<int32_t> own(1, -1);  // the end position a state was created for (-1: root, clones)
    for (size_t i = 0; i < n; ++i) {
        const int32_t c = source[i];
        const int32_t cur = int32_t(states_.size());
        states_.emplace_back();
        states_[size_t(cur)].len = states_[size_t(last)].len + 1;
        own.push_back(int32_t(i));
        int32_t p = last;
        while (p >= 0 && target(p, c) < 0) {
            set_edge(states_[size_t(p)].next, c, cur);
            p = states_[size_t(p)].link;
        }
        if (p < 0) {
            states_[size_t(cur)].link = 0;
        } else {
            const int32_t q = target(p, c);
            if (states_[size_t(p)].len + 1 == states_[size_t(q)].len) {
                states_[size_t(cur)].link = q;
            } else {
                const int32_t clone = int32_t(states_.size());
                State copy = states_[size_t(q)];
                copy.len = states_[size_t(p)].len + 1;
                states_.push_back(std::move(copy));
                own.push_back(-1);
                while (p >= 0 && target(p, c) == q) {
                    set_edge(states_[size_t(p)].next, c, clone);
                    p = states_[size_t(p)].link;
                }
                states_[size_t(q)].link = clone;
                states_[size_t(cur)].link = clone;
            }
        }
        last = cur;
    }
    whole_ = last;
    // a state's end positions are its own and those of every state whose suffix link leads to it;
    // the last one with a token after it (not n - 1) is what a prediction copies from
    std::vector<int32_t> order(states_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = int32_t(k);
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return states_[size_t(a)].len > states_[size_t(b)].len; });
    for (size_t k = 0; k < states_.size(); ++k)
        if (own[k] >= 0 && size_t(own[k]) + 1 < n) states_[k].last = own[k];
    for (const int32_t s : order) {
        const int32_t l = states_[size_t(s)].link;
        if (l >= 0) states_[size_t(l)].last = std::max(states_[size_t(l)].last, states_[size_t(s)].last);
    }
}

CopyIndex::Walk CopyIndex::start() const { return Walk{whole_, empty() ? 0 : states_[size_t(whole_)].len}; }

CopyIndex::Walk CopyIndex::advance(Walk w, int32_t token) const {
    if (empty()) return w;
    for (;;) {
        if (const int32_t t = target(w.state, token); t >= 0) return Walk{t, w.len + 1};
        if (w.state == 0) return Walk{0, 0};
        w.state = states_[size_t(w.state)].link;
        w.len = states_[size_t(w.state)].len;
    }
}

int32_t CopyIndex::predict(Walk w, int64_t* match_len) const {
    if (match_len) *match_len = 0;
    if (empty()) return -1;
    // the longest suffix with an occurrence that a token follows: shorter suffixes (suffix links)
    // have more occurrences
    while (w.state != 0 && states_[size_t(w.state)].last < 0) {
        w.state = states_[size_t(w.state)].link;
        w.len = states_[size_t(w.state)].len;
    }
    if (w.state == 0) return -1;
    if (match_len) *match_len = w.len;
    return source_[size_t(states_[size_t(w.state)].last) + 1];
}

int32_t CopyIndex::predict(const int32_t* ctx, size_t n, int64_t* match_len) const {
    Walk w;
    for (size_t i = 0; i < n; ++i) w = advance(w, ctx[i]);
    return predict(w, match_len);
}

std::unique_ptr<Drafter> make_drafter(DrafterKind kind) {
    switch (kind) {
        case DrafterKind::baseline: return std::make_unique<BaselineDrafter>();
        case DrafterKind::suffix: return std::make_unique<SuffixDrafter>();
        default: return nullptr;
    }
}

}  // namespace strata
