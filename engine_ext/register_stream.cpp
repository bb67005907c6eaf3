// Bindings for expert streaming: the pack reader's CRC, StreamingExpertStore (an ExpertStore
// that the engine takes through strata.model.build_engine(..., expert_store=...)), and the test
// hooks that the stream tests drive directly.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstring>
#include <optional>

#include "expert_cache.h"
#include "model.h"
#include "routing_moce.h"
#include "window_model.h"

#include "telemetry_py.h"

namespace py = pybind11;

namespace {

strata::WFormat parse_dtype(const std::string& s) {
    if (s == "bf16") return strata::WFormat::BF16;
    if (s == "f32") return strata::WFormat::F32;
    throw strata::ModelError("expert dtype '" + s + "' is not supported (bf16 or f32)");
}

py::array copy_mat(const strata::MatView& m) {
    if (m.format == strata::WFormat::BF16) {
        py::array_t<uint16_t> a({m.rows, m.cols});
        std::memcpy(a.mutable_data(), m.data, m.bytes());
        return std::move(a);
    }
    if (strata::format_info(m.format).quantized) {  // the stored blocks, one row of bytes per matrix row
        const int64_t row = strata::format_row_bytes(m.format, m.cols);
        py::array_t<uint8_t> a({int64_t(m.rows), row});
        std::memcpy(a.mutable_data(), m.data, size_t(m.rows) * size_t(row));
        return std::move(a);
    }
    if (m.format != strata::WFormat::F32) throw strata::ModelError(std::string("expert matrix in ") + strata::format_info(m.format).name + " cannot be copied out as an array");
    py::array_t<float> a({m.rows, m.cols});
    std::memcpy(a.mutable_data(), m.data, m.bytes());
    return std::move(a);
}


// `threads` threads pread `block` bytes at each offset (O_DIRECT when asked and allowed).
std::pair<int64_t, double> raw_read(const std::string& path, const std::vector<int64_t>& offsets, int64_t block,
                                    int threads, bool direct) {
    std::atomic<size_t> next{0};
    std::atomic<int64_t> bytes{0};
    std::atomic<bool> failed{false};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < std::max(1, threads); ++t) {
        ts.emplace_back([&] {
            int flags = O_RDONLY | O_CLOEXEC;
#ifdef O_DIRECT
            if (direct) flags |= O_DIRECT;
#endif
            const int fd = ::open(path.c_str(), flags);
            // the same kind of buffer as the store's slots (huge-page advised, touched), so
            // that the comparison isolates the store's own overhead
            const size_t len = size_t((block + 4095) / 4096 * 4096);
            void* buf = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (buf == MAP_FAILED) buf = nullptr;
#ifdef MADV_HUGEPAGE
            if (buf) ::madvise(buf, len, MADV_HUGEPAGE);
#endif
            if (buf) std::memset(buf, 0, len);
            if (fd < 0 || !buf) failed = true;
            for (size_t i; !failed && (i = next++) < offsets.size();) {
                const ssize_t r = ::pread(fd, buf, size_t(block), offsets[i]);
                if (r < 0) failed = true;
                else bytes += r;
            }
            if (fd >= 0) ::close(fd);
            if (buf) ::munmap(buf, len);
        });
    }
    for (auto& t : ts) t.join();
    if (failed) throw std::runtime_error("raw_read: cannot read " + path);
    return {bytes.load(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

strata::RoutingOptions routing_options(bool cache_aware, int protect, float bonus, int draft_protect,
                                       float draft_bonus, bool hard_budget, int budget_anchors,
                                       bool root_only_readahead) {
    strata::RoutingOptions o;
    o.cache_aware = cache_aware;
    o.protect = protect;
    o.bonus = bonus;
    o.draft_protect = draft_protect;
    o.draft_bonus = draft_bonus;
    o.hard_budget = hard_budget;
    o.budget_anchors = budget_anchors;
    o.root_only_readahead = root_only_readahead;
    return o;
}

}  // namespace

void register_stream(py::module_& m) {
    using strata::StreamingExpertStore;
    // The ExpertStore base and the C++ -> strata.errors mapping are registered by register_model
    // (module.cpp calls it first).

    m.def("crc32", [](py::buffer b, uint32_t crc) {
        py::buffer_info info = b.request();
        const size_t n = size_t(info.size) * size_t(info.itemsize);
        py::gil_scoped_release nogil;
        return strata::crc32(info.ptr, n, crc);
    }, py::arg("data"), py::arg("crc") = 0, "CRC-32 (zlib polynomial) of a contiguous buffer.");

    // Benchmark baseline: the disk's rate with nothing of strata in the way (no cache, no CRC).
    m.def("raw_read", [](const std::string& path, std::vector<int64_t> offsets, int64_t block, int threads,
                         bool direct) {
        std::pair<int64_t, double> r;
        {
            py::gil_scoped_release nogil;
            r = raw_read(path, offsets, block, threads, direct);
        }
        return py::make_tuple(r.first, r.second);
    }, py::arg("path"), py::arg("offsets"), py::arg("block"), py::arg("threads") = 4, py::arg("direct") = true,
       "Benchmark baseline: (bytes, seconds) for reading `block` bytes at each offset, no cache, no CRC.");

    m.def("route_window",
          [](py::array_t<float, py::array::c_style | py::array::forcecast> logits, int k, bool renormalize,
             std::optional<py::array_t<uint8_t, py::array::c_style | py::array::forcecast>> ready, bool cache_aware,
             int protect, float bonus, int draft_protect, float draft_bonus, bool hard_budget,
             int budget_anchors) {
              if (logits.ndim() != 2) throw py::value_error("logits must be [rows, experts]");
              const int rows = int(logits.shape(0)), E = int(logits.shape(1));
              if (k < 1 || k > E) throw py::value_error("k must be in 1..experts");
              if (ready && ready->size() != E) throw py::value_error("ready must have one entry per expert");
              const strata::RoutingOptions o = routing_options(cache_aware, protect, bonus, draft_protect,
                                                               draft_bonus, hard_budget, budget_anchors, false);
              py::array_t<int32_t> idx({rows, k});
              py::array_t<float> w({rows, k});
              strata::route_window(logits.data(), rows, E, k, renormalize, o, ready ? ready->data() : nullptr,
                                   idx.mutable_data(), w.mutable_data());
              return py::make_tuple(idx, w);
          },
          py::arg("logits"), py::arg("k"), py::arg("renormalize") = true, py::arg("ready") = py::none(),
          py::arg("cache_aware") = false, py::arg("protect") = 0, py::arg("bonus") = 0.f,
          py::arg("draft_protect") = -1, py::arg("draft_bonus") = NAN, py::arg("hard_budget") = false,
          py::arg("budget_anchors") = -1,
          "Routes a window's rows (row 0 = root) with the exact or a cache-aware (MoCE) mode.");

    // Engine.set_routing / Engine.routing: the engine class is bound in register_model.cpp; the
    // streaming area adds the cache-aware routing switch to it here.
    if (py::hasattr(m, "Engine")) {
        py::object engine_cls = m.attr("Engine");
        engine_cls.attr("set_routing") = py::cpp_function(
            [](strata::Engine& e, bool cache_aware, int protect, float bonus, int draft_protect, float draft_bonus,
               bool hard_budget, int budget_anchors, bool root_only_readahead) {
                if (e.window_open()) throw strata::WindowError("set_routing: commit the open window first");
                const strata::RoutingOptions o = routing_options(cache_aware, protect, bonus, draft_protect,
                                                                 draft_bonus, hard_budget, budget_anchors,
                                                                 root_only_readahead);
                e.set_routing(o);
            },
            py::is_method(engine_cls), py::name("set_routing"), py::arg("cache_aware") = false,
            py::arg("protect") = 0, py::arg("bonus") = 0.f, py::arg("draft_protect") = -1,
            py::arg("draft_bonus") = NAN, py::arg("hard_budget") = false, py::arg("budget_anchors") = -1,
            py::arg("root_only_readahead") = false,
            "Cache-aware routing (MoCE). Any active mode except root_only_readahead changes the model: "
            "windows are then marked approximate.");
        engine_cls.attr("routing") = py::cpp_function(
            [](const strata::Engine& e) {
                const auto& o = e.routing();
                py::dict d;
                d["cache_aware"] = o.cache_aware;
                d["protect"] = o.protect;
                d["bonus"] = o.bonus;
                d["draft_protect"] = o.draft_protect;
                d["draft_bonus"] = o.draft_bonus;
                d["hard_budget"] = o.hard_budget;
                d["budget_anchors"] = o.budget_anchors;
                d["root_only_readahead"] = o.root_only_readahead;
                d["approximate"] = o.approximate();
                return d;
            },
            py::is_method(engine_cls), py::name("routing"));
    }

    py::class_<StreamingExpertStore, strata::ExpertStore, std::shared_ptr<StreamingExpertStore>>(
        m, "StreamingExpertStore")
        .def(py::init([](const std::string& path, int64_t data_offset, int64_t stride, int64_t blob_bytes,
                         int num_experts, int hidden, int inter, const std::string& dtype,
                         std::vector<int> layers, py::array_t<uint32_t, py::array::c_style | py::array::forcecast> crcs,
                         int64_t cache_bytes, const std::string& io_mode, const std::string& eviction,
                         int io_threads, bool readahead, double lfu_half_life, bool prefault,
                         std::vector<std::vector<std::string>> formats) {
                 strata::PackGeometry g;
                 g.path = path;
                 g.data_offset = data_offset;
                 g.stride = stride;
                 g.blob_bytes = blob_bytes;
                 g.num_experts = num_experts;
                 g.hidden = hidden;
                 g.inter = inter;
                 if (formats.empty()) g.format = parse_dtype(dtype);
                 for (const auto& layer : formats) {
                     if (layer.size() != 3) throw py::value_error("formats: one [gate, up, down] triple per layer");
                     std::array<strata::WFormat, 3> f{};
                     for (int m = 0; m < 3; ++m)
                         if (!strata::format_from_name(layer[size_t(m)], f[size_t(m)]))
                             throw strata::ModelError(path + ": expert format '" + layer[size_t(m)] + "' is not supported");
                     g.mat_formats.push_back(f);
                 }
                 g.layers = std::move(layers);
                 g.crcs.assign(crcs.data(), crcs.data() + crcs.size());
                 strata::StreamOptions o;
                 o.cache_bytes = cache_bytes;
                 if (io_mode == "direct") o.io_mode = strata::IoMode::Direct;
                 else if (io_mode == "page_cache") o.io_mode = strata::IoMode::PageCache;
                 else throw py::value_error("io_mode must be 'direct' or 'page_cache', not '" + io_mode + "'");
                 if (eviction == "lru") o.eviction = strata::Eviction::LRU;
                 else if (eviction == "lfu") o.eviction = strata::Eviction::LFU;
                 else throw py::value_error("eviction must be 'lru' or 'lfu', not '" + eviction + "'");
                 o.io_threads = io_threads;
                 o.readahead = readahead;
                 o.lfu_half_life = lfu_half_life;
                 o.prefault = prefault;
                 return std::make_shared<StreamingExpertStore>(std::move(g), o);
             }),
             py::arg("path"), py::arg("data_offset"), py::arg("stride"), py::arg("blob_bytes"),
             py::arg("num_experts"), py::arg("hidden"), py::arg("inter"), py::arg("dtype"),
             py::arg("layers"), py::arg("crcs"), py::arg("cache_bytes"), py::arg("io_mode") = "direct",
             py::arg("eviction") = "lru", py::arg("io_threads") = 4, py::arg("readahead") = false,
             py::arg("lfu_half_life") = 32.0, py::arg("prefault") = false,
             py::arg("formats") = std::vector<std::vector<std::string>>{})
        .def("acquire", [](StreamingExpertStore& s, int layer, std::vector<int> experts,
                           std::vector<int> root) {
            std::vector<strata::ExpertView> views;
            {
                py::gil_scoped_release nogil;
                s.acquire_layer(layer, experts, root, views);
            }
            py::list out;
            for (auto& v : views) out.append(py::make_tuple(copy_mat(v.gate), copy_mat(v.up), copy_mat(v.down)));
            return out;
        }, py::arg("layer"), py::arg("experts"), py::arg("root_experts") = std::vector<int>{},
           "Pins and returns (gate, up, down) copies for each expert; bf16 comes back as uint16 bits.")
        .def("acquire_release", [](StreamingExpertStore& s, int layer, std::vector<int> experts,
                                   std::vector<int> root) {
            py::gil_scoped_release nogil;
            std::vector<strata::ExpertView> views;
            s.acquire_layer(layer, experts, root, views);
            s.release_layer(layer);
        }, py::arg("layer"), py::arg("experts"), py::arg("root_experts") = std::vector<int>{},
           "Loads (waits for) and releases experts without copying them out: for benchmarks.")
        .def("release", &StreamingExpertStore::release_layer, py::arg("layer"),
             py::call_guard<py::gil_scoped_release>())
        .def("prefetch", &StreamingExpertStore::prefetch, py::arg("layer"), py::arg("experts"))
        .def("is_ready", &StreamingExpertStore::is_ready, py::arg("layer"), py::arg("expert"))
        .def("resident", &StreamingExpertStore::resident, py::arg("layer"))
        .def("drain_telemetry", [](StreamingExpertStore& s) {
            strata::WindowTelemetry t;
            s.drain_telemetry(t);
            return strata::telemetry_dict(t);
        })
        .def("inject_read_error", &StreamingExpertStore::inject_read_error, py::arg("layer"),
             py::arg("expert"), py::arg("times") = 1, "Test hook: fail the next reads of one expert with EIO.")
        .def("stress", &StreamingExpertStore::stress, py::arg("threads"), py::arg("iterations"),
             py::arg("max_union"), py::arg("seed") = 0, py::call_guard<py::gil_scoped_release>())
        .def_property("readahead", &StreamingExpertStore::wants_prefetch, &StreamingExpertStore::set_readahead)
        .def_property_readonly("slots", &StreamingExpertStore::slots)
        .def_property_readonly("slots_used", &StreamingExpertStore::slots_used)
        .def_property_readonly("overflow_high_water", &StreamingExpertStore::overflow_high_water)
        .def_property_readonly("io_mode", &StreamingExpertStore::io_mode_name)
        .def_property_readonly("stride", [](const StreamingExpertStore& s) { return s.geo().stride; });
}
