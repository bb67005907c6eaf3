// Model-free drafters: propose the tokens that followed an earlier occurrence of the current
// suffix of the session's token history. A draft is only a guess; the window verifies it, so a
// drafter can never change the output, only the speed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "flat_map.h"

namespace strata {

enum class DrafterKind : int { none = 0, baseline = 1, suffix = 2 };

struct Draft {
    std::vector<int32_t> tokens;
    int match_len = 0;  // length of the matched suffix that chose the draft (0: no match)
};

class Drafter {
public:
    virtual ~Drafter() = default;
    virtual DrafterKind kind() const = 0;
    // Forget everything (live sequence and extra documents).
    virtual void reset() = 0;
    // Extend the live sequence (the session: prompts, outputs, earlier turns).
    virtual void append(const int32_t* tokens, size_t n) = 0;
    // Index a separate document (history loaded from saved sessions); matches never span documents.
    virtual void add_document(const int32_t* tokens, size_t n) = 0;
    // Propose up to max_tokens continuation tokens of the live sequence; empty when no match of
    // at least min_match tokens exists.
    virtual Draft propose(int max_tokens, int min_match) const = 0;
    virtual const std::vector<int32_t>& tokens() const = 0;
};

// The baseline rule: a trigram index keeping the few most recent end positions per trigram;
// each candidate is extended backwards to measure its match length; the longest match wins,
// then the most recent; at least min_match (and 3) tokens; at most `cap` drafts (3 by default).
// Documents are indexed only through the live sequence (baseline does not use saved history).
class BaselineDrafter final : public Drafter {
public:
    static constexpr int kCandidates = 4;       // most recent earlier occurrences per trigram
    static constexpr int kMaxBackward = 512;    // backward extension limit
    explicit BaselineDrafter(int cap = 3) : cap_(cap) {}
    DrafterKind kind() const override { return DrafterKind::baseline; }
    void reset() override;
    void append(const int32_t* tokens, size_t n) override;
    void add_document(const int32_t*, size_t) override {}
    Draft propose(int max_tokens, int min_match) const override;
    const std::vector<int32_t>& tokens() const override { return seq_; }
    int cap() const { return cap_; }

private:
    // end positions (index of the trigram's last token), most recent last; kCandidates + 1 kept
    // so that the current trigram's own position can be excluded
    struct Slots {
        int64_t pos[kCandidates + 1];
        int n = 0;
    };
    int cap_;
    std::vector<int32_t> seq_;
    std::unordered_map<uint64_t, Slots> index_;
};

// The suffix structure: continuation counts for every context of 1..kMaxOrder tokens over the
// live sequence and every added document. A proposal walks forward: at each step take the
// deepest context (ending with the tokens so far, drafts included) that has a continuation and
// at least min_match tokens, and follow its most frequent continuation (ties: most recent).
class SuffixDrafter final : public Drafter {
public:
    static constexpr int kMaxOrder = 24;
    static constexpr int kMaxDraft = 15;
    DrafterKind kind() const override { return DrafterKind::suffix; }
    void reset() override;
    void append(const int32_t* tokens, size_t n) override;
    void add_document(const int32_t* tokens, size_t n) override;
    Draft propose(int max_tokens, int min_match) const override;
    const std::vector<int32_t>& tokens() const override { return seq_; }
    size_t n_contexts() const { return best_.size(); }

private:
    struct Best {
        int32_t token;
        uint32_t count;
    };
    // count the continuation `next` of every context ending at seq[end] (contexts within seq)
    void count_at(const std::vector<int32_t>& seq, size_t end, int32_t next);
    // deepest order >= min_order whose context (the last tokens of seq) has a continuation
    const Best* lookup(const std::vector<int32_t>& seq, int min_order, int* order) const;

    std::vector<int32_t> seq_;
    FlatMap64<uint32_t> pair_count_;  // (context, next) -> count
    FlatMap64<Best> best_;            // context -> most frequent next
};

std::unique_ptr<Drafter> make_drafter(DrafterKind kind);

// The copy bias's predictor (docs/decoding.md, "Copy bias"): over a fixed source (the session's
// tokens when a generation starts), the token that followed the most recent occurrence of the
// longest suffix of a context that occurs in the source with a token after it. It is a function
// of the context alone (the source does not grow with the output), so a window row and a
// one-token step with the same tokens before them predict the same token, and the copy bias keeps
// the output identical with drafting on and off.
//
// A suffix automaton of the source: a walk over a context ends in the state of its longest suffix
// that occurs in the source, and each state knows the last position where its strings end. Build
// is linear in the source; a walk takes amortised O(1) per token.
class CopyIndex {
public:
    // Where a walk stands: the automaton state of the context's longest suffix that occurs in the
    // source, and that suffix's length.
    struct Walk {
        int32_t state = 0;
        int64_t len = 0;
    };
    void build(const int32_t* source, size_t n);
    void clear();
    bool empty() const { return source_.empty(); }
    // the walk over the whole source (what a generation's context starts as)
    Walk start() const;
    Walk advance(Walk w, int32_t token) const;
    // the predicted next token after the walked context, -1 when none; match_len: the length of
    // the suffix whose occurrence chose it
    int32_t predict(Walk w, int64_t* match_len = nullptr) const;
    // the same for a context given in full (tests, tools)
    int32_t predict(const int32_t* ctx, size_t n, int64_t* match_len = nullptr) const;

private:
    struct State {
        int64_t len = 0;
        int32_t link = -1;
        int32_t last = -1;  // the last end position with a token after it (-1: none)
        std::vector<std::pair<int32_t, int32_t>> next;  // (token, state), sorted by token
    };
    int32_t target(int32_t state, int32_t token) const;  // -1 when no transition
    std::vector<State> states_;
    std::vector<int32_t> source_;
    int32_t whole_ = 0;  // the state of the whole source
};

}  // namespace strata
