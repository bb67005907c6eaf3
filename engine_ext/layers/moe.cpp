#include "layers/moe.h"

#include <algorithm>
#include <string>

#include "routing.h"
#include "window_model.h"

namespace strata {

FfnBlock::FfnBlock(const LayerEnv& env, WeightLoader& w, int l, int moe_index)
    : env_(env), layer_(l), moe_index_(moe_index) {
    const ModelSpec& s = env.spec;
    if (moe_index >= 0) {
        router_ = w.linear(layer_name(l, "mlp.gate"), s.n_experts, s.hidden, false);
        if (s.shared_inter > 0) {
            has_shared_ = true;
            gate_ = w.linear(layer_name(l, "mlp.shared_expert.gate_proj"), s.shared_inter, s.hidden, false);
            up_ = w.linear(layer_name(l, "mlp.shared_expert.up_proj"), s.shared_inter, s.hidden, false);
            down_ = w.linear(layer_name(l, "mlp.shared_expert.down_proj"), s.hidden, s.shared_inter, false);
            shared_gate_ = w.linear(layer_name(l, "mlp.shared_expert_gate"), 1, s.hidden, false);
        }
    } else {
        gate_ = w.linear(layer_name(l, "mlp.gate_proj"), s.inter, s.hidden, false);
        up_ = w.linear(layer_name(l, "mlp.up_proj"), s.inter, s.hidden, false);
        down_ = w.linear(layer_name(l, "mlp.down_proj"), s.hidden, s.inter, false);
    }
}

size_t FfnBlock::dense_weight_bytes() const {
    return gate_.bytes() + up_.bytes() + down_.bytes() + router_.bytes() + shared_gate_.bytes();
}

void FfnBlock::dense(const float* h, int n, float* out) {
    const int H = env_.spec.hidden, I = env_.spec.inter;
    Backend& be = env_.be;
    ScratchScope sc(env_.scratch);
    float* g = sc.alloc<float>(size_t(n) * I);
    float* u = sc.alloc<float>(size_t(n) * I);
    be.matmul({{h, n, H, gate_.w, nullptr, g, I}, {h, n, H, up_.w, nullptr, u, I}});
    be.swiglu_matmul({g, I, 0}, {u, I, 0}, {g, I, 0}, n, I, {g, n, I, down_.w, nullptr, out, H});
}

bool FfnBlock::run_on_device(const float* h, int n, const int* idx, const float* wts, float* out, const float* sg,
                             float* shg, const float* shu, MoeWindow& win) {
    const std::vector<ExpertView>* all = win.store->resident_layer(layer_);
    if (!all || !win.late_ids) return false;
    const ModelSpec& s = env_.spec;
    auto ids = std::make_shared<std::vector<int>>();
    const Backend::MoeExpertsArgs a{h, s.hidden, n, idx, s.top_k, all->data(), int(all->size()), s.hidden,
                                    s.moe_inter, nullptr, nullptr, ids};
    if (!run_routed(a, wts, out, sg, shg, shu)) return false;
    win.late_ids->push_back({moe_index_, ids});
    if (!all->empty()) (*win.expert_bytes)[moe_index_] = int64_t((*all)[0].bytes());
    return true;
}

bool FfnBlock::run_routed(Backend::MoeExpertsArgs a, const float* wts, float* out, const float* sg, float* shg,
                          const float* shu) {
    const ModelSpec& s = env_.spec;
    Backend& be = env_.be;
    const int n = a.n, H = s.hidden, k = s.top_k, I = s.moe_inter, SI = s.shared_inter;
    const int NS = n * k;
    ScratchScope sc(env_.scratch);
    a.GU = sc.alloc<float>(size_t(NS) * 2 * I);
    a.D = sc.alloc<float>(size_t(NS) * H);
    if (!be.moe_experts(a)) return false;
    if (has_shared_) {
        be.swiglu_matmul({shg, SI, 0}, {shu, SI, 0}, {shg, SI, 0}, n, SI, {shg, n, SI, down_.w, nullptr, out, H});
    }
    // D row p is pair p's: the slots are the pairs themselves
    if (int(slots_.size()) < NS) {
        slots_.resize(size_t(NS));
        for (int i = 0; i < NS; ++i) slots_[size_t(i)] = i;
    }
    combine(a.D, slots_.data(), wts, n, out, sg);
    return true;
}

void FfnBlock::combine(const float* D, const int* slot, const float* wts, int n, float* out, const float* sg) {
    const ModelSpec& s = env_.spec;
    const float* shared = has_shared_ ? out : nullptr;
    const float* shared_gate = has_shared_ ? sg : nullptr;
    if (then_) {
        env_.be.moe_combine_add_rmsnorm(D, slot, wts, n, s.top_k, s.hidden, shared, shared_gate, out, *then_);
        then_done_ = true;
    } else {
        env_.be.moe_combine(D, slot, wts, n, s.top_k, s.hidden, shared, shared_gate, out);
    }
}

bool FfnBlock::run(const float* h, int n, float* out, MoeWindow& win, const Backend::AddNorm* then) {
    struct Reset {  // then_ lives for this call only, even on an exception
        FfnBlock& b;
        ~Reset() { b.then_ = nullptr; }
    } reset{*this};
    then_ = then;
    then_done_ = false;
    run_block(h, n, out, win);
    return then_done_;
}

void FfnBlock::run_block(const float* h, int n, float* out, MoeWindow& win) {
    if (!moe()) return dense(h, n, out);
    const ModelSpec& s = env_.spec;
    Backend& be = env_.be;
    ExpertStore& store = *win.store;
    const RoutingOptions& routing = *win.routing;
    const int li = layer_;
    const int H = s.hidden, E = s.n_experts, k = s.top_k, SI = s.shared_inter;
    ScratchScope sc(env_.scratch);
    float* logits = sc.alloc<float>(size_t(n) * E);
    float* sg = sc.alloc<float>(n);
    float* shg = sc.alloc<float>(size_t(n) * SI);
    float* shu = sc.alloc<float>(size_t(n) * SI);
    std::vector<MatJob> jobs = {{h, n, H, router_.w, nullptr, logits, E}};
    if (has_shared_) {  // the shared gate next to the router: a GGUF file keeps both in f32 (one dispatch)
        jobs.push_back({h, n, H, shared_gate_.w, nullptr, sg, 1});
        jobs.push_back({h, n, H, gate_.w, nullptr, shg, SI});
        jobs.push_back({h, n, H, up_.w, nullptr, shu, SI});
    }
    be.matmul(jobs);
    int* idx = sc.alloc<int>(size_t(n) * k);
    float* wts = sc.alloc<float>(size_t(n) * k);
    if (routing.approximate()) {
        // cache-aware routing (opt-in, changes the model): a routing policy over what is
        // resident right now, not a backend op
        be.to_host(logits, sizeof(float) * size_t(n) * E);
        std::vector<uint8_t> ready(static_cast<size_t>(E), 0);
        for (int e = 0; e < E; ++e) ready[size_t(e)] = store.is_ready(li, e) ? 1 : 0;
        const int per = win.has_drafts ? n : 1;  // prefill rows are all roots
        for (int t = 0; t < n; t += per)
            route_window(logits + size_t(t) * E, per, E, k, s.norm_topk, routing, ready.data(), idx + size_t(t) * k,
                         wts + size_t(t) * k);
        be.from_host(wts, sizeof(float) * size_t(n) * k);
        win.tele->approximate = true;
    } else {
        be.router_topk(logits, n, E, k, s.norm_topk, idx, wts);
        // every expert resident: a backend that can chooses them itself, with no readback
        if (run_on_device(h, n, idx, wts, out, sg, shg, shu, win)) return;
        be.to_host(idx, sizeof(int) * size_t(n) * k);  // the host groups rows by expert (one readback per layer)
    }
    std::vector<int> uni = expert_union(idx, n, k);
    std::vector<int> root(idx, idx + k);
    std::sort(root.begin(), root.end());
    std::vector<ExpertView>& views = views_;
    store.acquire_layer(li, uni, root, views);
    // read-ahead for the next MoE layer: its router applied to this hidden state (issued after
    // this layer's experts are pinned, so that it can never evict them)
    if (store.wants_prefetch() && next_) {
        const int pn = routing.root_only_readahead ? 1 : n;
        float* nlog = sc.alloc<float>(size_t(pn) * E);
        be.matmul({{h, pn, H, next_->router_.w, nullptr, nlog, E}});
        int* pi = sc.alloc<int>(size_t(pn) * k);
        float* pw = sc.alloc<float>(size_t(pn) * k);
        be.router_topk(nlog, pn, E, k, s.norm_topk, pi, pw);
        be.to_host(pi, sizeof(int) * size_t(pn) * k);
        store.prefetch(next_->layer_, expert_union(pi, pn, k));
    }
    if (views.size() != uni.size()) {
        store.release_layer(li);
        throw ModelError("expert store returned " + std::to_string(views.size()) + " experts for layer " +
                         std::to_string(li) + ", expected " + std::to_string(uni.size()));
    }
    auto& ru = (*win.union_per_moe)[moe_index_];
    ru.insert(ru.end(), uni.begin(), uni.end());
    if (!views.empty())
        (*win.expert_bytes)[moe_index_] = int64_t(views[0].bytes());
    // streamed experts: the acquired ones chosen on the device from the ids still there (a
    // routing mode that picks experts on the host leaves the device's ids stale: host grouping)
    if (!routing.approximate() && !store.resident_layer(li)) {
        bool done = false;
        try {
            Backend::MoeExpertsArgs a{h, H, n, idx, k, views.data(), int(views.size()), H, s.moe_inter,
                                      nullptr, nullptr, nullptr};
            a.expert_ids = uni.data();
            a.layer_experts = E;
            done = run_routed(a, wts, out, sg, shg, shu);
        } catch (...) {
            store.release_layer(li);
            throw;
        }
        if (done) {
            store.release_layer(li);
            return;
        }
    }
    // group rows by expert: each expert's weights are read once for all its rows
    const int I = s.moe_inter;
    const int U = int(uni.size());
    int* slot_of = sc.alloc<int>(size_t(n) * k);  // (row, rank) -> position in the gathered buffers
    int* start = sc.alloc<int>(U + 1);
    int* count = sc.alloc<int>(U);
    int* fill = sc.alloc<int>(U);
    std::fill(start, start + U + 1, 0);
    std::fill(count, count + U, 0);
    std::fill(fill, fill + U, 0);
    int* pos_in_uni = sc.alloc<int>(size_t(n) * k);
    for (int i = 0; i < n * k; ++i) {
        int u = int(std::lower_bound(uni.begin(), uni.end(), idx[i]) - uni.begin());
        pos_in_uni[i] = u;
        count[u]++;
    }
    for (int u = 0; u < U; ++u) start[u + 1] = start[u] + count[u];
    int* row_of = sc.alloc<int>(size_t(n) * k);
    for (int i = 0; i < n * k; ++i) {  // rows in order within each expert
        int u = pos_in_uni[i];
        int sl = start[u] + fill[u]++;
        slot_of[i] = sl;
        row_of[sl] = i / k;
    }
    const int NS = n * k;
    float* X = sc.alloc<float>(size_t(NS) * H);
    float* GU = sc.alloc<float>(size_t(NS) * 2 * I);
    float* D = sc.alloc<float>(size_t(NS) * H);
    be.gather(h, H, row_of, NS, H, X, H);
    std::vector<MatJob>& j1 = jobs1_;
    std::vector<MatJob>& j2 = jobs2_;
    j1.clear();
    j2.clear();
    for (int u = 0; u < U; ++u) {
        const float* xu = X + size_t(start[u]) * H;
        float* gu = GU + size_t(start[u]) * 2 * I;
        j1.push_back({xu, count[u], H, views[u].gate, nullptr, gu, 2 * I});
        j1.push_back({xu, count[u], H, views[u].up, nullptr, gu + I, 2 * I});
    }
    try {
        be.matmul(j1);
        be.swiglu({GU, 2 * I, 0}, {GU + I, 2 * I, 0}, {GU, 2 * I, 0}, NS, I);
        for (int u = 0; u < U; ++u)
            j2.push_back({GU + size_t(start[u]) * 2 * I, count[u], 2 * I, views[u].down, nullptr,
                          D + size_t(start[u]) * H, H});
        // the shared expert's down projection joins the experts' call: one dispatch less
        if (has_shared_) {
            be.swiglu({shg, SI, 0}, {shu, SI, 0}, {shg, SI, 0}, n, SI);
            j2.push_back({shg, n, SI, down_.w, nullptr, out, H});
        }
        be.matmul(j2);
    } catch (...) {
        store.release_layer(li);
        throw;
    }
    store.release_layer(li);
    combine(D, slot_of, wts, n, out, sg);
}

}  // namespace strata
