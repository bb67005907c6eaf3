// WindowTelemetry as a Python dict, shared by every area's bindings (engine, decode loop,
// expert store) so the three cannot drift apart.
#pragma once
#include <pybind11/pybind11.h>

#include "telemetry.h"

namespace strata {

const char* drafter_name(int kind);  // 0 none, 1 baseline, 2 suffix

// Keys are the names of strata.protocol.WindowStats; `drafter` by name, `experts` as one list
// of ids per MoE layer, plus the flat `expert_ids` / `expert_offsets` it is built from.
pybind11::dict telemetry_dict(const WindowTelemetry& t);

}  // namespace strata
