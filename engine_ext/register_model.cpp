// Python bindings of the engine core: Engine (a WindowModel), ExpertStore base, error mapping.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "model.h"

#include "telemetry_py.h"

namespace py = pybind11;
using namespace strata;

namespace {

ModelSpec spec_from_dict(const py::dict& d) {
    ModelSpec s;
    auto geti = [&](const char* k) { return d[k].cast<int64_t>(); };
    s.arch = d["arch"].cast<std::string>();
    s.vocab = int(geti("vocab_size"));
    s.hidden = int(geti("hidden_size"));
    s.n_layers = int(geti("num_layers"));
    s.layer_linear = d["layer_linear"].cast<std::vector<int>>();
    s.layer_moe = d["layer_moe"].cast<std::vector<int>>();
    s.n_heads = int(geti("num_heads"));
    s.n_kv = int(geti("num_kv_heads"));
    s.head_dim = int(geti("head_dim"));
    s.rot_dim = int(geti("rotary_dim"));
    s.rope_theta = d["rope_theta"].cast<double>();
    s.eps = d["eps"].cast<float>();
    s.attn_gated = d["attn_gated"].cast<bool>();
    s.attn_bias = d["attn_bias"].cast<bool>();
    s.norm_plus_one = d["norm_plus_one"].cast<bool>();
    s.lin_nk = int(geti("linear_num_key_heads"));
    s.lin_nv = int(geti("linear_num_value_heads"));
    s.lin_dk = int(geti("linear_key_head_dim"));
    s.lin_dv = int(geti("linear_value_head_dim"));
    s.conv_k = int(geti("linear_conv_kernel"));
    s.gdn_fused = d["gdn_fused"].cast<bool>();
    s.lin_v_tiled = d.contains("linear_v_tiled") && d["linear_v_tiled"].cast<bool>();
    s.n_experts = int(geti("num_experts"));
    s.top_k = int(geti("top_k"));
    s.norm_topk = d["norm_topk_prob"].cast<bool>();
    s.moe_inter = int(geti("moe_intermediate_size"));
    s.shared_inter = int(geti("shared_expert_intermediate_size"));
    s.inter = int(geti("intermediate_size"));
    s.tie = d["tie_word_embeddings"].cast<bool>();
    s.max_pos = geti("max_position_embeddings");
    return s;
}


std::vector<int32_t> tokens_from(const py::object& obj) {
    auto arr = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
    if (!arr) throw py::type_error("tokens must be a sequence of ints");
    if (arr.ndim() != 1) throw py::value_error("tokens must be one-dimensional");
    std::vector<int32_t> out(arr.size());
    auto r = arr.unchecked<1>();
    for (py::ssize_t i = 0; i < arr.size(); ++i) {
        int64_t v = r(i);
        if (v < 0 || v > INT32_MAX)
            throw py::value_error("token id " + std::to_string(v) + " at row " + std::to_string(i) +
                                  " is outside the vocabulary");
        out[i] = int32_t(v);
    }
    return out;
}

// run(out=...): the caller's array the logits go into, as it is (no cast, no copy), else a
// one-line ValueError saying what it must be.
py::array_t<float> logits_out(const py::object& out, py::ssize_t rows, py::ssize_t vocab) {
    const std::string want = "run: out must be a writable C-contiguous float32 array of shape (" + std::to_string(rows) +
                             ", " + std::to_string(vocab) + ")";
    if (!py::isinstance<py::array>(out))
        throw py::value_error(want + ", not " + std::string(py::str(out.get_type().attr("__name__"))));
    auto arr = out.cast<py::array>();
    std::string shape;
    for (py::ssize_t i = 0; i < arr.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(arr.shape(i));
    const std::string got = std::string(py::str(arr.dtype())) + " (" + shape + (arr.ndim() == 1 ? ",)" : ")");
    if (!arr.dtype().is(py::dtype::of<float>()) || arr.ndim() != 2 || arr.shape(0) != rows || arr.shape(1) != vocab)
        throw py::value_error(want + ", not " + got);
    if (!(arr.flags() & py::array::c_style)) throw py::value_error(want + ", not a strided view");
    if (!arr.writeable()) throw py::value_error(want + ", not a read-only one");
    return py::reinterpret_borrow<py::array_t<float>>(arr);
}

}  // namespace

void register_model(py::module_& m) {
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const WindowError& e) {
            py::object cls = py::module_::import("strata.errors").attr("WindowError");
            PyErr_SetString(cls.ptr(), e.what());
        } catch (const ModelError& e) {
            py::object cls = py::module_::import("strata.errors").attr("ModelError");
            PyErr_SetString(cls.ptr(), e.what());
        }
    });

    py::class_<ExpertStore, std::shared_ptr<ExpertStore>>(m, "ExpertStore");
    py::class_<WindowModel, std::shared_ptr<WindowModel>>(m, "WindowModel");

    py::class_<Engine, WindowModel, std::shared_ptr<Engine>>(m, "Engine")
        .def(py::init([](const py::dict& spec, const py::list& tensors,
                         std::shared_ptr<ExpertStore> store, int threads, const std::string& fold,
                         int64_t ctx, const std::string& model_id, const std::string& config_json,
                         const std::string& backend) {
                 ModelSpec s = spec_from_dict(spec);
                 std::vector<TensorRef> refs;
                 for (auto item : tensors) {
                     auto tup = item.cast<py::tuple>();
                     TensorRef r;
                     r.name = tup[0].cast<std::string>();
                     r.path = tup[1].cast<std::string>();
                     r.offset = tup[2].cast<int64_t>();
                     r.dtype = tup[3].cast<std::string>();
                     r.shape = tup[4].cast<std::vector<int64_t>>();
                     refs.push_back(std::move(r));
                 }
                 if (fold != "eager" && fold != "lazy")
                     throw py::value_error("fold must be 'eager' or 'lazy', not '" + fold + "'");
                 EngineOptions o;
                 o.threads = threads;
                 o.lazy_fold = fold == "lazy";
                 o.ctx = ctx;
                 o.model_id = model_id;
                 o.config_json = config_json;
                 o.backend = backend;
                 py::gil_scoped_release rel;
                 return std::make_shared<Engine>(s, refs, std::move(store), o);
             }),
             py::arg("spec"), py::arg("tensors"), py::arg("expert_store") = nullptr, py::arg("threads") = 0,
             py::arg("fold") = "eager", py::arg("ctx") = 0, py::arg("model_id") = "",
             py::arg("config_json") = "{}", py::arg("backend") = "cpu")
        .def(
            "run",
            [](Engine& e, const py::object& tokens, bool last_only, const py::object& out) {
                std::vector<int32_t> tok = tokens_from(tokens);
                if (tok.empty()) e.run_ex(tok.data(), 0, last_only);  // the engine's WindowError
                // the logits go straight into the returned array (the backend's readback writes
                // there), no copy from an engine buffer
                const py::ssize_t rows = last_only ? 1 : py::ssize_t(tok.size()), vocab = e.vocab();
                py::array_t<float> a;
                if (out.is_none()) {
                    a = py::array_t<float>({rows, vocab});
                } else {
                    a = logits_out(out, rows, vocab);
                }
                float* dst = a.mutable_data();
                {
                    py::gil_scoped_release rel;
                    e.run_ex(tok.data(), int(tok.size()), last_only, dst);
                }
                return a;
            },
            py::arg("tokens"), py::arg("last_only") = false, py::arg("out") = py::none(),
            "Run a window of tokens from pos; returns (T, vocab) float32 next-token logits "
            "((1, vocab) with last_only=True). out: a float32 C-contiguous writable array of that "
            "shape to write them into (returned), e.g. one buffer reused every step.")
        .def(
            "commit",
            [](Engine& e, int keep) {
                py::gil_scoped_release rel;
                e.commit(keep);
            },
            py::arg("keep"))
        .def("reset",
             [](Engine& e) {
                 py::gil_scoped_release rel;
                 e.reset();
             })
        .def_property_readonly("pos", &Engine::pos)
        .def_property_readonly("context_limit", &Engine::context_limit)
        .def_property_readonly("vocab_size", &Engine::vocab)
        .def_property_readonly("model_id", &Engine::model_id)
        .def_property_readonly("window_open", &Engine::window_open)
        .def_property_readonly("threads", &Engine::threads)
        .def_property_readonly("backend", &Engine::backend)
        .def("backend_counters",
             [](const Engine& e) {
                 py::dict d;
                 for (auto& [k, v] : e.backend_counters()) d[py::str(k)] = v;
                 return d;
             })
        .def_property_readonly("fold", [](const Engine& e) { return e.lazy_fold() ? "lazy" : "eager"; })
        .def_property_readonly("expert_store", &Engine::expert_store)
        .def_property_readonly("config",
                               [](const Engine& e) {
                                   return py::module_::import("json").attr("loads")(e.config_json());
                               })
        .def("save_state",
             [](Engine& e) {
                 std::string b;
                 {
                     py::gil_scoped_release rel;
                     b = e.save_state();
                 }
                 return py::bytes(b);
             })
        .def("load_state",
             [](Engine& e, const py::bytes& blob) {
                 std::string b = blob;
                 py::gil_scoped_release rel;
                 e.load_state(b);
             })
        .def("last_telemetry", [](const Engine& e) { return telemetry_dict(e.last_telemetry()); })
        .def("as_window_model", [](std::shared_ptr<Engine> e) { return std::static_pointer_cast<WindowModel>(e); });
}
