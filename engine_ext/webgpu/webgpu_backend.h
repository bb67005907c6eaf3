// The `webgpu` backend: every op of backend.h on the WGSL kernels. Arrays the engine attaches
// (Backend::attach: the scratch arena of activations, the layers' KV cells and GDN state, norm
// weights) have a device copy that is the current one, so a window's ops read and write device
// memory only; their dispatches go into one open recorder that is submitted when the host needs
// a result (to_host, an unattached output such as the logits). Unattached host arrays (the
// per-op test's NumPy arrays) are uploaded per op and their results read back at once.
// Weight matrices stay on the device between calls, keyed by address and refreshed when their
// contents version changes (a caller's refilled buffer); a streaming expert cache's slots have
// their own device copies (slot_pool.h).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend.h"
#include "expert_store.h"
#include "webgpu/device.h"
#include "webgpu/kernels.h"
#include "webgpu/slot_pool.h"

namespace strata::webgpu {

class WebGpuBackend : public Backend {
public:
    explicit WebGpuBackend(const DeviceOptions& options);
    std::string name() const override { return "webgpu"; }
    int threads() const override { return 1; }
    bool supports(Op op, WFormat f) const override;
    // One kernel family for every row count: prefill runs the same (batch-invariant) kernels.
    void set_prefill(bool on) override { prefill_ = on; }
    bool prefill() const override { return prefill_; }
    Device& device() { return *device_; }

    void embed(const MatView& W, const int32_t* ids, int n, float* out) override;
    void rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps) override;
    void gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps) override;
    void matmul(const std::vector<MatJob>& jobs) override;
    void rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half) override;
    void attention(const AttentionArgs& a) override;
    void causal_conv(const ConvArgs& a) override;
    void gdn_inputs(const GdnInputsArgs& a) override;
    void gdn_step(const GdnStepArgs& a) override;
    void gdn_inputs_step(const GdnInputsArgs& in, const GdnStepArgs& st) override;
    void conv_gdn_inputs_step(const ConvArgs& conv, const GdnInputsArgs& in, const GdnStepArgs& st) override;
    void router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx,
                     float* weights) override;
    void gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) override;
    void swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) override;
    void rmsnorm_rotary(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps, int64_t p0,
                        const float* inv_freq, int half) override;
    void swiglu_matmul(RowsC g, RowsC u, RowsF out, int rows, int n, const MatJob& job) override;
    void moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H, const float* shared,
                     const float* shared_gate, float* out) override;
    void moe_combine_add_rmsnorm(const float* D, const int* slot, const float* w, int n, int k, int H,
                                 const float* shared, const float* shared_gate, float* out,
                                 const AddNorm& then) override;
    bool moe_experts(const MoeExpertsArgs& a) override;
    // A streamed expert's read landed (IO thread): its slot's device copy is written now; a
    // temporary slot's memory was freed: its device copy goes back to the arenas.
    ExpertSlotHooks expert_slot_hooks() override;
    void add(float* x, const float* y, size_t n) override;
    void add_rmsnorm(float* x, const float* y, int rows, int dim, RowsF out, const float* w, float eps) override;
    void copy(RowsC src, RowsF dst, int rows, int heads, int dim) override;
    void copy_many(const std::vector<CopyJob>& jobs) override;
    void attach(const void* p, size_t bytes, bool upload) override;
    void detach(const void* p) override;
    void to_host(const void* p, size_t bytes) override;
    void from_host(const void* p, size_t bytes) override;
    // How often the recorder was submitted and how many dispatches went in (for the bench).
    // With STRATA_WEBGPU_PROFILE=1 also gpu_profile (Device::profile_mode), gpu_span_us and
    // gpu_timed_submits, and per dispatch label L: "gpu_n:L", "gpu_us:L", "gpu_bytes:L".
    std::vector<std::pair<std::string, double>> counters() const override {
        std::vector<std::pair<std::string, double>> c = {
            {"submits", double(submits_)}, {"early_submits", double(early_submits_)},
            {"dispatches", double(dispatches_)}, {"bind_groups_made", double(device_->bind_groups_made())},
            {"encode_s", encode_s_}, {"run_s", run_s_}, {"moe_on_device", double(routed_layers_run_)},
            {"moe_streamed_on_device", double(streamed_layers_run_)},
            {"slot_uploads_at_fill", double(slots_->uploads_at_fill())},
            {"slot_uploads_at_use", double(slots_->uploads_at_use())}};
        if (device_->profile_mode()) {
            c.push_back({"gpu_profile", double(device_->profile_mode())});
            c.push_back({"gpu_span_us", device_->profile_span_ns() * 1e-3});
            c.push_back({"gpu_timed_submits", double(device_->profile_submits())});
            for (auto& [label, e] : device_->profile()) {
                c.push_back({"gpu_n:" + label, double(e.count)});
                c.push_back({"gpu_us:" + label, e.ns * 1e-3});
                c.push_back({"gpu_bytes:" + label, double(e.bytes)});
            }
        }
        return c;
    }

private:
    friend class OpArgs;
    struct Region {
        size_t bytes;
        BufferPtr buf;
    };
    // The attached region holding [p, p + bytes), with p's byte offset in it; null: host memory.
    const Region* find(const void* p, size_t bytes, uint64_t& offset) const;
    BufferPtr temp(uint64_t bytes);  // a window temporary, recycled after the next flush
    void flush();                    // submit what is recorded, wait, fill host results
    Recorder& rec() { return rec_; }
    Kernels& kernels() { return *kernels_; }
    const GpuMatrix& weights(const MatView& W);  // the device copy of W, refreshed when its version changes
    std::unique_ptr<Device> device_;
    std::unique_ptr<Kernels> kernels_;
    std::unique_ptr<WeightPool> pool_;  // every cached matrix's chunks
    std::mutex mutex_;  // one window at a time on the queue
    bool prefill_ = false;
    struct CachedMatrix {
        uint64_t version;  // MatView::version of the uploaded contents
        WFormat format;
        int rows, cols;
        size_t row_bytes;
        GpuMatrix matrix;
    };
    std::unordered_map<const void*, CachedMatrix> weights_;
    Recorder rec_;
    std::map<uintptr_t, Region> regions_;
    std::map<uint64_t, std::vector<BufferPtr>> free_temps_;  // by size class
    std::vector<BufferPtr> used_temps_;
    uint64_t used_temp_bytes_ = 0;
    std::vector<std::function<void()>> after_flush_;  // unpack host results once they are read back
    uint64_t submits_ = 0, early_submits_ = 0, dispatches_ = 0;
    // Recorded dispatches are handed to the GPU in batches of this many without waiting, so it
    // computes while the host encodes the rest of the window.
    static constexpr size_t kEarlySubmit = 48;
    // A window's first batch goes at this many (STRATA_WEBGPU_EARLY_FIRST, read again at every
    // wait so that a bench can alternate values in one process; unset: kEarlySubmit): the GPU
    // idles from the window's start until its first batch arrives.
    size_t early_first_ = kEarlySubmit;
    bool window_batched_ = false;  // an early submit went since the last wait
    static size_t early_first_from_env(bool strict);
    // The folds STRATA_WEBGPU_FOLD names (bits of folds_, in this order): the SwiGLU into the down
    // projections, the MoE combine into the add and norm after it, the q/k norm into its rotary,
    // the attention output gate into attention, gdn_inputs into gdn_step, and the conv as well.
    enum : unsigned { kFoldSwiglu = 1, kFoldMoeNorm = 2, kFoldQkNorm = 4, kFoldGate = 8, kFoldGdn = 16, kFoldConvGdn = 32 };
    static constexpr const char* kFoldNames[] = {"swiglu", "moe_norm", "qk_norm", "gate", "gdn", "conv_gdn"};
    // What STRATA_WEBGPU_FOLD unset gives: none. On the H200 (2026-12-05, docs/webgpu.md) every fold
    // on made the 80B-A3B layer shape decode 13% slower (271 against 312 tok/s; the MoE combine
    // folded into the norm ran one workgroup a row, 364 us a layer) and window rows differed from
    // serial decoding in their last bits, which lavapipe never showed; until each fold is measured
    // there alone, they are for A/B runs (1 or names).
    static constexpr unsigned kDefaultFolds = 0u;
    static unsigned folds_from_env();
    void submit_early();
    // Where a matmul job can join a matmul_gathered dispatch: its matrix, the device arrays of x
    // and y and its place in them; false: it runs alone (f32 weights, a bias, host arrays).
    struct GatherPlace {
        const GpuMatrix* m = nullptr;
        BufferPtr x, y;
        Kernels::GatherJob job{};
    };
    bool gatherable(const MatJob& job, GatherPlace& at);
    // Activation rows quantized for the block-format matmuls (quantize_rows' codes, scales, sums):
    // the rows of X (T rows of `cols` floats, ldx apart) for weights of `format` in xq, valid
    // while no wait has ended the temporary's life (submits); producer: the op that wrote X.
    struct QuantX {
        const float* X = nullptr;
        int T = 0, ldx = 0, cols = 0;
        WeightFormat format = WeightFormat::F32;
        BufferPtr xq;
        uint64_t submits = 0;
        const void* producer = nullptr;
    };
    // formats whose activation blocks are the same (K-quants: Q8_K with code sums; Q8_0 / Q5_0:
    // Q8_0) share one quantized x (attention's Q6_K v beside Q4_K q and k)
    bool same_act(WeightFormat a, WeightFormat b) const;
    // q holds X's rows quantized for format f, made since the last wait
    bool quantized_for(const QuantX& q, const float* X, int T, int ldx, int cols, WeightFormat f) const;
    // The rows the last producer op (rmsnorm, add_rmsnorm: keyed by its norm weight; swiglu: by
    // its output) wrote, quantized as it wrote them where the block-format matmul that read that
    // producer's rows before quantized them (hints_): the next matmul or routed MoE over those
    // rows takes them instead of a quantize_rows dispatch. Every op other than matmul,
    // router_topk and moe_experts drops it (OpArgs), and so do those three where they write
    // into its rows.
    QuantX made_q_;
    struct QuantHint {
        int ldx, cols;
        WeightFormat format;
    };
    std::unordered_map<const void*, QuantHint> hints_;  // by producer
    // a block-format matmul quantizes X's rows for f: the producer of X learns to do it
    void hint(const float* X, int ldx, int cols, WeightFormat f);
    // a producer op about to write rows of `cols` floats at out: sets made_q_; returns the buffer
    // to quantize them into (for made_q_.format), or null
    // the hint under which producing() would quantize (null: it would not)
    const QuantHint* fold_hint(const void* producer, int ld, int cols) const;
    BufferPtr producing(const void* producer, const float* out, int rows, int ld, int cols);
    void drop_made_q_over(const void* p, size_t bytes);  // drop made_q_ if [p, p + bytes) overlaps its rows
    // STRATA_WEBGPU_QUANT_FOLD=1: producers quantize the rows they write (made_q_); otherwise a
    // quantize_rows per matmul input (the tests compare both)
    // producers that quantize their rows (STRATA_WEBGPU_QUANT_FOLD): for which block formats
    enum class FoldMode { Off, KQuants, All };
    FoldMode quant_fold_ = FoldMode::KQuants;
    bool folds(WeightFormat f) const;
    // A MoE layer whose experts the device chooses (moe_experts): every expert uploaded, the
    // (buffer, vec4 index) of each one's gate, up and down in `table`; ok = false: the layer's
    // experts do not fit the routed kernel (format, shape, more than kGatherBuffers arenas) and
    // the host groups its rows.
    struct RoutedLayer {
        bool ok = false;
        WeightFormat format = WeightFormat::F16;       // gate and up
        WeightFormat down_format = WeightFormat::F16;  // down (a block format may differ: Q4_K_M)
        uint32_t gu_row_words = 0, down_row_words = 0;
        BufferPtr table;
        std::vector<BufRef> gu_buffers, down_buffers;
    };
    std::unordered_map<const void*, RoutedLayer> routed_;  // by the layer's first expert's gate
    const RoutedLayer& routed_layer(const MoeExpertsArgs& a);
    RoutedLayer streamed_layer(const MoeExpertsArgs& a);  // a window's table over cache slots
    bool routed_fits(const MoeExpertsArgs& a, bool& quant) const;
    static bool routed_place(const GpuMatrix& m, bool quant, size_t slot, std::vector<uint32_t>& table,
                             std::vector<BufRef>& bufs);
    static void routed_formats(RoutedLayer& L, const GpuMatrix& gate, const GpuMatrix& down);
    // device copies of a streaming expert cache's slots (under mutex_, from the IO threads too)
    std::unique_ptr<SlotPool> slots_;
    // the batch being recorded: every submit starts the next (SlotPool: which copies it still reads)
    uint64_t open_batch() const { return submits_ + early_submits_; }
    void routed_swiglu(float* GU, uint64_t n, uint32_t cols = 0, WeightFormat f = WeightFormat::F32,
                       const BufferPtr& xq = nullptr);
    void moe_experts_quant(const MoeExpertsArgs& a, const RoutedLayer& L, const BufRef& x, uint64_t xo, const BufRef& gu,
                           uint64_t go, const BufRef& d, uint64_t d_off, const BufRef& ids, uint64_t io,
                           const BufferPtr& log);
    // ids logged on the device, downloaded at the next wait into `out`
    struct LateRead {
        BufferPtr buf;
        uint32_t n;
        std::shared_ptr<std::vector<int>> out;
    };
    std::vector<LateRead> late_reads_;
    uint64_t routed_layers_run_ = 0, streamed_layers_run_ = 0;
    bool fuse_ = true;  // STRATA_WEBGPU_FUSE=0 turns gathering off (the tests compare both)
    // Folding an element-wise op into the kernel that reads its output, one bit per fold
    // (kFoldNames): STRATA_WEBGPU_FOLD unset kDefaultFolds, 1 all, 0 none, or a comma list of the
    // names that are on (the tests compare; a GPU A/B finds each fold's share). None with FUSE=0.
    unsigned folds_ = kDefaultFolds;
    bool fold(unsigned bit) const { return (folds_ & bit) != 0; }
    // STRATA_WEBGPU_QUANT_GATHER=0: block-format jobs over one x one dispatch each (the tests compare)
    bool quant_gather_ = true;
    double encode_s_ = 0, run_s_ = 0;  // host encoding; submit to completion (GPU time and the wait)
};

}  // namespace strata::webgpu
