// Compute backends. The layers are written against this interface only: every op the three
// architectures need is a method here, and a backend says which (op, weight format) pairs it
// computes (supports). The CPU backend (cpu/) is the reference; other backends register a
// factory (register_backend) and join the engine and the per-op test without other changes.
//
// Buffers are host float arrays; strides are in floats. Exactness contract for every op: an
// output element is computed by one fixed code path whatever the number of rows, the other
// rows or the thread count (batch invariance), except where an op says otherwise.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format.h"

namespace strata {

struct ExpertView;  // expert_store.h

// What a backend with device copies of a streaming expert cache's slots hears from the cache.
struct ExpertSlotHooks {
    // a read landed in a slot (IO thread), before the slot is ready: its views and contents version
    std::function<void(const ExpertView&)> filled;
    // a temporary slot's memory (the address of its gate view) was freed
    std::function<void(const void*)> freed;
    // once, when the hooks are set: how many budget slots of how many bytes the cache has
    std::function<void(int slots, uint64_t slot_bytes)> planned;
    explicit operator bool() const { return bool(filled); }
};

// Decode windows (root + drafts) have at most kDecodeRows rows. Every op is exact by default:
// one fixed code path per output element whatever the row count, the other rows or the thread
// count (batch invariance). The engine runs windows of up to kExactRows rows exactly (so any
// prefix of them can be committed bit-identically to serial decoding); longer runs are prefill
// passes, for which it switches the backend to its prefill kernels (set_prefill), checked
// against references with a tolerance.
constexpr int kDecodeRows = 16;
constexpr int kExactRows = 64;

enum class Op : int {
    Embed = 0,      // gather rows of a weight matrix as f32 (format-dependent)
    RmsNorm,        // x / sqrt(mean(x^2) + eps) * w over heads of rows
    GatedRmsNorm,   // rmsnorm(x) * w * silu(z)
    Matmul,         // Y = X W^T (+ bias) over a weight format
    Rotary,         // rotary embedding (rotate-half) of the first 2*half lanes of each head
    Attention,      // causal attention of rows over KV cells, optional sigmoid output gate
    CausalConv,     // depthwise causal conv over [history; rows] + SiLU
    GdnInputs,      // GDN step inputs: L2-normalised q (scaled) / k, v, decay, beta
    GdnStep,        // gated delta-rule recurrence, rows in order, per value head
    RouterTopk,     // softmax over experts, top-k (ties: lower id), optional renormalisation
    Gather,         // copy rows by index (expert gather)
    SwiGlu,         // silu(g) * u
    MoeCombine,     // sum_j w_j * expert_out_j (+ sigmoid(gate) * shared)
    Add,            // x += y
    Copy,           // strided copy of rows x heads vectors (exact)
};
constexpr int kOpCount = int(Op::Copy) + 1;
const char* op_name(Op op);
bool op_from_name(const std::string& name, Op& out);
// Ops whose result depends on a weight format (the others take f32 and ignore the format).
inline bool op_has_format(Op op) { return op == Op::Embed || op == Op::Matmul; }

// One matrix product of a batch run together: Y[t*ldy + r] = dot(X[t*ldx ..], row r of W)
// (+ bias[r]) for t < T, r < W.rows.
struct MatJob {
    const float* X = nullptr;
    int T = 0;
    int ldx = 0;
    MatView W;
    const float* bias = nullptr;
    float* Y = nullptr;
    int ldy = 0;
};

// Rows of vectors: vector (r, h) starts at p + r*ld + h*hs and has `dim` elements.
struct RowsF {
    float* p = nullptr;
    int ld = 0;
    int hs = 0;
};
struct RowsC {
    const float* p = nullptr;
    int ld = 0;
    int hs = 0;
};

// Causal attention of n query rows at positions p0.. over cells [0, p0 + t] of a KV cache.
struct AttentionArgs {
    const float* q = nullptr;     // [n][n_heads][head_dim]
    const float* gate = nullptr;  // [n][n_heads][head_dim] sigmoid output gate, or null
    const float* k_cells = nullptr;  // [cells][n_kv][head_dim]
    const float* v_cells = nullptr;
    int n = 0, n_heads = 0, n_kv = 0, head_dim = 0;
    int64_t p0 = 0;
    float scale = 1.f;
    float* out = nullptr;         // [n][n_heads][head_dim]
};

// Depthwise causal conv (kernel K) over [history (K-1 rows, oldest first); n rows] + SiLU.
struct ConvArgs {
    const float* x = nullptr;     // [n][ldx], first `channels` lanes used
    int ldx = 0;
    const float* hist = nullptr;  // [K-1][channels]
    const float* w = nullptr;     // [channels][K]
    int n = 0, channels = 0, K = 0;
    float* out = nullptr;         // [n][channels]
    float* x_rows = nullptr;      // optional: the n input rows again, packed ([n][channels])
};

// GDN step inputs of n rows from the conv output c = [q | k | v] (per row, conv_dim lanes)
// and the projected b, a (per row, n_v lanes each).
struct GdnInputsArgs {
    const float* conv = nullptr;  // [n][conv_dim]
    const float* b = nullptr;     // row t at b + t*ld_ba
    const float* a = nullptr;
    int ld_ba = 0;
    const float* A = nullptr;     // [n_v] = -exp(A_log)
    const float* dt_bias = nullptr;
    int n = 0, n_k = 0, n_v = 0, d_k = 0, d_v = 0;
    float* q = nullptr;           // [n][n_k*d_k]  (L2-normalised, times 1/sqrt(d_k))
    float* k = nullptr;           // [n][n_k*d_k]
    float* v = nullptr;           // [n][n_v*d_v]
    float* decay = nullptr;       // [n][n_v]
    float* beta = nullptr;        // [n][n_v]
};

// The gated delta rule over n rows in order, every value head: row 0 reads S0 (may equal S),
// every row writes S. out may be null (fold: state only).
struct GdnStepArgs {
    const float* S0 = nullptr;    // [n_v][d_k][d_v]
    float* S = nullptr;
    const float* q = nullptr;     // [n][n_k*d_k]
    const float* k = nullptr;
    const float* v = nullptr;     // [n][n_v*d_v]
    const float* decay = nullptr; // [n][n_v]
    const float* beta = nullptr;
    int n = 0, n_k = 0, n_v = 0, d_k = 0, d_v = 0;
    float* out = nullptr;         // [n][n_v*d_v]
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    virtual int threads() const = 0;
    // Whether this backend computes `op` on weights stored in `f` (ops without a weight format:
    // whether it has the op at all, whatever f).
    virtual bool supports(Op op, WFormat f) const = 0;
    // Prefill mode on: the ops that follow may use faster kernels whose rows can depend on the
    // row count (matmul over many rows, causal attention over many queries). Off (the
    // default): exact kernels only.
    virtual void set_prefill(bool on) = 0;
    virtual bool prefill() const = 0;

    // out[i] = row ids[i] of W as f32.
    virtual void embed(const MatView& W, const int32_t* ids, int n, float* out) = 0;
    // rows x heads vectors of `dim`: out = x / sqrt(mean(x^2) + eps) * w (in place allowed).
    virtual void rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps) = 0;
    // x = rmsnorm(x) * w * silu(z), in place, rows x heads vectors of `dim`.
    virtual void gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps) = 0;
    // Every job, one fixed reduction order per output element whatever T, the batch of jobs
    // or the thread count (in prefill mode: the prefill kernel's own order).
    virtual void matmul(const std::vector<MatJob>& jobs) = 0;
    // Rotate-half rotary of rows at positions p0 + r (first 2*half lanes of each head).
    virtual void rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half) = 0;
    // rmsnorm(x, out, rows, heads, dim, w, eps), then rotary(out, rows, heads, p0, inv_freq, half)
    // (attention's q and k). A backend may fuse them; out equals the two ops'.
    virtual void rmsnorm_rotary(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps,
                                int64_t p0, const float* inv_freq, int half) {
        rmsnorm(x, out, rows, heads, dim, w, eps);
        rotary(out, rows, heads, p0, inv_freq, half);
    }
    virtual void attention(const AttentionArgs& a) = 0;
    virtual void causal_conv(const ConvArgs& a) = 0;
    virtual void gdn_inputs(const GdnInputsArgs& a) = 0;
    virtual void gdn_step(const GdnStepArgs& a) = 0;
    // gdn_inputs(in), then gdn_step(st) on what it wrote (st.q, st.k, st.v, st.decay, st.beta are
    // in.q, in.k, in.v, in.decay, in.beta), where the caller reads none of those afterwards: a
    // backend may fuse the two and leave them unwritten; out and S equal the two ops'.
    virtual void gdn_inputs_step(const GdnInputsArgs& in, const GdnStepArgs& st) {
        gdn_inputs(in);
        gdn_step(st);
    }
    // causal_conv(conv), then gdn_inputs_step(in, st) on what it wrote (in.conv is conv.out; no
    // conv.x_rows), where the caller reads neither the conv output nor the step inputs: a backend
    // may fuse the three and leave those unwritten; out and S equal the three ops'.
    virtual void conv_gdn_inputs_step(const ConvArgs& conv, const GdnInputsArgs& in, const GdnStepArgs& st) {
        causal_conv(conv);
        gdn_inputs_step(in, st);
    }
    // logits [n][E] -> idx/weights [n][k] in rank order.
    virtual void router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx,
                             float* weights) = 0;
    // dst row i = src row idx[i] (cols floats each).
    virtual void gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) = 0;
    // out = silu(g) * u over rows x n (out may alias g).
    virtual void swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) = 0;
    // swiglu(g, u, out, rows, n), then matmul({job}) whose X is out (an FFN's down projection).
    // A backend may fold the SwiGLU into the matmul's reads of x and leave out unwritten; job.Y
    // equals the two ops' either way.
    virtual void swiglu_matmul(RowsC g, RowsC u, RowsF out, int rows, int n, const MatJob& job) {
        swiglu(g, u, out, rows, n);
        matmul({job});
    }
    // out[t] = sum_j w[t][j] * D[slot[t][j]] in rank order; with `shared` (in/out, [n][H]):
    // out[t] = that + sigmoid(shared_gate[t]) * shared[t] (out may alias shared).
    virtual void moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H,
                             const float* shared, const float* shared_gate, float* out) = 0;
    // The routed experts of a MoE layer with the router's choices left where router_topk wrote
    // them (no readback): for the P = n*k (row, rank) pairs p of idx, D row p (H floats) = the
    // SwiGLU FFN of expert idx[p] (of `experts`, every expert of the layer) on x row p / k.
    // Each D row equals what the host-grouped path computes (gather, matmul, swiglu, matmul),
    // bit for bit. GU: scratch of P * 2I floats. `ids` gets idx by the time the window's
    // results are read (telemetry). Returns false where the backend has no such path (the
    // default; the layer then reads idx on the host and groups rows by expert).
    struct MoeExpertsArgs {
        const float* x;
        int ldx, n;
        const int* idx;
        int k;
        const ExpertView* experts;
        int n_experts, hidden, inter;
        float* GU;
        float* D;
        std::shared_ptr<std::vector<int>> ids;
        // Null: `experts` are every expert of the layer, resident for the store's lifetime.
        // Streamed experts: experts[u] (u < n_experts) is expert expert_ids[u] of the layer's
        // `layer_experts`, acquired for this window (the union of idx, read on the host); the
        // views are valid for this call only.
        const int* expert_ids = nullptr;
        int layer_experts = 0;
    };
    virtual bool moe_experts(const MoeExpertsArgs& /*a*/) { return false; }
    // For a streaming expert store (ExpertStore::set_slot_hooks). Empty (the default): the
    // backend reads slots where it uses them.
    virtual ExpertSlotHooks expert_slot_hooks();
    // x[i] += y[i]
    virtual void add(float* x, const float* y, size_t n) = 0;
    // The residual add and the next norm: x += y over rows x dim (packed), then out = rmsnorm(x)
    // (rows of dim at stride ld). A backend may fuse them; the result equals the two ops'.
    virtual void add_rmsnorm(float* x, const float* y, int rows, int dim, RowsF out, const float* w, float eps) {
        add(x, y, size_t(rows) * dim);
        rmsnorm({x, dim, 0}, out, rows, 1, dim, w, eps);
    }
    // A residual add and the norm after it, as add_rmsnorm(x, y, rows, dim, out, w, eps) does them
    // (y the op's output, rows and dim its shape).
    struct AddNorm {
        float* x;
        RowsF out;
        const float* w;
        float eps;
    };
    // moe_combine(D, slot, w, n, k, H, shared, shared_gate, out), then add_rmsnorm(then.x, out, n,
    // H, then.out, then.w, then.eps). A backend may fuse them and leave out unwritten; then.x and
    // then.out equal the two ops'.
    virtual void moe_combine_add_rmsnorm(const float* D, const int* slot, const float* w, int n, int k, int H,
                                         const float* shared, const float* shared_gate, float* out,
                                         const AddNorm& then) {
        moe_combine(D, slot, w, n, k, H, shared, shared_gate, out);
        add_rmsnorm(then.x, out, n, H, then.out, then.w, then.eps);
    }
    // dst vector (r, h) = src vector (r, h), rows x heads vectors of `dim` (no overlap).
    virtual void copy(RowsC src, RowsF dst, int rows, int heads, int dim) = 0;
    // Several copies (no destination overlaps any source); a backend may run them together.
    struct CopyJob {
        RowsC src;
        RowsF dst;
        int rows, heads, dim;
    };
    virtual void copy_many(const std::vector<CopyJob>& jobs) {
        for (const CopyJob& j : jobs) copy(j.src, j.dst, j.rows, j.heads, j.dim);
    }

    // Device-resident arrays. A backend that computes in its own memory (webgpu) keeps a
    // device copy of each attached host array and treats that copy as the current one: ops
    // whose arguments lie in it read and write it there, and nothing goes back to the host
    // unless asked. The engine and the layers attach their activations (the scratch arena) and
    // their state, and say where the host itself reads (to_host) or writes (from_host) such an
    // array between ops. Unattached arrays are host memory as ever. All no-ops on the CPU.
    // attach: `upload` copies the host contents in (else the device copy starts undefined).
    virtual void attach(const void* /*p*/, size_t /*bytes*/, bool /*upload*/) {}
    virtual void detach(const void* /*p*/) {}
    virtual void to_host(const void* /*p*/, size_t /*bytes*/) {}
    virtual void from_host(const void* /*p*/, size_t /*bytes*/) {}
    // What the backend counts about itself since it was made (webgpu: submits, dispatches).
    virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
};

// An attached host array (Backend::attach) that follows its storage: set() re-attaches when the
// array moved or grew, and the destructor detaches it.
class Attached {
public:
    Attached() = default;
    Attached(const Attached&) = delete;
    Attached& operator=(const Attached&) = delete;
    ~Attached() {
        if (be_ && p_) be_->detach(p_);
    }
    void set(Backend& be, const void* p, size_t bytes, bool upload) {
        if (be_ == &be && p == p_ && bytes <= bytes_) return;
        if (be_ && p_) be_->detach(p_);
        be_ = &be;
        p_ = p;
        bytes_ = bytes;
        if (p && bytes) be.attach(p, bytes, upload);
    }

private:
    Backend* be_ = nullptr;
    const void* p_ = nullptr;
    size_t bytes_ = 0;
};

// Backends join by registering a factory under a name (the CPU backend is always there).
using BackendFactory = std::function<std::unique_ptr<Backend>(int threads)>;
void register_backend(const std::string& name, BackendFactory f);
std::vector<std::string> backend_names();
std::unique_ptr<Backend> make_backend(const std::string& name, int threads);

}  // namespace strata
