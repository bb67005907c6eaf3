// How the MoE layers reach expert weights. Everything-resident is one implementation; the
// streaming cache (expert-major pack + slots + async IO) is another.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "backend.h"
#include "format.h"
#include "telemetry.h"

namespace strata {

struct ExpertView {
    MatView gate;  // [moe_inter x hidden]
    MatView up;    // [moe_inter x hidden]
    MatView down;  // [hidden x moe_inter]
    // stored bytes of the three matrices (what one read of this expert moves)
    size_t bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
};

class ExpertStore {
public:
    virtual ~ExpertStore() = default;
    // Called once per MoE layer per window with the union of the experts any row selected
    // (and, separately, the root row's). Blocks until all of them are usable; pins them until
    // release_layer(). Fills `out` in the order of `experts`.
    virtual void acquire_layer(int layer, const std::vector<int>& experts,
                               const std::vector<int>& root_experts,
                               std::vector<ExpertView>& out) = 0;
    virtual void release_layer(int layer) = 0;
    // Read-ahead hint: experts predicted for a later layer (low priority). Default: ignore.
    virtual void prefetch(int /*layer*/, const std::vector<int>& /*experts*/) {}
    virtual bool wants_prefetch() const { return false; }
    // Every expert of a layer, when all of them stay resident for the store's lifetime (no
    // acquire/release needed: the backend may choose among them itself); null: stream them.
    virtual const std::vector<ExpertView>* resident_layer(int /*layer*/) const { return nullptr; }
    // Whether an expert is resident and ready now (for cache-aware routing modes).
    virtual bool is_ready(int /*layer*/, int /*expert*/) const { return true; }
    // A store with slots calls hooks.filled on an IO thread each time a read lands in a slot
    // (before the slot is ready), so a backend can copy it to its device then rather than at first
    // use, and hooks.freed when it frees a temporary slot's memory. One owner at a time;
    // clear_slot_hooks(owner) removes `owner`'s and waits for a call in progress. Default: no slots.
    virtual void set_slot_hooks(const void* /*owner*/, ExpertSlotHooks /*hooks*/) {}
    virtual void clear_slot_hooks(const void* /*owner*/) {}
    // Adds this store's counters for the window that just ran, then clears them.
    virtual void drain_telemetry(WindowTelemetry& /*t*/) {}
};

}  // namespace strata
