#include "threadpool.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>

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

// Spins until done() or `us` microseconds have passed; the clock is read every 64 pauses.
template <class Done>
bool spin_until(Done done, int us) {
    auto t0 = std::chrono::steady_clock::now();
    for (int spins = 1;; ++spins) {
        if (done()) return true;
        STRATA_PAUSE();
        if (spins % 64 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(us))
            return done();
    }
}

// This process's CPU time (all its threads), seconds; negative where there is no such clock.
double process_cpu_s() {
#if defined(CLOCK_PROCESS_CPUTIME_ID)
    timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
#endif
    return -1;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    if (const char* v = std::getenv("STRATA_POOL_ADAPT")) {
        if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
            throw std::invalid_argument(std::string("STRATA_POOL_ADAPT='") + v +
                                        "': use 0 or 1 (1, the default: one thread while the pool gets about one core)");
        adaptive_ = v[0] == '1';
    }
    if (n_threads_ == 1 || process_cpu_s() < 0) adaptive_ = false;
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
        try {
            (*fn_.load(std::memory_order_acquire))(i);
        } catch (...) {
            // a worker thread must not let it escape (std::terminate: the process aborted), and
            // the caller must not unwind while other threads still run its fn: keep it for later
            std::lock_guard<std::mutex> lk(error_mu_);
            if (!error_) error_ = std::current_exception();
            failed_.store(true, std::memory_order_release);
        }
        // seq_cst pairs with the caller's store to caller_sleeping_ (either it sees this
        // increment before sleeping, or this thread sees it asleep and wakes it)
        if (done_.fetch_add(1) + 1 == int(n_of(w)) && caller_sleeping_.load()) {
            std::lock_guard<std::mutex> lk(done_mu_);
            done_cv_.notify_one();
        }
    }
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        auto woken = [&] { return wake_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(woken, kWorkerSpinUs)) {
            std::unique_lock<std::mutex> lk(mu_);
            sleepers_.fetch_add(1);  // seq_cst: pairs with the caller's wake_ bump
            cv_.wait(lk, [&] { return wake_.load() != seen; });
            sleepers_.fetch_sub(1);
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
    if (adaptive_ && solo(Clock::now())) {
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    gen_ = (gen_ + 1) & ((1ull << 24) - 1);
    fn_.store(&fn, std::memory_order_release);
    done_.store(0, std::memory_order_release);
    word_.store((gen_ << (kIdxBits + kNBits)) | (uint64_t(n) << kIdxBits), std::memory_order_release);
    wake_.fetch_add(1);  // seq_cst: either a worker about to sleep sees it, or we see it asleep
    if (sleepers_.load() > 0) {
        { std::lock_guard<std::mutex> lk(mu_); }
        cv_.notify_all();
    }
    run_tasks(gen_);
    // every task is claimed now; wait only for the ones still running
    auto finished = [&] { return done_.load(std::memory_order_acquire) == n; };
    if (!spin_until(finished, kCallerSpinUs)) {
        std::unique_lock<std::mutex> lk(done_mu_);
        caller_sleeping_.store(true);
        done_cv_.wait(lk, [&] { return done_.load() == n; });
        caller_sleeping_.store(false);
    }
    if (adaptive_) after_pooled(Clock::now());
    if (failed_.load(std::memory_order_acquire)) {  // every task has finished: no one writes error_ now
        std::exception_ptr error;
        {
            std::lock_guard<std::mutex> lk(error_mu_);
            error.swap(error_);
            failed_.store(false, std::memory_order_relaxed);
        }
        std::rethrow_exception(error);
    }
}

bool ThreadPool::solo(Clock::time_point now) {
    if (now < solo_until_) return true;
    // a window starts with a call; an idle pause in it (no calls: nothing to measure) restarts it
    if (!in_window_ || now - last_end_ > std::chrono::milliseconds(kPauseMs)) {
        in_window_ = true;
        window_start_ = now;
        window_cpu_s_ = process_cpu_s();
    }
    return false;
}

void ThreadPool::after_pooled(Clock::time_point end) {
    last_end_ = end;
    const auto wall = end - window_start_;
    if (wall < std::chrono::milliseconds(kWindowMs)) return;
    const double cores = (process_cpu_s() - window_cpu_s_) / std::chrono::duration<double>(wall).count();
    in_window_ = false;
    if (cores * 100 >= kFewCores) {
        short_windows_ = 0;
        solo_for_ = Clock::duration::zero();
        return;
    }
    // the first fallback takes kFirstWindows short windows in a row (a hiccup of the machine can
    // take one or two); a window tried after solo time takes one
    if (solo_for_ == Clock::duration::zero() && ++short_windows_ < kFirstWindows) return;
    short_windows_ = 0;
    solo_for_ = solo_for_ == Clock::duration::zero()
                    ? Clock::duration(std::chrono::milliseconds(kSoloMinMs))
                    : std::min<Clock::duration>(2 * solo_for_, std::chrono::milliseconds(kSoloMaxMs));
    solo_until_ = end + solo_for_;
}

}  // namespace strata
