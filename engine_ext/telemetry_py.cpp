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

namespace {

// one list of ids per MoE layer from a flat id array and its layer offsets
py::list per_layer(const std::vector<int>& ids, const std::vector<int>& offsets) {
    py::list out;
    for (size_t l = 0; l + 1 < offsets.size(); ++l) {
        py::list layer;
        for (int k = offsets[l]; k < offsets[l + 1] && k < int(ids.size()); ++k) layer.append(ids[k]);
        out.append(layer);
    }
    return out;
}

}  // namespace

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
    d["experts"] = per_layer(t.expert_ids, t.expert_offsets);
    d["cold_experts"] = per_layer(t.cold_ids, t.cold_offsets);
    return d;
}

}  // namespace strata
