#include "backend.h"

#include <stdexcept>

namespace strata {

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
    if (name.empty() || name == "cpu") return std::make_unique<CpuBackend>(threads);
    throw std::invalid_argument("unknown backend '" + name + "' (available: cpu)");
}

}  // namespace strata
