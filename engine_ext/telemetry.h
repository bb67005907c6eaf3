// Per-window telemetry: one plain struct, filled by the engine (timings, experts, IO) and by
// the decode loop (drafting fields). Python sees it as a dict with these names.
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

struct WindowTelemetry {
    // window shape (decode loop)
    int64_t pos0 = 0;
    int T = 0;
    int n_drafted = 0;
    int n_accept = 0;
    int keep = 0;
    int emitted = 0;
    int match_len = 0;
    int drafter = 0;           // 0 none, 1 baseline, 2 suffix
    // timings (engine / decode loop), microseconds
    double window_us = 0;      // whole window: draft + run + verify + commit
    double run_us = 0;         // engine run
    double fold_us = 0;        // GDN fold at commit (eager) or at next run (lazy)
    // experts and IO (streaming store; zero when everything is resident)
    int64_t hits = 0;
    int64_t cold_misses = 0;
    int64_t urgent_loads = 0;
    int64_t prefetch_issued = 0;
    int64_t prefetch_used = 0;
    int64_t prefetch_wasted = 0;
    double late_wait_us = 0;
    int64_t bytes_read = 0;
    int64_t prefetched_bytes = 0;
    int64_t extra_cold = 0;            // cold experts beyond those the root row needed
    // bytes of weights the window touched: every dense / shared matrix (in its stored format)
    // and f32 vector once, the embedding rows of its distinct tokens, each distinct expert of
    // each MoE layer once; the floor that reading weights sets on the window's cost
    int64_t weight_bytes = 0;
    int64_t cache_slots_used = 0;
    int64_t cache_slots_total = 0;
    bool approximate = false;          // a routing mode that changes the model was active
    std::vector<int> union_per_layer;  // size of the union of selected experts, per MoE layer
    // experts selected in this window, per MoE layer (flattened: layer-major, unique ids)
    std::vector<int> expert_ids;
    std::vector<int> expert_offsets;   // layer l's ids are expert_ids[offsets[l] .. offsets[l+1])
};

}  // namespace strata
