// Device memory for weight matrices: chunks are placed side by side in a few large buffers
// (arenas, each at most the device's chunk size) instead of one buffer per chunk, so that one
// dispatch can reach many matrices through a handful of bindings (matmul_gathered: every
// selected expert of a MoE layer in one dispatch) and its bind group repeats from window to
// window. A slot given back (a refilled expert's old contents) is reused for the next chunk of
// the same size.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "webgpu/device.h"

namespace strata::webgpu {

struct WeightSlot {
    BufferPtr buffer;  // the arena
    uint64_t offset = 0, bytes = 0;  // offset: a multiple of the storage offset alignment
};

class WeightPool {
public:
    explicit WeightPool(Device& device) : device_(device) {}
    WeightSlot take(uint64_t bytes);
    // The caller makes sure no recorded, unsubmitted dispatch still reads the slot.
    void give_back(const WeightSlot& slot) { free_[slot.bytes].push_back(slot); }
    size_t arenas() const { return arenas_.size(); }
    // The next takes, `bytes` in all, are about to belong together (a MoE layer's experts, bound
    // in one dispatch): when they would not fit in what is left of the last arena, start a new
    // one of up to the chunk size for them, so they span as few arenas as the chunk size allows;
    // a new arena is at least `at_least` bytes (up to the chunk size).
    void reserve(uint64_t bytes, uint64_t at_least = 0);

private:
    struct Arena {
        BufferPtr buffer;
        uint64_t used = 0;
    };
    static constexpr uint64_t kFirstArena = 16ull << 20;  // arenas grow from here to the chunk size
    Device& device_;
    std::vector<Arena> arenas_;
    std::map<uint64_t, std::vector<WeightSlot>> free_;
};

}  // namespace strata::webgpu
