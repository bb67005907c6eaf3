// The `webgpu` backend: every op of backend.h on the WGSL kernels. The Backend interface works
// on host arrays, so each call uploads its activations, runs its dispatches in one submit and
// reads the results back. Weight matrices stay on the device between calls, keyed by address
// and checked against a hash of their bytes on every use: expert cache slots are refilled with
// other experts at the same address, so the address alone could serve a stale copy. Correct and
// testable op by op on any adapter, not fast: device-resident windows are the next step.
#pragma once
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend.h"
#include "webgpu/device.h"
#include "webgpu/kernels.h"

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
    void router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx,
                     float* weights) override;
    void gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) override;
    void swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) override;
    void moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H, const float* shared,
                     const float* shared_gate, float* out) override;
    void add(float* x, const float* y, size_t n) override;

private:
    const GpuMatrix& weights(const MatView& W);  // the device copy of W, refreshed when its version changes
    BufferPtr up(const float* p, size_t n, const char* what);
    std::unique_ptr<Device> device_;
    std::unique_ptr<Kernels> kernels_;
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
};

}  // namespace strata::webgpu
