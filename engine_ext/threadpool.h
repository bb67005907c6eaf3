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
//
// When the pool's threads together get about one core, calls run on the caller alone for a
// while. That is what one busy process does to 2 threads on 2 cores (3 runnable threads): a
// claimed task has started, but its worker can be preempted in it, and the caller then waits,
// its own core idle, until the kernel gives that worker a core back (a scheduler tick).
// Measured next to one busy process, strata's two threads used 0.94-1.02 cores in all and
// decoded no faster than one thread, which then has a core to itself. So the pool reads the
// process's CPU time over windows of at least kWindowMs of calls; after kFirstWindows windows in
// a row with fewer than kFewCores / 100 cores in use (a quiet 2-core decode uses about 1.8), the
// caller runs the calls alone for kSoloMinMs (the workers sleep), then the workers are tried
// again for a window: the solo time doubles after each window short of cores (up to kSoloMaxMs)
// and starts over after one that is not. A pause of more than kPauseMs between calls (an idle
// engine) starts a window over. Which thread runs a task never changes its result, so this
// changes no bits. STRATA_POOL_ADAPT=0 turns it off.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
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
    // Calls fn(i) for i in [0, n) spread over the pool; returns when all calls are done. An
    // exception from a call (on any thread) is rethrown here once every call has finished.
    void parallel_for(int n, const std::function<void(int)>& fn);

    // How long a worker spins for the next call, and the caller for the last tasks, before
    // sleeping (microseconds). Decode issues a call every ~10-100 us, so a short spin keeps the
    // quiet-machine latency while bounding the waste when another process wants the core.
    static constexpr int kWorkerSpinUs = 100;
    static constexpr int kCallerSpinUs = 30;

    // The fallback to the caller alone (see the top of this file).
    static constexpr int kFewCores = 110;  // hundredths of a core
    static constexpr int kFirstWindows = 3;  // short windows in a row before the first fallback
    static constexpr int kWindowMs = 50;
    static constexpr int kPauseMs = 20;
    static constexpr int kSoloMinMs = 100;
    static constexpr int kSoloMaxMs = 1600;

private:
    using Clock = std::chrono::steady_clock;
    // Whether the next call runs on the caller alone; `now` is its start.
    bool solo(Clock::time_point now);
    // The end of a call given to the workers: closes a window, deciding whether to fall back.
    void after_pooled(Clock::time_point end);
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
    std::mutex error_mu_;
    std::exception_ptr error_;  // the first exception of the current call's tasks
    std::atomic<bool> failed_{false};  // error_ is set (read without the lock on every call)
    uint64_t gen_ = 0;
    std::mutex call_mu_;  // one parallel_for at a time
    // the fallback's state, touched only under call_mu_
    bool adaptive_ = true;  // STRATA_POOL_ADAPT unset or 1
    bool in_window_ = false;
    Clock::time_point window_start_{}, last_end_{}, solo_until_{};
    double window_cpu_s_ = 0;
    int short_windows_ = 0;  // windows in a row short of cores, before the first fallback
    Clock::duration solo_for_{0};
};

}  // namespace strata
