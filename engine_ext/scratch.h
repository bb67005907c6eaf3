// Per-engine scratch arena: the buffers of one pass through the layers, reused across runs, so
// that a warm engine allocates nothing per run call. A layer takes what it needs inside a
// ScratchScope and gives it back at the end of its run. Memory is not zeroed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace strata {

class Scratch {
public:
    // n elements of T, 64-byte aligned, valid until the enclosing scope ends.
    template <typename T>
    T* alloc(size_t n) {
        return static_cast<T*>(raw(n * sizeof(T)));
    }
    size_t mark() const { return used_; }
    void release(size_t mark);
    // Start of a pass (nothing is in use): if the last pass outgrew the arena, it grows to that
    // pass's high-water mark, so the next pass fits without allocating.
    void reset();
    size_t capacity() const { return cap_; }
    void* base() const { return base_; }

private:
    void* raw(size_t bytes);
    std::unique_ptr<uint8_t[]> mem_;
    uint8_t* base_ = nullptr;  // 64-byte aligned start of mem_
    size_t cap_ = 0, used_ = 0, high_ = 0;
    // allocations that did not fit, with their offsets: each has its own block until the
    // scope that took it ends (the arena grows at the next reset)
    struct Block {
        size_t offset;
        std::unique_ptr<uint8_t[]> mem;
    };
    std::vector<Block> overflow_;
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
