// The reference backend: the kernels of cpu/ on a thread pool.
#pragma once
#include "backend.h"
#include "threadpool.h"

namespace strata {

class CpuBackend : public Backend {
public:
    explicit CpuBackend(int threads) : pool_(threads) {}
    std::string name() const override { return "cpu"; }
    int threads() const override { return pool_.size(); }
    bool supports(Op op, WFormat f) const override;
    void set_prefill(bool on) override { prefill_ = on; }
    bool prefill() const override { return prefill_; }

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
    void copy(RowsC src, RowsF dst, int rows, int heads, int dim) override;

private:
    ThreadPool pool_;
    bool prefill_ = false;
};

}  // namespace strata
