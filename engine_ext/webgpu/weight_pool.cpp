#include "webgpu/weight_pool.h"

#include <algorithm>
#include <stdexcept>

namespace strata::webgpu {

WeightSlot WeightPool::take(uint64_t bytes) {
    const uint64_t align = std::max<uint64_t>(device_.limits().min_storage_offset_alignment, 16);
    bytes = (bytes + align - 1) / align * align;
    auto f = free_.find(bytes);
    if (f != free_.end() && !f->second.empty()) {
        WeightSlot s = f->second.back();
        f->second.pop_back();
        return s;
    }
    const uint64_t chunk = device_.limits().chunk_bytes;
    if (bytes > chunk) throw std::invalid_argument("webgpu weights: a chunk of " + std::to_string(bytes) +
                                                   " bytes is larger than the device's chunk size");
    // the last arena only: earlier ones are full enough (chunks of one model come in few sizes)
    if (arenas_.empty() || arenas_.back().buffer->size() - arenas_.back().used < bytes) {
        uint64_t size = arenas_.empty() ? kFirstArena : arenas_.back().buffer->size() * 2;
        size = std::max(bytes, std::min(size, chunk));
        arenas_.push_back({device_.create_buffer(size, "weight arena"), 0});
    }
    Arena& a = arenas_.back();
    WeightSlot s{a.buffer, a.used, bytes};
    a.used += bytes;
    return s;
}

void WeightPool::reserve(uint64_t bytes, uint64_t at_least) {
    if (!arenas_.empty() && arenas_.back().buffer->size() - arenas_.back().used >= bytes) return;
    const uint64_t chunk = device_.limits().chunk_bytes;
    const uint64_t align = std::max<uint64_t>(device_.limits().min_storage_offset_alignment, 16);
    uint64_t size = std::min(chunk, (bytes + align - 1) / align * align);
    if (!arenas_.empty()) size = std::max(size, std::min(arenas_.back().buffer->size(), chunk));
    size = std::max(size, std::min((at_least + align - 1) / align * align, chunk));
    arenas_.push_back({device_.create_buffer(size, "weight arena"), 0});
}

}  // namespace strata::webgpu
