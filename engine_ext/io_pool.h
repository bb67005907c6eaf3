// Worker threads with two priorities: urgent jobs (a layer is waiting) always run before
// read-ahead jobs. Jobs are plain callables; re-prioritising a queued read is done by the
// caller submitting an urgent duplicate that claims the work first (see expert_cache.cpp).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class IoPool {
public:
    enum Priority { Urgent = 0, ReadAhead = 1 };
    explicit IoPool(int threads);
    ~IoPool();
    IoPool(const IoPool&) = delete;
    IoPool& operator=(const IoPool&) = delete;

    void submit(std::function<void()> job, Priority p);
    size_t queued(Priority p) const;
    int threads() const { return int(workers_.size()); }

private:
    void loop();
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_[2];
    bool stop_ = false;
    std::vector<std::thread> workers_;
};

}  // namespace strata
