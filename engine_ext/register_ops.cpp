// Python bindings for running single backend ops on numpy arrays (the per-op consistency test,
// tests/test_backend_ops.py): list backends, formats, ops and (op, format) support, and run one
// op on a named backend (matmul and attention also in prefill mode, Backend::set_prefill).
// Arrays are taken as C-contiguous float32 (int32 for indices); weight
// matrices as raw stored bytes plus a format name.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "backend.h"
#include "format.h"

namespace py = pybind11;
using namespace strata;

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32 = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// One backend per (name, threads, mode), kept for the process: the mode is fixed per instance,
// so calls never change another call's mode. Like an Engine, one backend runs one op at a time
// (the test calls from one thread).
Backend& backend(const std::string& name, int threads, bool prefill = false) {
    static std::mutex mu;
    static std::map<std::tuple<std::string, int, bool>, std::unique_ptr<Backend>> cache;
    std::lock_guard<std::mutex> lk(mu);
    auto& b = cache[{name, threads, prefill}];
    if (!b) {
        // every fold on (STRATA_WEBGPU_FOLD=1 while the backend is made, unless the caller set it):
        // the composite ops' tests compare the folded kernels with their ops in sequence
        const bool set = !std::getenv("STRATA_WEBGPU_FOLD");
        if (set) setenv("STRATA_WEBGPU_FOLD", "1", 1);
        try {
            b = make_backend(name, threads);
        } catch (...) {
            if (set) unsetenv("STRATA_WEBGPU_FOLD");
            throw;
        }
        if (set) unsetenv("STRATA_WEBGPU_FOLD");
        b->set_prefill(prefill);
    }
    return *b;
}

WFormat parse_format(const std::string& s) {
    WFormat f;
    if (!format_from_name(s, f)) throw py::value_error("unknown weight format '" + s + "'");
    return f;
}

void need(bool ok, const std::string& what) {
    if (!ok) throw py::value_error(what);
}

F32 out_like(std::vector<py::ssize_t> shape) {
    F32 a(shape);
    std::memset(a.mutable_data(), 0, sizeof(float) * size_t(a.size()));
    return a;
}

// A weight matrix from its stored bytes (any numpy dtype; its bytes are used as they are).
struct Weights {
    py::array keep;
    MatView m;
};
Weights weights(const py::array& w, const std::string& format, int rows, int cols, Backend& be, Op op) {
    WFormat f = parse_format(format);
    int64_t rb = format_row_bytes(f, cols);
    need(rb > 0 && rows > 0, "weights: " + std::to_string(cols) + " columns is not a whole number of " +
                                 format_info(f).name + " blocks");
    py::array c = py::array::ensure(w, py::array::c_style);
    need(size_t(c.nbytes()) == size_t(rb) * size_t(rows),
         "weights: " + std::to_string(c.nbytes()) + " bytes given, a " + std::to_string(rows) + "x" +
             std::to_string(cols) + " " + format_info(f).name + " matrix has " + std::to_string(rb * rows));
    if (!be.supports(op, f))
        throw py::value_error(std::string("backend ") + be.name() + " does not support " + op_name(op) + " on " +
                              format_info(f).name);
    MatView m = make_mat(c.data(), f, rows, cols);
    m.version = new_content_version();  // a caller's buffer: another call may reuse the address
    return {c, m};
}

// The operands gdn_inputs_step and conv_gdn_inputs_step share: the step inputs (scratch) and
// the state, and the arguments of gdn_inputs (reading conv and the b/a columns of rows of ld
// floats) and of gdn_step over them.
struct GdnTail {
    std::vector<float> AA, dt, s0, q, k, v, dec, beta;
    F32 S, out;
    GdnInputsArgs gi;
    GdnStepArgs st;
    GdnTail(const F32& A, const F32& dt_bias, const F32& S0, int n, int n_k, bool in_place, const float* conv,
            const float* b, int ld) {
        const int nv = int(S0.shape(0)), dk = int(S0.shape(1)), dv = int(S0.shape(2));
        AA.assign(A.data(), A.data() + nv);
        dt.assign(dt_bias.data(), dt_bias.data() + nv);
        s0.assign(S0.data(), S0.data() + S0.size());
        q.resize(size_t(n) * n_k * dk);
        k.resize(q.size());
        v.resize(size_t(n) * nv * dv);
        dec.resize(size_t(n) * nv);
        beta.resize(dec.size());
        S = out_like({nv, dk, dv});
        out = out_like({n, nv * dv});
        float* ps = S.mutable_data();
        if (in_place) std::memcpy(ps, s0.data(), sizeof(float) * s0.size());
        gi.conv = conv;
        gi.b = b;
        gi.a = b + nv;
        gi.ld_ba = ld;
        gi.A = AA.data();
        gi.dt_bias = dt.data();
        gi.n = st.n = n;
        gi.n_k = st.n_k = n_k;
        gi.n_v = st.n_v = nv;
        gi.d_k = st.d_k = dk;
        gi.d_v = st.d_v = dv;
        gi.q = q.data();
        st.q = gi.q;
        gi.k = k.data();
        st.k = gi.k;
        gi.v = v.data();
        st.v = gi.v;
        gi.decay = dec.data();
        st.decay = gi.decay;
        gi.beta = beta.data();
        st.beta = gi.beta;
        st.S0 = in_place ? ps : s0.data();
        st.S = ps;
        st.out = out.mutable_data();
    }
    // the arrays a call attaches besides its own inputs
    std::vector<std::pair<const void*, size_t>> arrays() {
        return {{st.S, s0.size() * 4}, {s0.data(), s0.size() * 4}, {st.out, v.size() * 4}, {q.data(), q.size() * 4},
                {k.data(), k.size() * 4}, {v.data(), v.size() * 4}, {dec.data(), dec.size() * 4},
                {beta.data(), beta.size() * 4}};
    }
};

void register_calls(py::module_& o) {
    o.def("embed",
          [](const std::string& b, const py::array& w, const std::string& format, int rows, int cols, const I32& ids,
             int threads) {
              Backend& be = backend(b, threads);
              Weights W = weights(w, format, rows, cols, be, Op::Embed);
              int n = int(ids.size());
              for (int i = 0; i < n; ++i) need(ids.data()[i] >= 0 && ids.data()[i] < rows, "embed: id out of range");
              F32 out = out_like({n, cols});
              py::gil_scoped_release rel;
              be.embed(W.m, ids.data(), n, out.mutable_data());
              return out;
          },
          py::arg("backend"), py::arg("w"), py::arg("format"), py::arg("rows"), py::arg("cols"), py::arg("ids"),
          py::arg("threads") = 1);
    o.def("matmul",
          [](const std::string& b, const F32& x, const py::array& w, const std::string& format, int rows, int cols,
             const py::object& bias, int threads, bool prefill) {
              Backend& be = backend(b, threads, prefill);
              need(x.ndim() == 2 && x.shape(1) == cols, "matmul: x must be (T, cols)");
              Weights W = weights(w, format, rows, cols, be, Op::Matmul);
              F32 bb;
              if (!bias.is_none()) {
                  bb = bias.cast<F32>();
                  need(bb.size() == rows, "matmul: bias must have rows elements");
              }
              int T = int(x.shape(0));
              F32 y = out_like({T, rows});
              MatJob j{x.data(), T, cols, W.m, bias.is_none() ? nullptr : bb.data(), y.mutable_data(), rows};
              py::gil_scoped_release rel;
              be.matmul({j});
              return y;
          },
          py::arg("backend"), py::arg("x"), py::arg("w"), py::arg("format"), py::arg("rows"), py::arg("cols"),
          py::arg("bias") = py::none(), py::arg("threads") = 1, py::arg("prefill") = false);
    o.def("rmsnorm",
          [](const std::string& b, const F32& x, const F32& w, float eps, int threads) {
              Backend& be = backend(b, threads);
              need(x.ndim() == 3 && w.size() == x.shape(2), "rmsnorm: x (rows, heads, dim), w (dim)");
              int rows = int(x.shape(0)), heads = int(x.shape(1)), dim = int(x.shape(2));
              F32 out = out_like({rows, heads, dim});
              py::gil_scoped_release rel;
              be.rmsnorm({x.data(), heads * dim, dim}, {out.mutable_data(), heads * dim, dim}, rows, heads, dim,
                         w.data(), eps);
              return out;
          },
          py::arg("backend"), py::arg("x"), py::arg("w"), py::arg("eps"), py::arg("threads") = 1);
    o.def("gated_rmsnorm",
          [](const std::string& b, const F32& x, const F32& z, const F32& w, float eps, int threads) {
              Backend& be = backend(b, threads);
              need(x.ndim() == 3 && z.ndim() == 3 && w.size() == x.shape(2), "gated_rmsnorm: x, z (rows, heads, dim)");
              for (int d = 0; d < 3; ++d) need(x.shape(d) == z.shape(d), "gated_rmsnorm: x and z differ in shape");
              int rows = int(x.shape(0)), heads = int(x.shape(1)), dim = int(x.shape(2));
              F32 out = out_like({rows, heads, dim});
              std::memcpy(out.mutable_data(), x.data(), sizeof(float) * size_t(x.size()));
              py::gil_scoped_release rel;
              be.gated_rmsnorm({out.mutable_data(), heads * dim, dim}, {z.data(), heads * dim, dim}, rows, heads, dim,
                               w.data(), eps);
              return out;
          },
          py::arg("backend"), py::arg("x"), py::arg("z"), py::arg("w"), py::arg("eps"), py::arg("threads") = 1);
    o.def("rotary",
          [](const std::string& b, const F32& x, int64_t p0, const F32& inv_freq, int threads) {
              Backend& be = backend(b, threads);
              need(x.ndim() == 3 && 2 * inv_freq.size() <= x.shape(2), "rotary: x (rows, heads, dim), 2*half <= dim");
              need(p0 >= 0, "rotary: p0 must be >= 0");
              int rows = int(x.shape(0)), heads = int(x.shape(1)), dim = int(x.shape(2));
              F32 out = out_like({rows, heads, dim});
              std::memcpy(out.mutable_data(), x.data(), sizeof(float) * size_t(x.size()));
              py::gil_scoped_release rel;
              be.rotary({out.mutable_data(), heads * dim, dim}, rows, heads, p0, inv_freq.data(), int(inv_freq.size()));
              return out;
          },
          py::arg("backend"), py::arg("x"), py::arg("p0"), py::arg("inv_freq"), py::arg("threads") = 1);
    o.def("attention",
          [](const std::string& b, const F32& q, const F32& k_cells, const F32& v_cells, int64_t p0, float scale,
             const py::object& gate, int threads, bool prefill) {
              Backend& be = backend(b, threads, prefill);
              need(q.ndim() == 3 && k_cells.ndim() == 3 && v_cells.ndim() == 3, "attention: 3-d arrays");
              int n = int(q.shape(0)), nh = int(q.shape(1)), hd = int(q.shape(2)), nkv = int(k_cells.shape(1));
              need(k_cells.shape(2) == hd && v_cells.shape(1) == nkv && v_cells.shape(2) == hd &&
                       k_cells.shape(0) == v_cells.shape(0),
                   "attention: k/v cells must be (cells, n_kv, head_dim)");
              need(nkv > 0 && nh % nkv == 0, "attention: n_heads must be a multiple of n_kv");
              need(p0 >= 0 && p0 + n <= k_cells.shape(0), "attention: cells must cover positions p0 .. p0+n-1");
              F32 g;
              if (!gate.is_none()) {
                  g = gate.cast<F32>();
                  need(g.size() == q.size(), "attention: gate must have q's shape");
              }
              F32 out = out_like({n, nh, hd});
              AttentionArgs a;
              a.q = q.data();
              a.gate = gate.is_none() ? nullptr : g.data();
              a.k_cells = k_cells.data();
              a.v_cells = v_cells.data();
              a.n = n;
              a.n_heads = nh;
              a.n_kv = nkv;
              a.head_dim = hd;
              a.p0 = p0;
              a.scale = scale;
              a.out = out.mutable_data();
              py::gil_scoped_release rel;
              be.attention(a);
              return out;
          },
          py::arg("backend"), py::arg("q"), py::arg("k_cells"), py::arg("v_cells"), py::arg("p0"), py::arg("scale"),
          py::arg("gate") = py::none(), py::arg("threads") = 1, py::arg("prefill") = false);
    o.def("causal_conv",
          [](const std::string& b, const F32& x, const F32& hist, const F32& w, int threads, bool keep_x) -> py::object {
              // x (n, ldx >= C): the first C lanes of each row are the input; keep_x: also return
              // the input rows packed (ConvArgs::x_rows)
              Backend& be = backend(b, threads);
              need(x.ndim() == 2 && w.ndim() == 2 && hist.ndim() == 2, "causal_conv: 2-d arrays");
              int n = int(x.shape(0)), C = int(w.shape(0)), K = int(w.shape(1));
              need(x.shape(1) >= C && hist.shape(0) == K - 1 && hist.shape(1) == C,
                   "causal_conv: x (n, >= C), hist (K-1, C), w (C, K)");
              F32 out = out_like({n, C});
              F32 rows = out_like({keep_x ? n : 0, C});
              ConvArgs a;
              a.x = x.data();
              a.ldx = int(x.shape(1));
              a.x_rows = keep_x ? rows.mutable_data() : nullptr;
              a.hist = hist.data();
              a.w = w.data();
              a.n = n;
              a.channels = C;
              a.K = K;
              a.out = out.mutable_data();
              {
                  py::gil_scoped_release rel;
                  be.causal_conv(a);
              }
              if (keep_x) return py::make_tuple(out, rows);
              return std::move(out);
          },
          py::arg("backend"), py::arg("x"), py::arg("hist"), py::arg("w"), py::arg("threads") = 1,
          py::arg("keep_x") = false);
    o.def("gdn_inputs",
          [](const std::string& b, const F32& conv, const F32& bb, const F32& aa, const F32& A, const F32& dt_bias,
             int n_k, int d_k, int d_v, int threads) {
              Backend& be = backend(b, threads);
              int n = int(conv.shape(0)), nv = int(A.size());
              need(conv.ndim() == 2 && conv.shape(1) == 2 * n_k * d_k + nv * d_v, "gdn_inputs: conv (n, conv_dim)");
              need(bb.size() == int64_t(n) * nv && aa.size() == int64_t(n) * nv && dt_bias.size() == nv,
                   "gdn_inputs: b, a (n, n_v), dt_bias (n_v)");
              F32 q = out_like({n, n_k * d_k}), k = out_like({n, n_k * d_k}), v = out_like({n, nv * d_v});
              F32 dec = out_like({n, nv}), beta = out_like({n, nv});
              GdnInputsArgs a;
              a.conv = conv.data();
              a.b = bb.data();
              a.a = aa.data();
              a.ld_ba = nv;
              a.A = A.data();
              a.dt_bias = dt_bias.data();
              a.n = n;
              a.n_k = n_k;
              a.n_v = nv;
              a.d_k = d_k;
              a.d_v = d_v;
              a.q = q.mutable_data();
              a.k = k.mutable_data();
              a.v = v.mutable_data();
              a.decay = dec.mutable_data();
              a.beta = beta.mutable_data();
              {
                  py::gil_scoped_release rel;
                  be.gdn_inputs(a);
              }
              return py::make_tuple(q, k, v, dec, beta);
          },
          py::arg("backend"), py::arg("conv"), py::arg("b"), py::arg("a"), py::arg("A"), py::arg("dt_bias"),
          py::arg("n_k"), py::arg("d_k"), py::arg("d_v"), py::arg("threads") = 1);
    o.def("gdn_step",
          [](const std::string& b, const F32& S0, const F32& q, const F32& k, const F32& v, const F32& decay,
             const F32& beta, int n_k, int threads) {
              Backend& be = backend(b, threads);
              need(S0.ndim() == 3, "gdn_step: S0 (n_v, d_k, d_v)");
              int nv = int(S0.shape(0)), dk = int(S0.shape(1)), dv = int(S0.shape(2)), n = int(q.shape(0));
              need(n_k > 0 && nv % n_k == 0 && dv <= 512, "gdn_step: n_v must be a multiple of n_k, d_v <= 512");
              need(q.size() == int64_t(n) * n_k * dk && k.size() == q.size() && v.size() == int64_t(n) * nv * dv &&
                       decay.size() == int64_t(n) * nv && beta.size() == decay.size(),
                   "gdn_step: q, k (n, n_k*d_k), v (n, n_v*d_v), decay, beta (n, n_v)");
              F32 S = out_like({nv, dk, dv}), out = out_like({n, nv * dv});
              GdnStepArgs a;
              a.S0 = S0.data();
              a.S = S.mutable_data();
              a.q = q.data();
              a.k = k.data();
              a.v = v.data();
              a.decay = decay.data();
              a.beta = beta.data();
              a.n = n;
              a.n_k = n_k;
              a.n_v = nv;
              a.d_k = dk;
              a.d_v = dv;
              a.out = out.mutable_data();
              {
                  py::gil_scoped_release rel;
                  be.gdn_step(a);
              }
              return py::make_tuple(S, out);
          },
          py::arg("backend"), py::arg("S0"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("decay"),
          py::arg("beta"), py::arg("n_k"), py::arg("threads") = 1);
    o.def("router_topk",
          [](const std::string& b, const F32& logits, int k, bool renormalize, int threads) {
              Backend& be = backend(b, threads);
              need(logits.ndim() == 2 && k >= 1 && k <= logits.shape(1), "router_topk: logits (n, E), 1 <= k <= E");
              int n = int(logits.shape(0)), E = int(logits.shape(1));
              I32 idx({n, k});
              F32 w = out_like({n, k});
              {
                  py::gil_scoped_release rel;
                  be.router_topk(logits.data(), n, E, k, renormalize, idx.mutable_data(), w.mutable_data());
              }
              return py::make_tuple(idx, w);
          },
          py::arg("backend"), py::arg("logits"), py::arg("k"), py::arg("renormalize"), py::arg("threads") = 1);
    o.def("gather",
          [](const std::string& b, const F32& src, const I32& idx, int threads) {
              Backend& be = backend(b, threads);
              need(src.ndim() == 2, "gather: src (rows, cols)");
              int m = int(src.shape(0)), cols = int(src.shape(1)), n = int(idx.size());
              for (int i = 0; i < n; ++i) need(idx.data()[i] >= 0 && idx.data()[i] < m, "gather: index out of range");
              F32 out = out_like({n, cols});
              py::gil_scoped_release rel;
              be.gather(src.data(), cols, reinterpret_cast<const int*>(idx.data()), n, cols, out.mutable_data(), cols);
              return out;
          },
          py::arg("backend"), py::arg("src"), py::arg("idx"), py::arg("threads") = 1);
    o.def("swiglu",
          [](const std::string& b, const F32& g, const F32& u, int threads) {
              Backend& be = backend(b, threads);
              need(g.ndim() == 2 && u.ndim() == 2 && g.shape(0) == u.shape(0) && g.shape(1) == u.shape(1),
                   "swiglu: g, u (rows, n)");
              int rows = int(g.shape(0)), n = int(g.shape(1));
              F32 out = out_like({rows, n});
              py::gil_scoped_release rel;
              be.swiglu({g.data(), n, 0}, {u.data(), n, 0}, {out.mutable_data(), n, 0}, rows, n);
              return out;
          },
          py::arg("backend"), py::arg("g"), py::arg("u"), py::arg("threads") = 1);
    o.def("moe_combine",
          [](const std::string& b, const F32& D, const I32& slot, const F32& w, const py::object& shared,
             const py::object& shared_gate, int threads) {
              Backend& be = backend(b, threads);
              need(D.ndim() == 2 && slot.ndim() == 2 && w.ndim() == 2 && slot.shape(0) == w.shape(0) &&
                       slot.shape(1) == w.shape(1),
                   "moe_combine: D (slots, H), slot and w (n, k)");
              int n = int(slot.shape(0)), k = int(slot.shape(1)), H = int(D.shape(1));
              for (int i = 0; i < n * k; ++i)
                  need(slot.data()[i] >= 0 && slot.data()[i] < D.shape(0), "moe_combine: slot out of range");
              need(shared.is_none() == shared_gate.is_none(), "moe_combine: shared and shared_gate go together");
              F32 out = out_like({n, H});
              F32 sg;
              if (!shared.is_none()) {
                  F32 s = shared.cast<F32>();
                  sg = shared_gate.cast<F32>();
                  need(s.size() == int64_t(n) * H && sg.size() == n, "moe_combine: shared (n, H), shared_gate (n)");
                  std::memcpy(out.mutable_data(), s.data(), sizeof(float) * size_t(s.size()));
              }
              bool has = !shared.is_none();
              py::gil_scoped_release rel;
              be.moe_combine(D.data(), reinterpret_cast<const int*>(slot.data()), w.data(), n, k, H,
                             has ? out.data() : nullptr, has ? sg.data() : nullptr, out.mutable_data());
              return out;
          },
          py::arg("backend"), py::arg("D"), py::arg("slot"), py::arg("w"), py::arg("shared") = py::none(),
          py::arg("shared_gate") = py::none(), py::arg("threads") = 1);
    o.def("add",
          [](const std::string& b, const F32& x, const F32& y, int threads) {
              Backend& be = backend(b, threads);
              need(x.size() == y.size(), "add: x and y differ in size");
              F32 out = out_like(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
              std::memcpy(out.mutable_data(), x.data(), sizeof(float) * size_t(x.size()));
              py::gil_scoped_release rel;
              be.add(out.mutable_data(), y.data(), size_t(x.size()));
              return out;
          },
          py::arg("backend"), py::arg("x"), py::arg("y"), py::arg("threads") = 1);
    o.def("copy",
          [](const std::string& b, const F32& src, int heads, int threads) {
              // src (rows, heads * dim) read with a head stride of 2 * dim from a wider array, so
              // the strides are exercised: row r head h = src[r, h*dim:(h+1)*dim]
              Backend& be = backend(b, threads);
              need(src.ndim() == 2 && heads >= 1 && src.shape(1) % heads == 0, "copy: src (rows, heads * dim)");
              int rows = int(src.shape(0)), dim = int(src.shape(1)) / heads;
              std::vector<float> wide(size_t(rows) * heads * 2 * dim, 0.f);
              for (int r = 0; r < rows; ++r)
                  for (int h = 0; h < heads; ++h)
                      std::memcpy(&wide[(size_t(r) * heads + h) * 2 * dim], src.data() + (size_t(r) * heads + h) * dim,
                                  sizeof(float) * dim);
              F32 out = out_like({rows, heads * dim});
              py::gil_scoped_release rel;
              be.copy({wide.data(), heads * 2 * dim, 2 * dim}, {out.mutable_data(), heads * dim, dim}, rows, heads, dim);
              return out;
          },
          py::arg("backend"), py::arg("src"), py::arg("heads") = 1, py::arg("threads") = 1);
}

// Arrays attached to a backend for one call (as the engine attaches its activations), so a
// backend that keeps device copies runs its device-resident path; results read back, then
// detached. On the CPU backend all of this is a no-op.
struct AttachScope {
    Backend& be;
    std::vector<std::pair<const void*, size_t>> arrays;
    AttachScope(Backend& b, bool on, std::vector<std::pair<const void*, size_t>> a) : be(b) {
        if (!on) return;
        arrays = std::move(a);
        for (auto& [p, n] : arrays) be.attach(p, n, true);
    }
    void read_back() {
        for (auto& [p, n] : arrays) be.to_host(p, n);
    }
    ~AttachScope() {
        for (auto& [p, n] : arrays) be.detach(p);
    }
};

// The composite ops a backend may fuse (Backend::add_rmsnorm, Backend::copy_many,
// Backend::swiglu_matmul, rmsnorm_rotary, moe_combine_add_rmsnorm, gdn_inputs_step,
// conv_gdn_inputs_step): not in the
// Op table (their default is the plain ops in sequence); the per-op test checks them apart.
void register_fused_calls(py::module_& o) {
    o.def("add_rmsnorm",
          [](const std::string& b, const F32& x, const F32& y, const F32& w, float eps, bool attached, int threads) {
              Backend& be = backend(b, threads);
              need(x.ndim() == 2 && y.ndim() == 2 && x.shape(0) == y.shape(0) && x.shape(1) == y.shape(1),
                   "add_rmsnorm: x and y (rows, dim) of one shape");
              int rows = int(x.shape(0)), dim = int(x.shape(1));
              need(w.ndim() == 1 && w.shape(0) == dim, "add_rmsnorm: w (dim,)");
              F32 sum = out_like({rows, dim}), out = out_like({rows, dim});
              std::memcpy(sum.mutable_data(), x.data(), sizeof(float) * size_t(x.size()));
              std::vector<float> yy(y.data(), y.data() + y.size()), ww(w.data(), w.data() + w.size());
              const size_t bytes = sizeof(float) * size_t(x.size());
              float* ps = sum.mutable_data();
              float* po = out.mutable_data();
              {
                  py::gil_scoped_release rel;
                  AttachScope sc(be, attached, {{ps, bytes}, {yy.data(), bytes}, {po, bytes}, {ww.data(), ww.size() * 4}});
                  be.add_rmsnorm(ps, yy.data(), rows, dim, {po, dim, 0}, ww.data(), eps);
                  sc.read_back();
              }
              return py::make_tuple(sum, out);
          },
          py::arg("backend"), py::arg("x"), py::arg("y"), py::arg("w"), py::arg("eps") = 1e-6f,
          py::arg("attached") = false, py::arg("threads") = 1);
    o.def("swiglu_matmul",
          [](const std::string& b, const F32& g, const F32& u, const py::array& w, const std::string& format, int rows,
             bool attached, int threads) {
              // g and u (T, n) side by side in one array, as the engine's scratch holds them (the
              // webgpu backend folds the SwiGLU into the matmul only there); y = (silu(g) * u) W^T
              Backend& be = backend(b, threads);
              need(g.ndim() == 2 && u.ndim() == 2 && g.shape(0) == u.shape(0) && g.shape(1) == u.shape(1),
                   "swiglu_matmul: g and u (T, n) of one shape");
              const int T = int(g.shape(0)), n = int(g.shape(1));
              Weights W = weights(w, format, rows, n, be, Op::Matmul);
              std::vector<float> gu(size_t(g.size()) * 2);
              std::memcpy(gu.data(), g.data(), sizeof(float) * size_t(g.size()));
              std::memcpy(gu.data() + g.size(), u.data(), sizeof(float) * size_t(u.size()));
              F32 y = out_like({T, rows});
              float* pg = gu.data();
              float* py_ = y.mutable_data();
              {
                  py::gil_scoped_release rel;
                  AttachScope sc(be, attached, {{pg, gu.size() * 4}, {py_, size_t(T) * rows * 4}});
                  be.swiglu_matmul({pg, n, 0}, {pg + size_t(T) * n, n, 0}, {pg, n, 0}, T, n,
                                   {pg, T, n, W.m, nullptr, py_, rows});
                  sc.read_back();
              }
              return y;
          },
          py::arg("backend"), py::arg("g"), py::arg("u"), py::arg("w"), py::arg("format"), py::arg("rows"),
          py::arg("attached") = false, py::arg("threads") = 1);
    o.def("rmsnorm_rotary",
          [](const std::string& b, const F32& x, const F32& w, float eps, int64_t p0, const F32& inv_freq,
             bool attached, int threads) {
              Backend& be = backend(b, threads);
              need(x.ndim() == 3 && w.size() == x.shape(2) && 2 * inv_freq.size() <= x.shape(2) && p0 >= 0,
                   "rmsnorm_rotary: x (rows, heads, dim), w (dim), 2*half <= dim, p0 >= 0");
              int rows = int(x.shape(0)), heads = int(x.shape(1)), dim = int(x.shape(2));
              std::vector<float> xx(x.data(), x.data() + x.size()), ww(w.data(), w.data() + w.size());
              F32 out = out_like({rows, heads, dim});
              float* po = out.mutable_data();
              {
                  py::gil_scoped_release rel;
                  AttachScope sc(be, attached, {{xx.data(), xx.size() * 4}, {po, xx.size() * 4}, {ww.data(), ww.size() * 4}});
                  be.rmsnorm_rotary({xx.data(), heads * dim, dim}, {po, heads * dim, dim}, rows, heads, dim, ww.data(),
                                    eps, p0, inv_freq.data(), int(inv_freq.size()));
                  sc.read_back();
              }
              return out;
          },
          py::arg("backend"), py::arg("x"), py::arg("w"), py::arg("eps"), py::arg("p0"), py::arg("inv_freq"),
          py::arg("attached") = false, py::arg("threads") = 1);
    o.def("gdn_inputs_step",
          [](const std::string& b, const F32& conv, const F32& bb, const F32& aa, const F32& A, const F32& dt_bias,
             const F32& S0, int n_k, bool in_place, bool attached, int threads) {
              // gdn_inputs then gdn_step through Backend::gdn_inputs_step (the step inputs scratch);
              // b and a side by side in one row array as in the engine's projection rows
              Backend& be = backend(b, threads);
              need(S0.ndim() == 3 && conv.ndim() == 2, "gdn_inputs_step: conv (n, conv_dim), S0 (n_v, d_k, d_v)");
              const int nv = int(S0.shape(0)), dk = int(S0.shape(1)), dv = int(S0.shape(2)), n = int(conv.shape(0));
              need(n_k > 0 && nv % n_k == 0 && dv <= 512 && A.size() == nv && dt_bias.size() == nv,
                   "gdn_inputs_step: n_v a multiple of n_k, d_v <= 512, A and dt_bias (n_v)");
              need(conv.shape(1) == 2 * n_k * dk + nv * dv && bb.size() == int64_t(n) * nv && aa.size() == int64_t(n) * nv,
                   "gdn_inputs_step: conv (n, conv_dim), b, a (n, n_v)");
              const int ld = 2 * nv + 1;  // [pad | b | a] per row
              std::vector<float> ba(size_t(n) * ld, 0.0f), cv(conv.data(), conv.data() + conv.size());
              for (int t = 0; t < n; ++t)
                  for (int h = 0; h < nv; ++h) {
                      ba[size_t(t) * ld + 1 + h] = bb.data()[size_t(t) * nv + h];
                      ba[size_t(t) * ld + 1 + nv + h] = aa.data()[size_t(t) * nv + h];
                  }
              GdnTail g(A, dt_bias, S0, n, n_k, in_place, cv.data(), ba.data() + 1, ld);
              {
                  py::gil_scoped_release rel;
                  auto arrays = g.arrays();
                  arrays.push_back({cv.data(), cv.size() * 4});
                  arrays.push_back({ba.data(), ba.size() * 4});
                  AttachScope sc(be, attached, arrays);
                  be.gdn_inputs_step(g.gi, g.st);
                  sc.read_back();
              }
              return py::make_tuple(g.S, g.out);
          },
          py::arg("backend"), py::arg("conv"), py::arg("b"), py::arg("a"), py::arg("A"), py::arg("dt_bias"),
          py::arg("S0"), py::arg("n_k"), py::arg("in_place") = false, py::arg("attached") = false,
          py::arg("threads") = 1);
    o.def("conv_gdn_inputs_step",
          [](const std::string& b, const F32& x, const F32& hist, const F32& w, const F32& bb, const F32& aa,
             const F32& A, const F32& dt_bias, const F32& S0, int n_k, bool in_place, bool attached, int threads) {
              // causal_conv, gdn_inputs, gdn_step through Backend::conv_gdn_inputs_step (the conv
              // output and step inputs scratch); x, b and a in one row array [x | pad | b | a] as in
              // the engine's projection rows
              Backend& be = backend(b, threads);
              need(S0.ndim() == 3 && x.ndim() == 2 && w.ndim() == 2 && hist.ndim() == 2,
                   "conv_gdn_inputs_step: x (n, C), hist (K-1, C), w (C, K), S0 (n_v, d_k, d_v)");
              const int nv = int(S0.shape(0)), dk = int(S0.shape(1)), dv = int(S0.shape(2)), n = int(x.shape(0));
              const int C = int(w.shape(0)), K = int(w.shape(1));
              need(n_k > 0 && nv % n_k == 0 && dv <= 512 && A.size() == nv && dt_bias.size() == nv,
                   "conv_gdn_inputs_step: n_v a multiple of n_k, d_v <= 512, A and dt_bias (n_v)");
              need(C == 2 * n_k * dk + nv * dv && x.shape(1) == C && hist.shape(0) == K - 1 && hist.shape(1) == C &&
                       bb.size() == int64_t(n) * nv && aa.size() == int64_t(n) * nv,
                   "conv_gdn_inputs_step: x (n, 2*n_k*d_k + n_v*d_v), hist (K-1, C), b, a (n, n_v)");
              const int ld = C + 1 + 2 * nv;
              std::vector<float> rows(size_t(n) * ld, 0.0f);
              for (int t = 0; t < n; ++t) {
                  std::memcpy(rows.data() + size_t(t) * ld, x.data() + size_t(t) * C, sizeof(float) * C);
                  for (int h = 0; h < nv; ++h) {
                      rows[size_t(t) * ld + C + 1 + h] = bb.data()[size_t(t) * nv + h];
                      rows[size_t(t) * ld + C + 1 + nv + h] = aa.data()[size_t(t) * nv + h];
                  }
              }
              std::vector<float> hh(hist.data(), hist.data() + hist.size()), ww(w.data(), w.data() + w.size());
              std::vector<float> cv(size_t(n) * C);
              GdnTail g(A, dt_bias, S0, n, n_k, in_place, cv.data(), rows.data() + C + 1, ld);
              ConvArgs ca;
              ca.x = rows.data();
              ca.ldx = ld;
              ca.hist = hh.data();
              ca.w = ww.data();
              ca.n = n;
              ca.channels = C;
              ca.K = K;
              ca.out = cv.data();
              {
                  py::gil_scoped_release rel;
                  auto arrays = g.arrays();
                  arrays.push_back({rows.data(), rows.size() * 4});
                  arrays.push_back({hh.data(), hh.size() * 4});
                  arrays.push_back({cv.data(), cv.size() * 4});
                  AttachScope sc(be, attached, arrays);
                  be.conv_gdn_inputs_step(ca, g.gi, g.st);
                  sc.read_back();
              }
              return py::make_tuple(g.S, g.out);
          },
          py::arg("backend"), py::arg("x"), py::arg("hist"), py::arg("w"), py::arg("b"), py::arg("a"), py::arg("A"),
          py::arg("dt_bias"), py::arg("S0"), py::arg("n_k"), py::arg("in_place") = false,
          py::arg("attached") = false, py::arg("threads") = 1);
    o.def("moe_combine_add_rmsnorm",
          [](const std::string& b, const F32& D, const I32& slot, const F32& cw, const py::object& shared,
             const py::object& shared_gate, const F32& x, const F32& w, float eps, bool attached, int threads) {
              // (x + moe_combine(...), rmsnorm of that): the combine's output is not returned
              Backend& be = backend(b, threads);
              need(D.ndim() == 2 && slot.ndim() == 2 && cw.ndim() == 2 && slot.shape(0) == cw.shape(0) &&
                       slot.shape(1) == cw.shape(1),
                   "moe_combine_add_rmsnorm: D (slots, H), slot and w (n, k)");
              const int n = int(slot.shape(0)), k = int(slot.shape(1)), H = int(D.shape(1));
              for (int i = 0; i < n * k; ++i)
                  need(slot.data()[i] >= 0 && slot.data()[i] < D.shape(0), "moe_combine_add_rmsnorm: slot out of range");
              need(x.ndim() == 2 && x.shape(0) == n && x.shape(1) == H && w.size() == H,
                   "moe_combine_add_rmsnorm: x (n, H), w (H)");
              need(shared.is_none() == shared_gate.is_none(), "moe_combine_add_rmsnorm: shared and shared_gate go together");
              const bool has = !shared.is_none();
              const size_t ny = size_t(n) * H;
              std::vector<float> dd(D.data(), D.data() + D.size()), ww(cw.data(), cw.data() + cw.size()),
                  nw(w.data(), w.data() + w.size()), o(ny, 0.0f), sg;
              if (has) {
                  F32 s = shared.cast<F32>();
                  F32 g = shared_gate.cast<F32>();
                  need(s.size() == int64_t(ny) && g.size() == n, "moe_combine_add_rmsnorm: shared (n, H), shared_gate (n)");
                  std::memcpy(o.data(), s.data(), ny * 4);
                  sg.assign(g.data(), g.data() + g.size());
              }
              std::vector<int> sl(slot.data(), slot.data() + slot.size());
              F32 sum = out_like({n, H}), normed = out_like({n, H});
              std::memcpy(sum.mutable_data(), x.data(), ny * 4);
              float* ps = sum.mutable_data();
              float* pn = normed.mutable_data();
              {
                  py::gil_scoped_release rel;
                  std::vector<std::pair<const void*, size_t>> arrays = {
                      {dd.data(), dd.size() * 4}, {ww.data(), ww.size() * 4}, {nw.data(), nw.size() * 4},
                      {o.data(), ny * 4}, {ps, ny * 4}, {pn, ny * 4}};
                  if (has) arrays.push_back({sg.data(), sg.size() * 4});
                  AttachScope sc(be, attached, arrays);
                  be.moe_combine_add_rmsnorm(dd.data(), sl.data(), ww.data(), n, k, H, has ? o.data() : nullptr,
                                             has ? sg.data() : nullptr, o.data(), {ps, {pn, H, 0}, nw.data(), eps});
                  sc.read_back();
              }
              return py::make_tuple(sum, normed);
          },
          py::arg("backend"), py::arg("D"), py::arg("slot"), py::arg("w"), py::arg("shared"), py::arg("shared_gate"),
          py::arg("x"), py::arg("norm_w"), py::arg("eps") = 1e-6f, py::arg("attached") = false, py::arg("threads") = 1);
    o.def("copy_many",
          [](const std::string& b, const F32& src, int dst_size, const I32& jobs, bool attached, int threads,
             std::optional<F32> src2) {
              // jobs: (n, 9) rows of (rows, heads, dim, src_off, src_ld, src_hs, dst_off, dst_ld, dst_hs)
              // over the flat src and a flat dst of dst_size floats that starts as -1; (n, 10): the
              // 10th column 1 reads src2 instead
              Backend& be = backend(b, threads);
              const py::ssize_t cols = jobs.ndim() == 2 ? jobs.shape(1) : 0;
              need(cols == 9 || (cols == 10 && src2), "copy_many: jobs (n, 9), or (n, 10) with src2");
              need(dst_size > 0, "copy_many: dst_size > 0");
              std::vector<float> in(src.data(), src.data() + src.size());
              std::vector<float> in2;
              if (src2) in2.assign(src2->data(), src2->data() + src2->size());
              F32 dst = out_like({dst_size});
              std::fill(dst.mutable_data(), dst.mutable_data() + dst_size, -1.0f);
              float* pd = dst.mutable_data();
              std::vector<Backend::CopyJob> cj;
              for (py::ssize_t i = 0; i < jobs.shape(0); ++i) {
                  const int32_t* j = jobs.data() + i * cols;
                  int64_t rows = j[0], heads = j[1], dim = j[2];
                  need(rows > 0 && heads > 0 && dim > 0, "copy_many: empty job");
                  need(cols == 9 || j[9] == 0 || j[9] == 1, "copy_many: the source column is 0 or 1");
                  const std::vector<float>& from = cols == 10 && j[9] == 1 ? in2 : in;
                  int64_t s_end = j[3] + (rows - 1) * j[4] + (heads - 1) * j[5] + dim;
                  int64_t d_end = j[6] + (rows - 1) * j[7] + (heads - 1) * j[8] + dim;
                  need(j[3] >= 0 && j[6] >= 0 && s_end <= int64_t(from.size()) && d_end <= dst_size,
                       "copy_many: job " + std::to_string(i) + " reaches past its array");
                  cj.push_back({{from.data() + j[3], j[4], j[5]}, {pd + j[6], j[7], j[8]}, int(rows),
                                int(heads), int(dim)});
              }
              py::gil_scoped_release rel;
              std::vector<std::pair<const void*, size_t>> arrays = {{in.data(), in.size() * 4}, {pd, size_t(dst_size) * 4}};
              if (!in2.empty()) arrays.push_back({in2.data(), in2.size() * 4});
              AttachScope sc(be, attached, arrays);
              be.copy_many(cj);
              sc.read_back();
              return dst;
          },
          py::arg("backend"), py::arg("src"), py::arg("dst_size"), py::arg("jobs"), py::arg("attached") = false,
          py::arg("threads") = 1, py::arg("src2") = py::none());
}

}  // namespace

void register_ops(py::module_& m) {
    py::module_ o = m.def_submodule("ops", "single backend ops on numpy arrays (per-op consistency test)");
    o.def("backends", &backend_names, "names of the registered backends");
    register_fused_calls(o);
    o.def("op_names", [] {
        std::vector<std::string> v;
        for (int i = 0; i < kOpCount; ++i) v.push_back(op_name(Op(i)));
        return v;
    });
    o.def("formats", [] {
        py::list v;
        for (int i = 0; i < kFormatCount; ++i) {
            const FormatInfo& fi = format_info(WFormat(i));
            v.append(py::make_tuple(fi.name, fi.block_elems, fi.block_bytes, fi.quantized));
        }
        return v;
    }, "(name, elements per block, bytes per block, quantized) of every weight format");
    o.def("op_has_format", [](const std::string& op) {
        Op o;
        if (!op_from_name(op, o)) throw py::value_error("unknown op '" + op + "'");
        return op_has_format(o);
    });
    o.def("supports",
          [](const std::string& b, const std::string& op, const std::string& format) {
              Op o;
              if (!op_from_name(op, o)) throw py::value_error("unknown op '" + op + "'");
              return backend(b, 1).supports(o, parse_format(format));
          },
          py::arg("backend"), py::arg("op"), py::arg("format") = "F32");
    register_calls(o);
}
