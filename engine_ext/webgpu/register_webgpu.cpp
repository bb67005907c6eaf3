// strata._engine.webgpu: open a WebGPU device, report its adapter and limits, and run each
// kernel on NumPy arrays (one window = one submit) for the tests and `strata info`.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "webgpu/device.h"
#include "webgpu/kernels.h"
#include "webgpu/webgpu_backend.h"
#include "window_model.h"

namespace py = pybind11;
using namespace strata::webgpu;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using U32Array = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>;

// A Device plus its kernels, kept alive together.
struct PyDevice {
    Device device;
    Kernels kernels;
    explicit PyDevice(const DeviceOptions& o) : device(o), kernels(device) {}

    BufferPtr up(const F32Array& a, const char* what) { return device.upload(a.data(), a.nbytes(), what); }
    BufferPtr upu(const U32Array& a, const char* what) { return device.upload(a.data(), a.nbytes(), what); }
    BufferPtr scratch(uint64_t floats, const char* what) { return device.create_buffer(floats * 4, what); }
};

F32Array empty_like_shape(std::vector<py::ssize_t> shape) { return F32Array(shape); }

GpuMatrix matrix_from(PyDevice& d, py::buffer weights, const std::string& format, uint32_t cols) {
    py::buffer_info info = weights.request();
    if (info.ndim != 2) throw std::invalid_argument("webgpu: weights must be a 2-D array of rows");
    WeightFormat f = parse_weight_format(format);
    uint64_t row_bytes = uint64_t(info.strides[0]);
    if (info.strides[1] != info.itemsize) throw std::invalid_argument("webgpu: weight rows must be contiguous");
    return upload_matrix(d.device, info.ptr, f, uint32_t(info.shape[0]), cols, row_bytes);
}

py::dict info_dict(PyDevice& d) {
    const AdapterInfo& a = d.device.adapter();
    const DeviceLimits& l = d.device.limits();
    py::dict limits;
    limits["max_storage_binding"] = l.max_storage_binding;
    limits["max_buffer"] = l.max_buffer;
    limits["chunk_bytes"] = l.chunk_bytes;
    limits["max_storage_buffers_per_stage"] = l.max_storage_buffers_per_stage;
    limits["max_workgroup_storage"] = l.max_workgroup_storage;
    limits["max_invocations_per_workgroup"] = l.max_invocations_per_workgroup;
    limits["max_workgroups_per_dimension"] = l.max_workgroups_per_dimension;
    py::dict out;
    out["device"] = a.device;
    out["vendor"] = a.vendor;
    out["driver"] = a.description;
    out["backend"] = a.backend;
    out["adapter_type"] = a.type;
    out["software"] = a.software;
    out["vendor_id"] = a.vendor_id;
    out["device_id"] = a.device_id;
    out["wgpu_native"] = d.device.library_version();
    out["library"] = d.device.api().library_path;
    out["limits"] = limits;
    return out;
}

}  // namespace

void register_webgpu(py::module_& parent) {
    // make_backend("webgpu"): where the library and shaders are and which adapter to take come
    // from strata.webgpu.backend_config() (the installed wheel, STRATA_WEBGPU_ADAPTER).
    strata::register_backend("webgpu", [](int) -> std::unique_ptr<strata::Backend> {
        DeviceOptions o;
        {
            py::gil_scoped_acquire gil;
            py::tuple cfg = py::module_::import("strata.webgpu").attr("backend_config")();
            o.library = cfg[0].cast<std::string>();
            o.shader_dir = cfg[1].cast<std::string>();
            o.adapter = cfg[2].cast<std::string>();
        }
        // tests: small weight chunks, so that one layer's matrices span many arenas
        if (const char* chunk = std::getenv("STRATA_WEBGPU_CHUNK_BYTES")) o.max_chunk_bytes = std::strtoull(chunk, nullptr, 10);
        try {
            return std::make_unique<WebGpuBackend>(o);
        } catch (const std::runtime_error& e) {  // no adapter / driver / library: the user's to fix
            throw strata::ModelError(std::string("--backend webgpu: ") + e.what());
        }
    });
    py::module_ m = parent.def_submodule("webgpu", "WebGPU device and WGSL kernels (wgpu-native, loaded at run time)");
    m.def("preprocess_wgsl",
          [](const std::string& source, const std::map<std::string, std::string>& defines, const std::string& dialect,
             std::optional<std::map<std::string, std::string>> includes) {
              if (dialect != "naga" && dialect != "dawn") throw std::invalid_argument("dialect must be naga or dawn");
              ShaderIncludes read;
              if (includes)
                  read = [files = *includes](const std::string& name) {
                      auto it = files.find(name);
                      if (it == files.end()) throw std::runtime_error("cannot read shader " + name);
                      return it->second;
                  };
              return preprocess_wgsl(source, "<source>", defines, dialect == "naga" ? ShaderDialect::Naga : ShaderDialect::Dawn,
                                     read);
          },
          py::arg("source"), py::arg("defines"), py::arg("dialect") = "naga", py::arg("includes") = py::none());
    m.def("library_version", [](const std::string& library) { return version_string(load_wgpu(library).version); });
    m.attr("WORKGROUP_SIZE") = Kernels::kWorkgroup;

    py::class_<PyDevice>(m, "Device")
        .def(py::init([](const std::string& library, const std::string& shaders, const std::string& adapter,
                         uint64_t max_chunk_bytes) {
                 DeviceOptions o;
                 o.library = library;
                 o.shader_dir = shaders;
                 o.adapter = adapter;
                 o.max_chunk_bytes = max_chunk_bytes;
                 py::gil_scoped_release release;
                 return new PyDevice(o);
             }),
             py::arg("library"), py::arg("shaders"), py::arg("adapter") = "auto", py::arg("max_chunk_bytes") = 0)
        .def("info", &info_dict)
        .def("matmul",
             [](PyDevice& d, F32Array x, py::buffer weights, const std::string& format) {
                 if (x.ndim() != 2) throw std::invalid_argument("webgpu matmul: x must be (T, K)");
                 uint32_t T = uint32_t(x.shape(0)), K = uint32_t(x.shape(1));
                 GpuMatrix m = matrix_from(d, weights, format, K);
                 auto bx = d.up(x, "x");
                 auto by = d.scratch(uint64_t(T) * m.rows, "y");
                 F32Array y = empty_like_shape({py::ssize_t(T), py::ssize_t(m.rows)});
                 Recorder r = d.device.record();
                 d.kernels.matmul(r, bx, T, m, by);
                 r.download(by, 0, y.nbytes(), y.mutable_data());
                 r.submit();
                 return py::make_tuple(y, m.chunks.size());
             })
        .def("bench_matmul",
             // Seconds per matmul of `rows` window rows against resident weights: `iters`
             // dispatches in one submit, timed from the submit to its completion (encoding
             // excluded; one warm-up window first).
             [](PyDevice& d, py::buffer weights, const std::string& format, uint32_t rows, uint32_t iters) {
                 py::buffer_info info = weights.request();
                 if (info.ndim != 2) throw std::invalid_argument("webgpu bench_matmul: weights must be 2-D");
                 uint32_t cols = uint32_t(format == "f32" ? info.shape[1] : info.shape[1] * info.itemsize / 2);
                 GpuMatrix m = matrix_from(d, weights, format, cols);
                 std::vector<float> x(size_t(rows) * cols, 0.5f);
                 auto bx = d.device.upload(x.data(), x.size() * 4, "x");
                 auto by = d.scratch(uint64_t(rows) * m.rows, "y");
                 py::gil_scoped_release release;
                 double best = 0;
                 for (int pass = 0; pass < 2; ++pass) {
                     Recorder r = d.device.record();
                     for (uint32_t i = 0; i < (pass ? iters : 1u); ++i) d.kernels.matmul(r, bx, rows, m, by);
                     r.submit();
                     best = r.last_run_seconds();
                 }
                 return best / std::max(1u, iters);
             },
             py::arg("weights"), py::arg("format"), py::arg("rows"), py::arg("iters"))
        .def("bench_dispatch",
             // Seconds per dispatch of a tiny elementwise add (n floats) over `iters` dispatches in
             // one submit, timed like bench_matmul: the floor a window pays per dispatch. mode
             // "chain": each reads the previous one's output (two buffers in turn: a barrier
             // between every pair); "shared": each reads one input and writes the same output
             // (no data dependency, but one buffer written by all, as the scratch arena is);
             // "distinct": each writes its own output buffer (nothing to order).
             [](PyDevice& d, uint32_t n, uint32_t iters, const std::string& mode) {
                 if (mode != "chain" && mode != "shared" && mode != "distinct")
                     throw std::invalid_argument("webgpu bench_dispatch: mode must be chain, shared or distinct");
                 if (n == 0 || iters == 0) throw std::invalid_argument("webgpu bench_dispatch: n and iters must be > 0");
                 std::vector<float> x(n, 0.5f);
                 auto a = d.device.upload(x.data(), x.size() * 4, "a");
                 auto b = d.scratch(n, "b");
                 std::vector<BufferPtr> outs(mode == "distinct" ? iters : 1);
                 for (auto& o : outs) o = d.scratch(n, "out");
                 py::gil_scoped_release release;
                 double best = 0;
                 for (int pass = 0; pass < 2; ++pass) {
                     Recorder r = d.device.record();
                     for (uint32_t i = 0; i < (pass ? iters : 1u); ++i) {
                         if (mode == "chain")
                             d.kernels.elementwise(r, "add", i % 2 ? b : a, i % 2 ? b : a, i % 2 ? a : b, n);
                         else
                             d.kernels.elementwise(r, "add", a, a, outs[mode == "distinct" ? i : 0], n);
                     }
                     r.submit();
                     best = r.last_run_seconds();
                 }
                 return best / iters;
             },
             py::arg("n"), py::arg("iters"), py::arg("mode"))
        .def("rmsnorm",
             [](PyDevice& d, F32Array x, F32Array w, float eps, float offset, py::object z) {
                 uint32_t D = uint32_t(w.size());
                 if (x.size() % D) throw std::invalid_argument("webgpu rmsnorm: x is not rows of the weight length");
                 uint32_t rows = uint32_t(x.size() / D);
                 auto bx = d.up(x, "x"), bw = d.up(w, "weight"), by = d.scratch(x.size(), "y");
                 F32Array y(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
                 Recorder r = d.device.record();
                 if (z.is_none()) {
                     d.kernels.rmsnorm(r, bx, bw, by, rows, D, eps, offset);
                 } else {
                     F32Array za = z.cast<F32Array>();
                     if (za.size() != x.size()) throw std::invalid_argument("webgpu rmsnorm_gated: z must match x");
                     d.kernels.rmsnorm_gated(r, bx, d.up(za, "z"), bw, by, rows, D, eps, offset);
                 }
                 r.download(by, 0, y.nbytes(), y.mutable_data());
                 r.submit();
                 return y;
             },
             py::arg("x"), py::arg("weight"), py::arg("eps"), py::arg("weight_offset") = 0.0f, py::arg("z") = py::none())
        .def("rotary",
             [](PyDevice& d, F32Array x, F32Array cos_sin, uint32_t rot_dim) {
                 if (x.ndim() != 3) throw std::invalid_argument("webgpu rotary: x must be (T, heads, D)");
                 uint32_t T = uint32_t(x.shape(0)), H = uint32_t(x.shape(1)), D = uint32_t(x.shape(2));
                 auto bx = d.up(x, "x");
                 F32Array y(std::vector<py::ssize_t>{x.shape(0), x.shape(1), x.shape(2)});
                 Recorder r = d.device.record();
                 d.kernels.rotary(r, bx, d.up(cos_sin, "cos_sin"), T, H, D, rot_dim);
                 r.download(bx, 0, y.nbytes(), y.mutable_data());
                 r.submit();
                 return y;
             })
        .def("embedding",
             [](PyDevice& d, U32Array ids, py::buffer table, const std::string& format, uint32_t cols) {
                 GpuMatrix m = matrix_from(d, table, format, cols);
                 for (py::ssize_t i = 0; i < ids.size(); ++i)
                     if (ids.data()[i] >= m.rows)
                         throw std::invalid_argument("webgpu embedding: token id " + std::to_string(ids.data()[i]) +
                                                     " outside the vocabulary of " + std::to_string(m.rows));
                 uint32_t T = uint32_t(ids.size());
                 auto by = d.scratch(uint64_t(T) * cols, "y");
                 F32Array y(std::vector<py::ssize_t>{py::ssize_t(T), py::ssize_t(cols)});
                 Recorder r = d.device.record();
                 d.kernels.embedding(r, d.upu(ids, "ids"), T, m, by);
                 r.download(by, 0, y.nbytes(), y.mutable_data());
                 r.submit();
                 return py::make_tuple(y, m.chunks.size());
             })
        .def("elementwise",
             [](PyDevice& d, const std::string& op, F32Array a, py::object b, float s) {
                 auto ba = d.up(a, "a");
                 BufferPtr bb;
                 if (!b.is_none()) {
                     F32Array barr = b.cast<F32Array>();
                     if (barr.size() != a.size()) throw std::invalid_argument("webgpu " + op + ": b must match a");
                     bb = d.up(barr, "b");
                 }
                 auto by = d.scratch(a.size(), "y");
                 F32Array y(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
                 Recorder r = d.device.record();
                 d.kernels.elementwise(r, op, ba, bb, by, uint32_t(a.size()), s);
                 r.download(by, 0, y.nbytes(), y.mutable_data());
                 r.submit();
                 return y;
             },
             py::arg("op"), py::arg("a"), py::arg("b") = py::none(), py::arg("s") = 0.0f)
        .def("router_topk",
             [](PyDevice& d, F32Array logits, uint32_t k, bool renormalize) {
                 if (logits.ndim() != 2) throw std::invalid_argument("webgpu router_topk: logits must be (T, E)");
                 uint32_t T = uint32_t(logits.shape(0)), E = uint32_t(logits.shape(1));
                 auto bids = d.scratch(uint64_t(T) * k, "ids"), bw = d.scratch(uint64_t(T) * k, "weights");
                 U32Array ids(std::vector<py::ssize_t>{py::ssize_t(T), py::ssize_t(k)});
                 F32Array w(std::vector<py::ssize_t>{py::ssize_t(T), py::ssize_t(k)});
                 Recorder r = d.device.record();
                 d.kernels.router_topk(r, d.up(logits, "logits"), bids, bw, T, E, k, renormalize);
                 r.download(bids, 0, ids.nbytes(), ids.mutable_data());
                 r.download(bw, 0, w.nbytes(), w.mutable_data());
                 r.submit();
                 return py::make_tuple(ids, w);
             })
        .def("attention",
             // One window over a cache that already holds pos0 committed cells: the window's k/v
             // are written into the cache (kv_write) and attended to in the same submit.
             [](PyDevice& d, F32Array q, F32Array k_cache, F32Array v_cache, F32Array k_new, F32Array v_new,
                uint32_t pos0, float scale) {
                 if (q.ndim() != 3 || k_cache.ndim() != 3) throw std::invalid_argument("webgpu attention: q (T,Hq,D), caches (cells,Hk,D)");
                 uint32_t T = uint32_t(q.shape(0)), Hq = uint32_t(q.shape(1)), D = uint32_t(q.shape(2));
                 uint32_t cells = uint32_t(k_cache.shape(0)), Hk = uint32_t(k_cache.shape(1));
                 if (pos0 + T > cells) throw std::invalid_argument("webgpu attention: window past the cache");
                 auto bk = d.up(k_cache, "k_cache"), bv = d.up(v_cache, "v_cache");
                 auto bout = d.scratch(uint64_t(T) * Hq * D, "out");
                 auto scores = d.scratch(uint64_t(T) * Hq * (pos0 + T), "scores");
                 F32Array out(std::vector<py::ssize_t>{py::ssize_t(T), py::ssize_t(Hq), py::ssize_t(D)});
                 Recorder r = d.device.record();
                 d.kernels.kv_write(r, d.up(k_new, "k"), d.up(v_new, "v"), bk, bv, T, Hk * D, pos0);
                 d.kernels.attention(r, d.up(q, "q"), bk, bv, scores, bout, T, Hq, Hk, D, pos0, scale);
                 r.download(bout, 0, out.nbytes(), out.mutable_data());
                 F32Array kc(std::vector<py::ssize_t>{k_cache.shape(0), k_cache.shape(1), k_cache.shape(2)});
                 r.download(bk, 0, kc.nbytes(), kc.mutable_data());
                 r.submit();
                 return py::make_tuple(out, kc);
             })
        .def("gdn",
             [](PyDevice& d, F32Array q, F32Array k, F32Array v, F32Array g, F32Array beta, F32Array state,
                uint32_t commit_rows, float scale) {
                 if (q.ndim() != 3 || v.ndim() != 3 || state.ndim() != 3)
                     throw std::invalid_argument("webgpu gdn: q/k (T,Hk,Dk), v (T,Hv,Dv), state (Hv,Dk,Dv)");
                 uint32_t T = uint32_t(q.shape(0)), Hk = uint32_t(q.shape(1)), Dk = uint32_t(q.shape(2));
                 uint32_t Hv = uint32_t(v.shape(1)), Dv = uint32_t(v.shape(2));
                 auto bs = d.up(state, "state");
                 auto bout = d.scratch(uint64_t(T) * Hv * Dv, "out");
                 F32Array out(std::vector<py::ssize_t>{py::ssize_t(T), py::ssize_t(Hv), py::ssize_t(Dv)});
                 F32Array s2(std::vector<py::ssize_t>{state.shape(0), state.shape(1), state.shape(2)});
                 Recorder r = d.device.record();
                 d.kernels.gdn_window(r, d.up(q, "q"), d.up(k, "k"), d.up(v, "v"), d.up(g, "g"), d.up(beta, "beta"), bs,
                                      bout, T, Hk, Hv, Dk, Dv, commit_rows, scale);
                 r.download(bout, 0, out.nbytes(), out.mutable_data());
                 r.download(bs, 0, s2.nbytes(), s2.mutable_data());
                 r.submit();
                 return py::make_tuple(out, s2);
             })
        .def("causal_conv",
             [](PyDevice& d, F32Array x, F32Array w, F32Array hist, uint32_t commit_rows) {
                 if (x.ndim() != 2 || w.ndim() != 2) throw std::invalid_argument("webgpu causal_conv: x (T,C), weight (C,K)");
                 uint32_t T = uint32_t(x.shape(0)), C = uint32_t(x.shape(1)), Kc = uint32_t(w.shape(1));
                 auto bh = d.up(hist, "history");
                 auto by = d.scratch(x.size(), "y");
                 F32Array y(std::vector<py::ssize_t>{x.shape(0), x.shape(1)});
                 F32Array h2(std::vector<py::ssize_t>(hist.shape(), hist.shape() + hist.ndim()));
                 Recorder r = d.device.record();
                 d.kernels.causal_conv(r, d.up(x, "x"), d.up(w, "weight"), bh, by, T, C, Kc, commit_rows);
                 r.download(by, 0, y.nbytes(), y.mutable_data());
                 r.download(bh, 0, h2.nbytes(), h2.mutable_data());
                 r.submit();
                 return py::make_tuple(y, h2);
             });
}
