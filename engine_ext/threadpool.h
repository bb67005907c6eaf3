// A tiny fork-join pool: the calling thread works too; workers spin briefly, then sleep.
// Work is always split over OUTPUT elements by the callers, never over a reduction axis,
// so the number of threads never changes a result.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Calls fn(i) for i in [0, n) spread over the pool; returns when all calls are done.
    void parallel_for(int n, const std::function<void(int)>& fn);

private:
    void worker_loop(int id);
    void run_tasks();

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> next_{0};
    std::atomic<int> pending_workers_{0};
    std::atomic<bool> stop_{false};
    const std::function<void(int)>* fn_ = nullptr;
    int n_ = 0;
    std::mutex call_mu_;  // one parallel_for at a time
};

}  // namespace strata
