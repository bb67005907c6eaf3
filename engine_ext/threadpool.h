// A tiny fork-join pool: the calling thread works too. Workers spin briefly after a call (the
// next one usually follows within microseconds in decode), then sleep; the caller, once its own
// tasks are done, spins briefly for the others and then sleeps too. Sleeping matters on a busy
// machine: a spinning thread takes the core that a preempted worker (holding a claimed task)
// needs, so one competing process could cut decode to a quarter.
//
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

    // How long a worker spins for the next call, and the caller for the last tasks, before
    // sleeping (microseconds). Decode issues a call every ~10-100 us, so a short spin keeps the
    // quiet-machine latency while bounding the waste when another process wants the core.
    static constexpr int kWorkerSpinUs = 100;
    static constexpr int kCallerSpinUs = 30;

private:
    void worker_loop();
    void run_tasks(uint64_t gen);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;                    // guards sleeping workers
    std::condition_variable cv_;
    std::atomic<int> sleepers_{0};     // workers blocked (or about to block) on cv_
    std::mutex done_mu_;               // guards the sleeping caller
    std::condition_variable done_cv_;
    std::atomic<bool> caller_sleeping_{false};
    std::atomic<uint64_t> word_{0};    // gen (24 bits) | n (20 bits) | next (20 bits)
    std::atomic<uint64_t> wake_{0};    // bumped for every call (and at shutdown)
    std::atomic<int> done_{0};
    std::atomic<int> n_tasks_{0};
    std::atomic<bool> stop_{false};
    std::atomic<const std::function<void(int)>*> fn_{nullptr};
    uint64_t gen_ = 0;
    std::mutex call_mu_;  // one parallel_for at a time
};

}  // namespace strata
