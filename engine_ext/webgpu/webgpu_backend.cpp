#include "webgpu/webgpu_backend.h"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/quant/formats.h"
#include "webgpu/quant_layout.h"

namespace strata::webgpu {

WeightFormat to_weight_format(WFormat f) {
    switch (f) {
        case WFormat::F32: return WeightFormat::F32;
        case WFormat::F16: return WeightFormat::F16;
        case WFormat::BF16: return WeightFormat::BF16;
        case WFormat::Q8_0: return WeightFormat::Q8_0;
        case WFormat::Q5_0: return WeightFormat::Q5_0;
        case WFormat::Q5_1: return WeightFormat::Q5_1;
        case WFormat::Q4_K: return WeightFormat::Q4_K;
        case WFormat::Q5_K: return WeightFormat::Q5_K;
        case WFormat::Q6_K: return WeightFormat::Q6_K;
        case WFormat::IQ4_XS: return WeightFormat::IQ4_XS;
        default:
            throw std::runtime_error(std::string("webgpu: no kernel for ") + format_info(f).name + " weights");
    }
}

namespace {

// rows x heads vectors of `dim` floats: vector (r, h) at p + r*ld + h*hs.
struct View {
    const float* p;
    int64_t rows, ld, heads, hs, dim;
    uint64_t packed() const { return uint64_t(rows) * heads * dim; }
    uint64_t extent() const { return rows <= 0 ? 0 : uint64_t((rows - 1) * ld + (heads - 1) * hs + dim); }
    bool is_packed() const { return (rows <= 1 || ld == heads * dim) && (heads <= 1 || hs == dim); }
};
View span(const void* p, uint64_t floats) { return View{static_cast<const float*>(p), 1, 0, 1, 0, int64_t(floats)}; }
View rows_of(const float* p, int rows, int ld, int cols) { return View{p, rows, ld, 1, 0, cols}; }

std::vector<float> pack(const View& v) {
    std::vector<float> out(v.packed());
    for (int64_t r = 0; r < v.rows; ++r)
        for (int64_t h = 0; h < v.heads; ++h)
            std::memcpy(&out[(r * v.heads + h) * v.dim], v.p + r * v.ld + h * v.hs, sizeof(float) * v.dim);
    return out;
}

void unpack(const std::vector<float>& in, const View& v) {
    float* p = const_cast<float*>(v.p);
    for (int64_t r = 0; r < v.rows; ++r)
        for (int64_t h = 0; h < v.heads; ++h)
            std::memcpy(p + r * v.ld + h * v.hs, &in[(r * v.heads + h) * v.dim], sizeof(float) * v.dim);
}

uint64_t words(uint64_t floats) { return floats * 4; }

}  // namespace

// The operands of one op. Inputs come first (in), then outputs (out/inout); done() records the
// copies of outputs that went through a temporary, and reads host outputs back. A kernel gets
// each operand packed as it expects: an attached array bound in place when its layout and
// offset allow, else copied into a temporary on the device; host arrays through an upload.
// An attached array is bound from the operand to the end of its buffer (kernels bound their
// loops by their parameters, never by the binding's length), so a dispatch whose operand grows
// (the KV cells of every next position) keeps its cached bind group.
// Inputs and outputs may lie in one device array (the scratch arena): every activation binding
// of the kernels is read_write, and WebGPU allows one buffer in several writable bindings of a
// dispatch (a read-only binding beside a writable one would be a usage conflict). Weights keep
// read-only bindings of their own buffers.
class OpArgs {
public:
    // An op may write anywhere, so a producer's quantized rows end here, except in the ops that
    // check what they write (keeps_made_q: matmul, router_topk, moe_experts).
    explicit OpArgs(WebGpuBackend& b, bool keeps_made_q = false) : b_(b) {
        if (!keeps_made_q) b_.made_q_ = {};
    }

    BufRef in(const View& v, const char* what) {
        if (v.packed() == 0) return b_.temp(16);
        uint64_t off = 0;
        const WebGpuBackend::Region* r = b_.find(v.p, words(v.extent()), off);
        if (!r) {
            auto host = pack(v);
            BufferPtr t = b_.temp(words(host.size()));
            b_.device().write(t, 0, host.data(), words(host.size()));
            return read(BufRef(t, 0, words(host.size())));
        }
        if (v.is_packed() && direct(off)) return read(BufRef(r->buf, off, r->buf->size() - off));
        BufferPtr t = b_.temp(words(v.packed()));
        b_.kernels().copy(b_.rec(), r->buf, t, uint32_t(v.rows), uint32_t(v.heads), uint32_t(v.dim), uint32_t(off / 4),
                          uint32_t(v.ld), uint32_t(v.hs), 0, uint32_t(v.heads * v.dim), uint32_t(v.dim));
        (void)what;
        return read(BufRef(t, 0, words(v.packed())));
    }
    // The whole buffer holding `floats` floats from p, and p's float offset in it (kernels that
    // take offsets and strides themselves).
    BufRef in_whole(const float* p, uint64_t floats, uint32_t& off_floats, const char* what) {
        uint64_t off = 0;
        const WebGpuBackend::Region* r = b_.find(p, words(floats), off);
        if (r && off / 4 <= UINT32_MAX) {
            off_floats = uint32_t(off / 4);
            return read(BufRef(r->buf));
        }
        off_floats = 0;
        return in(span(p, floats), what);
    }
    // A host array of n 32-bit ints, uploaded (index lists the host computed).
    BufRef in_u32(const uint32_t* host, size_t n) {
        BufferPtr t = b_.temp(words(std::max<size_t>(n, 1)));
        if (n) b_.device().write(t, 0, host, words(n));
        return read(BufRef(t, 0, words(std::max<size_t>(n, 1))));
    }

    // A packed buffer for the kernel to write `v` into.
    BufRef out(const View& v, const char* what) {
        (void)what;
        if (v.packed() == 0) return b_.temp(16);
        uint64_t off = 0;
        const WebGpuBackend::Region* r = b_.find(v.p, words(v.extent()), off);
        if (r && v.is_packed() && direct(off)) return write(BufRef(r->buf, off, r->buf->size() - off));
        BufferPtr t = b_.temp(words(v.packed()));
        backs_.push_back({t, v, r ? r->buf : nullptr, off});
        return write(BufRef(t, 0, words(v.packed())));
    }
    // The buffer an output of `rows` rows of `cols` floats at stride ld goes to, for a kernel
    // that takes an offset and a row stride: the whole attached buffer (off, ld), or a packed
    // temporary (0, cols) copied into place by done().
    BufRef out_rows(const float* p, int rows, int ld, int cols, uint32_t& off_floats, uint32_t& stride) {
        View v = rows_of(p, rows, ld, cols);
        uint64_t off = 0;
        const WebGpuBackend::Region* r = b_.find(p, words(v.extent()), off);
        if (r && off / 4 <= UINT32_MAX) {
            off_floats = uint32_t(off / 4);
            stride = uint32_t(ld);
            return write(BufRef(r->buf));
        }
        off_floats = 0;
        stride = uint32_t(cols);
        BufferPtr t = b_.temp(words(v.packed()));
        backs_.push_back({t, v, r ? r->buf : nullptr, off});
        return write(BufRef(t, 0, words(v.packed())));
    }
    // Read and written in place by the kernel (one binding).
    BufRef inout(const View& v, const char* what) {
        (void)what;
        uint64_t off = 0;
        const WebGpuBackend::Region* r = b_.find(v.p, words(v.extent()), off);
        if (r && v.is_packed() && direct(off)) return write(BufRef(r->buf, off, r->buf->size() - off));
        BufferPtr t = b_.temp(words(v.packed()));
        if (r) {
            b_.kernels().copy(b_.rec(), r->buf, t, uint32_t(v.rows), uint32_t(v.heads), uint32_t(v.dim),
                              uint32_t(off / 4), uint32_t(v.ld), uint32_t(v.hs), 0, uint32_t(v.heads * v.dim),
                              uint32_t(v.dim));
        } else {
            auto host = pack(v);
            b_.device().write(t, 0, host.data(), words(host.size()));
        }
        backs_.push_back({t, v, r ? r->buf : nullptr, off});
        return write(BufRef(t, 0, words(v.packed())));
    }

    void done() {
        bool host = false;
        for (auto& b : backs_) {
            const View& v = b.view;
            if (b.region) {
                b_.kernels().copy(b_.rec(), b.tmp, b.region, uint32_t(v.rows), uint32_t(v.heads), uint32_t(v.dim), 0,
                                  uint32_t(v.heads * v.dim), uint32_t(v.dim), uint32_t(b.offset / 4), uint32_t(v.ld),
                                  uint32_t(v.hs));
            } else if (v.is_packed()) {  // read back straight into the host array (the logits)
                b_.rec().download(b.tmp, 0, words(v.packed()), const_cast<float*>(v.p));
                host = true;
            } else {
                auto data = std::make_shared<std::vector<float>>(v.packed());
                b_.rec().download(b.tmp, 0, words(v.packed()), data->data());
                b_.after_flush_.push_back([data, v] { unpack(*data, v); });
                host = true;
            }
        }
        if (host || b_.used_temp_bytes_ > kTempBudget)
            b_.flush();
        else
            b_.submit_early();
    }

private:
    static constexpr uint64_t kTempBudget = 512ull << 20;  // flush a long pass before temporaries pile up
    bool direct(uint64_t off) const { return off % b_.device().limits().min_storage_offset_alignment == 0; }
    static BufRef read(BufRef r) { return r; }
    static BufRef write(BufRef r) { return r; }
    struct Back {
        BufferPtr tmp;
        View view;
        BufferPtr region;  // null: a host array
        uint64_t offset;
    };
    WebGpuBackend& b_;
    std::vector<Back> backs_;
};

namespace {
// moe_combine's inputs, as moe_combine and moe_combine_add_rmsnorm both bind them.
struct CombineIn {
    BufRef D, slot, w, shared, gate;
    uint32_t n_slots;
};
CombineIn combine_inputs(OpArgs& a, const float* D, const int* slot, const float* w, int n, int k, int H,
                         const float* shared, const float* shared_gate) {
    uint64_t nk = uint64_t(n) * k, ny = uint64_t(n) * H;
    std::vector<uint32_t> u(nk);
    int max_slot = 0;
    for (size_t i = 0; i < nk; ++i) {
        if (slot[i] < 0) throw std::out_of_range("moe_combine: negative slot");
        u[i] = uint32_t(slot[i]);
        max_slot = std::max(max_slot, slot[i]);
    }
    CombineIn c;
    c.D = a.in(span(D, uint64_t(max_slot + 1) * H), "expert outputs");
    c.slot = a.in_u32(u.data(), u.size());
    c.w = a.in(span(w, nk), "expert weights");
    c.shared = shared ? a.in(span(shared, ny), "shared") : BufRef();
    c.gate = shared ? a.in(span(shared_gate, n), "shared gate") : BufRef();
    c.n_slots = uint32_t(max_slot + 1);
    return c;
}
}  // namespace

WebGpuBackend::WebGpuBackend(const DeviceOptions& options)
    : device_(std::make_unique<Device>(options)),
      kernels_(std::make_unique<Kernels>(*device_)),
      pool_(std::make_unique<WeightPool>(*device_)),
      rec_(*device_) {
    // gdn_inputs binds the most storage buffers of any kernel (10; the WebGPU default limit is 8)
    uint32_t have = device_->limits().max_storage_buffers_per_stage;
    if (have < Kernels::kMaxStorageBuffers)
        throw std::runtime_error("webgpu: " + device_->adapter().device + " allows " + std::to_string(have) +
                                 " storage buffers per shader stage, strata's kernels need " +
                                 std::to_string(Kernels::kMaxStorageBuffers));
    const char* fuse = std::getenv("STRATA_WEBGPU_FUSE");
    fuse_ = !(fuse && std::string(fuse) == "0");
    folds_ = fuse_ ? folds_from_env() : 0u;
    const char* qg = std::getenv("STRATA_WEBGPU_QUANT_GATHER");
    quant_gather_ = !(qg && std::string(qg) == "0");
    slots_ = std::make_unique<SlotPool>(*device_);
    // "1": every block format; "0": none; unset: the 256-value (K-quant) formats only. On the
    // H200 (2026-12-03, two runs) folding made Q4_K_M decode 12-13% faster and Q8_0 0-9% slower
    // (docs/webgpu.md)
    const char* qf = std::getenv("STRATA_WEBGPU_QUANT_FOLD");
    quant_fold_ = !qf ? FoldMode::KQuants : std::string(qf) == "1" ? FoldMode::All : FoldMode::Off;
    early_first_ = early_first_from_env(true);
}

unsigned WebGpuBackend::folds_from_env() {
    const char* v = std::getenv("STRATA_WEBGPU_FOLD");
    if (!v || !*v) return kDefaultFolds;
    if (std::strcmp(v, "1") == 0) return ~0u;
    if (std::strcmp(v, "0") == 0) return 0u;
    unsigned bits = 0;
    for (const std::string& name : comma_items(v)) {
        unsigned bit = 0;
        for (size_t i = 0; i < std::size(kFoldNames); i++)
            if (name == kFoldNames[i]) bit = 1u << i;
        if (!bit) {
            std::string all;
            for (const char* n : kFoldNames) all += std::string(all.empty() ? "" : ",") + n;
            throw std::invalid_argument(std::string("STRATA_WEBGPU_FOLD='") + v + "': use 0, 1 or a comma list of " + all +
                                        " (unset: none; 1: every fold)");
        }
        bits |= bit;
    }
    return bits;
}

size_t WebGpuBackend::early_first_from_env(bool strict) {
    const char* v = std::getenv("STRATA_WEBGPU_EARLY_FIRST");
    if (!v || !*v) return kEarlySubmit;
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end || n < 1 || n > 4096) {
        if (strict)
            throw std::invalid_argument(std::string("STRATA_WEBGPU_EARLY_FIRST='") + v +
                                        "': use a whole number of dispatches from 1 to 4096 (unset: 48)");
        return kEarlySubmit;
    }
    return size_t(n);
}

bool WebGpuBackend::same_act(WeightFormat a, WeightFormat b) const {
    if (a == b) return true;
    if (!fuse_ || !quant_gather_) return false;
    const QuantLayout &La = quant_layout(a), &Lb = quant_layout(b);
    return La.block_elems == Lb.block_elems && La.act_sums == Lb.act_sums;
}

bool WebGpuBackend::quantized_for(const QuantX& q, const float* X, int T, int ldx, int cols, WeightFormat f) const {
    return q.xq && q.X == X && q.T == T && q.ldx == ldx && q.cols == cols && same_act(q.format, f) &&
           q.submits == submits_;
}

void WebGpuBackend::hint(const float* X, int ldx, int cols, WeightFormat f) {
    if (!made_q_.producer || made_q_.X != X || made_q_.ldx != ldx || made_q_.cols != cols) return;
    if (hints_.size() > 4096) hints_.clear();  // producers that went away: forget, relearn in one window
    hints_[made_q_.producer] = {ldx, cols, f};
}

bool WebGpuBackend::folds(WeightFormat f) const {
    return quant_fold_ == FoldMode::All || (quant_fold_ == FoldMode::KQuants && quant_layout(f).block_elems == 256);
}

const WebGpuBackend::QuantHint* WebGpuBackend::fold_hint(const void* producer, int ld, int cols) const {
    if (!fuse_ || quant_fold_ == FoldMode::Off) return nullptr;
    auto it = hints_.find(producer);
    if (it == hints_.end() || it->second.ldx != ld || it->second.cols != cols || !folds(it->second.format) ||
        cols % int(quant_layout(it->second.format).block_elems))
        return nullptr;
    return &it->second;
}

BufferPtr WebGpuBackend::producing(const void* producer, const float* out, int rows, int ld, int cols) {
    made_q_ = {out, rows, ld, cols, WeightFormat::F32, nullptr, submits_, producer};
    const QuantHint* h = fold_hint(producer, ld, cols);
    if (!h) return nullptr;
    made_q_.format = h->format;
    made_q_.xq = temp(quant_act_words(made_q_.format, uint32_t(rows), uint32_t(cols)) * 4);
    return made_q_.xq;
}

void WebGpuBackend::drop_made_q_over(const void* p, size_t bytes) {
    if (!made_q_.xq) return;
    const auto a = reinterpret_cast<uintptr_t>(p), x0 = reinterpret_cast<uintptr_t>(made_q_.X);
    const size_t xb = (size_t(made_q_.T - 1) * made_q_.ldx + made_q_.cols) * 4;
    if (a < x0 + xb && x0 < a + bytes) made_q_ = {};
}

ExpertSlotHooks WebGpuBackend::expert_slot_hooks() {
    ExpertSlotHooks h;
    h.filled = [this](const ExpertView& v) {
        std::lock_guard<std::mutex> lock(mutex_);
        try {
            slots_->filled(v, open_batch());
        } catch (const std::exception&) {
            // left for the use, which uploads again and reports the error on the engine's thread
        }
    };
    h.freed = [this](const void* slot) {
        std::lock_guard<std::mutex> lock(mutex_);
        slots_->freed(slot, open_batch());
    };
    h.planned = [this](int slots, uint64_t slot_bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        slots_->plan(slots, slot_bytes);
    };
    return h;
}

namespace {

// The routed kernels' expert table: every expert of the layer (resident), or of the layer's
// `layer_experts` with the window's acquired ones filled in (streamed).
uint32_t table_experts(const Backend::MoeExpertsArgs& a) {
    return uint32_t(a.expert_ids ? a.layer_experts : a.n_experts);
}

// The block formats of shaders/matmul_quant.wgsl.
bool quant_matmul_format(WFormat f) {
    return f == WFormat::Q8_0 || f == WFormat::Q5_0 || f == WFormat::Q5_1 || f == WFormat::Q4_K || f == WFormat::Q5_K ||
           f == WFormat::Q6_K || f == WFormat::IQ4_XS;
}

// The CPU's dequantizer for a block format (the embedding rows of a quantized table are made
// on the host, bit-identical to the cpu backend's, and uploaded); false: none.
bool host_rows(WFormat f, quant::QType& t) {
    if (!format_info(f).quantized) return false;
    try {
        t = quant::parse_type(format_info(f).name);
    } catch (const std::invalid_argument&) {
        return false;
    }
    return quant::is_supported(int(t));
}

}  // namespace

bool WebGpuBackend::supports(Op op, WFormat f) const {
    if (op == Op::Embed) {
        quant::QType t;
        return f == WFormat::F32 || f == WFormat::F16 || f == WFormat::BF16 || host_rows(f, t);
    }
    if (op_has_format(op))
        return f == WFormat::F32 || f == WFormat::F16 || f == WFormat::BF16 || quant_matmul_format(f);
    return true;
}

const GpuMatrix& WebGpuBackend::weights(const MatView& W) {
    // a streaming cache slot's matrix: its slot's device copy (SlotPool), current
    if (const GpuMatrix* m = slots_->matrix(W, open_batch(), [this] { flush(); })) return *m;
    WeightFormat format = to_weight_format(W.format);
    // The device copy is current when the view is the same matrix with the same contents
    // version: refilled memory (an expert cache slot) comes with a new version, so no host pass
    // over the weights is needed to notice it.
    auto it = weights_.find(W.data);
    if (it != weights_.end()) {
        CachedMatrix& c = it->second;
        bool same_shape = c.format == W.format && c.rows == W.rows && c.cols == W.cols && c.row_bytes == W.row_bytes;
        if (same_shape && c.version == W.version) return c.matrix;
        // new contents at this address (a refilled expert slot): what is recorded still reads
        // the old ones, so it goes to the GPU before the chunks are rewritten or given back
        flush();
        if (same_shape) {
            rewrite_matrix(*device_, c.matrix, W.data, W.row_bytes);
            c.version = W.version;
            return c.matrix;
        }
        for (const auto& ch : c.matrix.chunks) pool_->give_back({ch.buffer, ch.offset, ch.bytes});
        weights_.erase(it);
    }
    GpuMatrix m = upload_matrix(*device_, W.data, format, uint32_t(W.rows), uint32_t(W.cols), W.row_bytes, pool_.get());
    return weights_.emplace(W.data, CachedMatrix{W.version, W.format, W.rows, W.cols, W.row_bytes, std::move(m)})
        .first->second.matrix;
}

const WebGpuBackend::Region* WebGpuBackend::find(const void* p, size_t bytes, uint64_t& offset) const {
    if (regions_.empty() || !p) return nullptr;
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin()) return nullptr;
    --it;
    if (a >= it->first + it->second.bytes) return nullptr;
    if (a + bytes > it->first + it->second.bytes)
        throw std::logic_error("webgpu: an op argument runs past the end of its attached array");
    offset = a - it->first;
    return &it->second;
}

BufferPtr WebGpuBackend::temp(uint64_t bytes) {
    uint64_t cls = 256;
    while (cls < bytes) cls *= 2;
    auto& free = free_temps_[cls];
    BufferPtr b;
    if (!free.empty()) {
        b = std::move(free.back());
        free.pop_back();
    } else {
        b = device_->create_buffer(cls, "window temporary");
    }
    used_temps_.push_back(b);
    used_temp_bytes_ += cls;
    return b;
}

void WebGpuBackend::flush() {
    for (auto& l : late_reads_) {  // ids the device chose, for the window's telemetry
        auto host = std::make_shared<std::vector<uint32_t>>(l.n);
        rec_.download(l.buf, 0, uint64_t(l.n) * 4, host->data());
        after_flush_.push_back([host, out = l.out] { out->assign(host->begin(), host->end()); });
    }
    late_reads_.clear();
    if (!rec_.empty()) {
        dispatches_ += rec_.dispatches();
        ++submits_;
        rec_.submit();
        encode_s_ += rec_.last_encode_seconds();
        run_s_ += rec_.last_run_seconds();
    }
    window_batched_ = false;
    early_first_ = early_first_from_env(false);
    auto unpacks = std::move(after_flush_);
    after_flush_.clear();
    for (auto& f : unpacks) f();
    // back in reverse, so the next window's k-th temporary of a size is this one's k-th: the
    // same dispatches get the same buffers and find their cached bind groups
    for (auto it = used_temps_.rbegin(); it != used_temps_.rend(); ++it) free_temps_[(*it)->size()].push_back(std::move(*it));
    used_temps_.clear();
    used_temp_bytes_ = 0;
}

void WebGpuBackend::submit_early() {
    if (rec_.dispatches() < (window_batched_ ? kEarlySubmit : early_first_)) return;
    window_batched_ = true;
    dispatches_ += rec_.dispatches();
    ++early_submits_;
    rec_.submit(false);
    encode_s_ += rec_.last_encode_seconds();
}

void WebGpuBackend::attach(const void* p, size_t bytes, bool upload) {
    if (!p || !bytes) return;
    std::lock_guard<std::mutex> lock(mutex_);
    // larger than one binding: stays host memory (each op uploads what it reads)
    if (bytes > device_->limits().max_storage_binding) return;
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    regions_.erase(a);
    auto next = regions_.lower_bound(a);
    if (next != regions_.end() && next->first < a + bytes)
        throw std::logic_error("webgpu: attached arrays overlap");
    if (next != regions_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > a)
        throw std::logic_error("webgpu: attached arrays overlap");
    // a producer's quantized rows stay good unless they lay in this memory: an array attached
    // between the producer and its matmul (a scratch block a layer takes) must not cost the
    // matmul its codes, nor the producer its hint
    drop_made_q_over(p, bytes);
    BufferPtr buf = device_->create_buffer(bytes, "attached array");
    if (upload) device_->write(buf, 0, p, bytes);
    regions_.emplace(a, Region{bytes, std::move(buf)});
}

void WebGpuBackend::detach(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end()) return;
    drop_made_q_over(p, it->second.bytes);  // (as attach)
    regions_.erase(it);  // recorded dispatches keep their buffers alive
}

void WebGpuBackend::to_host(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t off = 0;
    const Region* r = find(p, bytes, off);
    if (!r || !bytes) return;
    rec_.download(r->buf, off, bytes, const_cast<void*>(p));
    flush();
}

void WebGpuBackend::from_host(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t off = 0;
    const Region* r = find(p, bytes, off);
    if (!r || !bytes) return;
    flush();  // what is recorded ran against the old contents
    made_q_ = {};
    device_->write(r->buf, off, p, bytes);
}

void WebGpuBackend::embed(const MatView& W, const int32_t* ids, int n, float* out) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<uint32_t> u(n);
    for (int i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= W.rows)
            throw std::out_of_range("embed: token id " + std::to_string(ids[i]) + " outside the vocabulary of " +
                                    std::to_string(W.rows));
        u[i] = uint32_t(ids[i]);
    }
    quant::QType qt;
    if (host_rows(W.format, qt)) {  // a block-format table: the rows dequantized on the host
        std::vector<float> rows(size_t(n) * W.cols);
        for (int i = 0; i < n; ++i) quant::dequantize_row(qt, W.row(ids[i]), W.cols, rows.data() + size_t(i) * W.cols);
        OpArgs a(*this);
        BufRef src = a.in(span(rows.data(), rows.size()), "embeddings");
        BufRef y = a.out(span(out, rows.size()), "embeddings");
        kernels_->copy(rec_, src, y, 1, 1, uint32_t(rows.size()), 0, 0, 0, 0, 0, 0);
        a.done();
        return;
    }
    const GpuMatrix& m = weights(W);
    OpArgs a(*this);
    BufRef bids = a.in_u32(u.data(), u.size());
    BufRef y = a.out(span(out, uint64_t(n) * W.cols), "embeddings");
    kernels_->embedding(rec_, bids, uint32_t(n), m, y);
    a.done();
}

void WebGpuBackend::rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps) {
    if (rows <= 0 || heads <= 0 || dim <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    OpArgs a(*this);
    const View vx{x.p, rows, x.ld, heads, x.hs, dim};
    BufRef bw = a.in(span(w, dim), "norm weight");
    BufRef by = a.out(View{out.p, rows, out.ld, heads, out.hs, dim}, "y");
    if (BufferPtr xq = heads == 1 ? producing(w, out.p, rows, out.ld, dim) : nullptr) {
        BufRef bx = a.in(vx, "x");
        kernels_->quantizing_producer(rec_, "rmsnorm_quant", bx, BufRef(), bw, by, uint32_t(rows), uint32_t(dim), eps,
                                      0.0f, made_q_.format, BufRef(xq));
    } else {  // x read where it lies (attention's q between its gates, k in the projection rows)
        uint32_t x_off = 0;
        BufRef bx = a.in_whole(x.p, vx.extent(), x_off, "x");
        kernels_->rmsnorm(rec_, bx, bw, by, uint32_t(rows * heads), uint32_t(dim), eps, 0.0f, uint32_t(heads), x_off,
                          uint32_t(x.ld), uint32_t(x.hs));
    }
    a.done();
}

void WebGpuBackend::gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps) {
    if (rows <= 0 || heads <= 0 || dim <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    OpArgs a(*this);
    View vx{x.p, rows, x.ld, heads, x.hs, dim};
    View vz{z.p, rows, z.ld, heads, z.hs, dim};
    BufRef bx = a.in(vx, "x");
    BufRef bw = a.in(span(w, dim), "norm weight");
    BufRef by = a.out(vx, "y");
    if (BufferPtr xq = producing(w, x.p, rows, x.ld, heads * dim)) {  // the GDN output before its out projection
        BufRef bz = a.in(vz, "z");
        kernels_->quantizing_producer(rec_, "rmsnorm_gated_quant", bx, bz, bw, by, uint32_t(rows), uint32_t(dim), eps,
                                      0.0f, made_q_.format, BufRef(xq), uint32_t(heads));
    } else {  // the gate read where it lies (a strided view of the projection rows is not packed first)
        uint32_t z_off = 0;
        BufRef bz = a.in_whole(z.p, vz.extent(), z_off, "z");
        kernels_->rmsnorm_gated(rec_, bx, bz, bw, by, uint32_t(rows * heads), uint32_t(dim), eps, 0.0f, uint32_t(heads),
                                z_off, uint32_t(z.ld), uint32_t(z.hs));
    }
    a.done();
}

bool WebGpuBackend::gatherable(const MatJob& job, GatherPlace& at) {
    if (!fuse_ || job.bias) return false;
    const bool f32 = job.W.format == WFormat::F32 && quant_gather_;  // GGUF's f32 router and shared gate
    if (job.W.format != WFormat::F16 && job.W.format != WFormat::BF16 && !f32) return false;
    at.m = &weights(job.W);
    if (f32 ? !Kernels::gather_f32_ok(*at.m) : !Kernels::gather_ok(*at.m)) return false;
    uint64_t xo = 0, yo = 0;
    const Region* rx = find(job.X, (uint64_t(job.T - 1) * job.ldx + job.W.cols) * 4, xo);
    const Region* ry = find(job.Y, (uint64_t(job.T - 1) * job.ldy + job.W.rows) * 4, yo);
    if (!rx || !ry || xo / 4 > UINT32_MAX || yo / 4 > UINT32_MAX) return false;
    at.x = rx->buf;
    at.y = ry->buf;
    at.job = {at.m, uint32_t(job.T), uint32_t(xo / 4), uint32_t(job.ldx), uint32_t(yo / 4), uint32_t(job.ldy)};
    return true;
}

void WebGpuBackend::matmul(const std::vector<MatJob>& jobs) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Consecutive half-precision jobs of one width whose x and y lie in device arrays go in one
    // matmul_gathered dispatch (a MoE layer's experts, q/k/v, router + shared expert), as long
    // as their weights lie in at most kGatherBuffers arenas.
    std::vector<Kernels::GatherJob> group;
    std::vector<const Buffer*> group_buffers;
    // block formats: x quantized once for the jobs that share it (q/k/v, gate/up), or by the
    // op that wrote it (made_q_), unless one of these jobs writes into its rows
    for (const MatJob& job : jobs)
        if (job.T > 0) drop_made_q_over(job.Y, size_t(job.T) * job.ldy * 4);
    QuantX qx = made_q_;
    // consecutive block-format jobs over that one quantized x, without bias, whose y lie in one
    // device array away from x: one matmul_quant_gathered dispatch (q/k/v, gate/up)
    std::vector<Kernels::QuantJob> qgroup;
    std::vector<const Buffer*> qgroup_buffers;
    uint32_t qgroup_chunks = 0;
    BufferPtr qy;
    // the quantized x is this job's (same rows, same activation blocks, no wait since it was made)
    auto has_qx = [&](const MatJob& job, WeightFormat f) {
        return quantized_for(qx, job.X, job.T, job.ldx, job.W.cols, f);
    };
    auto quantize_x = [&](OpArgs& a, const MatJob& job, WeightFormat f) {
        uint32_t x_off = 0;
        BufRef bx = a.in_whole(job.X, uint64_t(job.T - 1) * job.ldx + job.W.cols, x_off, "x");
        qx = {job.X, job.T, job.ldx, job.W.cols, f, temp(quant_act_words(f, uint32_t(job.T), uint32_t(job.W.cols)) * 4),
              submits_};
        kernels_->quantize_rows(rec_, bx, x_off, uint32_t(job.ldx), uint32_t(job.T), uint32_t(job.W.cols), f,
                                BufRef(qx.xq));
        hint(job.X, job.ldx, job.W.cols, f);  // the op that writes x quantizes it from the next window on
    };
    // y overlaps x: writing y invalidates a quantized x made from those rows
    auto y_over_x = [](const MatJob& job) {
        const auto x0 = reinterpret_cast<uintptr_t>(job.X), y0 = reinterpret_cast<uintptr_t>(job.Y);
        return y0 < x0 + (size_t(job.T - 1) * job.ldx + job.W.cols) * 4 && x0 < y0 + size_t(job.T) * job.ldy * 4;
    };
    // the distinct weight buffers of `bufs` plus those of m's chunks
    auto with_buffers = [](std::vector<const Buffer*> bufs, const GpuMatrix& m) {
        for (const auto& c : m.chunks)
            if (std::find(bufs.begin(), bufs.end(), c.buffer.get()) == bufs.end()) bufs.push_back(c.buffer.get());
        return bufs;
    };
    auto emit_quant = [&] {
        if (qgroup.empty()) return;
        if (qgroup.size() == 1) {
            kernels_->matmul_quant(rec_, BufRef(qx.xq), uint32_t(qx.T), *qgroup[0].m, BufRef(qy), qgroup[0].y_off,
                                   qgroup[0].y_stride);
        } else {
            kernels_->matmul_quant_gathered(rec_, BufRef(qx.xq), uint32_t(qx.T), BufRef(qy), qgroup);
        }
        qgroup.clear();
        qgroup_buffers.clear();
        qgroup_chunks = 0;
        submit_early();
    };
    BufferPtr gx, gy;
    uint32_t g_cols = 0;
    WFormat g_format = WFormat::F32;
    auto emit = [&] {
        emit_quant();
        if (group.size() == 1) {
            const Kernels::GatherJob& j = group[0];
            kernels_->matmul(rec_, BufRef(gx), j.T, *j.m, BufRef(gy), j.x_off, j.x_stride, j.y_off, j.y_stride);
        } else if (!group.empty() && g_format == WFormat::F32) {
            kernels_->matmul_f32_gathered(rec_, BufRef(gx), BufRef(gy), group);
        } else if (!group.empty()) {
            kernels_->matmul_gathered(rec_, BufRef(gx), BufRef(gy), group);
        }
        if (!group.empty()) submit_early();
        group.clear();
        group_buffers.clear();
    };
    for (const MatJob& job : jobs) {
        if (job.T <= 0 || job.W.rows <= 0) continue;
        GatherPlace at;
        if (gatherable(job, at)) {
            const Buffer* wb = at.m->chunks[0].buffer.get();
            bool new_buffer = std::find(group_buffers.begin(), group_buffers.end(), wb) == group_buffers.end();
            bool fits = !group.empty() && at.x == gx && at.y == gy && job.W.cols == int(g_cols) &&
                        job.W.format == g_format &&
                        group.size() < (g_format == WFormat::F32 ? Kernels::kGatherF32Jobs : Kernels::kGatherJobs) &&
                        (!new_buffer || group_buffers.size() < Kernels::kGatherBuffers);
            if (!fits) {
                emit();
                gx = at.x;
                gy = at.y;
                g_cols = uint32_t(job.W.cols);
                g_format = job.W.format;
                new_buffer = true;
            }
            if (new_buffer) group_buffers.push_back(wb);
            group.push_back(at.job);
            continue;
        }
        const GpuMatrix& m = weights(job.W);
        if (is_quant(m.format) && fuse_ && quant_gather_ && !job.bias) {
            uint64_t yo = 0;
            const Region* ry = find(job.Y, (uint64_t(job.T - 1) * job.ldy + job.W.rows) * 4, yo);
            if (ry && !y_over_x(job) && yo / 4 <= UINT32_MAX) {
                std::vector<const Buffer*> nb = with_buffers(qgroup_buffers, m);
                const bool fits = has_qx(job, m.format) && !qgroup.empty() && ry->buf == qy &&
                                  qgroup[0].m->format == m.format &&
                                  qgroup_chunks + m.chunks.size() <= Kernels::kQuantGatherEntries &&
                                  nb.size() <= Kernels::kGatherBuffers;
                if (!fits) {
                    emit();  // may wait, which ends the quantized x's life
                    if (!has_qx(job, m.format)) {
                        OpArgs a(*this, true);
                        quantize_x(a, job, m.format);
                    }
                    qy = ry->buf;
                    nb = with_buffers({}, m);
                }
                if (m.chunks.size() <= Kernels::kQuantGatherEntries && nb.size() <= Kernels::kGatherBuffers) {
                    qgroup_buffers = std::move(nb);
                    qgroup_chunks += uint32_t(m.chunks.size());
                    qgroup.push_back({&m, uint32_t(yo / 4), uint32_t(job.ldy)});
                    continue;
                }
            }
        }
        emit();
        OpArgs a(*this, true);
        uint32_t x_off = 0, y_off = 0, y_stride = 0;
        if (is_quant(m.format)) {
            if (!has_qx(job, m.format)) quantize_x(a, job, m.format);
            if (job.bias) {
                BufRef bb = a.in(span(job.bias, job.W.rows), "bias");
                uint64_t ny = uint64_t(job.T) * job.W.rows;
                BufferPtr raw = temp(ny * 4);
                kernels_->matmul_quant(rec_, BufRef(qx.xq), uint32_t(job.T), m, raw, 0, 0);
                BufRef by = a.out(rows_of(job.Y, job.T, job.ldy, job.W.rows), "y + bias");
                kernels_->elementwise(rec_, "bias_add", raw, bb, by, uint32_t(ny), 0.0f, uint32_t(job.W.rows));
            } else {
                BufRef by = a.out_rows(job.Y, job.T, job.ldy, job.W.rows, y_off, y_stride);
                kernels_->matmul_quant(rec_, BufRef(qx.xq), uint32_t(job.T), m, by, y_off, y_stride);
            }
            a.done();
            // quantized x stays valid only while no job writes into the rows it came from
            if (y_over_x(job)) qx = QuantX{};
            continue;
        }
        BufRef bx = a.in_whole(job.X, uint64_t(job.T - 1) * job.ldx + job.W.cols, x_off, "x");
        if (job.bias) {
            BufRef bb = a.in(span(job.bias, job.W.rows), "bias");
            uint64_t ny = uint64_t(job.T) * job.W.rows;
            BufferPtr raw = temp(ny * 4);
            kernels_->matmul(rec_, bx, uint32_t(job.T), m, raw, x_off, uint32_t(job.ldx), 0, 0);
            BufRef by = a.out(rows_of(job.Y, job.T, job.ldy, job.W.rows), "y + bias");
            kernels_->elementwise(rec_, "bias_add", raw, bb, by, uint32_t(ny), 0.0f, uint32_t(job.W.rows));
        } else {
            BufRef by = a.out_rows(job.Y, job.T, job.ldy, job.W.rows, y_off, y_stride);
            kernels_->matmul(rec_, bx, uint32_t(job.T), m, by, x_off, uint32_t(job.ldx), y_off, y_stride);
        }
        a.done();
    }
    emit();
}

namespace {
// cos/sin per row on the host, with the same f32 angles as the CPU backend: GPU sin/cos of
// large angles are too coarse, and one table serves every head.
std::vector<float> rotary_table(int rows, int64_t p0, const float* inv_freq, int half) {
    std::vector<float> cs(size_t(rows) * 2 * half);
    for (int t = 0; t < rows; ++t)
        for (int i = 0; i < half; ++i) {
            float f = float(p0 + t) * inv_freq[i];
            cs[size_t(t) * 2 * half + i] = std::cos(f);
            cs[size_t(t) * 2 * half + half + i] = std::sin(f);
        }
    return cs;
}
}  // namespace

// The q or k norm and its rotary in one dispatch (norm_rotary.wgsl: one workgroup per (row,
// head) norms the head, then rotates it), each value as rmsnorm then rotary compute it. Where
// the output is not packed heads, the two ops.
void WebGpuBackend::rmsnorm_rotary(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps,
                                   int64_t p0, const float* inv_freq, int half) {
    if (rows <= 0 || heads <= 0 || dim <= 0 || half <= 0 || !fold(kFoldQkNorm) || 2 * half > dim ||
        int64_t(out.ld) != int64_t(heads) * dim || (heads > 1 && out.hs != dim))
        return Backend::rmsnorm_rotary(x, out, rows, heads, dim, w, eps, p0, inv_freq, half);
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<float> cs = rotary_table(rows, p0, inv_freq, half);
    OpArgs a(*this);
    BufRef bcs = a.in(span(cs.data(), cs.size()), "cos/sin");
    const View vx{x.p, rows, x.ld, heads, x.hs, dim};
    BufRef bw = a.in(span(w, dim), "norm weight");
    BufRef by = a.out(View{out.p, rows, out.ld, heads, out.hs, dim}, "y");
    uint32_t x_off = 0;
    BufRef bx = a.in_whole(x.p, vx.extent(), x_off, "x");
    kernels_->rmsnorm_rotary(rec_, bx, bw, by, bcs, uint32_t(rows), uint32_t(heads), uint32_t(dim), eps, x_off,
                             uint32_t(x.ld), uint32_t(x.hs), uint32_t(2 * half));
    a.done();
}

void WebGpuBackend::rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half) {
    if (rows <= 0 || heads <= 0 || half <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<float> cs = rotary_table(rows, p0, inv_freq, half);
    OpArgs a(*this);
    BufRef bcs = a.in(span(cs.data(), cs.size()), "cos/sin");
    // whole heads where they lie side by side (the kernel leaves the lanes past 2*half alone):
    // packed, so rotated in place; else only the rotated lanes, through a packed copy
    const int D = heads > 1 && x.hs >= 2 * half ? x.hs : 2 * half;
    BufRef bx = a.inout(View{x.p, rows, x.ld, heads, x.hs, D}, "x");
    kernels_->rotary(rec_, bx, bcs, uint32_t(rows), uint32_t(heads), uint32_t(D), uint32_t(2 * half));
    a.done();
}

void WebGpuBackend::attention(const AttentionArgs& p) {
    if (p.n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t n = uint32_t(p.n), nh = uint32_t(p.n_heads), nkv = uint32_t(p.n_kv), hd = uint32_t(p.head_dim);
    uint32_t p0 = uint32_t(p.p0), cells = p0 + n;
    uint64_t nq = uint64_t(n) * nh * hd, nc = uint64_t(cells) * nkv * hd;
    OpArgs a(*this);
    BufRef bq = a.in(span(p.q, nq), "q");
    BufRef bk = a.in(span(p.k_cells, nc), "k cells");
    BufRef bv = a.in(span(p.v_cells, nc), "v cells");
    BufRef bg = p.gate ? a.in(span(p.gate, nq), "gate") : BufRef();
    BufferPtr scores = temp(uint64_t(n) * nh * cells * 4);
    if (p.gate && fold(kFoldGate)) {  // the output gate folded into the attention kernel: the same bits
        BufRef out = a.out(span(p.out, nq), "gated out");
        kernels_->attention(rec_, bq, bk, bv, scores, out, n, nh, nkv, hd, p0, p.scale, bg);
    } else if (p.gate) {
        BufferPtr raw = temp(nq * 4);
        kernels_->attention(rec_, bq, bk, bv, scores, raw, n, nh, nkv, hd, p0, p.scale);
        BufRef out = a.out(span(p.out, nq), "gated out");
        kernels_->elementwise(rec_, "sigmoid_mul", raw, bg, out, uint32_t(nq));
    } else {
        BufRef out = a.out(span(p.out, nq), "attention out");
        kernels_->attention(rec_, bq, bk, bv, scores, out, n, nh, nkv, hd, p0, p.scale);
    }
    a.done();
}

void WebGpuBackend::causal_conv(const ConvArgs& p) {
    if (p.n <= 0 || p.channels <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    OpArgs a(*this);
    uint32_t x_off = 0;  // the rows where they lie (a strided view is not packed first)
    BufRef bx = a.in_whole(p.x, uint64_t(p.n - 1) * p.ldx + p.channels, x_off, "x");
    BufRef bw = a.in(span(p.w, uint64_t(p.channels) * p.K), "conv weight");
    // the layer owns the history: the kernel reads it and leaves it (commit_rows = 0)
    BufRef bh = a.in(span(p.hist, uint64_t(p.K - 1) * p.channels), "conv history");
    BufRef by = a.out(span(p.out, uint64_t(p.n) * p.channels), "conv out");
    BufRef bxr = p.x_rows ? a.out(span(p.x_rows, uint64_t(p.n) * p.channels), "conv input rows") : BufRef();
    kernels_->causal_conv(rec_, bx, bw, bh, by, uint32_t(p.n), uint32_t(p.channels), uint32_t(p.K), 0, x_off,
                          uint32_t(p.ldx), bxr);
    a.done();
}

void WebGpuBackend::gdn_inputs(const GdnInputsArgs& p) {
    if (p.n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t T = uint32_t(p.n), Hk = uint32_t(p.n_k), Hv = uint32_t(p.n_v), Dk = uint32_t(p.d_k), Dv = uint32_t(p.d_v);
    uint64_t key = uint64_t(T) * Hk * Dk, val = uint64_t(T) * Hv * Dv, heads = uint64_t(T) * Hv;
    uint64_t conv_dim = 2ull * Hk * Dk + uint64_t(Hv) * Dv;
    uint64_t ba = uint64_t(T - 1) * p.ld_ba + Hv;
    OpArgs a(*this);
    BufRef conv = a.in(span(p.conv, T * conv_dim), "conv");
    uint32_t b_off = 0, a_off = 0;  // where they lie: b and a are columns of the projection rows
    BufRef bb = a.in_whole(p.b, ba, b_off, "b"), baa = a.in_whole(p.a, ba, a_off, "a");
    BufRef bA = a.in(span(p.A, Hv), "A"), bdt = a.in(span(p.dt_bias, Hv), "dt_bias");
    BufRef q = a.out(span(p.q, key), "q"), k = a.out(span(p.k, key), "k"), v = a.out(span(p.v, val), "v");
    BufRef decay = a.out(span(p.decay, heads), "decay"), beta = a.out(span(p.beta, heads), "beta");
    kernels_->gdn_inputs(rec_, conv, bb, baa, uint32_t(p.ld_ba), bA, bdt, T, Hk, Hv, Dk, Dv, q, k, v, decay, beta, b_off,
                         a_off);
    a.done();
}

// gdn_inputs and gdn_step in one dispatch (gdn_fused.wgsl: each step workgroup computes the
// inputs it reads), where the layer keeps none of the step inputs; out and S as the two ops
// write them. Elsewhere (STRATA_WEBGPU_FOLD=0, a key head dim gdn_step runs with one thread per
// column, arguments that do not chain), the two ops.
void WebGpuBackend::gdn_inputs_step(const GdnInputsArgs& in, const GdnStepArgs& st) {
    if (!fold(kFoldGdn) || in.n <= 0 || st.n != in.n || st.q != in.q || st.k != in.k || st.v != in.v ||
        st.decay != in.decay || st.beta != in.beta || st.n_k != in.n_k || st.n_v != in.n_v || st.d_k != in.d_k ||
        st.d_v != in.d_v || !st.out || in.n_k <= 0 || in.n_v % in.n_k != 0 || in.d_k % Kernels::kGdnParts != 0 ||
        in.d_k > 256)
        return Backend::gdn_inputs_step(in, st);
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t T = uint32_t(in.n), Hk = uint32_t(in.n_k), Hv = uint32_t(in.n_v), Dk = uint32_t(in.d_k),
             Dv = uint32_t(in.d_v);
    uint64_t val = uint64_t(T) * Hv * Dv, ns = uint64_t(Hv) * Dk * Dv;
    uint64_t conv_dim = 2ull * Hk * Dk + uint64_t(Hv) * Dv;
    uint64_t ba = uint64_t(T - 1) * in.ld_ba + Hv;
    OpArgs a(*this);
    BufRef conv = a.in(span(in.conv, T * conv_dim), "conv");
    uint32_t b_off = 0, a_off = 0;
    BufRef bb = a.in_whole(in.b, ba, b_off, "b"), baa = a.in_whole(in.a, ba, a_off, "a");
    BufRef bA = a.in(span(in.A, Hv), "A"), bdt = a.in(span(in.dt_bias, Hv), "dt_bias");
    BufRef S0 = a.in(span(st.S0, ns), "S0");
    BufRef S = a.out(span(st.S, ns), "state");
    BufRef out = a.out(span(st.out, val), "gdn out");
    kernels_->gdn_inputs_step(rec_, conv, bb, baa, uint32_t(in.ld_ba), bA, bdt, S0, S, out, T, Hk, Hv, Dk, Dv, b_off,
                              a_off);
    a.done();
}

// causal_conv, gdn_inputs and gdn_step in one dispatch (gdn_conv_fused.wgsl: each step workgroup
// computes the conv values and inputs it reads), where the layer keeps neither; out and S as
// the three ops write them. Elsewhere, the conv, then gdn_inputs_step (which may fold the rest).
void WebGpuBackend::conv_gdn_inputs_step(const ConvArgs& c, const GdnInputsArgs& in, const GdnStepArgs& st) {
    const int64_t conv_dim = 2ll * in.n_k * in.d_k + int64_t(in.n_v) * in.d_v;
    if (!fold(kFoldConvGdn) || in.n <= 0 || c.n != in.n || c.out != in.conv || c.x_rows || c.channels != conv_dim || c.K < 1 ||
        c.K > 9 || c.ldx < c.channels || st.n != in.n || st.q != in.q || st.k != in.k || st.v != in.v ||
        st.decay != in.decay || st.beta != in.beta || st.n_k != in.n_k || st.n_v != in.n_v || st.d_k != in.d_k ||
        st.d_v != in.d_v || !st.out || in.n_k <= 0 || in.n_v % in.n_k != 0 || in.d_k % Kernels::kGdnParts != 0 ||
        in.d_k > 256)
        return Backend::conv_gdn_inputs_step(c, in, st);
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t T = uint32_t(in.n), Hk = uint32_t(in.n_k), Hv = uint32_t(in.n_v), Dk = uint32_t(in.d_k),
             Dv = uint32_t(in.d_v);
    uint64_t val = uint64_t(T) * Hv * Dv, ns = uint64_t(Hv) * Dk * Dv;
    uint64_t ba = uint64_t(T - 1) * in.ld_ba + Hv;
    OpArgs a(*this);
    uint32_t x_off = 0;  // the rows where they lie, as causal_conv binds them
    BufRef bx = a.in_whole(c.x, uint64_t(c.n - 1) * c.ldx + c.channels, x_off, "x");
    BufRef bw = a.in(span(c.w, uint64_t(c.channels) * c.K), "conv weight");
    BufRef bh = a.in(span(c.hist, uint64_t(c.K - 1) * c.channels), "conv history");
    uint32_t b_off = 0, a_off = 0;
    BufRef bb = a.in_whole(in.b, ba, b_off, "b"), baa = a.in_whole(in.a, ba, a_off, "a");
    BufRef bA = a.in(span(in.A, Hv), "A"), bdt = a.in(span(in.dt_bias, Hv), "dt_bias");
    BufRef S0 = a.in(span(st.S0, ns), "S0");
    BufRef S = a.out(span(st.S, ns), "state");
    BufRef out = a.out(span(st.out, val), "gdn out");
    kernels_->conv_gdn_inputs_step(rec_, bx, x_off, uint32_t(c.ldx), bw, bh, uint32_t(c.K), bb, baa,
                                   uint32_t(in.ld_ba), bA, bdt, S0, S, out, T, Hk, Hv, Dk, Dv, b_off, a_off);
    a.done();
}

void WebGpuBackend::gdn_step(const GdnStepArgs& p) {
    uint64_t ns = uint64_t(p.n_v) * p.d_k * p.d_v;
    if (p.n <= 0) {
        if (p.S != p.S0) copy({p.S0, 0, 0}, {p.S, 0, 0}, 1, 1, int(ns));
        return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t T = uint32_t(p.n), Hk = uint32_t(p.n_k), Hv = uint32_t(p.n_v), Dk = uint32_t(p.d_k), Dv = uint32_t(p.d_v);
    uint64_t key = uint64_t(T) * Hk * Dk, val = uint64_t(T) * Hv * Dv, heads = uint64_t(T) * Hv;
    OpArgs a(*this);
    BufRef S0 = a.in(span(p.S0, ns), "S0");
    BufRef q = a.in(span(p.q, key), "q"), k = a.in(span(p.k, key), "k"), v = a.in(span(p.v, val), "v");
    BufRef decay = a.in(span(p.decay, heads), "decay"), beta = a.in(span(p.beta, heads), "beta");
    BufRef S = a.out(span(p.S, ns), "state");
    BufRef out = p.out ? a.out(span(p.out, val), "gdn out") : BufRef(temp(val * 4));
    kernels_->gdn_step(rec_, S0, S, q, k, v, decay, beta, out, T, Hk, Hv, Dk, Dv);
    a.done();
}

void WebGpuBackend::router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx,
                                float* weights) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t nk = uint64_t(n) * k;
    drop_made_q_over(idx, nk * 4);
    drop_made_q_over(weights, nk * 4);
    OpArgs a(*this, true);
    BufRef bl = a.in(span(logits, uint64_t(n) * n_experts), "router logits");
    // the ids are u32 on the device; a non-negative int has the same bits
    BufRef ids = a.out(span(idx, nk), "expert ids");
    BufRef w = a.out(span(weights, nk), "expert weights");
    kernels_->router_topk(rec_, bl, ids, w, uint32_t(n), uint32_t(n_experts), uint32_t(k), renormalize);
    a.done();
}

void WebGpuBackend::gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n <= 0) return;
    std::vector<uint32_t> u(n);
    int max_row = 0;
    for (int i = 0; i < n; ++i) {
        if (idx[i] < 0) throw std::out_of_range("gather: negative row index");
        u[i] = uint32_t(idx[i]);
        max_row = std::max(max_row, idx[i]);
    }
    uint64_t src_floats = uint64_t(max_row) * ld_src + cols;
    OpArgs a(*this);
    BufRef bs = a.in(span(src, src_floats), "gather src");
    BufRef bi = a.in_u32(u.data(), u.size());
    // dst rows keep their lanes past `cols`: the kernel writes packed rows, copied into place
    BufRef y = a.out(rows_of(dst, n, ld_dst, cols), "gather dst");
    kernels_->gather(rec_, bs, uint32_t(ld_src), uint32_t(max_row + 1), bi, uint32_t(n), uint32_t(cols), y,
                     uint32_t(cols));
    a.done();
}

void WebGpuBackend::swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) {
    if (rows <= 0 || n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    OpArgs a(*this);
    BufRef bg = a.in(rows_of(g.p, rows, g.ld, n), "g");
    BufRef bu = a.in(rows_of(u.p, rows, u.ld, n), "u");
    BufRef y = a.out(rows_of(out.p, rows, out.ld, n), "swiglu out");
    if (BufferPtr xq = producing(out.p, out.p, rows, out.ld, n))
        kernels_->quantizing_producer(rec_, "swiglu_quant", bg, bu, BufRef(), y, uint32_t(rows), uint32_t(n), 0.0f,
                                      0.0f, made_q_.format, BufRef(xq));
    else
        kernels_->elementwise(rec_, "swiglu", bg, bu, y, uint32_t(uint64_t(rows) * n));
    a.done();
}

void WebGpuBackend::moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H,
                                const float* shared, const float* shared_gate, float* out) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    OpArgs a(*this);
    CombineIn c = combine_inputs(a, D, slot, w, n, k, H, shared, shared_gate);
    BufRef y = a.out(span(out, uint64_t(n) * H), "moe out");
    kernels_->moe_combine(rec_, c.D, c.n_slots, c.slot, c.w, uint32_t(n), uint32_t(k), uint32_t(H), c.shared, c.gate, y);
    a.done();
}

// The combine, the residual add and the next norm in one dispatch (moe_norm.wgsl), each value as
// moe_combine then add_rmsnorm compute it; out (the combine's output) is left unwritten. Where
// the norm quantizes its rows for the next matmul (a block-format file), the two ops.
void WebGpuBackend::moe_combine_add_rmsnorm(const float* D, const int* slot, const float* w, int n, int k, int H,
                                            const float* shared, const float* shared_gate, float* out,
                                            const AddNorm& then) {
    if (n <= 0) return;
    if (!fold(kFoldMoeNorm) || then.out.hs != 0 || fold_hint(then.w, int(then.out.ld), H))
        return Backend::moe_combine_add_rmsnorm(D, slot, w, n, k, H, shared, shared_gate, out, then);
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t ny = uint64_t(n) * H;
    OpArgs a(*this);
    CombineIn c = combine_inputs(a, D, slot, w, n, k, H, shared, shared_gate);
    BufRef bnw = a.in(span(then.w, H), "norm weight");
    BufRef bx = a.inout(span(then.x, ny), "x");
    BufRef bh = a.out(View{then.out.p, n, then.out.ld, 1, 0, H}, "y");
    producing(then.w, then.out.p, n, int(then.out.ld), H);  // (null: fold_hint said so) made_q_ as add_rmsnorm sets it
    kernels_->moe_combine_add_rmsnorm(rec_, c.D, c.n_slots, c.slot, c.w, uint32_t(n), uint32_t(k), uint32_t(H),
                                      c.shared, c.gate, bx, bnw, bh, then.eps);
    a.done();
}

// Whether the experts of `a` fit the routed kernels (format, shape); quant: block formats.
bool WebGpuBackend::routed_fits(const MoeExpertsArgs& a, bool& quant) const {
    const int H = a.hidden, I = a.inter;
    const WFormat f = a.experts[0].gate.format, fd = a.experts[0].down.format;
    const int rb = int(kernels_->rows_per_workgroup());
    const bool half = f == WFormat::F16 || f == WFormat::BF16;
    quant = quant_matmul_format(f) && quant_matmul_format(fd);
    bool ok = false;
    if (half) ok = fd == f && H % 8 == 0 && I % 8 == 0 && H % rb == 0 && I % rb == 0;
    // block formats: whole blocks per row, and whole workgroups of rows (8 rows of 256-blocks, 2 of 32-blocks)
    if (quant) {
        const QuantLayout &Lg = quant_layout(to_weight_format(f)), &Ld = quant_layout(to_weight_format(fd));
        ok = H % Lg.block_elems == 0 && I % Ld.block_elems == 0 && I % 8 == 0 && H % 8 == 0;
    }
    for (int e = 0; ok && e < a.n_experts; ++e) {
        const ExpertView& v = a.experts[e];
        ok = v.gate.format == f && v.up.format == f && v.down.format == fd && v.gate.rows == I && v.gate.cols == H &&
             v.up.rows == I && v.up.cols == H && v.down.rows == H && v.down.cols == I;
    }
    return ok;
}

// Table entry `slot` (expert * 3 + matrix) = (binding of m's arena in bufs, its first word or vec4).
bool WebGpuBackend::routed_place(const GpuMatrix& m, bool quant, size_t slot, std::vector<uint32_t>& table,
                                 std::vector<BufRef>& bufs) {
    if (quant ? m.chunks.size() != 1 : !Kernels::gather_ok(m)) return false;
    const GpuMatrix::Chunk& c = m.chunks[0];
    const int b = Kernels::weight_binding(bufs, c.buffer);
    if (b < 0) return false;
    table[slot * 2] = uint32_t(b);
    table[slot * 2 + 1] = uint32_t(quant ? c.offset / 4 : c.offset / 16);  // words / vec4 words
    return true;
}

void WebGpuBackend::routed_formats(RoutedLayer& L, const GpuMatrix& gate, const GpuMatrix& down) {
    L.format = gate.format;
    L.down_format = down.format;
    L.gu_row_words = gate.row_words;
    L.down_row_words = down.row_words;
}

const WebGpuBackend::RoutedLayer& WebGpuBackend::routed_layer(const MoeExpertsArgs& a) {
    auto found = routed_.find(a.experts[0].gate.data);
    if (found != routed_.end()) return found->second;
    RoutedLayer& L = routed_[a.experts[0].gate.data];
    const int E = a.n_experts, H = a.hidden, I = a.inter;
    const WFormat f = a.experts[0].gate.format, fd = a.experts[0].down.format;
    bool quant = false;
    bool ok = routed_fits(a, quant);
    // device bytes of one matrix, for the arena reservation
    auto device_bytes = [&](WFormat g, int rows, int cols) {
        return quant ? uint64_t(rows) * quant_row_words(to_weight_format(g), uint32_t(cols)) * 4 : uint64_t(rows) * cols * 2;
    };
    uint64_t gu_bytes = 0, down_bytes = 0;  // what is still to upload
    for (int e = 0; ok && e < E; ++e) {
        const ExpertView& v = a.experts[e];
        if (!weights_.count(v.gate.data)) gu_bytes += device_bytes(f, I, H);
        if (!weights_.count(v.up.data)) gu_bytes += device_bytes(f, I, H);
        if (!weights_.count(v.down.data)) down_bytes += device_bytes(fd, H, I);
    }
    if (!ok) return L;
    std::vector<uint32_t> table(size_t(E) * 3 * 2);
    // each layer's gates and ups side by side, then its downs: two dispatches bind few arenas
    pool_->reserve(gu_bytes);
    for (int e = 0; ok && e < E; ++e)
        ok = routed_place(weights(a.experts[e].gate), quant, size_t(e) * 3, table, L.gu_buffers) &&
             routed_place(weights(a.experts[e].up), quant, size_t(e) * 3 + 1, table, L.gu_buffers);
    pool_->reserve(down_bytes);
    for (int e = 0; ok && e < E; ++e)
        ok = routed_place(weights(a.experts[e].down), quant, size_t(e) * 3 + 2, table, L.down_buffers);
    if (!ok) return L;
    routed_formats(L, weights(a.experts[0].gate), weights(a.experts[0].down));
    L.table = device_->upload(table.data(), table.size() * 4, "expert table");
    L.ok = true;
    return L;
}

// Streamed experts: this window's table over the acquired slots' device copies (SlotPool), in a
// window temporary; ok = false where they do not fit the routed kernels (format, shape, their
// slots in more than kGatherBuffers arenas).
WebGpuBackend::RoutedLayer WebGpuBackend::streamed_layer(const MoeExpertsArgs& a) {
    RoutedLayer L;
    bool quant = false;
    if (a.layer_experts <= 0 || a.layer_experts > int(Kernels::kMaxExperts) || !routed_fits(a, quant)) return L;
    if (a.n_experts <= 0) return L;
    std::vector<uint32_t> table(size_t(a.layer_experts) * 3 * 2, 0);
    std::vector<SlotPool::Entry*> entries(size_t(a.n_experts));
    // every slot current first (an upload may submit the open batch), then all marked as read by it
    for (int u = 0; u < a.n_experts; ++u) {
        if (a.expert_ids[u] < 0 || a.expert_ids[u] >= a.layer_experts) return L;
        entries[size_t(u)] = &slots_->current(a.experts[u], open_batch(), [this] { flush(); });
    }
    for (int u = 0; u < a.n_experts; ++u) {
        SlotPool::Entry& s = *entries[size_t(u)];
        const size_t e = size_t(a.expert_ids[u]);
        s.used_serial = open_batch();
        if (!routed_place(s.m[0], quant, e * 3, table, L.gu_buffers) ||
            !routed_place(s.m[1], quant, e * 3 + 1, table, L.gu_buffers) ||
            !routed_place(s.m[2], quant, e * 3 + 2, table, L.down_buffers))
            return L;
    }
    routed_formats(L, entries[0]->m[0], entries[0]->m[2]);
    L.table = temp(table.size() * 4);
    device_->write(L.table, 0, table.data(), table.size() * 4);
    L.ok = true;
    return L;
}

// The routed pairs' gate rows [0, n) and up rows [n, 2n) of GU: G = silu(gate) * up in place;
// with xq, G's rows of `cols` values also quantized for format f into xq.
void WebGpuBackend::routed_swiglu(float* GU, uint64_t n, uint32_t cols, WeightFormat f, const BufferPtr& xq) {
    OpArgs args(*this);
    BufRef g = args.in(span(GU, n), "gate");
    BufRef u = args.in(span(GU + n, n), "up");
    BufRef y = args.out(span(GU, n), "swiglu");
    if (xq)
        kernels_->quantizing_producer(rec_, "swiglu_quant", g, u, BufRef(), y, uint32_t(n / cols), cols, 0.0f, 0.0f, f,
                                      BufRef(xq));
    else
        kernels_->elementwise(rec_, "swiglu", g, u, y, uint32_t(n));
    args.done();
}

// The down projection with the SwiGLU folded into its reads of x (matmul GLU = 1): one dispatch
// where swiglu + matmul are two, the same bits (each x value is computed as the swiglu kernel
// writes it). Where g and u are not in one device array with u after g, or the matrix is not
// f16/bf16 vec4 rows under the lanes loop (or is quantized: the swiglu then quantizes its rows
// for the matmul), the two ops.
void WebGpuBackend::swiglu_matmul(RowsC g, RowsC u, RowsF out, int rows, int n, const MatJob& job) {
    if (rows > 0 && n > 0 && fold(kFoldSwiglu) && !job.bias && job.X == out.p && job.T == rows && job.ldx == out.ld &&
        out.p == g.p && out.ld == g.ld && u.ld == g.ld && g.hs == 0 && u.hs == 0 && job.W.cols == n &&
        job.W.rows > 0 && (job.W.format == WFormat::F16 || job.W.format == WFormat::BF16)) {
        std::lock_guard<std::mutex> lock(mutex_);
        const GpuMatrix& m = weights(job.W);
        const uint64_t span_x = (uint64_t(rows - 1) * g.ld + n) * 4;
        uint64_t go = 0, uo = 0, yo = 0;
        const Region* rg = find(g.p, span_x, go);
        const Region* ru = find(u.p, span_x, uo);
        const Region* ry = find(job.Y, (uint64_t(job.T - 1) * job.ldy + job.W.rows) * 4, yo);
        if (rg && ru && ry && rg->buf == ru->buf && uo >= go && go % 4 == 0 && uo % 4 == 0 && yo % 4 == 0 &&
            uo / 4 <= UINT32_MAX && yo / 4 <= UINT32_MAX && kernels_->glu_ok(m, uint32_t(rows))) {
            drop_made_q_over(job.Y, size_t(job.T) * job.ldy * 4);
            kernels_->matmul(rec_, BufRef(rg->buf), uint32_t(rows), m, BufRef(ry->buf), uint32_t(go / 4),
                             uint32_t(g.ld), uint32_t(yo / 4), uint32_t(job.ldy), true, uint32_t((uo - go) / 4));
            submit_early();
            return;
        }
    }
    Backend::swiglu_matmul(g, u, out, rows, n, job);
}

bool WebGpuBackend::moe_experts(const MoeExpertsArgs& a) {
    if (!fuse_ || a.n <= 0 || a.k <= 0 || a.n_experts <= 0) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    // first, even when this window's arrays are host memory (a caller's unattached arrays; an
    // engine's first pass has its scratch blocks attached like the arena): the layer's experts
    // are uploaded side by side before the host path would upload the ones it picks in routing order
    RoutedLayer window;  // streamed experts: made below, once the window's arrays are found on the device
    const RoutedLayer& L = a.expert_ids ? window : routed_layer(a);
    if (!a.expert_ids && !L.ok) return false;
    const uint64_t P = uint64_t(a.n) * a.k, H = uint64_t(a.hidden), I = uint64_t(a.inter);
    uint64_t xo = 0, io = 0, go = 0, d_off = 0;
    const Region* rx = find(a.x, (uint64_t(a.n - 1) * a.ldx + H) * 4, xo);
    const Region* ri = find(a.idx, P * 4, io);
    const Region* rg = find(a.GU, P * 2 * I * 4, go);
    const Region* rd = find(a.D, P * H * 4, d_off);
    if (!rx || !ri || !rg || !rd) return false;
    if ((go / 4 + P * 2 * I) > UINT32_MAX || (d_off / 4 + P * H) > UINT32_MAX || xo / 4 > UINT32_MAX ||
        io / 4 > UINT32_MAX)
        return false;
    if (a.expert_ids && !(window = streamed_layer(a)).ok) return false;
    const uint32_t p32 = uint32_t(P), k = uint32_t(a.k), E = table_experts(a);
    BufferPtr log = temp(P * 4);
    if (is_quant(L.format)) {
        moe_experts_quant(a, L, BufRef(rx->buf), xo, BufRef(rg->buf), go, BufRef(rd->buf), d_off, BufRef(ri->buf), io, log);
        return true;
    }
    // gate and up of each pair's expert on its token's row: G [P][I], then U [P][I]
    Kernels::Routed gu{L.format, p32, k, uint32_t(H), L.gu_row_words, uint32_t(2 * I), uint32_t(I), 0,
                       uint32_t(xo / 4), uint32_t(a.ldx), 0, uint32_t(go / 4), uint32_t(go / 4 + P * I), uint32_t(I),
                       uint32_t(io / 4), E};
    kernels_->matmul_routed(rec_, BufRef(rx->buf), BufRef(rg->buf), BufRef(ri->buf), BufRef(L.table), L.gu_buffers,
                            BufRef(log), gu);
    // each pair's down projection of its own row of G = silu(gate) * up: folded into the down
    // kernel's reads (the same bits, one dispatch fewer), or a swiglu dispatch first
    const bool glu = fold(kFoldSwiglu) && kernels_->routed_glu_ok() && P * I <= UINT32_MAX;
    if (!glu) routed_swiglu(a.GU, P * I);
    Kernels::Routed dn{L.format, p32, k, uint32_t(I), L.down_row_words, uint32_t(H), uint32_t(H), 2,
                       uint32_t(go / 4), uint32_t(I), 1, uint32_t(d_off / 4), uint32_t(d_off / 4), uint32_t(H),
                       uint32_t(io / 4), E, glu, glu ? uint32_t(P * I) : 0u};
    kernels_->matmul_routed(rec_, BufRef(rg->buf), BufRef(rd->buf), BufRef(ri->buf), BufRef(L.table), L.down_buffers,
                            BufRef(), dn);
    if (a.ids) late_reads_.push_back({log, p32, a.ids});
    ++(a.expert_ids ? streamed_layers_run_ : routed_layers_run_);
    submit_early();
    return true;
}

void WebGpuBackend::add(float* x, const float* y, size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n == 0) return;
    OpArgs a(*this);
    BufRef bx = a.in(span(x, n), "x");
    BufRef by = a.in(span(y, n), "y");
    BufRef out = a.out(span(x, n), "sum");
    kernels_->elementwise(rec_, "add", bx, by, out, uint32_t(n));
    a.done();
}

void WebGpuBackend::add_rmsnorm(float* x, const float* y, int rows, int dim, RowsF out, const float* w, float eps) {
    if (rows <= 0 || dim <= 0) return;
    if (!fuse_) return Backend::add_rmsnorm(x, y, rows, dim, out, w, eps);
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t n = uint64_t(rows) * dim;
    OpArgs a(*this);
    BufRef by = a.in(span(y, n), "addend");
    BufRef bw = a.in(span(w, dim), "norm weight");
    BufRef bx = a.inout(span(x, n), "x");
    BufRef bh = a.out(View{out.p, rows, out.ld, 1, 0, dim}, "y");
    if (BufferPtr xq = producing(w, out.p, rows, out.ld, dim))
        kernels_->quantizing_producer(rec_, "add_rmsnorm_quant", bx, by, bw, bh, uint32_t(rows), uint32_t(dim), eps,
                                      0.0f, made_q_.format, BufRef(xq));
    else
        kernels_->add_rmsnorm(rec_, bx, by, bw, bh, uint32_t(rows), uint32_t(dim), eps, 0.0f);
    a.done();
}

void WebGpuBackend::copy(RowsC src, RowsF dst, int rows, int heads, int dim) {
    if (rows <= 0 || heads <= 0 || dim <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    View vs{src.p, rows, src.ld, heads, src.hs, dim}, vd{dst.p, rows, dst.ld, heads, dst.hs, dim};
    uint64_t so = 0, d_off = 0;
    const Region* rs = find(src.p, vs.extent() * 4, so);
    const Region* rd = find(dst.p, vd.extent() * 4, d_off);
    if (rs && rd) {  // one strided copy between device arrays (ranges never overlap)
        made_q_ = {};
        kernels_->copy(rec_, rs->buf, rd->buf, uint32_t(rows), uint32_t(heads), uint32_t(dim), uint32_t(so / 4),
                       uint32_t(src.ld), uint32_t(src.hs), uint32_t(d_off / 4), uint32_t(dst.ld), uint32_t(dst.hs));
        return;
    }
    OpArgs a(*this);
    BufRef packed = a.in(vs, "copy src");
    BufRef y = a.out(vd, "copy dst");
    kernels_->copy(rec_, packed, y, uint32_t(rows), uint32_t(heads), uint32_t(dim), 0, uint32_t(heads * dim),
                   uint32_t(dim), 0, uint32_t(heads * dim), uint32_t(dim));
    a.done();
}

}  // namespace strata::webgpu

namespace strata::webgpu {

void WebGpuBackend::copy_many(const std::vector<CopyJob>& jobs) {
    std::vector<const CopyJob*> todo;
    for (const CopyJob& j : jobs)
        if (j.rows > 0 && j.heads > 0 && j.dim > 0) todo.push_back(&j);
    if (todo.empty()) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        // one dispatch when the sources lie in at most two device arrays and every destination in one
        BufferPtr src, src2, dst;
        std::vector<Kernels::CopyJob> kj;
        bool one = fuse_ && todo.size() <= Kernels::kManyCopies;
        for (size_t i = 0; one && i < todo.size(); ++i) {
            const CopyJob& j = *todo[i];
            View vs{j.src.p, j.rows, j.src.ld, j.heads, j.src.hs, j.dim}, vd{j.dst.p, j.rows, j.dst.ld, j.heads, j.dst.hs, j.dim};
            uint64_t so = 0, d_off = 0;
            const Region* rs = find(j.src.p, vs.extent() * 4, so);
            const Region* rd = find(j.dst.p, vd.extent() * 4, d_off);
            one = rs && rd && (!dst || rd->buf == dst) && so / 4 <= UINT32_MAX && d_off / 4 <= UINT32_MAX;
            if (!one) break;
            if (!src) src = rs->buf;
            else if (rs->buf != src && !src2) src2 = rs->buf;
            one = rs->buf == src || rs->buf == src2;
            if (!one) break;
            dst = rd->buf;
            kj.push_back({uint32_t(j.rows), uint32_t(j.heads), uint32_t(j.dim), uint32_t(so / 4), uint32_t(j.src.ld),
                          uint32_t(j.src.hs), uint32_t(d_off / 4), uint32_t(j.dst.ld), uint32_t(j.dst.hs),
                          rs->buf == src ? 0u : 1u});
        }
        if (one) {
            made_q_ = {};
            kernels_->copy_many(rec_, BufRef(src), BufRef(src2 ? src2 : src), BufRef(dst), kj);
            submit_early();
            return;
        }
    }
    for (const CopyJob* j : todo) copy(j->src, j->dst, j->rows, j->heads, j->dim);
}

// moe_experts for experts in the GGUF block formats: the tokens' rows quantized once, the routed
// gate and up, SwiGLU, the pairs' rows quantized, the routed down; each row as the host-grouped
// path computes it (quantization is per row, matmul_quant_routed runs matmul_quant's row code).
void WebGpuBackend::moe_experts_quant(const MoeExpertsArgs& a, const RoutedLayer& L, const BufRef& x, uint64_t xo,
                                      const BufRef& gu, uint64_t go, const BufRef& d, uint64_t d_off,
                                      const BufRef& ids, uint64_t io, const BufferPtr& log) {
    const uint64_t P = uint64_t(a.n) * a.k, H = uint64_t(a.hidden), I = uint64_t(a.inter);
    const uint32_t p32 = uint32_t(P), k = uint32_t(a.k), E = table_experts(a);
    BufferPtr xq = quantized_for(made_q_, a.x, a.n, a.ldx, a.hidden, L.format) ? made_q_.xq : nullptr;
    if (!xq) {
        xq = temp(quant_act_words(L.format, uint32_t(a.n), uint32_t(H)) * 4);
        kernels_->quantize_rows(rec_, x, uint32_t(xo / 4), uint32_t(a.ldx), uint32_t(a.n), uint32_t(H), L.format,
                                BufRef(xq));
        hint(a.x, a.ldx, a.hidden, L.format);
    }
    Kernels::Routed up{L.format, p32, k, uint32_t(H), L.gu_row_words, uint32_t(2 * I), uint32_t(I), 0, 0, 0, 0,
                       uint32_t(go / 4), uint32_t(go / 4 + P * I), uint32_t(I), uint32_t(io / 4), E};
    kernels_->matmul_quant_routed(rec_, BufRef(xq), gu, ids, BufRef(L.table), L.gu_buffers, BufRef(log), up);
    BufferPtr gq = temp(quant_act_words(L.down_format, p32, uint32_t(I)) * 4);
    if (folds(L.down_format) && I % quant_layout(L.down_format).block_elems == 0) {
        routed_swiglu(a.GU, P * I, uint32_t(I), L.down_format, gq);  // SwiGLU quantizing the rows it writes
    } else {
        routed_swiglu(a.GU, P * I);
        kernels_->quantize_rows(rec_, gu, uint32_t(go / 4), uint32_t(I), p32, uint32_t(I), L.down_format, BufRef(gq));
    }
    Kernels::Routed dn{L.down_format, p32, k, uint32_t(I), L.down_row_words, uint32_t(H), uint32_t(H), 2, 0, 0, 1,
                       uint32_t(d_off / 4), uint32_t(d_off / 4), uint32_t(H), uint32_t(io / 4), E};
    kernels_->matmul_quant_routed(rec_, BufRef(gq), d, ids, BufRef(L.table), L.down_buffers, BufRef(), dn);
    if (a.ids) late_reads_.push_back({log, p32, a.ids});
    ++(a.expert_ids ? streamed_layers_run_ : routed_layers_run_);
    submit_early();
}

}  // namespace strata::webgpu
