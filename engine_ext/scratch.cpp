#include "scratch.h"

namespace strata {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
uint8_t* aligned(uint8_t* p) { return p + (kAlign - reinterpret_cast<uintptr_t>(p) % kAlign) % kAlign; }
}  // namespace

// Offsets are logical: an allocation lives at [offset, offset + bytes). One that ends inside the
// arena is served from it; one that does not gets its own block. Every allocation made while
// an overflowed one is alive lies above it, so arena and blocks never overlap.
void* Scratch::raw(size_t bytes) {
    bytes = round_up(bytes == 0 ? 1 : bytes);
    const size_t offset = used_;
    used_ += bytes;
    if (used_ > high_) high_ = used_;
    if (used_ <= cap_) return base_ + offset;
    overflow_.push_back({offset, std::unique_ptr<uint8_t[]>(new uint8_t[bytes + kAlign])});
    return aligned(overflow_.back().mem.get());
}

void Scratch::release(size_t mark) {
    while (!overflow_.empty() && overflow_.back().offset >= mark) overflow_.pop_back();
    used_ = mark;
}

void Scratch::reset() {
    overflow_.clear();
    if (high_ > cap_) {
        cap_ = round_up(high_ + high_ / 8);
        mem_.reset(new uint8_t[cap_ + kAlign]);
        base_ = aligned(mem_.get());
    }
    used_ = 0;
    high_ = 0;
}

}  // namespace strata
