#include "threadpool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_PAUSE() _mm_pause()
#else
#define STRATA_PAUSE() std::this_thread::yield()
#endif

namespace strata {

namespace {
constexpr uint64_t kIdxBits = 20, kNBits = 20;
constexpr uint64_t kIdxMask = (1ull << kIdxBits) - 1, kNMask = (1ull << kNBits) - 1;
inline uint64_t gen_of(uint64_t w) { return w >> (kIdxBits + kNBits); }
inline uint64_t n_of(uint64_t w) { return (w >> kIdxBits) & kNMask; }
inline uint64_t idx_of(uint64_t w) { return w & kIdxMask; }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
        wake_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(uint64_t gen) {
    for (;;) {
        uint64_t w = word_.load(std::memory_order_acquire);
        if (gen_of(w) != gen || idx_of(w) >= n_of(w)) return;
        if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
        int i = int(idx_of(w));
        (*fn_.load(std::memory_order_acquire))(i);
        done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        auto t0 = std::chrono::steady_clock::now();
        int spins = 0;
        while (wake_.load(std::memory_order_acquire) == seen) {
            STRATA_PAUSE();
            if (++spins % 256 == 0 &&
                std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(300)) {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return wake_.load() != seen; });
                break;
            }
        }
        seen = wake_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        run_tasks(gen_of(word_.load(std::memory_order_acquire)));
    }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1 || uint64_t(n) > kNMask) {
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    std::lock_guard<std::mutex> call(call_mu_);
    gen_ = (gen_ + 1) & ((1ull << 24) - 1);
    fn_.store(&fn, std::memory_order_release);
    done_.store(0, std::memory_order_release);
    word_.store((gen_ << (kIdxBits + kNBits)) | (uint64_t(n) << kIdxBits), std::memory_order_release);
    {
        std::lock_guard<std::mutex> lk(mu_);
        wake_.fetch_add(1, std::memory_order_acq_rel);
    }
    cv_.notify_all();
    run_tasks(gen_);
    // every task is claimed now; wait only for the ones still running
    int spins = 0;
    while (done_.load(std::memory_order_acquire) != n) {
        STRATA_PAUSE();
        if (++spins > 4096) std::this_thread::yield();
    }
}

}  // namespace strata
