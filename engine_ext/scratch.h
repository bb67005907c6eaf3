// Per-engine scratch arena: the buffers of one pass through the layers, reused across runs, so
// that a warm engine allocates nothing per run call. A layer takes what it needs inside a
// ScratchScope and gives it back at the end of its run. Memory is not zeroed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace strata {

class Backend;

class Scratch {
public:
    Scratch() = default;
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch();
    // n elements of T, 64-byte aligned, valid until the enclosing scope ends.
    template <typename T>
    T* alloc(size_t n) {
        return static_cast<T*>(raw(n * sizeof(T)));
    }
    size_t mark() const { return used_; }
    void release(size_t mark);
    // Start of a pass (nothing is in use): if the last pass outgrew the arena, it grows to that
    // pass's high-water mark, so the next pass fits without allocating. `be`: the pass's
    // backend, to which the blocks of allocations that do not fit are attached (a GPU backend
    // keeps them on the device, as the arena); the last pass's blocks are detached and freed.
    void reset(Backend* be = nullptr);
    size_t capacity() const { return cap_; }
    void* base() const { return base_; }

private:
    void* raw(size_t bytes);
    std::unique_ptr<uint8_t[]> mem_;
    uint8_t* base_ = nullptr;  // 64-byte aligned start of mem_
    size_t cap_ = 0, used_ = 0, high_ = 0;
    // Allocations that did not fit get blocks of their own (the arena grows at the next reset).
    // A block stays, attached to the pass's backend, until the next reset: an allocation that
    // does not fit takes the smallest free block that holds it, so the layers of a long first
    // pass reuse the same few blocks (and their device copies) instead of each op's operands
    // going through the host.
    struct Block {
        size_t bytes;
        std::unique_ptr<uint8_t[]> mem;
        uint8_t* p;  // 64-byte aligned in mem
        bool used;
    };
    std::vector<Block> blocks_;
    std::vector<std::pair<size_t, size_t>> overflow_;  // live allocations in blocks: (offset, block)
    Backend* be_ = nullptr;
    void drop_blocks();
};

class ScratchScope {
public:
    explicit ScratchScope(Scratch& s) : s_(s), mark_(s.mark()) {}
    ~ScratchScope() { s_.release(mark_); }
    ScratchScope(const ScratchScope&) = delete;
    ScratchScope& operator=(const ScratchScope&) = delete;
    template <typename T>
    T* alloc(size_t n) {
        return s_.alloc<T>(n);
    }

private:
    Scratch& s_;
    size_t mark_;
};

}  // namespace strata
