#include "webgpu/slot_pool.h"

#include <algorithm>

#include "webgpu/quant_layout.h"

namespace strata::webgpu {

namespace {

// Arena bytes of one matrix as upload_matrix places it (one chunk: an expert matrix is far below
// the chunk size; a larger one still uploads, over several chunks).
uint64_t arena_bytes(const Device& device, const MatView& W) {
    const WeightFormat f = to_weight_format(W.format);
    const uint64_t row = is_quant(f) ? uint64_t(quant_row_words(f, uint32_t(W.cols))) * 4
                                     : (uint64_t(W.cols) * (f == WeightFormat::F32 ? 4 : 2) + 3) & ~uint64_t(3);
    const uint64_t align = std::max<uint64_t>(device.limits().min_storage_offset_alignment, 16);
    return (uint64_t(W.rows) * row + align - 1) / align * align;
}

bool same_shape(const MatView& a, const MatView& b) {
    return a.format == b.format && a.rows == b.rows && a.cols == b.cols && a.row_bytes == b.row_bytes;
}

const MatView& part(const ExpertView& v, int j) { return j == 0 ? v.gate : j == 1 ? v.up : v.down; }

}  // namespace

void SlotPool::upload(Entry& e, const ExpertView& v) {
    bool same = true;
    for (int j = 0; j < 3; ++j) same = same && !e.m[j].chunks.empty() && same_shape(e.shape[j], part(v, j));
    if (same) {
        for (int j = 0; j < 3; ++j) rewrite_matrix(device_, e.m[j], part(v, j).data, part(v, j).row_bytes);
    } else {
        // a first fill, or a layer of another shape or format in this slot: fresh places, side by
        // side, so that one slot never spans two arenas
        give_back(v.gate.data, e);
        pool_.reserve(arena_bytes(device_, v.gate) + arena_bytes(device_, v.up) + arena_bytes(device_, v.down),
                      arena_bytes_);
        for (int j = 0; j < 3; ++j) {
            const MatView& W = part(v, j);
            e.m[j] = upload_matrix(device_, W.data, to_weight_format(W.format), uint32_t(W.rows), uint32_t(W.cols),
                                   W.row_bytes, &pool_);
            of_[W.data] = {v.gate.data, j};
        }
    }
    for (int j = 0; j < 3; ++j) e.shape[j] = part(v, j);
}

bool SlotPool::is_current(const Entry& e, const ExpertView& v) {
    for (int j = 0; j < 3; ++j) {
        const MatView& W = part(v, j);
        if (e.m[j].chunks.empty() || !same_shape(e.shape[j], W) || e.shape[j].data != W.data ||
            e.shape[j].version != W.version)
            return false;
    }
    return true;
}

SlotPool::Entry& SlotPool::entry(const void* slot, uint64_t open) {
    for (size_t i = 0; i < dead_.size();) {
        auto it = entries_.find(dead_[i]);
        if (it != entries_.end() && it->second.dead && it->second.used_serial == open) {
            ++i;
            continue;
        }
        if (it != entries_.end() && it->second.dead) reclaim(dead_[i]);
        dead_[i] = dead_.back();
        dead_.pop_back();
    }
    Entry& e = entries_[slot];
    e.dead = false;  // new memory at a freed slot's address
    return e;
}

void SlotPool::give_back(const void* slot, Entry& e) {
    for (int j = 0; j < 3; ++j) {
        for (const auto& c : e.m[j].chunks) pool_.give_back({c.buffer, c.offset, c.bytes});
        e.m[j].chunks.clear();
        auto it = of_.find(e.shape[j].data);
        if (it != of_.end() && it->second.first == slot) of_.erase(it);
    }
}

void SlotPool::reclaim(const void* slot) {
    give_back(slot, entries_.at(slot));
    entries_.erase(slot);
}

void SlotPool::plan(int slots, uint64_t slot_bytes) {
    // device rows are the host rows rounded to words (quantized: scales regrouped), and each of a
    // slot's three matrices starts on the storage offset alignment
    const uint64_t align = std::max<uint64_t>(device_.limits().min_storage_offset_alignment, 16);
    const uint64_t per_slot = slot_bytes + slot_bytes / 8 + 3 * align;
    // (at least 16 MiB: a window's union beyond the budget borrows temporary slots)
    arena_bytes_ = std::min<uint64_t>(device_.limits().chunk_bytes,
                                      std::max<uint64_t>(uint64_t(std::max(slots, 1)) * per_slot, 16ull << 20));
}

void SlotPool::freed(const void* slot, uint64_t open) {
    auto it = entries_.find(slot);
    if (it == entries_.end()) return;
    it->second.dead = true;
    if (it->second.used_serial == open) {
        dead_.push_back(slot);
    } else {
        reclaim(slot);
    }
}

void SlotPool::filled(const ExpertView& v, uint64_t open) {
    Entry& e = entry(v.gate.data, open);
    if (e.used_serial == open || is_current(e, v)) return;  // the open batch reads the old contents: at use
    upload(e, v);
    ++at_fill_;
}

SlotPool::Entry& SlotPool::current(const ExpertView& v, uint64_t open, const std::function<void()>& flush) {
    Entry& e = entry(v.gate.data, open);
    if (!is_current(e, v)) {
        if (e.used_serial == open) flush();
        upload(e, v);
        ++at_use_;
    }
    e.used_serial = open;
    return e;
}

const GpuMatrix* SlotPool::matrix(const MatView& W, uint64_t open, const std::function<void()>& flush) {
    auto it = of_.find(W.data);
    if (it == of_.end()) return nullptr;
    Entry& e = entries_.at(it->second.first);
    MatView& have = e.shape[it->second.second];
    if (!same_shape(have, W)) return nullptr;
    if (have.version != W.version) {  // this matrix only: the host-grouped path asks per matrix
        if (e.used_serial == open) flush();
        rewrite_matrix(device_, e.m[it->second.second], W.data, W.row_bytes);
        have.version = W.version;
        ++at_use_;
    }
    e.used_serial = open;
    return &e.m[it->second.second];
}

}  // namespace strata::webgpu
