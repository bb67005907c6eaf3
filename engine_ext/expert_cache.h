// StreamingExpertStore: a fixed budget of resident expert slots filled from a strata pack by
// IO worker threads. Per layer the engine asks for the union of the window's experts; what is
// resident or in flight is pinned, every missing expert becomes an urgent read, and only those
// are waited for. Unpinned slots are evicted by LRU or by a per-layer frequency score.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "expert_store.h"
#include "io_pool.h"
#include "pack.h"

namespace strata {

enum class Eviction { LRU = 0, LFU = 1 };

struct StreamOptions {
    int64_t cache_bytes = 0;      // slot budget; slots = cache_bytes / stride (at least 1)
    IoMode io_mode = IoMode::Direct;
    Eviction eviction = Eviction::LRU;
    int io_threads = 4;
    bool readahead = false;       // accept prefetch() hints
    double lfu_half_life = 32.0;  // LFU: a use counts half after this many acquires of its layer
    bool prefault = false;        // touch all slot memory up front (first-touch faults are slow on VMs)
};

class StreamingExpertStore : public ExpertStore {
public:
    StreamingExpertStore(PackGeometry geo, StreamOptions opt);
    ~StreamingExpertStore() override;

    void acquire_layer(int layer, const std::vector<int>& experts, const std::vector<int>& root_experts,
                       std::vector<ExpertView>& out) override;
    void release_layer(int layer) override;
    void prefetch(int layer, const std::vector<int>& experts) override;
    bool wants_prefetch() const override { return readahead_; }
    bool is_ready(int layer, int expert) const override;
    void drain_telemetry(WindowTelemetry& t) override;
    void set_slot_hooks(const void* owner, ExpertSlotHooks hooks) override;
    void clear_slot_hooks(const void* owner) override;

    void set_readahead(bool on) { readahead_ = on; }
    int slots() const { return n_slots_; }
    int slots_used() const;
    int overflow_high_water() const;   // most temporary slots ever needed at once
    std::vector<int> resident(int layer) const;
    const char* io_mode_name() const { return pack_.mode_name(); }
    const PackGeometry& geo() const { return pack_.geo(); }
    // Test hook: the next `times` reads of (layer, expert) fail as if the disk returned EIO.
    void inject_read_error(int layer, int expert, int times);
    // Stress check: `threads` threads acquire random unions on random layers, verify every pinned
    // blob's checksum while holding it, and release. Returns the number of corrupted views seen.
    int64_t stress(int threads, int iterations, int max_union, uint64_t seed);

private:
    enum class State : uint8_t { Free, Loading, Ready, Failed };
    struct Slot {
        uint8_t* buf = nullptr;
        int key = -1;              // ord * num_experts + expert
        State state = State::Free;
        int pins = 0;
        uint64_t gen = 0;          // bumps on every reassignment; stale IO jobs see a mismatch
        uint64_t version = 0;      // MatView::version of the contents (new on every reassignment)
        bool claimed = false;      // an IO worker has started the read
        bool prefetched = false;   // brought by read-ahead ...
        bool used = false;         // ... and used by a layer since
        bool overflow = false;     // temporary slot beyond the budget, freed on release
        uint64_t last_use = 0;
        std::string error;
    };
    struct Counters {
        int64_t hits = 0, cold_misses = 0, urgent_loads = 0, prefetch_issued = 0, prefetch_used = 0,
                prefetch_wasted = 0, bytes_read = 0, prefetched_bytes = 0, extra_cold = 0;
        double late_wait_us = 0;
        std::vector<int> cold_keys;   // ord * num_experts + expert of every cold miss
    };

    int ord_or_throw(int layer) const;
    int find_victim_locked();
    int assign_locked(int key, bool prefetch);   // returns slot or -1
    void evict_locked(Slot& s);
    void submit_load_locked(int slot, IoPool::Priority p);
    void load(int slot, uint64_t gen);
    double lfu_score_locked(int key) const;
    void touch_locked(int key);
    std::string describe(int key) const;
    ExpertView view_of(int ord, const Slot& s) const;
    void free_overflow_locked(int i, std::vector<const void*>& freed);  // a temporary slot, unpinned
    void tell_freed(const std::vector<const void*>& freed);             // (without m_)

    PackFile pack_;
    StreamOptions opt_;
    bool readahead_;
    int n_slots_;
    int E_;
    mutable std::mutex m_;
    std::condition_variable ready_cv_;
    std::vector<std::unique_ptr<Slot>> slots_;     // [0, n_slots_) budget, then overflow
    uint8_t* arena_ = nullptr;                     // budget slots' memory (one lazy mapping)
    size_t arena_bytes_ = 0;
    std::vector<int> free_overflow_;
    int overflow_live_ = 0, overflow_high_ = 0;
    std::vector<int> where_;                       // key -> slot or -1
    std::unordered_map<int, std::vector<int>> held_;  // model layer -> pinned slots
    uint64_t tick_ = 0;
    std::vector<uint64_t> layer_tick_;             // LFU: acquires per pack layer
    std::vector<float> freq_;                      // LFU: decayed use count per key
    std::vector<uint64_t> freq_tick_;              // LFU: layer tick of the last update
    std::unordered_map<int, int> injected_;        // key -> reads left to fail
    Counters c_;
    std::mutex hook_m_;            // held while a hook runs (never with m_)
    const void* hook_owner_ = nullptr;
    ExpertSlotHooks hooks_;
    std::unique_ptr<IoPool> pool_;                 // last: joined before the slots go away
};

}  // namespace strata
