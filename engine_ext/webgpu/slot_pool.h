// Device copies of a streaming expert cache's slots (StreamingExpertStore): one entry per host
// slot (keyed by its gate matrix's address), its gate, up and down side by side in arenas of at
// most the device's chunk size (WeightPool). An entry is written when the IO pool's read lands
// in the slot (ExpertStore::FillHook, on the IO thread, under the backend's lock), once per fill,
// and checked at use against the slot's contents version: a fill whose upload had to wait (the
// open recorder still read the old contents) is uploaded then. The routed MoE kernels bind the
// entries through a per-window table of (arena binding, offset) per expert, as for resident
// experts.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "expert_store.h"
#include "webgpu/kernels.h"
#include "webgpu/weight_pool.h"

namespace strata::webgpu {

WeightFormat to_weight_format(WFormat f);  // (webgpu_backend.cpp) a one-line error for a format with no kernel

class SlotPool {
public:
    explicit SlotPool(Device& device) : device_(device), pool_(device) {}
    struct Entry {
        GpuMatrix m[3];                 // gate, up, down
        MatView shape[3];               // address, shape and contents version of what is on the device
        uint64_t used_serial = UINT64_MAX;  // the recorder batch that last bound it
        bool dead = false;                  // its slot memory was freed (in dead_ until reclaimed)
    };
    // A read landed in the slot of `v` (IO thread, backend lock held). `open` is the serial of the
    // batch being recorded: an entry bound in it keeps its old contents until the next use.
    void filled(const ExpertView& v, uint64_t open);
    // The cache has `slots` budget slots of `slot_bytes` (host): arenas are made big enough for
    // all of them where the chunk size allows (a routed dispatch binds at most kGatherBuffers).
    void plan(int slots, uint64_t slot_bytes);
    // The memory of a temporary slot (its gate's address) was freed: its places go back to the
    // arenas once no batch still to be submitted reads them.
    void freed(const void* slot, uint64_t open);
    // The entry of slot `v`, current: uploaded now where the fill's upload waited; `flush` is
    // called first where the open batch (`open`) still reads the old contents.
    Entry& current(const ExpertView& v, uint64_t open, const std::function<void()>& flush);
    // The device copy of W where W is one of a known slot's matrices (made current as above); null
    // otherwise.
    const GpuMatrix* matrix(const MatView& W, uint64_t open, const std::function<void()>& flush);
    uint64_t uploads_at_fill() const { return at_fill_; }
    uint64_t uploads_at_use() const { return at_use_; }
    size_t entries() const { return entries_.size(); }

private:
    void upload(Entry& e, const ExpertView& v);
    static bool is_current(const Entry& e, const ExpertView& v);
    Entry& entry(const void* slot, uint64_t open);  // (reclaims dead entries no open batch reads)
    void reclaim(const void* slot);
    void give_back(const void* slot, Entry& e);  // its places to the arenas (no open batch reads them)
    std::vector<const void*> dead_;
    Device& device_;
    WeightPool pool_;
    std::unordered_map<const void*, Entry> entries_;                   // by the slot's gate address
    std::unordered_map<const void*, std::pair<const void*, int>> of_;  // matrix address -> (slot, which)
    uint64_t at_fill_ = 0, at_use_ = 0;
    uint64_t arena_bytes_ = 0;  // the size of a new arena (plan), 0: what WeightPool picks
};

}  // namespace strata::webgpu
