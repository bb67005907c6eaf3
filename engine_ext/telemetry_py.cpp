#include "telemetry_py.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace strata {

const char* drafter_name(int kind) {
    switch (kind) {
        case 1: return "baseline";
        case 2: return "suffix";
        default: return "none";
    }
}

py::dict telemetry_dict(const WindowTelemetry& t) {
    py::dict d;
    d["pos0"] = t.pos0;
    d["T"] = t.T;
    d["n_drafted"] = t.n_drafted;
    d["n_accept"] = t.n_accept;
    d["keep"] = t.keep;
    d["emitted"] = t.emitted;
    d["match_len"] = t.match_len;
    d["drafter"] = drafter_name(t.drafter);
    d["window_us"] = t.window_us;
    d["run_us"] = t.run_us;
    d["fold_us"] = t.fold_us;
    d["hits"] = t.hits;
    d["cold_misses"] = t.cold_misses;
    d["urgent_loads"] = t.urgent_loads;
    d["prefetch_issued"] = t.prefetch_issued;
    d["prefetch_used"] = t.prefetch_used;
    d["prefetch_wasted"] = t.prefetch_wasted;
    d["late_wait_us"] = t.late_wait_us;
    d["bytes_read"] = t.bytes_read;
    d["weight_bytes"] = t.weight_bytes;
    d["prefetched_bytes"] = t.prefetched_bytes;
    d["extra_cold"] = t.extra_cold;
    d["cache_slots_used"] = t.cache_slots_used;
    d["cache_slots_total"] = t.cache_slots_total;
    d["approximate"] = t.approximate;
    d["union_per_layer"] = t.union_per_layer;
    d["expert_ids"] = t.expert_ids;
    d["expert_offsets"] = t.expert_offsets;
    py::list experts;
    for (size_t l = 0; l + 1 < t.expert_offsets.size(); ++l) {
        py::list ids;
        for (int k = t.expert_offsets[l]; k < t.expert_offsets[l + 1] && k < int(t.expert_ids.size()); ++k)
            ids.append(t.expert_ids[k]);
        experts.append(ids);
    }
    d["experts"] = experts;
    return d;
}

}  // namespace strata
