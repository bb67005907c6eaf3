#include "expert_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>
#include <unordered_set>

#include <sys/mman.h>

#include "window_model.h"

namespace strata {

namespace {

uint8_t* alloc_slot(int64_t bytes) {
    void* p = std::aligned_alloc(4096, size_t(bytes));  // O_DIRECT needs page-aligned buffers
    if (!p) throw std::bad_alloc();
    return static_cast<uint8_t*>(p);
}

}  // namespace

StreamingExpertStore::StreamingExpertStore(PackGeometry geo, StreamOptions opt)
    : pack_(std::move(geo), opt.io_mode), opt_(opt), readahead_(opt.readahead) {
    const auto& g = pack_.geo();
    E_ = g.num_experts;
    const int64_t total = int64_t(g.layers.size()) * E_;
    n_slots_ = int(std::min<int64_t>(total, std::max<int64_t>(1, opt.cache_bytes / g.stride)));
    // One lazily committed mapping for all budget slots, advised for transparent huge pages:
    // first-touch faults of fresh slot memory otherwise cost as much as the disk read itself.
    arena_bytes_ = size_t(n_slots_) * size_t(g.stride);
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
    flags |= MAP_NORESERVE;
#endif
    void* a = ::mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (a == MAP_FAILED) throw std::bad_alloc();
    arena_ = static_cast<uint8_t*>(a);
#ifdef MADV_HUGEPAGE
    ::madvise(arena_, arena_bytes_, MADV_HUGEPAGE);
#endif
    if (opt.prefault)
        for (size_t off = 0; off < arena_bytes_; off += 4096) arena_[off] = 0;
    slots_.reserve(size_t(n_slots_));
    for (int i = 0; i < n_slots_; ++i) {
        slots_.push_back(std::make_unique<Slot>());
        slots_.back()->buf = arena_ + size_t(i) * size_t(g.stride);
    }
    where_.assign(size_t(total), -1);
    layer_tick_.assign(g.layers.size(), 0);
    freq_.assign(size_t(total), 0.f);
    freq_tick_.assign(size_t(total), 0);
    pool_ = std::make_unique<IoPool>(opt.io_threads);
}

StreamingExpertStore::~StreamingExpertStore() {
    pool_.reset();  // finish or drop every read before the buffers go away
    for (size_t i = size_t(n_slots_); i < slots_.size(); ++i) std::free(slots_[i]->buf);
    ::munmap(arena_, arena_bytes_);
}

int StreamingExpertStore::ord_or_throw(int layer) const {
    const int ord = pack_.ordinal(layer);
    if (ord < 0) throw ModelError("expert pack has no experts for layer " + std::to_string(layer));
    return ord;
}

std::string StreamingExpertStore::describe(int key) const {
    const auto& g = pack_.geo();
    return g.path + ": layer " + std::to_string(g.layers[size_t(key / E_)]) + " expert " +
           std::to_string(key % E_);
}

double StreamingExpertStore::lfu_score_locked(int key) const {
    const uint64_t lt = layer_tick_[size_t(key / E_)];
    const double age = double(lt - freq_tick_[size_t(key)]);
    return double(freq_[size_t(key)]) * std::exp2(-age / opt_.lfu_half_life);
}

void StreamingExpertStore::touch_locked(int key) {
    if (opt_.eviction != Eviction::LFU) return;
    freq_[size_t(key)] = float(lfu_score_locked(key) + 1.0);
    freq_tick_[size_t(key)] = layer_tick_[size_t(key / E_)];
}

int StreamingExpertStore::find_victim_locked() {
    int best = -1;
    double best_score = 0;
    uint64_t best_use = 0;
    for (int i = 0; i < n_slots_; ++i) {
        const Slot& s = *slots_[size_t(i)];
        if (s.state == State::Free) return i;
        if (s.pins > 0 || s.state == State::Loading) continue;
        const double score = opt_.eviction == Eviction::LFU ? lfu_score_locked(s.key) : 0.0;
        if (best < 0 || score < best_score || (score == best_score && s.last_use < best_use)) {
            best = i;
            best_score = score;
            best_use = s.last_use;
        }
    }
    return best;
}

void StreamingExpertStore::evict_locked(Slot& s) {
    if (s.key >= 0) {
        if (s.prefetched && !s.used && s.state == State::Ready) ++c_.prefetch_wasted;
        where_[size_t(s.key)] = -1;
    }
    s.key = -1;
    s.state = State::Free;
    s.error.clear();
}

int StreamingExpertStore::assign_locked(int key, bool prefetch) {
    int i = find_victim_locked();
    if (i < 0) {
        if (prefetch) return -1;
        // Every budget slot is pinned or in flight: this window's union is larger than the
        // cache. Borrow a temporary slot for this layer instead of failing or deadlocking.
        if (!free_overflow_.empty()) {
            i = free_overflow_.back();
            free_overflow_.pop_back();
        } else {
            i = int(slots_.size());
            slots_.push_back(std::make_unique<Slot>());
        }
        slots_[size_t(i)]->overflow = true;
        overflow_high_ = std::max(overflow_high_, ++overflow_live_);
    }
    Slot& s = *slots_[size_t(i)];
    evict_locked(s);
    if (!s.buf) s.buf = alloc_slot(pack_.geo().stride);
    s.key = key;
    s.state = State::Loading;
    s.claimed = false;
    s.prefetched = prefetch;
    s.used = false;
    s.gen++;
    s.version = new_content_version();
    where_[size_t(key)] = i;
    return i;
}

void StreamingExpertStore::submit_load_locked(int slot, IoPool::Priority p) {
    const uint64_t gen = slots_[size_t(slot)]->gen;
    pool_->submit([this, slot, gen] { load(slot, gen); }, p);
}

void StreamingExpertStore::load(int slot, uint64_t gen) {
    uint8_t* buf;
    int key;
    bool fail_injected = false;
    ExpertView landed;  // for the fill hook: a Loading slot is never reassigned, so these stay its views
    {
        std::lock_guard<std::mutex> lk(m_);
        Slot& s = *slots_[size_t(slot)];
        if (s.gen != gen || s.state != State::Loading || s.claimed) return;  // stale or duplicate
        s.claimed = true;
        buf = s.buf;
        key = s.key;
        landed = view_of(key / E_, s);
        auto it = injected_.find(key);
        if (it != injected_.end() && it->second > 0) {
            fail_injected = true;
            if (--it->second == 0) injected_.erase(it);
        }
    }
    std::string err = fail_injected ? std::string("read error: Input/output error (injected by test hook)")
                                    : pack_.read_blob(key / E_, key % E_, buf);
    // The backend's device copy (if it keeps one) is made before the slot is Ready: a layer
    // waiting for this read finds it made, and its upload is off the engine's thread.
    if (err.empty()) {
        std::lock_guard<std::mutex> hk(hook_m_);
        if (hooks_.filled) hooks_.filled(landed);
    }
    {
        std::lock_guard<std::mutex> lk(m_);
        Slot& s = *slots_[size_t(slot)];
        if (s.gen == gen) {
            s.state = err.empty() ? State::Ready : State::Failed;
            s.error = std::move(err);
            if (s.state == State::Ready) {
                const int64_t got = pack_.geo().layer_read_bytes(key / E_);
                c_.bytes_read += got;
                if (s.prefetched) c_.prefetched_bytes += got;
            }
        }
    }
    ready_cv_.notify_all();
}

ExpertView StreamingExpertStore::view_of(int ord, const Slot& s) const {
    const auto& g = pack_.geo();
    const int64_t gate_bytes = g.mat_bytes(ord, 0), up_bytes = g.mat_bytes(ord, 1);
    ExpertView v;
    v.gate = make_mat(s.buf, g.mat_format(ord, 0), g.inter, g.hidden);
    v.up = make_mat(s.buf + gate_bytes, g.mat_format(ord, 1), g.inter, g.hidden);
    v.down = make_mat(s.buf + gate_bytes + up_bytes, g.mat_format(ord, 2), g.hidden, g.inter);
    v.gate.version = v.up.version = v.down.version = s.version;
    return v;
}

void StreamingExpertStore::set_slot_hooks(const void* owner, ExpertSlotHooks hooks) {
    std::lock_guard<std::mutex> hk(hook_m_);
    hook_owner_ = owner;
    hooks_ = std::move(hooks);
    if (hooks_.planned) hooks_.planned(n_slots_, uint64_t(pack_.geo().stride));
}

void StreamingExpertStore::clear_slot_hooks(const void* owner) {
    std::lock_guard<std::mutex> hk(hook_m_);
    if (hook_owner_ != owner) return;
    hook_owner_ = nullptr;
    hooks_ = {};
}

void StreamingExpertStore::acquire_layer(int layer, const std::vector<int>& experts,
                                         const std::vector<int>& root_experts,
                                         std::vector<ExpertView>& out) {
    const int ord = ord_or_throw(layer);
    for (int e : experts)
        if (e < 0 || e >= E_)
            throw ModelError("layer " + std::to_string(layer) + ": expert " + std::to_string(e) +
                             " out of range (pack has " + std::to_string(E_) + ")");
    std::unordered_set<int> root(root_experts.begin(), root_experts.end());
    std::vector<int> mine(experts.size(), -1);
    std::unique_lock<std::mutex> lk(m_);
    ++tick_;
    ++layer_tick_[size_t(ord)];
    auto pin = [&](size_t k, int i, bool cold) {
        Slot& s = *slots_[size_t(i)];
        s.pins++;
        s.used = true;
        s.last_use = tick_;
        touch_locked(ord * E_ + experts[k]);
        if (cold) {
            ++c_.cold_misses;
            c_.cold_keys.push_back(ord * E_ + experts[k]);
            if (!root.count(experts[k])) ++c_.extra_cold;
        } else {
            ++c_.hits;
        }
        mine[k] = i;
    };
    // Pass 1 pins everything already resident or in flight, so that pass 2's evictions for the
    // missing experts can never take one that this same layer needs.
    for (size_t k = 0; k < experts.size(); ++k) {
        const int key = ord * E_ + experts[k];
        const int i = where_[size_t(key)];
        if (i < 0) continue;
        Slot& s = *slots_[size_t(i)];
        if (s.state == State::Failed) {
            if (s.pins == 0) evict_locked(s);  // retry a read that failed earlier
            continue;
        }
        if (s.prefetched && !s.used) ++c_.prefetch_used;
        if (s.state == State::Loading && !s.claimed) {
            submit_load_locked(i, IoPool::Urgent);  // jump the read-ahead queue
            ++c_.urgent_loads;
        }
        pin(k, i, s.state != State::Ready);
    }
    for (size_t k = 0; k < experts.size(); ++k) {
        if (mine[k] >= 0) continue;
        const int key = ord * E_ + experts[k];
        int i = where_[size_t(key)];
        if (i < 0) {  // (a duplicate id in `experts` may have been assigned just above)
            i = assign_locked(key, false);
            submit_load_locked(i, IoPool::Urgent);
            ++c_.urgent_loads;
        }
        pin(k, i, true);
    }
    auto pending = [&] {
        for (int i : mine)
            if (slots_[size_t(i)]->state == State::Loading) return true;
        return false;
    };
    if (pending()) {
        const auto t0 = std::chrono::steady_clock::now();
        ready_cv_.wait(lk, [&] { return !pending(); });
        c_.late_wait_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    std::string err;
    for (int i : mine) {
        const Slot& s = *slots_[size_t(i)];
        if (s.state == State::Failed && err.empty()) err = describe(s.key) + ": " + s.error;
    }
    if (!err.empty()) {
        // Undo this call's pins; failed slots are dropped so that a later window retries them.
        std::vector<const void*> freed;
        for (int i : mine) {
            Slot& s = *slots_[size_t(i)];
            if (--s.pins == 0 && s.overflow) {
                free_overflow_locked(i, freed);
            } else if (s.pins == 0 && s.state == State::Failed) {
                evict_locked(s);
            }
        }
        lk.unlock();
        tell_freed(freed);
        throw ModelError(err);
    }
    auto& held = held_[layer];
    held.insert(held.end(), mine.begin(), mine.end());
    lk.unlock();

    out.resize(experts.size());
    for (size_t k = 0; k < mine.size(); ++k) out[k] = view_of(ord, *slots_[size_t(mine[k])]);
}

void StreamingExpertStore::free_overflow_locked(int i, std::vector<const void*>& freed) {
    Slot& s = *slots_[size_t(i)];
    evict_locked(s);
    s.overflow = false;
    freed.push_back(s.buf);
    std::free(s.buf);
    s.buf = nullptr;
    free_overflow_.push_back(i);
    --overflow_live_;
}

void StreamingExpertStore::tell_freed(const std::vector<const void*>& freed) {
    if (freed.empty()) return;
    std::lock_guard<std::mutex> hk(hook_m_);
    if (hooks_.freed)
        for (const void* p : freed) hooks_.freed(p);
}

void StreamingExpertStore::release_layer(int layer) {
    std::vector<const void*> freed;
    {
        std::lock_guard<std::mutex> lk(m_);
        auto it = held_.find(layer);
        if (it == held_.end()) return;
        for (int i : it->second) {
            Slot& s = *slots_[size_t(i)];
            if (--s.pins == 0 && s.overflow) free_overflow_locked(i, freed);
        }
        held_.erase(it);
    }
    tell_freed(freed);
}

void StreamingExpertStore::prefetch(int layer, const std::vector<int>& experts) {
    const int ord = pack_.ordinal(layer);
    if (ord < 0 || !readahead_) return;
    std::lock_guard<std::mutex> lk(m_);
    // A deep read-ahead queue means the disk is behind: newer hints would only evict more.
    if (pool_->queued(IoPool::ReadAhead) > size_t(std::max(4, n_slots_ / 4))) return;
    for (int e : experts) {
        if (e < 0 || e >= E_) continue;
        const int key = ord * E_ + e;
        if (where_[size_t(key)] >= 0) continue;
        const int i = assign_locked(key, true);
        if (i < 0) break;
        slots_[size_t(i)]->last_use = tick_;
        submit_load_locked(i, IoPool::ReadAhead);
        ++c_.prefetch_issued;
    }
}

bool StreamingExpertStore::is_ready(int layer, int expert) const {
    const int ord = pack_.ordinal(layer);
    if (ord < 0 || expert < 0 || expert >= E_) return false;
    std::lock_guard<std::mutex> lk(m_);
    const int i = where_[size_t(ord * E_ + expert)];
    return i >= 0 && slots_[size_t(i)]->state == State::Ready;
}

int StreamingExpertStore::slots_used() const {
    std::lock_guard<std::mutex> lk(m_);
    int n = 0;
    for (int i = 0; i < n_slots_; ++i) n += slots_[size_t(i)]->key >= 0;
    return n;
}

int StreamingExpertStore::overflow_high_water() const {
    std::lock_guard<std::mutex> lk(m_);
    return overflow_high_;
}

std::vector<int> StreamingExpertStore::resident(int layer) const {
    const int ord = pack_.ordinal(layer);
    std::vector<int> r;
    if (ord < 0) return r;
    std::lock_guard<std::mutex> lk(m_);
    for (int e = 0; e < E_; ++e) {
        const int i = where_[size_t(ord * E_ + e)];
        if (i >= 0 && slots_[size_t(i)]->state == State::Ready) r.push_back(e);
    }
    return r;
}

void StreamingExpertStore::drain_telemetry(WindowTelemetry& t) {
    std::lock_guard<std::mutex> lk(m_);
    t.hits += c_.hits;
    t.cold_misses += c_.cold_misses;
    t.urgent_loads += c_.urgent_loads;
    t.prefetch_issued += c_.prefetch_issued;
    t.prefetch_used += c_.prefetch_used;
    t.prefetch_wasted += c_.prefetch_wasted;
    t.late_wait_us += c_.late_wait_us;
    t.bytes_read += c_.bytes_read;
    t.prefetched_bytes += c_.prefetched_bytes;
    t.extra_cold += c_.extra_cold;
    int used = 0;
    for (int i = 0; i < n_slots_; ++i) used += slots_[size_t(i)]->key >= 0;
    t.cache_slots_used = used;
    t.cache_slots_total = n_slots_;
    // which experts missed, per pack layer (= MoE layer order), like expert_ids
    std::sort(c_.cold_keys.begin(), c_.cold_keys.end());
    c_.cold_keys.erase(std::unique(c_.cold_keys.begin(), c_.cold_keys.end()), c_.cold_keys.end());
    const int n_layers = int(pack_.geo().layers.size());
    t.cold_ids.clear();
    t.cold_offsets.assign(1, 0);
    size_t k = 0;
    for (int ord = 0; ord < n_layers; ++ord) {
        for (; k < c_.cold_keys.size() && c_.cold_keys[k] / E_ == ord; ++k) t.cold_ids.push_back(c_.cold_keys[k] % E_);
        t.cold_offsets.push_back(int(t.cold_ids.size()));
    }
    c_ = Counters{};
}

void StreamingExpertStore::inject_read_error(int layer, int expert, int times) {
    const int ord = ord_or_throw(layer);
    if (expert < 0 || expert >= E_) throw ModelError("inject_read_error: expert out of range");
    std::lock_guard<std::mutex> lk(m_);
    if (times > 0) injected_[ord * E_ + expert] = times;
    else injected_.erase(ord * E_ + expert);
}

int64_t StreamingExpertStore::stress(int threads, int iterations, int max_union, uint64_t seed) {
    const auto& g = pack_.geo();
    if (threads < 1 || size_t(threads) > g.layers.size())
        throw ModelError("stress: need 1..number-of-layers threads (each thread owns its layers)");
    std::atomic<int64_t> bad{0};
    std::vector<std::thread> ts;
    std::mutex err_m;
    std::string first_error;
    for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
            std::mt19937_64 rng(seed * 1000003u + uint64_t(t));
            // Each thread owns distinct model layers so that held_ lists never mix threads.
            std::vector<int> mine;
            for (size_t l = size_t(t); l < g.layers.size(); l += size_t(threads)) mine.push_back(g.layers[l]);
            std::vector<ExpertView> views;
            for (int it = 0; it < iterations; ++it) {
                const int layer = mine[rng() % mine.size()];
                const int ord = pack_.ordinal(layer);
                std::vector<int> ex;
                const int n = 1 + int(rng() % uint64_t(std::max(1, std::min(max_union, E_))));
                while (int(ex.size()) < n) {
                    const int e = int(rng() % uint64_t(E_));
                    if (std::find(ex.begin(), ex.end(), e) == ex.end()) ex.push_back(e);
                }
                try {
                    acquire_layer(layer, ex, {ex[0]}, views);
                } catch (const std::exception& e) {
                    std::lock_guard<std::mutex> lk(err_m);
                    if (first_error.empty()) first_error = e.what();
                    bad++;
                    continue;
                }
                std::this_thread::yield();  // let other threads evict around our pins
                for (size_t k = 0; k < ex.size(); ++k) {
                    const uint32_t want = g.crcs[size_t(ord) * E_ + ex[k]];
                    if (crc32(views[k].gate.data, size_t(g.layer_blob_bytes(ord))) != want) bad++;
                }
                release_layer(layer);
            }
        });
    }
    for (auto& t : ts) t.join();
    if (!first_error.empty()) throw ModelError("stress: " + first_error);
    return bad.load();
}

}  // namespace strata
