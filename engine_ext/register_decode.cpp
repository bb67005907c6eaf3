// Python bindings of the decoding area: drafters, sampler, decode loop, and the fake model that
// tests and the model-free benchmark drive the loop with.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "decode.h"
#include "drafter.h"
#include "fake_model.h"
#include "sampler.h"
#include "window_model.h"

#include "telemetry_py.h"

namespace py = pybind11;
using namespace strata;

namespace {

std::vector<int32_t> to_ids(const py::handle& seq) {
    std::vector<int32_t> out;
    for (auto item : seq) {
        const long long v = py::cast<long long>(item);
        if (v < INT32_MIN || v > INT32_MAX) throw py::value_error("token id " + std::to_string(v) + " does not fit int32");
        out.push_back(int32_t(v));
    }
    return out;
}

DrafterKind drafter_kind(const std::string& name) {
    if (name == "none") return DrafterKind::none;
    if (name == "baseline") return DrafterKind::baseline;
    if (name == "suffix") return DrafterKind::suffix;
    throw py::value_error("unknown drafter '" + name + "' (none, baseline, suffix)");
}


DecodeSettings settings_from(const py::kwargs& kw) {
    static const char* known[] = {"max_new", "temperature", "top_k", "top_p", "repetition_penalty",
                                  "presence_penalty", "frequency_penalty", "seed", "drafter", "max_draft",
                                  "min_match", "stop_ids", "forced", "copy_bias", "copy_skip"};
    for (auto item : kw) {
        const std::string k = py::str(item.first);
        if (std::find(std::begin(known), std::end(known), k) == std::end(known))
            throw py::type_error("unknown decode setting '" + k + "'");
    }
    auto get = [&](const char* k) -> py::object { return kw.contains(k) ? py::object(kw[k]) : py::none(); };
    DecodeSettings s;
    if (auto v = get("max_new"); !v.is_none()) s.max_new = v.cast<int>();
    if (auto v = get("temperature"); !v.is_none()) s.sampling.temperature = v.cast<float>();
    if (auto v = get("top_k"); !v.is_none()) s.sampling.top_k = v.cast<int>();
    if (auto v = get("top_p"); !v.is_none()) s.sampling.top_p = v.cast<float>();
    if (auto v = get("repetition_penalty"); !v.is_none()) s.sampling.repetition_penalty = v.cast<float>();
    if (auto v = get("presence_penalty"); !v.is_none()) s.sampling.presence_penalty = v.cast<float>();
    if (auto v = get("frequency_penalty"); !v.is_none()) s.sampling.frequency_penalty = v.cast<float>();
    if (auto v = get("seed"); !v.is_none()) s.sampling.seed = v.cast<uint64_t>();
    if (auto v = get("copy_bias"); !v.is_none()) s.sampling.copy_bias = v.cast<float>();
    if (auto v = get("drafter"); !v.is_none()) s.drafter = drafter_kind(v.cast<std::string>());
    if (auto v = get("max_draft"); !v.is_none()) {
        s.max_draft = v.cast<int>();
        if (s.max_draft < 0) throw py::value_error("max_draft must be >= 0 or None (adaptive)");
    }
    if (auto v = get("min_match"); !v.is_none()) s.min_match = v.cast<int>();
    if (auto v = get("stop_ids"); !v.is_none()) s.stop_ids = to_ids(v);
    if (auto v = get("forced"); !v.is_none()) s.forced = to_ids(v);
    if (auto v = get("copy_skip"); !v.is_none()) s.copy_skip = to_ids(v);
    if (s.sampling.top_k < 0) throw py::value_error("top_k must be >= 0");
    if (!(s.sampling.top_p > 0.f)) throw py::value_error("top_p must be > 0");
    if (!(s.sampling.repetition_penalty > 0.f)) throw py::value_error("repetition_penalty must be > 0");
    if (!(s.sampling.copy_bias >= 0.f && std::isfinite(s.sampling.copy_bias)))
        throw py::value_error("copy_bias must be a finite number >= 0");
    return s;
}

}  // namespace


void register_decode(py::module_& m) {
    // WindowModel and the error mapping are registered by register_model (module.cpp calls it first).

    // ---- fake model
    py::class_<FakeWindowModel, WindowModel, std::shared_ptr<FakeWindowModel>>(m, "FakeLM",
        "Deterministic stand-in model for tests: logits depend on the last `order` tokens (sharp) and "
        "on the whole history (weak); enforces the window rules.")
        .def(py::init<int, uint64_t, int64_t, int, float, float, double, double, float>(), py::arg("vocab"),
             py::arg("seed") = 0, py::arg("context_limit") = 4096, py::arg("order") = 3, py::arg("sharp") = 8.f,
             py::arg("history_weight") = 1.f, py::arg("cost_us_base") = 0.0, py::arg("cost_us_per_row") = 0.0,
             py::arg("copy_bias") = 0.f)
        .def("run",
             [](FakeWindowModel& self, py::object tokens) {
                 const auto ids = to_ids(tokens);
                 const float* p;
                 {
                     py::gil_scoped_release nogil;
                     p = self.run(ids.data(), int(ids.size()));
                 }
                 py::array_t<float> out({py::ssize_t(ids.size()), py::ssize_t(self.vocab())});
                 std::memcpy(out.mutable_data(), p, ids.size() * size_t(self.vocab()) * sizeof(float));
                 return out;
             },
             py::arg("tokens"))
        .def("commit", &FakeWindowModel::commit, py::arg("keep"))
        .def_property_readonly("pos", &FakeWindowModel::pos)
        .def_property_readonly("context_limit", &FakeWindowModel::context_limit)
        .def_property_readonly("vocab", &FakeWindowModel::vocab)
        .def_property_readonly("window_open", &FakeWindowModel::window_open)
        .def_property_readonly("committed", &FakeWindowModel::committed)
        .def_property_readonly("runs", &FakeWindowModel::runs)
        .def_property_readonly("rows", &FakeWindowModel::rows)
        .def("reset", &FakeWindowModel::reset)
        .def("save_state", [](const FakeWindowModel& self) { return py::bytes(self.save_state()); })
        .def("load_state", [](FakeWindowModel& self, py::bytes b) { self.load_state(std::string(b)); },
             py::arg("blob"))
        .def("last_telemetry", [](const FakeWindowModel& self) { return telemetry_dict(self.last_telemetry()); });

    // ---- drafters
    py::class_<Drafter>(m, "Drafter")
        .def("append", [](Drafter& d, py::object t) { auto v = to_ids(t); d.append(v.data(), v.size()); },
             py::arg("tokens"))
        .def("add_document", [](Drafter& d, py::object t) { auto v = to_ids(t); d.add_document(v.data(), v.size()); },
             py::arg("tokens"))
        .def("propose",
             [](const Drafter& d, int max_tokens, int min_match) {
                 Draft r = d.propose(max_tokens, min_match);
                 return py::make_tuple(r.tokens, r.match_len);
             },
             py::arg("max_tokens"), py::arg("min_match") = 4,
             "-> (draft tokens, match length); empty when no match of min_match tokens")
        .def("reset", &Drafter::reset)
        .def_property_readonly("tokens", &Drafter::tokens)
        .def_property_readonly("kind", [](const Drafter& d) { return drafter_name(int(d.kind())); });
    py::class_<BaselineDrafter, Drafter>(m, "BaselineDrafter")
        .def(py::init<int>(), py::arg("cap") = 3)
        .def_property_readonly("cap", &BaselineDrafter::cap);
    py::class_<SuffixDrafter, Drafter>(m, "SuffixDrafter")
        .def(py::init<>())
        .def_property_readonly("n_contexts", &SuffixDrafter::n_contexts)
        .def_property_readonly_static("max_order", [](py::object) { return SuffixDrafter::kMaxOrder; });

    // ---- limits the front ends validate settings against (strata.settings reads these)
    {
        py::dict limits;
        limits["max_draft"] = LengthController::kMaxDraft;
        limits["max_window"] = LengthController::kMaxT;
        limits["max_new"] = std::numeric_limits<int>::max();
        limits["max_top_k"] = std::numeric_limits<int>::max();
        limits["max_min_match"] = BaselineDrafter::kMaxBackward;
        limits["max_seed"] = std::numeric_limits<uint64_t>::max();
        limits["max_token_id"] = std::numeric_limits<int32_t>::max();
        limits["max_context"] = int64_t(std::numeric_limits<int32_t>::max());
        limits["max_threads"] = 1024;
        m.attr("LIMITS") = limits;
    }

    // ---- sampler
    m.def("counter_uniform", &counter_uniform, py::arg("seed"), py::arg("position"), py::arg("token"));
    m.def("gumbel_noise", &gumbel_noise, py::arg("seed"), py::arg("position"), py::arg("token"));
    py::class_<Sampler>(m, "Sampler")
        .def(py::init([](float temperature, int top_k, float top_p, float repetition_penalty, float presence_penalty,
                         float frequency_penalty, uint64_t seed, float copy_bias) {
                 SamplingParams p;
                 p.temperature = temperature;
                 p.top_k = top_k;
                 p.top_p = top_p;
                 p.repetition_penalty = repetition_penalty;
                 p.presence_penalty = presence_penalty;
                 p.frequency_penalty = frequency_penalty;
                 p.seed = seed;
                 p.copy_bias = copy_bias;
                 return Sampler(p);
             }),
             py::arg("temperature") = 0.f, py::arg("top_k") = 0, py::arg("top_p") = 1.f,
             py::arg("repetition_penalty") = 1.f, py::arg("presence_penalty") = 0.f,
             py::arg("frequency_penalty") = 0.f, py::arg("seed") = 0, py::arg("copy_bias") = 0.f)
        .def("accept", &Sampler::accept, py::arg("token"))
        .def("sample",
             [](Sampler& s, py::array_t<float, py::array::c_style | py::array::forcecast> logits, int64_t position,
                py::object pending, int32_t copy) {
                 if (logits.ndim() != 1) throw py::value_error("sample takes one row of logits");
                 auto pend = pending.is_none() ? std::vector<int32_t>{} : to_ids(pending);
                 return s.sample(logits.data(), int(logits.shape(0)), position, pend.data(), int(pend.size()), copy);
             },
             py::arg("logits"), py::arg("position"), py::arg("pending") = py::none(), py::arg("copy") = -1);

    // ---- copy index (the copy bias's predictor; standalone for tests)
    py::class_<CopyIndex>(m, "CopyIndex")
        .def(py::init([](py::object source) {
                 const auto ids = to_ids(source);
                 CopyIndex c;
                 c.build(ids.data(), ids.size());
                 return c;
             }),
             py::arg("source"))
        .def("predict",
             [](const CopyIndex& c, py::object context) {
                 const auto ids = to_ids(context);
                 int64_t len = 0;
                 const int32_t t = c.predict(ids.data(), ids.size(), &len);
                 return py::make_tuple(t, len);
             },
             py::arg("context"), "-> (token after the longest suffix's most recent occurrence or -1, suffix length)")
        .def("predictions",
             [](const CopyIndex& c, py::object context, size_t start) {
                 const auto ids = to_ids(context);
                 std::vector<int32_t> out;
                 CopyIndex::Walk w;
                 for (size_t i = 0; i <= ids.size(); ++i) {
                     if (i >= start) out.push_back(c.predict(w));
                     if (i < ids.size()) w = c.advance(w, ids[i]);
                 }
                 return out;
             },
             py::arg("context"), py::arg("start") = 0,
             "the prediction after each prefix context[:k], k = start..len(context), in one walk");

    // ---- length controller (standalone, for tests and tools)
    py::class_<LengthController>(m, "LengthController")
        .def(py::init<>())
        .def("choose", &LengthController::choose, py::arg("match_len"), py::arg("available"))
        .def("observe_drafts", &LengthController::observe_drafts, py::arg("match_len"), py::arg("observed"),
             py::arg("accepted"))
        .def("observe_cost", &LengthController::observe_cost, py::arg("T"), py::arg("us"))
        .def("observe_window", &LengthController::observe_window, py::arg("T"), py::arg("keep"),
             "a window of T rows kept `keep`: charges (or credits) the loss budget")
        .def("begin_generation", &LengthController::begin_generation)
        .def("draft_cap", &LengthController::draft_cap, py::arg("available"))
        .def_property_readonly("budget_us", &LengthController::budget_us,
                               "what drafting may still lose in this generation (microseconds)")
        .def("acceptance", &LengthController::acceptance, py::arg("bucket"), py::arg("position"))
        .def("cost", &LengthController::cost, py::arg("T"))
        .def("expected_keep", &LengthController::expected_keep, py::arg("match_len"), py::arg("drafts"))
        .def_static("bucket", &LengthController::bucket, py::arg("match_len"))
        .def("reset", &LengthController::reset);

    // ---- decode loop
    py::class_<Decoder, std::shared_ptr<Decoder>>(m, "Decoder")
        .def(py::init<std::shared_ptr<WindowModel>>(), py::arg("model"))
        .def(
            "generate",
            [](Decoder& dec, py::object prompt, py::object callback, py::kwargs kw) {
                 const DecodeSettings s = settings_from(kw);
                 const auto ids = to_ids(prompt);
                 // The loop runs without the GIL; the callback takes it, and so does the check for
                 // Ctrl-C between windows. Either one raising ends the loop with the state committed.
                 Decoder::WindowCallback cb = [&](const std::vector<int32_t>& emitted, const WindowTelemetry& t) {
                     py::gil_scoped_acquire gil;
                     bool go_on = true;
                     if (!callback.is_none()) {
                         py::object r = callback(py::cast(emitted), telemetry_dict(t));
                         go_on = r.is_none() || r.cast<bool>();
                     }
                     if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                     return go_on;
                 };
                 DecodeResult r;
                 {
                     py::gil_scoped_release nogil;
                     r = dec.generate(ids, s, cb);
                 }
                 py::dict out;
                 out["tokens"] = r.tokens;
                 out["stop_reason"] = r.stop_reason;
                 out["prefill_us"] = r.prefill_us;
                 out["n_prefill"] = r.n_prefill;
                 return out;
             },
             py::arg("prompt"), py::kw_only(), py::arg("callback") = py::none(),
             "generate(prompt, *, max_new=256, temperature=0, top_k=0, top_p=1, repetition_penalty=1, "
             "presence_penalty=0, frequency_penalty=0, seed=0, drafter='suffix', max_draft=None, "
             "min_match=4, stop_ids=None, copy_bias=0, copy_skip=None, callback=None) -> {tokens, stop_reason, prefill_us, n_prefill}. "
             "callback(tokens, stats) after every window; returning False stops.")
        .def(
            "start",
            [](Decoder& dec, py::object prompt, py::kwargs kw) {
                 const DecodeSettings s = settings_from(kw);
                 const auto ids = to_ids(prompt);
                 WindowTelemetry t;
                 std::vector<int32_t> out;
                 {
                     py::gil_scoped_release nogil;
                     out = dec.start(ids, s, &t);
                 }
                 return py::make_tuple(out, telemetry_dict(t));
             },
             py::arg("prompt"),
             "prefill and emit the first token: -> (tokens, stats); settings as for generate")
        .def(
            "step",
            [](Decoder& dec) {
                 WindowTelemetry t;
                 std::vector<int32_t> out;
                 {
                     py::gil_scoped_release nogil;
                     out = dec.step(&t);
                 }
                 return py::make_tuple(out, telemetry_dict(t));
             },
             "run one window: -> (tokens, stats)")
        .def("stop", &Decoder::stop, py::arg("reason") = "stopped")
        .def_property_readonly("active", &Decoder::active)
        .def_property_readonly("stop_reason",
                               [](const Decoder& d) -> py::object {
                                   if (d.stop_reason().empty()) return py::none();
                                   return py::str(d.stop_reason());
                               })
        .def_property_readonly("prefill_us", [](const Decoder& d) { return d.result().prefill_us; })
        .def_property_readonly("history", &Decoder::history)
        .def_property_readonly("pending", &Decoder::pending)
        .def_property_readonly("pos", [](Decoder& d) { return d.model().pos(); })
        .def("set_state",
             [](Decoder& d, py::object history, py::object pending) { d.set_state(to_ids(history), to_ids(pending)); },
             py::arg("history"), py::arg("pending"))
        .def("add_document", [](Decoder& d, py::object t) { d.add_document(to_ids(t)); }, py::arg("tokens"))
        .def_property_readonly("documents", &Decoder::documents)
        .def("peek_draft",
             [](Decoder& d, const std::string& kind, int max_tokens, int min_match) {
                 Draft r = d.peek_draft(drafter_kind(kind), max_tokens, min_match);
                 return py::make_tuple(r.tokens, r.match_len);
             },
             py::arg("drafter"), py::arg("max_tokens"), py::arg("min_match") = 4)
        .def("reset", &Decoder::reset)
        .def("controller_state",
             [](Decoder& d) {
                 auto& c = d.controller();
                 py::dict out;
                 py::list cost, samples;
                 for (int T = 1; T <= LengthController::kMaxT; ++T) {
                     cost.append(c.cost(T));
                     samples.append(c.cost_samples(T));
                 }
                 py::list acc;
                 for (int b = 0; b < LengthController::kBuckets; ++b) {
                     py::list row;
                     for (int i = 0; i < LengthController::kMaxDraft; ++i) row.append(c.acceptance(b, i));
                     acc.append(row);
                 }
                 out["cost_us"] = cost;
                 out["cost_samples"] = samples;
                 out["budget_us"] = c.budget_us();
                 out["acceptance"] = acc;
                 return out;
             },
             "estimated window cost per T (index 0 is T=1) and acceptance per match bucket and position")
        .def("reset_controller", [](Decoder& d) { d.controller().reset(); });
}
