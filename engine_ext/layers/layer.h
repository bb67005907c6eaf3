// What a layer of the engine is. A stateful layer owns its state and its rollback: the engine
// only orders calls (begin_window -> run over each pass of rows -> commit), and saves, loads
// and resets every stateful layer through this interface, so a new stateful layer (QSA tail,
// PLE history, MTP cache) is one new file implementing it.
#pragma once
#include <cstdint>

#include "backend.h"
#include "model_spec.h"
#include "scratch.h"
#include "state_blob.h"

namespace strata {

// What every layer needs from the engine: the architecture, the backend, the context limit,
// and the engine's scratch arena (a layer's temporaries live in a ScratchScope of its run).
struct LayerEnv {
    const ModelSpec& spec;
    Backend& be;
    int64_t ctx;
    Scratch& scratch;
};

class StatefulLayer {
public:
    virtual ~StatefulLayer() = default;
    // A window of T rows starts. keep_rows: keep what a partial commit needs (per-row inputs);
    // without it only commit(T) is allowed, and the engine replays a shorter prefix instead.
    virtual void begin_window(int T, bool keep_rows) = 0;
    // Exactly once per window: keep == T adopts the state after all rows; keep < T makes the
    // state after the first `keep` rows the committed one. Returns whether it computed anything
    // now (a fold), for the telemetry.
    virtual bool commit(int keep) = 0;
    // Finishes a deferred (lazy) fold; returns whether there was one. Called before each run
    // and before save.
    virtual bool flush() { return false; }
    // State at committed length pos: its size in the blob, save, load (the size is checked
    // before any load), and the empty state.
    virtual size_t state_bytes(int64_t pos) const = 0;
    virtual void save(StateWriter& w, int64_t pos) const = 0;
    virtual void load(StateReader& r, int64_t pos) = 0;
    virtual void reset() = 0;
};

// A token mixer (attention, GDN): runs n rows at positions p0.. of the window (row0 = their
// index in the window; rows of one window come in order) reading h [n][hidden], writing
// out [n][hidden].
class Mixer : public StatefulLayer {
public:
    virtual void run(const float* h, int n, int64_t p0, int row0, float* out) = 0;
    // Stored bytes of the weights every run reads (for the window telemetry).
    virtual size_t weight_bytes() const = 0;
};

}  // namespace strata
