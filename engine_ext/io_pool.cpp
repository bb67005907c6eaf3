#include "io_pool.h"

#include <algorithm>

namespace strata {

IoPool::IoPool(int threads) {
    threads = std::max(1, threads);
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
}

IoPool::~IoPool() {
    {
        std::lock_guard<std::mutex> lk(m_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
}

void IoPool::submit(std::function<void()> job, Priority p) {
    {
        std::lock_guard<std::mutex> lk(m_);
        q_[p].push_back(std::move(job));
    }
    cv_.notify_one();
}

size_t IoPool::queued(Priority p) const {
    std::lock_guard<std::mutex> lk(m_);
    return q_[p].size();
}

void IoPool::loop() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lk(m_);
            cv_.wait(lk, [&] { return stop_ || !q_[0].empty() || !q_[1].empty(); });
            // on shutdown, drain what is queued so that nobody waits on a dropped read
            if (stop_ && q_[0].empty() && q_[1].empty()) return;
            auto& q = !q_[0].empty() ? q_[0] : q_[1];
            job = std::move(q.front());
            q.pop_front();
        }
        job();
    }
}

}  // namespace strata
