// The window/commit contract as a C++ interface. The engine implements it; the decode loop
// (draft -> run -> verify -> commit) is written against it, so it can also drive a fake model in tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "telemetry.h"

namespace strata {

// Raised for transaction-rule violations (run while uncommitted, commit without run, ...).
// Mapped to strata.WindowError in Python.
struct WindowError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Raised for malformed / mismatched model files and state blobs. Mapped to strata.ModelError.
struct ModelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class WindowModel {
public:
    virtual ~WindowModel() = default;
    // Runs T input rows starting at pos(); returns a pointer to T*vocab() float32 logits
    // (row i = next-token logits after input i), valid until the next run/reset.
    virtual const float* run(const int32_t* tokens, int T) = 0;
    // Like run(), but only the last row's logits are needed (prefill chunks): returns vocab()
    // floats. Engines skip the LM head for the other rows; the default runs everything.
    virtual const float* run_last(const int32_t* tokens, int T) {
        return run(tokens, T) + static_cast<size_t>(T - 1) * static_cast<size_t>(vocab());
    }
    // Keeps the first `keep` rows of the last run (1 <= keep <= T), exactly once per run.
    virtual void commit(int keep) = 0;
    virtual int64_t pos() const = 0;          // committed length
    virtual int64_t context_limit() const = 0;
    virtual int vocab() const = 0;
    virtual void reset() = 0;
    // Engine-side part of the last window's telemetry (timings, expert/IO counters).
    virtual const WindowTelemetry& last_telemetry() const = 0;
};

}  // namespace strata
