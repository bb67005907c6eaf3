// Compute backends. The engine's forward pass is written against this interface; the CPU
// backend (kernels_cpu.*, threadpool.*) is the reference, a GPU backend slots in beside it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels_cpu.h"
#include "threadpool.h"

namespace strata {

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    virtual int threads() const = 0;
    // Every job: Y[t][r] = dot(X[t], W[r]) (+ bias), one fixed reduction order per output
    // element whatever T, the batch of jobs or the thread count.
    virtual void matmul(const std::vector<MatJob>& jobs) = 0;
    // Independent work items (heads, (row, head) pairs): never split a reduction.
    virtual void parallel_for(int n, const std::function<void(int)>& fn) = 0;
};

class CpuBackend : public Backend {
public:
    explicit CpuBackend(int threads) : pool_(threads) {}
    std::string name() const override { return "cpu"; }
    int threads() const override { return pool_.size(); }
    void matmul(const std::vector<MatJob>& jobs) override { matmul_jobs(pool_, jobs); }
    void parallel_for(int n, const std::function<void(int)>& fn) override { pool_.parallel_for(n, fn); }

private:
    ThreadPool pool_;
};

std::unique_ptr<Backend> make_backend(const std::string& name, int threads);

}  // namespace strata
