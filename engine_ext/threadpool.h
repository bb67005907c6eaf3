// A tiny fork-join pool: the calling thread works too; workers spin briefly, then sleep.
// Work is always split over OUTPUT elements by the callers, never over a reduction axis,
// so the number of threads never changes a result.
//
// Tasks are claimed from one 64-bit word (generation | task count | next index), so a worker
// that wakes late (a busy machine) can never run a task of another call, and the caller only
// waits for tasks that were actually claimed, never for a worker that has not woken up.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
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
    void worker_loop();
    void run_tasks(uint64_t gen);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> word_{0};  // gen (24 bits) | n (20 bits) | next (20 bits)
    std::atomic<uint64_t> wake_{0};  // bumped for every call (and at shutdown)
    std::atomic<int> done_{0};
    std::atomic<bool> stop_{false};
    std::atomic<const std::function<void(int)>*> fn_{nullptr};
    uint64_t gen_ = 0;
    std::mutex call_mu_;  // one parallel_for at a time
};

}  // namespace strata
