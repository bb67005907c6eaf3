#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/math.h"

namespace strata::cpu {

void gdn_inputs(const GdnInputsArgs& a) {
    const int nk = a.n_k, nv = a.n_v, dk = a.d_k;
    const int key_dim = nk * dk, value_dim = nv * a.d_v, conv_dim = 2 * key_dim + value_dim;
    const float qscale = 1.0f / std::sqrt(float(dk));
    for (int t = 0; t < a.n; ++t) {
        const float* c = a.conv + size_t(t) * conv_dim;
        for (int g = 0; g < nk; ++g) {
            const float* qi = c + size_t(g) * dk;
            const float* ki = c + key_dim + size_t(g) * dk;
            float sq = 0.f, sk = 0.f;
            for (int i = 0; i < dk; ++i) {
                sq += qi[i] * qi[i];
                sk += ki[i] * ki[i];
            }
            float iq = 1.0f / std::sqrt(sq + 1e-6f), ik = 1.0f / std::sqrt(sk + 1e-6f);
            float* qo = a.q + size_t(t) * key_dim + size_t(g) * dk;
            float* ko = a.k + size_t(t) * key_dim + size_t(g) * dk;
            for (int i = 0; i < dk; ++i) {
                qo[i] = (qi[i] * iq) * qscale;
                ko[i] = ki[i] * ik;
            }
        }
        std::memcpy(a.v + size_t(t) * value_dim, c + 2 * key_dim, sizeof(float) * value_dim);
        const float* b = a.b + size_t(t) * a.ld_ba;
        const float* av = a.a + size_t(t) * a.ld_ba;
        for (int hh = 0; hh < nv; ++hh) {
            float g = a.A[hh] * softplus(av[hh] + a.dt_bias[hh]);
            a.decay[size_t(t) * nv + hh] = std::exp(g);
            a.beta[size_t(t) * nv + hh] = sigmoidf_(b[hh]);
        }
    }
}

namespace {

// One row of one value head: S = decay*Sin; delta = (v - S^T k) * beta; S += k delta^T;
// out = S^T q. Sin may equal S (in place): each element is read before it is written.
void step_head(const float* Sin, float* S, const float* q, const float* k, const float* v, float decay,
               float beta, int dk, int dv, float* out) {
    float mem[512], delta[512];
    for (int j = 0; j < dv; ++j) mem[j] = 0.f;
    for (int i = 0; i < dk; ++i) {
        const float* src = Sin + size_t(i) * dv;
        float* row = S + size_t(i) * dv;
        float ki = k[i];
        for (int j = 0; j < dv; ++j) {
            float sv = src[j] * decay;
            row[j] = sv;
            mem[j] = STRATA_FMA(sv, ki, mem[j]);
        }
    }
    for (int j = 0; j < dv; ++j) {
        delta[j] = (v[j] - mem[j]) * beta;
        out[j] = 0.f;
    }
    for (int i = 0; i < dk; ++i) {
        float* row = S + size_t(i) * dv;
        float ki = k[i], qi = q[i];
        for (int j = 0; j < dv; ++j) {
            row[j] = STRATA_FMA(ki, delta[j], row[j]);
            out[j] = STRATA_FMA(row[j], qi, out[j]);
        }
    }
}

}  // namespace

// Value heads in parallel, rows in order within a head.
void gdn_step(ThreadPool& pool, const GdnStepArgs& a) {
    const int nv = a.n_v, dk = a.d_k, dv = a.d_v;
    const int r = nv / a.n_k;
    const size_t key_dim = size_t(a.n_k) * dk, value_dim = size_t(nv) * dv;
    auto head = [&](int hh) {
        int g = hh / r;
        float* Sh = a.S + size_t(hh) * dk * dv;
        const float* S0 = a.S0 + size_t(hh) * dk * dv;
        std::vector<float> scratch(a.out ? 0 : dv);
        for (int t = 0; t < a.n; ++t) {
            float* o = a.out ? a.out + size_t(t) * value_dim + size_t(hh) * dv : scratch.data();
            step_head(t == 0 ? S0 : Sh, Sh, a.q + size_t(t) * key_dim + size_t(g) * dk,
                      a.k + size_t(t) * key_dim + size_t(g) * dk, a.v + size_t(t) * value_dim + size_t(hh) * dv,
                      a.decay[size_t(t) * nv + hh], a.beta[size_t(t) * nv + hh], dk, dv, o);
        }
    };
    if (int64_t(nv) * dk * dv * a.n > 16384)
        pool.parallel_for(nv, head);
    else
        for (int hh = 0; hh < nv; ++hh) head(hh);
}

}  // namespace strata::cpu
