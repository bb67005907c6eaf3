#include "scratch.h"

#include "backend.h"

namespace strata {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
uint8_t* aligned(uint8_t* p) { return p + (kAlign - reinterpret_cast<uintptr_t>(p) % kAlign) % kAlign; }
}  // namespace

Scratch::~Scratch() { drop_blocks(); }

void Scratch::drop_blocks() {
    for (Block& b : blocks_)
        if (be_) be_->detach(b.p);
    blocks_.clear();
    overflow_.clear();
}

// Offsets are logical: an allocation lives at [offset, offset + bytes). One that ends inside the
// arena is served from it; one that does not gets a block of its own. Every allocation made while
// an overflowed one is alive lies above it, so arena and blocks never overlap.
void* Scratch::raw(size_t bytes) {
    bytes = round_up(bytes == 0 ? 1 : bytes);
    const size_t offset = used_;
    used_ += bytes;
    if (used_ > high_) high_ = used_;
    if (used_ <= cap_) return base_ + offset;
    size_t best = blocks_.size();
    for (size_t i = 0; i < blocks_.size(); ++i)
        if (!blocks_[i].used && blocks_[i].bytes >= bytes && (best == blocks_.size() || blocks_[i].bytes < blocks_[best].bytes))
            best = i;
    if (best == blocks_.size()) {
        std::unique_ptr<uint8_t[]> mem(new uint8_t[bytes + kAlign]);
        uint8_t* p = aligned(mem.get());
        blocks_.push_back({bytes, std::move(mem), p, false});
        if (be_) be_->attach(p, bytes, false);
    }
    blocks_[best].used = true;
    overflow_.push_back({offset, best});
    return blocks_[best].p;
}

void Scratch::release(size_t mark) {
    while (!overflow_.empty() && overflow_.back().first >= mark) {
        blocks_[overflow_.back().second].used = false;
        overflow_.pop_back();
    }
    used_ = mark;
}

void Scratch::reset(Backend* be) {
    drop_blocks();
    be_ = be;
    if (high_ > cap_) {
        cap_ = round_up(high_ + high_ / 8);
        mem_.reset(new uint8_t[cap_ + kAlign]);
        base_ = aligned(mem_.get());
    }
    used_ = 0;
    high_ = 0;
}

}  // namespace strata
