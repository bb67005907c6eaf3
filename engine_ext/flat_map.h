// A flat hash map from 64-bit hashed keys to small values, for the suffix drafter's context
// counts. The drafter updates two entries per context order for every token of the session, so a
// node-based map (one allocation per entry, a pointer chase per lookup) made indexing cost more
// than a decode row of a small model; here an entry is one slot of a power-of-two array probed
// linearly, and `prefetch` lets a caller start the memory reads of many keys at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

template <class V>
class FlatMap64 {
public:
    // Keys are hashes (already mixed), so their low bits pick the slot; 0 marks an empty slot, and a
    // real key of 0 is stored as 1 (a collision of two hashes, as harmless as any other).
    static uint64_t stored(uint64_t key) { return key ? key : 1; }

    const V* find(uint64_t key) const {
        if (slots_.empty()) return nullptr;
        key = stored(key);
        for (size_t i = size_t(key) & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == key) return &s.value;
            if (s.key == 0) return nullptr;
        }
    }

    // The value of `key`, inserted as `init` when absent; second: whether it was inserted.
    std::pair<V*, bool> emplace(uint64_t key, const V& init) {
        if ((size_ + 1) * 2 > slots_.size()) grow();
        key = stored(key);
        for (size_t i = size_t(key) & mask_;; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.key == key) return {&s.value, false};
            if (s.key == 0) {
                s.key = key;
                s.value = init;
                ++size_;
                return {&s.value, true};
            }
        }
    }

    void prefetch(uint64_t key) const {
        if (!slots_.empty()) __builtin_prefetch(&slots_[size_t(stored(key)) & mask_]);
    }

    size_t size() const { return size_; }
    void clear() {
        slots_.clear();
        slots_.shrink_to_fit();
        size_ = 0;
        mask_ = 0;
    }

private:
    struct Slot {
        uint64_t key = 0;
        V value{};
    };

    void grow() {
        std::vector<Slot> old(slots_.empty() ? size_t(1) << 12 : slots_.size() * 2);
        old.swap(slots_);
        mask_ = slots_.size() - 1;
        size_ = 0;
        for (const Slot& s : old)
            if (s.key) {
                size_t i = size_t(s.key) & mask_;
                while (slots_[i].key) i = (i + 1) & mask_;
                slots_[i] = s;
                ++size_;
            }
    }

    std::vector<Slot> slots_;
    size_t size_ = 0, mask_ = 0;
};

}  // namespace strata
