#include "backend.h"

#include <map>
#include <mutex>
#include <stdexcept>

#include "cpu/cpu_backend.h"

namespace strata {

ExpertSlotHooks Backend::expert_slot_hooks() { return {}; }

namespace {
const char* const kOpNames[kOpCount] = {"embed",      "rmsnorm",    "gated_rmsnorm", "matmul", "rotary",
                                        "attention",  "causal_conv", "gdn_inputs",   "gdn_step", "router_topk",
                                        "gather",     "swiglu",     "moe_combine",   "add",
                                        "copy"};

struct Registry {
    std::mutex mu;
    std::map<std::string, BackendFactory> factories;
};
Registry& registry() {
    static Registry r;
    return r;
}
}  // namespace

const char* op_name(Op op) { return kOpNames[int(op)]; }

bool op_from_name(const std::string& name, Op& out) {
    for (int i = 0; i < kOpCount; ++i)
        if (name == kOpNames[i]) {
            out = Op(i);
            return true;
        }
    return false;
}

void register_backend(const std::string& name, BackendFactory f) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    r.factories[name] = std::move(f);
}

std::vector<std::string> backend_names() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    std::vector<std::string> out = {"cpu"};
    for (auto& kv : r.factories)
        if (kv.first != "cpu") out.push_back(kv.first);
    return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
    if (name.empty() || name == "cpu") return std::make_unique<CpuBackend>(threads);
    BackendFactory f;
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lk(r.mu);
        auto it = r.factories.find(name);
        if (it != r.factories.end()) f = it->second;
    }
    if (!f) {
        std::string avail;
        for (auto& n : backend_names()) avail += (avail.empty() ? "" : ", ") + n;
        throw std::invalid_argument("unknown backend '" + name + "' (available: " + avail + ")");
    }
    return f(threads);
}

}  // namespace strata
