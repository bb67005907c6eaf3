#include "threadpool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_PAUSE() _mm_pause()
#else
#define STRATA_PAUSE() std::this_thread::yield()
#endif

namespace strata {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks() {
    for (;;) {
        int i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= n_) break;
        (*fn_)(i);
    }
}

void ThreadPool::worker_loop(int /*id*/) {
    uint64_t seen = 0;
    for (;;) {
        // spin a little (windows come back to back), then sleep
        auto t0 = std::chrono::steady_clock::now();
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen) {
            STRATA_PAUSE();
            if (++spins % 1024 == 0 &&
                std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(200)) {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return generation_.load() != seen; });
                break;
            }
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        run_tasks();
        pending_workers_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    std::lock_guard<std::mutex> call(call_mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    pending_workers_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(mu_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    run_tasks();
    while (pending_workers_.load(std::memory_order_acquire) != 0) STRATA_PAUSE();
    fn_ = nullptr;
}

}  // namespace strata
