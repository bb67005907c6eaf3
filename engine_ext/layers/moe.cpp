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

void FfnBlock::dense(const float* h, int n, float* out) {
    const int H = env_.spec.hidden, I = env_.spec.inter;
    Backend& be = env_.be;
    std::vector<float> g(size_t(n) * I), u(size_t(n) * I);
    be.matmul({{h, n, H, gate_.w, nullptr, g.data(), I}, {h, n, H, up_.w, nullptr, u.data(), I}});
    be.swiglu({g.data(), I, 0}, {u.data(), I, 0}, {g.data(), I, 0}, n, I);
    be.matmul({{g.data(), n, I, down_.w, nullptr, out, H}});
}

void FfnBlock::run(const float* h, int n, float* out, MoeWindow& win) {
    if (!moe()) return dense(h, n, out);
    const ModelSpec& s = env_.spec;
    Backend& be = env_.be;
    ExpertStore& store = *win.store;
    const RoutingOptions& routing = *win.routing;
    const int li = layer_;
    const int H = s.hidden, E = s.n_experts, k = s.top_k, SI = s.shared_inter;
    std::vector<float> logits(size_t(n) * E), sg(n), shg(size_t(n) * SI), shu(size_t(n) * SI);
    std::vector<MatJob> jobs = {{h, n, H, router_.w, nullptr, logits.data(), E}};
    if (has_shared_) {
        jobs.push_back({h, n, H, gate_.w, nullptr, shg.data(), SI});
        jobs.push_back({h, n, H, up_.w, nullptr, shu.data(), SI});
        jobs.push_back({h, n, H, shared_gate_.w, nullptr, sg.data(), 1});
    }
    be.matmul(jobs);
    std::vector<int> idx(size_t(n) * k);
    std::vector<float> wts(size_t(n) * k);
    if (routing.approximate()) {
        // cache-aware routing (opt-in, changes the model): a routing policy over what is
        // resident right now, not a backend op
        std::vector<uint8_t> ready(static_cast<size_t>(E), 0);
        for (int e = 0; e < E; ++e) ready[size_t(e)] = store.is_ready(li, e) ? 1 : 0;
        const int per = win.has_drafts ? n : 1;  // prefill rows are all roots
        for (int t = 0; t < n; t += per)
            route_window(logits.data() + size_t(t) * E, per, E, k, s.norm_topk, routing, ready.data(),
                         idx.data() + size_t(t) * k, wts.data() + size_t(t) * k);
        win.tele->approximate = true;
    } else {
        be.router_topk(logits.data(), n, E, k, s.norm_topk, idx.data(), wts.data());
    }
    std::vector<int> uni = expert_union(idx.data(), n, k);
    std::vector<int> root(idx.begin(), idx.begin() + k);
    std::sort(root.begin(), root.end());
    std::vector<ExpertView> views;
    store.acquire_layer(li, uni, root, views);
    // read-ahead for the next MoE layer: its router applied to this hidden state (issued after
    // this layer's experts are pinned, so that it can never evict them)
    if (store.wants_prefetch() && next_) {
        const int pn = routing.root_only_readahead ? 1 : n;
        std::vector<float> nlog(size_t(pn) * E);
        be.matmul({{h, pn, H, next_->router_.w, nullptr, nlog.data(), E}});
        std::vector<int> pi(size_t(pn) * k);
        std::vector<float> pw(size_t(pn) * k);
        be.router_topk(nlog.data(), pn, E, k, s.norm_topk, pi.data(), pw.data());
        store.prefetch(next_->layer_, expert_union(pi.data(), pn, k));
    }
    if (views.size() != uni.size()) {
        store.release_layer(li);
        throw ModelError("expert store returned " + std::to_string(views.size()) + " experts for layer " +
                         std::to_string(li) + ", expected " + std::to_string(uni.size()));
    }
    auto& ru = (*win.union_per_moe)[moe_index_];
    ru.insert(ru.end(), uni.begin(), uni.end());
    // group rows by expert: each expert's weights are read once for all its rows
    const int I = s.moe_inter;
    const int U = int(uni.size());
    std::vector<int> slot_of(size_t(n) * k);  // (row, rank) -> position in the gathered buffers
    std::vector<int> start(U + 1, 0), count(U, 0);
    std::vector<int> pos_in_uni(size_t(n) * k);
    for (int i = 0; i < n * k; ++i) {
        int u = int(std::lower_bound(uni.begin(), uni.end(), idx[i]) - uni.begin());
        pos_in_uni[i] = u;
        count[u]++;
    }
    for (int u = 0; u < U; ++u) start[u + 1] = start[u] + count[u];
    std::vector<int> fill(U, 0);
    std::vector<int> row_of(size_t(n) * k);
    for (int i = 0; i < n * k; ++i) {  // rows in order within each expert
        int u = pos_in_uni[i];
        int sl = start[u] + fill[u]++;
        slot_of[i] = sl;
        row_of[sl] = i / k;
    }
    const int NS = n * k;
    std::vector<float> X(size_t(NS) * H), GU(size_t(NS) * 2 * I), D(size_t(NS) * H);
    be.gather(h, H, row_of.data(), NS, H, X.data(), H);
    std::vector<MatJob> j1, j2;
    for (int u = 0; u < U; ++u) {
        const float* xu = X.data() + size_t(start[u]) * H;
        float* gu = GU.data() + size_t(start[u]) * 2 * I;
        j1.push_back({xu, count[u], H, views[u].gate, nullptr, gu, 2 * I});
        j1.push_back({xu, count[u], H, views[u].up, nullptr, gu + I, 2 * I});
    }
    try {
        be.matmul(j1);
        be.swiglu({GU.data(), 2 * I, 0}, {GU.data() + I, 2 * I, 0}, {GU.data(), 2 * I, 0}, NS, I);
        for (int u = 0; u < U; ++u)
            j2.push_back({GU.data() + size_t(start[u]) * 2 * I, count[u], 2 * I, views[u].down, nullptr,
                          D.data() + size_t(start[u]) * H, H});
        be.matmul(j2);
    } catch (...) {
        store.release_layer(li);
        throw;
    }
    store.release_layer(li);
    if (has_shared_) {
        be.swiglu({shg.data(), SI, 0}, {shu.data(), SI, 0}, {shg.data(), SI, 0}, n, SI);
        be.matmul({{shg.data(), n, SI, down_.w, nullptr, out, H}});
    }
    be.moe_combine(D.data(), slot_of.data(), wts.data(), n, k, H, has_shared_ ? out : nullptr,
                   has_shared_ ? sg.data() : nullptr, out);
}

}  // namespace strata
