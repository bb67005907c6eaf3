#include "webgpu/kernels.h"

#include <cctype>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "hash.h"
#include "webgpu/quant_layout.h"

namespace strata::webgpu {

namespace {

void need(const BufRef& b, uint64_t floats, const char* op, const char* arg) {
    if (!b) throw std::invalid_argument(std::string("webgpu ") + op + ": " + arg + " is missing");
    if (b.size < floats * 4)
        throw std::invalid_argument(std::string("webgpu ") + op + ": " + arg + " holds " +
                                    std::to_string(b.size / 4) + " values, needs " + std::to_string(floats));
}

void check(bool ok, const char* op, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string("webgpu ") + op + ": " + what);
}

uint32_t element_bytes(WeightFormat f) { return f == WeightFormat::F32 ? 4 : 2; }

// A norm's strided input: `rows` vectors of D as (token, head) pairs of `heads` heads, head h of
// token t at off + t * ld + h * hs (ld 0: heads * D, hs 0: D, the packed rows). Checks that the
// rows are whole tokens and that `b` holds the last vector; fills in the defaults.
void need_heads(const BufRef& b, uint32_t rows, uint32_t heads, uint32_t D, uint32_t off, uint32_t& ld, uint32_t& hs,
                const char* op, const char* arg) {
    check(heads > 0 && rows % heads == 0, op, "rows a whole number of heads");
    if (!ld) ld = heads * D;
    if (!hs) hs = D;
    need(b, off + uint64_t(rows / heads - 1) * ld + uint64_t(heads - 1) * hs + D, op, arg);
}

}  // namespace

WeightFormat parse_weight_format(const std::string& name) {
    std::string n;
    for (char c : name) n += char(std::tolower(static_cast<unsigned char>(c)));
    static const std::pair<const char*, WeightFormat> names[] = {
        {"f32", WeightFormat::F32},   {"f16", WeightFormat::F16},   {"bf16", WeightFormat::BF16},
        {"q8_0", WeightFormat::Q8_0}, {"q5_0", WeightFormat::Q5_0}, {"q5_1", WeightFormat::Q5_1},
        {"q4_k", WeightFormat::Q4_K}, {"q5_k", WeightFormat::Q5_K}, {"q6_k", WeightFormat::Q6_K},
        {"iq4_xs", WeightFormat::IQ4_XS}};
    for (const auto& [s, f] : names)
        if (n == s) return f;
    throw std::invalid_argument("webgpu: unsupported weight format '" + name +
                                "' (f32, f16, bf16, q8_0, q5_0, q5_1, q4_k, q5_k, q6_k, iq4_xs)");
}

namespace {

// Rows [row0, row0 + n) of the host matrix as device rows (odd 16-bit rows padded with a zero
// value; block formats repacked into whole words, quant_layout.h).
void stage_rows(std::vector<uint8_t>& staging, const uint8_t* src, uint64_t row0, uint32_t n, uint64_t row_bytes,
                uint64_t packed, uint64_t device_row, WeightFormat f = WeightFormat::F32, uint32_t cols = 0) {
    staging.assign(n * device_row, 0);
    for (uint32_t r = 0; r < n; ++r) {
        if (is_quant(f))
            repack_quant_row(f, src + (row0 + r) * row_bytes, cols, reinterpret_cast<uint32_t*>(&staging[r * device_row]));
        else
            std::memcpy(&staging[r * device_row], src + (row0 + r) * row_bytes, packed);
    }
}

// Rows [row0, row0 + n) as the device holds them: straight from the source (the mapped file)
// where its rows already are device rows (unquantized, a whole number of words, no gap between
// rows), else through `staging` (stage_rows). Returns the bytes to write (`bytes` of them).
const uint8_t* device_rows(std::vector<uint8_t>& staging, const uint8_t* src, uint64_t row0, uint32_t n,
                           uint64_t row_bytes, uint64_t packed, uint64_t device_row, WeightFormat f, uint32_t cols,
                           uint64_t& bytes) {
    bytes = n * device_row;
    if (!is_quant(f) && packed == device_row && row_bytes == device_row) return src + row0 * row_bytes;
    stage_rows(staging, src, row0, n, row_bytes, packed, device_row, f, cols);
    return staging.data();
}

// Stored bytes of a row, and its bytes on the device.
void row_sizes(WeightFormat f, uint32_t cols, uint64_t& packed, uint64_t& device_row) {
    if (is_quant(f)) {
        const QuantLayout& L = quant_layout(f);
        device_row = uint64_t(quant_row_words(f, cols)) * 4;
        packed = uint64_t(cols / L.block_elems) * L.block_bytes;
        return;
    }
    packed = uint64_t(cols) * element_bytes(f);
    device_row = (packed + 3) & ~uint64_t(3);  // an odd 16-bit row gets a zero pad value
}

}  // namespace

GpuMatrix upload_matrix(Device& device, const void* data, WeightFormat format, uint32_t rows, uint32_t cols,
                        uint64_t row_bytes, WeightPool* pool) {
    check(rows > 0 && cols > 0, "weights", "empty matrix");
    uint64_t packed = 0, device_row = 0;
    row_sizes(format, cols, packed, device_row);
    check(row_bytes >= packed, "weights", "row stride " + std::to_string(row_bytes) + " below " + std::to_string(packed));
    GpuMatrix m;
    m.format = format;
    m.rows = rows;
    m.cols = cols;
    m.row_words = uint32_t(device_row / 4);
    uint64_t rows_per_chunk = device.limits().chunk_bytes / device_row;
    check(rows_per_chunk > 0, "weights", "one row is larger than the binding limit");
    const auto* src = static_cast<const uint8_t*>(data);
    std::vector<uint8_t> staging;
    for (uint64_t row0 = 0; row0 < rows; row0 += rows_per_chunk) {
        uint32_t n = uint32_t(std::min<uint64_t>(rows_per_chunk, rows - row0));
        uint64_t bytes = 0;
        const uint8_t* p = device_rows(staging, src, row0, n, row_bytes, packed, device_row, format, cols, bytes);
        if (pool) {
            WeightSlot s = pool->take(bytes);
            device.write(s.buffer, s.offset, p, bytes);
            m.chunks.push_back({uint32_t(row0), n, s.buffer, s.offset, bytes});
        } else {
            BufferPtr b = device.upload(p, bytes, "weight chunk");
            m.chunks.push_back({uint32_t(row0), n, b, 0, b->size()});
        }
    }
    return m;
}

void rewrite_matrix(Device& device, const GpuMatrix& m, const void* data, uint64_t row_bytes) {
    uint64_t packed = 0, device_row = 0;
    row_sizes(m.format, m.cols, packed, device_row);
    check(row_bytes >= packed, "weights", "row stride " + std::to_string(row_bytes) + " below " + std::to_string(packed));
    std::vector<uint8_t> staging;
    for (const auto& c : m.chunks) {
        uint64_t bytes = 0;
        const uint8_t* p = device_rows(staging, static_cast<const uint8_t*>(data), c.row0, c.rows, row_bytes, packed,
                                       device_row, m.format, m.cols, bytes);
        device.write(c.buffer, c.offset, p, bytes);
    }
}

Kernels::Kernels(Device& device) : device_(device) {
    const char* env = std::getenv("STRATA_WEBGPU_XLOAD");
    std::string xload = env && *env ? env : "lanes";
    if (xload == "staged") {  // 4 rows per workgroup, x staged in workgroup memory
        rows_file_ = "matmul_rows.wgsl";
        rb_ = 4;
    } else if (xload == "direct") {  // one row per workgroup, 64 threads per row
        rows_file_ = "matmul_rows_direct.wgsl";
        rb_ = 1;
    } else if (xload == "lanes") {
        x4_ = true;
    } else if (xload == "lanes4") {  // the lanes loop's values, 4 rows per thread, 16 per workgroup
        rows_file_ = "matmul_rows_lanes4.wgsl";
        rb_ = 16;
        x4_ = true;
    } else {
        throw std::invalid_argument("STRATA_WEBGPU_XLOAD='" + xload + "': use lanes (default), lanes4, direct or staged");
    }
    const char* split = std::getenv("STRATA_WEBGPU_ROW_SPLIT");
    if (split && *split) {
        if (std::strcmp(split, "0") != 0 && std::strcmp(split, "1") != 0)
            throw std::invalid_argument(std::string("STRATA_WEBGPU_ROW_SPLIT='") + split + "': use 0 or 1 (unset: 1)");
        split_ = *split == '1';
    }
    // STRATA_WEBGPU_NORM_WG: the workgroup size of norms over rows of kNormWideRow values or more
    // (an A/B for the GPU: one 64-thread workgroup per row is a chain of memory latencies there)
    if (const char* nwg = std::getenv("STRATA_WEBGPU_NORM_WG"); nwg && *nwg) {
        const std::string v(nwg);
        const uint32_t have = device_.limits().max_invocations_per_workgroup;
        uint32_t n = 0;
        for (uint32_t c : {64u, 128u, 256u, 512u, 1024u})
            if (v == std::to_string(c)) n = c;
        if (!n || n > have)
            throw std::invalid_argument("STRATA_WEBGPU_NORM_WG='" + v + "': use 64, 128, 256, 512 or 1024, at most " +
                                        std::to_string(have) + " on this adapter (unset: " +
                                        std::to_string(kNormWorkgroup) + ")");
        norm_wg_ = n;
    }
}

namespace {
uint64_t fnv(uint64_t h, const std::string& s) {
    for (unsigned char c : s) h = fnv1a(h, c);
    return fnv1a(h, 0xff);  // a separator: ("ab", "c") and ("a", "bc") differ
}
}  // namespace

const Pipeline& Kernels::pipeline(const std::string& file, const std::string& entry, ShaderDefines extra) {
    uint64_t h = fnv(fnv(kFnvOffset, file), entry);
    for (const auto& [k, v] : extra) h = fnv(fnv(h, k), v);
    std::vector<Known>& same = known_[h];
    for (const Known& k : same)
        if (k.file == file && k.entry == entry && k.extra == extra) return *k.pipeline;
    Known k{file, entry, extra, nullptr};
    if (!extra.count("WG")) extra["WG"] = std::to_string(kWorkgroup);
    if (file.rfind("matmul", 0) == 0 && !extra.count("ROWS")) {
        extra["ROWS"] = rows_file_;
        extra["RB"] = std::to_string(rb_);
    }
    if (file.rfind("matmul", 0) == 0 && !extra.count("GLU")) extra["GLU"] = "0";
    k.pipeline = &device_.pipeline(file, entry, extra);  // (a std::map's element: stays put)
    same.push_back(std::move(k));
    return *same.back().pipeline;
}

ShaderDefines Kernels::norm_defines(uint32_t D, ShaderDefines extra) const {
    // (pipeline() gives every other kernel kWorkgroup: the default adds nothing to build per dispatch)
    if (D >= kNormWideRow && norm_wg_ != kWorkgroup) extra["WG"] = std::to_string(norm_wg_);
    return extra;
}

Kernels::Split Kernels::row_split(uint64_t groups, uint32_t T) const {
    if (!split_ || T < 2 || groups >= kSplitGroups) return {1, T};
    const uint32_t want = uint32_t(std::min<uint64_t>(T, (kSplitGroups + groups - 1) / groups));
    const uint32_t t_per = (T + want - 1) / want;
    return {(T + t_per - 1) / t_per, t_per};
}

bool Kernels::head_lanes4(uint32_t rows, uint32_t T) const {
    return rows_file_ == "matmul_rows_lanes.wgsl" && rows >= kHeadRows && T >= 2 && T <= kTokenBlock;
}

bool Kernels::glu_ok(const GpuMatrix& m, uint32_t T) const {
    return routed_glu_ok() && m.format != WeightFormat::F32 && !is_quant(m.format) && m.row_words % 4 == 0 &&
           uint64_t(m.cols) == 2ull * m.row_words && !head_lanes4(m.rows, T);
}

uint32_t Kernels::x_vec4(uint32_t x_off, uint32_t x_stride) const {
    return x4_ && x_off % 4 == 0 && x_stride % 4 == 0 ? 1u : 0u;
}

std::vector<BufRef> Kernels::with_x4(std::vector<BufRef> b, const BufRef& x) const {
    if (!x4_) return b;
    b.resize(kX4Binding - 1);  // bindings up to 11 as given (null: unused), then x again
    b.push_back(x);
    return b;
}

uint32_t Kernels::stride_groups(uint64_t n) const {
    uint64_t groups = (n + kWorkgroup - 1) / kWorkgroup;
    return uint32_t(std::clamp<uint64_t>(groups, 1, 4096));
}

void Kernels::matmul(Recorder& r, const BufRef& x, uint32_t T, const GpuMatrix& m, const BufRef& y, uint32_t x_off,
                     uint32_t x_stride, uint32_t y_off, uint32_t y_stride, bool glu, uint32_t glu_off) {
    check(T > 0, "matmul", "no rows");
    if (!x_stride) x_stride = m.cols;
    if (!y_stride) y_stride = m.rows;
    check(x_stride >= m.cols && y_stride >= m.rows, "matmul", "row stride below the row length");
    need(x, x_off + uint64_t(T - 1) * x_stride + m.cols, "matmul", "x");
    if (glu) {
        check(glu_ok(m, T), "matmul", "a folded SwiGLU needs f16/bf16 vec4 rows under the lanes loop");
        need(x, uint64_t(x_off) + glu_off + uint64_t(T - 1) * x_stride + m.cols, "matmul", "x (SwiGLU up)");
    }
    need(y, y_off + uint64_t(T - 1) * y_stride + m.rows, "matmul", "y");
    if (is_quant(m.format)) {
        BufferPtr xq = device_.create_buffer(quant_act_words(m.format, T, m.cols) * 4, "quantized x");
        quantize_rows(r, x, x_off, x_stride, T, m.cols, m.format, BufRef(xq));
        return matmul_quant(r, BufRef(xq), T, m, y, y_off, y_stride);
    }
    // four words per load when a row is whole 16-byte vectors of values (no pad lane)
    bool half = m.format != WeightFormat::F32;
    bool v4 = half && m.row_words % 4 == 0 && uint64_t(m.cols) == 2ull * m.row_words;
    const char* entry = !half ? "matmul_f32" : v4 ? "matmul_half_v4" : "matmul_half";
    ShaderDefines defs = {{"TB", std::to_string(kTokenBlock)}, {"BF16", m.format == WeightFormat::BF16 ? "1" : "0"}};
    if (glu) defs["GLU"] = "1";
    // the output head at T = 2..8 under the lanes loop: lanes4, the same bits with x read once per
    // 4 weight rows
    uint32_t rb = rb_;
    if (v4 && head_lanes4(m.rows, T)) {
        defs["ROWS"] = "matmul_rows_lanes4.wgsl";
        defs["RB"] = std::to_string(kLanes4Rows);
        rb = kLanes4Rows;
    }
    const Pipeline& pl = pipeline("matmul.wgsl", entry, defs);
    uint32_t max_groups = device_.limits().max_workgroups_per_dimension;
    for (auto& c : m.chunks) {
        uint32_t groups = v4 ? (c.rows + rb - 1) / rb : c.rows;  // v4: rb rows per workgroup
        const Split sp = v4 ? row_split(groups, T) : Split{1, T};
        const uint64_t wgs = uint64_t(groups) * sp.slices;
        check(wgs <= UINT32_MAX, "matmul", "too many rows");
        uint32_t gx = uint32_t(std::min<uint64_t>(wgs, max_groups));
        uint32_t gy = uint32_t((wgs + gx - 1) / gx);
        struct {
            uint32_t T, K, N, row_words, x_stride, y_stride, col0, groups_x, x_off, y_off, x_vec4, slices, t_per,
                glu_off;
        } p{T, m.cols, c.rows, m.row_words, x_stride, y_stride, c.row0, gx, x_off, y_off,
            glu && glu_off % 4 ? 0u : x_vec4(x_off, x_stride), sp.slices, sp.t_per, glu ? glu_off : 0u};
        if (v4)
            r.dispatch(pl, &p, sizeof p, with_x4({x, nullptr, y, c.ref()}, x), gx, gy);
        else
            r.dispatch(pl, &p, sizeof p, {x, c.ref(), y}, gx, gy);
        if (r.profiling())
            r.annotate(std::string(entry) + (glu ? " swiglu" : "") + (rb != rb_ ? " lanes4 " : " ") +
                           std::to_string(m.rows) + "x" +
                           std::to_string(m.cols) + " T" + std::to_string(T) +
                           (sp.slices > 1 ? " split " + std::to_string(sp.slices) : ""),
                       c.bytes);
    }
}

bool Kernels::gather_ok(const GpuMatrix& m) {
    return m.format != WeightFormat::F32 && !is_quant(m.format) && m.chunks.size() == 1 && m.row_words % 4 == 0 &&
           uint64_t(m.cols) == 2ull * m.row_words && m.chunks[0].offset % 16 == 0;
}

void Kernels::matmul_gathered(Recorder& r, const BufRef& x, const BufRef& y, const std::vector<GatherJob>& jobs) {
    check(!jobs.empty() && jobs.size() <= kGatherJobs, "matmul_gathered", "1.." + std::to_string(kGatherJobs) + " jobs");
    const GpuMatrix& m0 = *jobs[0].m;
    struct Entry {
        uint32_t first_row, rows, buffer, w_quad;  // weights: vec4 index of the chunk in its buffer
        uint32_t T, x_off, x_stride, t_per;
        uint32_t y_off, y_stride, slices, pad;
    };
    struct {
        uint32_t K, row_words, groups_x, total_rows;
        uint32_t n_entries, x_vec4, pad[2];
        Entry e[kGatherJobs];
    } p{};
    p.x_vec4 = 1;
    std::vector<BufRef> bound;  // distinct weight buffers, bound whole
    // the window-row split: the dispatch's row groups decide it, each job splits its own rows of x
    uint64_t groups = 0;
    uint32_t max_T = 0;
    for (const GatherJob& j : jobs) {
        groups += (j.m->rows + rb_ - 1) / rb_;
        max_T = std::max(max_T, j.T);
    }
    const uint32_t want = row_split(groups, max_T).slices;
    uint64_t rows = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const GatherJob& j = jobs[i];
        const GpuMatrix& m = *j.m;
        check(gather_ok(m) && m.format == m0.format && m.cols == m0.cols, "matmul_gathered", "matrices of one shape");
        check(j.T > 0 && j.x_stride >= m.cols && j.y_stride >= m.rows, "matmul_gathered", "rows and strides");
        need(x, j.x_off + uint64_t(j.T - 1) * j.x_stride + m.cols, "matmul_gathered", "x");
        need(y, j.y_off + uint64_t(j.T - 1) * j.y_stride + m.rows, "matmul_gathered", "y");
        const GpuMatrix::Chunk& c = m.chunks[0];
        const int wb = weight_binding(bound, c.buffer);
        check(wb >= 0, "matmul_gathered", "weights in more than 4 buffers");
        const uint32_t b = uint32_t(wb);
        const uint32_t t_per = (j.T + std::min(want, j.T) - 1) / std::min(want, j.T);
        const uint32_t slices = (j.T + t_per - 1) / t_per;
        check(rows <= UINT32_MAX, "matmul_gathered", "too many rows");
        p.e[i] = Entry{uint32_t(rows), m.rows, b, uint32_t(c.offset / 16), j.T, j.x_off, j.x_stride, t_per,
                       j.y_off, j.y_stride, slices, 0};
        p.x_vec4 &= x_vec4(j.x_off, j.x_stride);
        rows += uint64_t((m.rows + rb_ - 1) / rb_) * slices;  // workgroups: rb_ rows of one job, t_per rows of x
    }
    check(rows <= UINT32_MAX, "matmul_gathered", "too many rows");
    uint32_t gx = uint32_t(std::min<uint64_t>(rows, device_.limits().max_workgroups_per_dimension));
    p.K = m0.cols;
    p.row_words = m0.row_words;
    p.groups_x = gx;
    p.total_rows = uint32_t(rows);
    p.n_entries = uint32_t(jobs.size());
    const Pipeline& pl = pipeline("matmul_gathered.wgsl", "matmul_half_v4_gathered",
                                  {{"TB", std::to_string(kTokenBlock)},
                                   {"BF16", m0.format == WeightFormat::BF16 ? "1" : "0"},
                                   {"MAX_JOBS", std::to_string(kGatherJobs)}});
    std::vector<BufRef> b = {x, nullptr, y, nullptr};
    push_weight_bindings(b, bound);
    b = with_x4(std::move(b), x);
    // the parameter block is sent whole: its size, and so its place in the uniform ring, stays fixed
    r.dispatch(pl, &p, sizeof p, b, gx, uint32_t((rows + gx - 1) / gx));
    if (r.profiling()) {
        uint64_t bytes = 0;
        for (auto& j : jobs) bytes += j.m->chunks[0].bytes;
        r.annotate("matmul_gathered K" + std::to_string(m0.cols) + " " + std::to_string(jobs.size()) + " jobs T" +
                       std::to_string(jobs[0].T) + (want > 1 ? " split " + std::to_string(want) : ""),
                   bytes);
    }
}

int Kernels::weight_binding(std::vector<BufRef>& bound, const BufferPtr& buffer) {
    for (size_t b = 0; b < bound.size(); ++b)
        if (bound[b].buf == buffer) return int(b);
    if (bound.size() >= kGatherBuffers) return -1;
    bound.push_back(BufRef(buffer));
    return int(bound.size() - 1);
}

void Kernels::push_weight_bindings(std::vector<BufRef>& b, const std::vector<BufRef>& bound) {
    for (size_t i = 0; i < kGatherBuffers; ++i) b.push_back(bound[std::min(i, bound.size() - 1)]);
}

bool Kernels::gather_f32_ok(const GpuMatrix& m) {
    return m.format == WeightFormat::F32 && m.chunks.size() == 1 && m.row_words == m.cols && m.chunks[0].offset % 4 == 0;
}

void Kernels::matmul_f32_gathered(Recorder& r, const BufRef& x, const BufRef& y, const std::vector<GatherJob>& jobs) {
    check(!jobs.empty() && jobs.size() <= kGatherF32Jobs, "matmul_f32_gathered",
          "1.." + std::to_string(kGatherF32Jobs) + " jobs");
    const GpuMatrix& m0 = *jobs[0].m;
    struct Entry {
        uint32_t first_row, rows, buffer, word;
        uint32_t T, x_off, x_stride, pad0;
        uint32_t y_off, y_stride, col0, pad1;
    };
    struct {
        uint32_t K, row_words, groups_x, total_rows, n_entries, pad[3];
        Entry e[kGatherF32Jobs];
    } p{};
    std::vector<BufRef> bound;
    uint64_t rows = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const GatherJob& j = jobs[i];
        const GpuMatrix& m = *j.m;
        check(gather_f32_ok(m) && m.cols == m0.cols, "matmul_f32_gathered", "single-chunk f32 matrices of one width");
        check(j.T > 0 && j.x_stride >= m.cols && j.y_stride >= m.rows, "matmul_f32_gathered", "rows and strides");
        need(x, j.x_off + uint64_t(j.T - 1) * j.x_stride + m.cols, "matmul_f32_gathered", "x");
        need(y, j.y_off + uint64_t(j.T - 1) * j.y_stride + m.rows, "matmul_f32_gathered", "y");
        const GpuMatrix::Chunk& c = m.chunks[0];
        const int wb = weight_binding(bound, c.buffer);
        check(wb >= 0, "matmul_f32_gathered", "weights in more than 4 buffers");
        const uint32_t b = uint32_t(wb);
        p.e[i] = Entry{uint32_t(rows), m.rows, b, uint32_t(c.offset / 4), j.T, j.x_off, j.x_stride, 0,
                       j.y_off, j.y_stride, c.row0, 0};
        rows += m.rows;  // one workgroup per row
    }
    check(rows <= UINT32_MAX, "matmul_f32_gathered", "too many rows");
    const uint32_t gx = uint32_t(std::min<uint64_t>(rows, device_.limits().max_workgroups_per_dimension));
    p.K = m0.cols;
    p.row_words = m0.row_words;
    p.groups_x = gx;
    p.total_rows = uint32_t(rows);
    p.n_entries = uint32_t(jobs.size());
    const Pipeline& pl = pipeline("matmul_f32_gathered.wgsl", "matmul_f32_gathered",
                                  {{"TB", std::to_string(kTokenBlock)}, {"MAX_JOBS", std::to_string(kGatherF32Jobs)}});
    std::vector<BufRef> b = {x, y};
    push_weight_bindings(b, bound);
    r.dispatch(pl, &p, sizeof p, b, gx, uint32_t((rows + gx - 1) / gx));
    if (r.profiling()) {
        uint64_t bytes = 0;
        for (auto& j : jobs) bytes += j.m->chunks[0].bytes;
        r.annotate("matmul_f32_gathered K" + std::to_string(m0.cols) + " " + std::to_string(jobs.size()) + " jobs T" +
                       std::to_string(jobs[0].T), bytes);
    }
}

void Kernels::matmul_routed(Recorder& r, const BufRef& x, const BufRef& y, const BufRef& ids, const BufRef& table,
                            const std::vector<BufRef>& weights, const BufRef& ids_log, const Routed& a) {
    if (!a.pairs) return;
    check(a.format != WeightFormat::F32 && a.row_words % 4 == 0 && uint64_t(a.K) == 2ull * a.row_words,
          "matmul_routed", "half-precision rows of whole vec4 words");
    check(!weights.empty() && weights.size() <= kGatherBuffers, "matmul_routed", "1..4 weight buffers");
    check(a.k > 0 && a.n_experts > 0 && a.half_rows > 0 && a.half_rows <= a.rows_per_pair &&
              (a.mat0 == 0 || (a.mat0 == 2 && a.half_rows == a.rows_per_pair)),
          "matmul_routed", "pair layout");
    const uint32_t second = a.rows_per_pair - a.half_rows;
    check(a.y_stride >= std::max(a.half_rows, second) && a.x_stride >= a.K, "matmul_routed", "rows and strides");
    uint32_t x_rows = a.x_per_pair ? a.pairs : (a.pairs + a.k - 1) / a.k;
    need(x, a.x_off + uint64_t(x_rows - 1) * a.x_stride + a.K, "matmul_routed", "x");
    need(y, a.y_off + uint64_t(a.pairs - 1) * a.y_stride + a.half_rows, "matmul_routed", "y");
    if (second) need(y, a.y_off2 + uint64_t(a.pairs - 1) * a.y_stride + second, "matmul_routed", "y (second matrix)");
    need(ids, uint64_t(a.ids_off) + a.pairs, "matmul_routed", "ids");
    need(table, uint64_t(a.n_experts) * 3 * 2, "matmul_routed", "table");
    check(a.half_rows % rb_ == 0 && a.rows_per_pair % rb_ == 0, "matmul_routed",
          "rows per pair a multiple of " + std::to_string(rb_));
    uint64_t rows = uint64_t(a.pairs) * a.rows_per_pair / rb_;  // workgroups
    check(rows <= UINT32_MAX, "matmul_routed", "too many rows");
    uint32_t gx = uint32_t(std::min<uint64_t>(rows, device_.limits().max_workgroups_per_dimension));
    struct {
        uint32_t K, row_words, groups_x, total_rows, rows_per_pair, half_rows, mat0, k;
        uint32_t x_off, x_stride, x_per_pair, y_off, y_stride, ids_off, n_experts, log_ids;
        uint32_t y_off2, x_vec4, pad[2];
    } p{a.K, a.row_words, gx, uint32_t(rows), a.rows_per_pair, a.half_rows, a.mat0, a.k,
        a.x_off, a.x_stride, a.x_per_pair, a.y_off, a.y_stride, a.ids_off, a.n_experts, ids_log ? 1u : 0u,
        a.y_off2, a.glu && a.glu_off % 4 ? 0u : x_vec4(a.x_off, a.x_stride), {a.glu ? a.glu_off : 0u, 0}};
    if (a.glu) {
        check(routed_glu_ok() && a.mat0 == 2, "matmul_routed", "a folded SwiGLU is the lanes loop's down projection");
        need(x, a.x_off + uint64_t(a.glu_off) + uint64_t(x_rows - 1) * a.x_stride + a.K, "matmul_routed",
             "x (SwiGLU up)");
    }
    if (ids_log) need(ids_log, a.pairs, "matmul_routed", "ids log");
    const Pipeline& pl = pipeline("matmul_gathered.wgsl", "matmul_half_v4_routed",
                                  {{"TB", std::to_string(kTokenBlock)},
                                   {"BF16", a.format == WeightFormat::BF16 ? "1" : "0"},
                                   {"MAX_JOBS", std::to_string(kGatherJobs)},
                                   {"GLU", a.glu ? "1" : "0"}});
    std::vector<BufRef> b = {x, nullptr, y, nullptr};
    push_weight_bindings(b, weights);
    b.push_back(ids);
    b.push_back(table);
    b.push_back(ids_log ? ids_log : ids);
    b = with_x4(std::move(b), x);
    r.dispatch(pl, &p, sizeof p, b, gx, uint32_t((rows + gx - 1) / gx));
    if (r.profiling())  // every pair reads its expert's rows, duplicates included
        r.annotate(std::string("matmul_routed ") + (a.mat0 == 0 ? "gate+up" : a.glu ? "swiglu+down" : "down") + " " +
                       std::to_string(a.pairs) + " pairs", uint64_t(a.pairs) * a.rows_per_pair * a.row_words * 4);
}

void Kernels::copy(Recorder& r, const BufRef& src, const BufRef& dst, uint32_t rows, uint32_t heads, uint32_t D,
                   uint32_t src_off, uint32_t src_ld, uint32_t src_hs, uint32_t dst_off, uint32_t dst_ld,
                   uint32_t dst_hs) {
    if (!rows || !heads || !D) return;
    need(src, src_off + uint64_t(rows - 1) * src_ld + uint64_t(heads - 1) * src_hs + D, "copy", "src");
    need(dst, dst_off + uint64_t(rows - 1) * dst_ld + uint64_t(heads - 1) * dst_hs + D, "copy", "dst");
    struct { uint32_t rows, heads, D, src_off, src_ld, src_hs, dst_off, dst_ld, dst_hs; } p{
        rows, heads, D, src_off, src_ld, src_hs, dst_off, dst_ld, dst_hs};
    r.dispatch(pipeline("copy.wgsl", "copy_rows", {{"MAX_COPIES", std::to_string(kManyCopies)}}), &p, sizeof p, {src, dst}, stride_groups(uint64_t(rows) * heads * D));
}

void Kernels::copy_many(Recorder& r, const BufRef& src, const BufRef& src2, const BufRef& dst,
                        const std::vector<CopyJob>& jobs) {
    check(!jobs.empty() && jobs.size() <= kManyCopies, "copy_many", "1.." + std::to_string(kManyCopies) + " copies");
    struct {
        uint32_t n_jobs, total, pad0, pad1;
        uint32_t jobs[kManyCopies][12];
    } p{};
    uint64_t total = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const CopyJob& j = jobs[i];
        check(j.rows && j.heads && j.D, "copy_many", "an empty copy");
        check(j.second <= 1, "copy_many", "a copy reads src or src2");
        need(j.second ? src2 : src, j.src_off + uint64_t(j.rows - 1) * j.src_ld + uint64_t(j.heads - 1) * j.src_hs + j.D,
             "copy_many", j.second ? "src2" : "src");
        need(dst, j.dst_off + uint64_t(j.rows - 1) * j.dst_ld + uint64_t(j.heads - 1) * j.dst_hs + j.D, "copy_many", "dst");
        check(total <= UINT32_MAX, "copy_many", "too many values");
        uint32_t e[12] = {j.rows, j.heads, j.D, uint32_t(total), j.src_off, j.src_ld, j.src_hs, j.second,
                          j.dst_off, j.dst_ld, j.dst_hs, 0};
        std::memcpy(p.jobs[i], e, sizeof e);
        total += uint64_t(j.rows) * j.heads * j.D;
    }
    check(total <= UINT32_MAX, "copy_many", "too many values");
    p.n_jobs = uint32_t(jobs.size());
    p.total = uint32_t(total);
    r.dispatch(pipeline("copy.wgsl", "copy_many", {{"MAX_COPIES", std::to_string(kManyCopies)}}), &p, sizeof p,
               {src, dst, src2}, stride_groups(total));
}

void Kernels::rmsnorm(Recorder& r, const BufRef& x, const BufRef& w, const BufRef& y, uint32_t rows,
                      uint32_t D, float eps, float weight_offset, uint32_t heads, uint32_t x_off, uint32_t x_ld,
                      uint32_t x_hs) {
    need_heads(x, rows, heads, D, x_off, x_ld, x_hs, "rmsnorm", "x");
    need(w, D, "rmsnorm", "weight");
    need(y, uint64_t(rows) * D, "rmsnorm", "y");
    uint32_t gx = std::min(rows, device_.limits().max_workgroups_per_dimension);
    struct {
        uint32_t rows, D;
        float eps, off;
        uint32_t gx, d_off, e_off, heads, z_off, z_ld, z_hs, x_off, x_ld, x_hs;
    } p{rows, D, eps, weight_offset, gx, 0, 0, heads, 0, 0, 0, x_off, x_ld, x_hs};
    r.dispatch(pipeline("norm.wgsl", "rmsnorm", norm_defines(D)), &p, sizeof p, {x, w, y, nullptr}, gx, (rows + gx - 1) / gx);
}

// The two-input norms (norm.wgsl's z binding: the gate, or the residual's addend).
void Kernels::norm_with(Recorder& r, const char* entry, const char* z_name, const BufRef& x, const BufRef& z,
                        const BufRef& w, const BufRef& y, uint32_t rows, uint32_t D, float eps, float weight_offset) {
    need(x, uint64_t(rows) * D, entry, "x");
    need(z, uint64_t(rows) * D, entry, z_name);
    need(w, D, entry, "weight");
    need(y, uint64_t(rows) * D, entry, "y");
    uint32_t gx = std::min(rows, device_.limits().max_workgroups_per_dimension);
    struct { uint32_t rows, D; float eps, off; uint32_t gx; } p{rows, D, eps, weight_offset, gx};
    r.dispatch(pipeline("norm.wgsl", entry, norm_defines(D)), &p, sizeof p, {x, w, y, z}, gx, (rows + gx - 1) / gx);
}

void Kernels::add_rmsnorm(Recorder& r, const BufRef& x, const BufRef& z, const BufRef& w, const BufRef& y,
                          uint32_t rows, uint32_t D, float eps, float weight_offset) {
    norm_with(r, "add_rmsnorm", "addend", x, z, w, y, rows, D, eps, weight_offset);
}

void Kernels::rmsnorm_gated(Recorder& r, const BufRef& x, const BufRef& z, const BufRef& w,
                            const BufRef& y, uint32_t rows, uint32_t D, float eps, float weight_offset, uint32_t heads,
                            uint32_t z_off, uint32_t z_ld, uint32_t z_hs) {
    need(x, uint64_t(rows) * D, "rmsnorm_gated", "x");
    need_heads(z, rows, heads, D, z_off, z_ld, z_hs, "rmsnorm_gated", "z");
    need(w, D, "rmsnorm_gated", "weight");
    need(y, uint64_t(rows) * D, "rmsnorm_gated", "y");
    uint32_t gx = std::min(rows, device_.limits().max_workgroups_per_dimension);
    struct { uint32_t rows, D; float eps, off; uint32_t gx, d_off, e_off, heads, z_off, z_ld, z_hs; } p{
        rows, D, eps, weight_offset, gx, 0, 0, heads, z_off, z_ld, z_hs};
    r.dispatch(pipeline("norm.wgsl", "rmsnorm_gated", norm_defines(D)), &p, sizeof p, {x, w, y, z}, gx, (rows + gx - 1) / gx);
}

void Kernels::rotary(Recorder& r, const BufRef& x, const BufRef& cos_sin, uint32_t T, uint32_t heads,
                     uint32_t D, uint32_t rot_dim) {
    check(rot_dim % 2 == 0 && rot_dim <= D && rot_dim > 0, "rotary", "rot_dim must be even, within the head dim");
    need(x, uint64_t(T) * heads * D, "rotary", "x");
    need(cos_sin, uint64_t(T) * rot_dim, "rotary", "cos_sin");
    struct { uint32_t rows, heads, D, half; } p{T * heads, heads, D, rot_dim / 2};
    r.dispatch(pipeline("rotary.wgsl", "rotary"), &p, sizeof p, {x, cos_sin}, stride_groups(uint64_t(T) * heads * p.half));
}

void Kernels::rmsnorm_rotary(Recorder& r, const BufRef& x, const BufRef& w, const BufRef& y, const BufRef& cos_sin,
                             uint32_t T, uint32_t heads, uint32_t D, float eps, uint32_t x_off, uint32_t x_ld,
                             uint32_t x_hs, uint32_t rot_dim) {
    check(rot_dim % 2 == 0 && rot_dim <= D && rot_dim > 0, "rmsnorm_rotary", "rot_dim must be even, within the head dim");
    const uint32_t rows = T * heads;
    need_heads(x, rows, heads, D, x_off, x_ld, x_hs, "rmsnorm_rotary", "x");
    need(w, D, "rmsnorm_rotary", "weight");
    need(y, uint64_t(rows) * D, "rmsnorm_rotary", "y");
    need(cos_sin, uint64_t(T) * rot_dim, "rmsnorm_rotary", "cos_sin");
    uint32_t gx = std::min(rows, device_.limits().max_workgroups_per_dimension);
    // norm.wgsl's Params up to rot_half
    struct {
        uint32_t rows, D;
        float eps, off;
        uint32_t gx, d_off, e_off, heads, z_off, z_ld, z_hs, x_off, x_ld, x_hs, k, has_shared, rot_half;
    } p{rows, D, eps, 0.0f, gx, 0, 0, heads, 0, 0, 0, x_off, x_ld, x_hs, 0, 0, rot_dim / 2};
    static_assert(sizeof p == 17 * 4, "norm.wgsl's Params up to rot_half");
    r.dispatch(pipeline("norm_rotary.wgsl", "rmsnorm_rotary", norm_defines(D)), &p, sizeof p, {x, w, y, nullptr, cos_sin}, gx,
               (rows + gx - 1) / gx);
}

void Kernels::embedding(Recorder& r, const BufRef& ids, uint32_t T, const GpuMatrix& table, const BufRef& y) {
    need(ids, T, "embedding", "ids");
    need(y, uint64_t(T) * table.cols, "embedding", "y");
    const char* entry = table.format == WeightFormat::F32 ? "embedding_f32"
                        : table.format == WeightFormat::F16 ? "embedding_f16" : "embedding_bf16";
    const Pipeline& pl = pipeline("embedding.wgsl", entry);
    for (auto& c : table.chunks) {
        struct { uint32_t T, D, row_words, row0, rows, ld_out; } p{T, table.cols, table.row_words, c.row0, c.rows, table.cols};
        r.dispatch(pl, &p, sizeof p, {ids, c.ref(), y}, stride_groups(uint64_t(T) * table.cols));
    }
}

void Kernels::elementwise(Recorder& r, const std::string& op, const BufRef& a, const BufRef& b,
                          const BufRef& y, uint32_t n, float s, uint32_t bias_len) {
    static const char* binary[] = {"add", "add_scaled", "swiglu", "sigmoid_mul", "bias_add"};
    static const char* unary[] = {"scale", "silu"};
    bool is_binary = std::find(std::begin(binary), std::end(binary), op) != std::end(binary);
    bool is_unary = std::find(std::begin(unary), std::end(unary), op) != std::end(unary);
    check(is_binary || is_unary, "elementwise", "unknown op '" + op + "'");
    need(a, n, op.c_str(), "a");
    uint32_t m = op == "bias_add" ? bias_len : n;
    check(op != "bias_add" || (m > 0 && n % m == 0), "bias_add", "bias length must divide n");
    if (is_binary) need(b, m, op.c_str(), "b");
    need(y, n, op.c_str(), "y");
    struct { uint32_t n; float s; uint32_t m; } p{n, s, m};
    std::string entry = op == "silu" ? "silu_op" : op;
    r.dispatch(pipeline("elementwise.wgsl", entry), &p, sizeof p, {a, is_binary ? b : nullptr, y}, stride_groups(n));
}

void Kernels::router_topk(Recorder& r, const BufRef& logits, const BufRef& ids, const BufRef& weights,
                          uint32_t T, uint32_t E, uint32_t k, bool renormalize) {
    check(E > 0 && E <= kMaxExperts, "router_topk", "expert count " + std::to_string(E) + " outside 1.." + std::to_string(kMaxExperts));
    check(k > 0 && k <= E, "router_topk", "top-k " + std::to_string(k) + " outside 1..E");
    check(T <= device_.limits().max_workgroups_per_dimension, "router_topk", "too many rows in one window");
    need(logits, uint64_t(T) * E, "router_topk", "logits");
    need(ids, uint64_t(T) * k, "router_topk", "ids");
    need(weights, uint64_t(T) * k, "router_topk", "weights");
    struct { uint32_t T, E, k, renorm; } p{T, E, k, renormalize ? 1u : 0u};
    r.dispatch(pipeline("router.wgsl", "router_topk", {{"MAX_E", std::to_string(kMaxExperts)}}), &p, sizeof p,
               {logits, ids, weights}, T);
}

void Kernels::kv_write(Recorder& r, const BufRef& k, const BufRef& v, const BufRef& k_cache,
                       const BufRef& v_cache, uint32_t T, uint32_t row, uint32_t pos0) {
    need(k, uint64_t(T) * row, "kv_write", "k");
    need(v, uint64_t(T) * row, "kv_write", "v");
    need(k_cache, uint64_t(pos0 + T) * row, "kv_write", "k_cache");
    need(v_cache, uint64_t(pos0 + T) * row, "kv_write", "v_cache");
    struct { uint32_t T, row, pos0; } p{T, row, pos0};
    r.dispatch(pipeline("kv_cache.wgsl", "kv_write"), &p, sizeof p, {k, v, k_cache, v_cache}, stride_groups(uint64_t(T) * row));
}

void Kernels::attention(Recorder& r, const BufRef& q, const BufRef& k_cache, const BufRef& v_cache,
                        const BufRef& scores, const BufRef& out, uint32_t T, uint32_t Hq, uint32_t Hk,
                        uint32_t D, uint32_t pos0, float scale, const BufRef& gate) {
    check(Hk > 0 && Hq % Hk == 0, "attention", "query heads must be a multiple of kv heads");
    uint32_t ctx = pos0 + T;
    need(q, uint64_t(T) * Hq * D, "attention", "q");
    need(k_cache, uint64_t(ctx) * Hk * D, "attention", "k_cache");
    need(v_cache, uint64_t(ctx) * Hk * D, "attention", "v_cache");
    need(scores, uint64_t(T) * Hq * ctx, "attention", "scores");
    need(out, uint64_t(T) * Hq * D, "attention", "out");
    if (gate) need(gate, uint64_t(T) * Hq * D, "attention", "gate");
    struct { uint32_t T, Hq, Hk, D, pos0, ctx; float scale; uint32_t gated; } p{
        T, Hq, Hk, D, pos0, ctx, scale, gate ? 1u : 0u};
    r.dispatch(pipeline("attention.wgsl", "attention"), &p, sizeof p,
               {q, k_cache, v_cache, scores, out, gate ? gate : out}, Hq, T);
}

void Kernels::gdn_window(Recorder& r, const BufRef& q, const BufRef& k, const BufRef& v, const BufRef& g,
                         const BufRef& beta, const BufRef& state, const BufRef& out, uint32_t T,
                         uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv, uint32_t commit_rows, float scale) {
    check(Hk > 0 && Hv % Hk == 0, "gdn", "value heads must be a multiple of key heads");
    check(Dk > 0 && Dk <= 256, "gdn", "key head dim " + std::to_string(Dk) + " outside 1..256");
    check(commit_rows <= T, "gdn", "commit_rows above T");
    need(q, uint64_t(T) * Hk * Dk, "gdn", "q");
    need(k, uint64_t(T) * Hk * Dk, "gdn", "k");
    need(v, uint64_t(T) * Hv * Dv, "gdn", "v");
    need(g, uint64_t(T) * Hv, "gdn", "g");
    need(beta, uint64_t(T) * Hv, "gdn", "beta");
    need(state, uint64_t(Hv) * Dk * Dv, "gdn", "state");
    need(out, uint64_t(T) * Hv * Dv, "gdn", "out");
    struct { uint32_t T, Hk, Hv, Dk, Dv, commit; float scale, eps; } p{T, Hk, Hv, Dk, Dv, commit_rows, scale, 1e-6f};
    r.dispatch(pipeline("gdn.wgsl", "gdn_window",
                        {{"DK", std::to_string(Dk)}, {"CWG", std::to_string(kGdnColumns)}, {"PARTS", "1"}}),
               &p, sizeof p, {q, k, v, g, beta, state, out}, Hv, (Dv + kGdnColumns - 1) / kGdnColumns);
}

void Kernels::causal_conv(Recorder& r, const BufRef& x, const BufRef& w, const BufRef& hist,
                          const BufRef& y, uint32_t T, uint32_t C, uint32_t Kc, uint32_t commit_rows, uint32_t x_off,
                          uint32_t ldx, const BufRef& x_rows) {
    if (!ldx) ldx = C;
    check(Kc >= 1 && Kc <= 9, "causal_conv", "kernel size " + std::to_string(Kc) + " outside 1..9");
    check(commit_rows <= T, "causal_conv", "commit_rows above T");
    check(ldx >= C, "causal_conv", "x row stride below the channels");
    need(x, x_off + uint64_t(T - 1) * ldx + C, "causal_conv", "x");
    need(w, uint64_t(C) * Kc, "causal_conv", "weight");
    need(hist, uint64_t(C) * (Kc - 1), "causal_conv", "history");
    need(y, uint64_t(T) * C, "causal_conv", "y");
    if (x_rows) need(x_rows, uint64_t(T) * C, "causal_conv", "x rows");
    struct { uint32_t T, C, Kc, commit, x_off, ldx, keep_x; } p{T, C, Kc, commit_rows, x_off, ldx, x_rows ? 1u : 0u};
    r.dispatch(pipeline("conv.wgsl", "causal_conv"), &p, sizeof p, {x, w, hist, y, x_rows ? x_rows : y},
               stride_groups(C));
}

void Kernels::gather(Recorder& r, const BufRef& src, uint32_t ld_src, uint32_t src_rows, const BufRef& ids,
                     uint32_t n, uint32_t cols, const BufRef& y, uint32_t ld_out) {
    check(cols <= ld_src && cols <= ld_out, "gather", "cols wider than a row");
    need(src, uint64_t(src_rows) * ld_src, "gather", "src");
    need(ids, n, "gather", "ids");
    need(y, uint64_t(n) * ld_out, "gather", "dst");
    struct { uint32_t T, D, row_words, row0, rows, ld_out; } p{n, cols, ld_src, 0, src_rows, ld_out};
    r.dispatch(pipeline("embedding.wgsl", "gather_f32"), &p, sizeof p, {ids, src, y}, stride_groups(uint64_t(n) * cols));
}

void Kernels::gdn_inputs(Recorder& r, const BufRef& conv, const BufRef& b, const BufRef& a, uint32_t ld_ba,
                         const BufRef& A, const BufRef& dt_bias, uint32_t T, uint32_t Hk, uint32_t Hv,
                         uint32_t Dk, uint32_t Dv, const BufRef& q, const BufRef& k, const BufRef& v,
                         const BufRef& decay, const BufRef& beta, uint32_t b_off, uint32_t a_off) {
    uint64_t conv_dim = 2ull * Hk * Dk + uint64_t(Hv) * Dv;
    check(ld_ba >= Hv, "gdn_inputs", "b/a row stride below the value heads");
    need(conv, T * conv_dim, "gdn_inputs", "conv");
    need(b, b_off + uint64_t(T - 1) * ld_ba + Hv, "gdn_inputs", "b");
    need(a, a_off + uint64_t(T - 1) * ld_ba + Hv, "gdn_inputs", "a");
    need(A, Hv, "gdn_inputs", "A");
    need(dt_bias, Hv, "gdn_inputs", "dt_bias");
    need(q, uint64_t(T) * Hk * Dk, "gdn_inputs", "q");
    need(k, uint64_t(T) * Hk * Dk, "gdn_inputs", "k");
    need(v, uint64_t(T) * Hv * Dv, "gdn_inputs", "v");
    need(decay, uint64_t(T) * Hv, "gdn_inputs", "decay");
    need(beta, uint64_t(T) * Hv, "gdn_inputs", "beta");
    struct { uint32_t T, Hk, Hv, Dk, Dv, ld_ba, b_off, a_off; } p{T, Hk, Hv, Dk, Dv, ld_ba, b_off, a_off};
    r.dispatch(pipeline("gdn_inputs.wgsl", "gdn_inputs"), &p, sizeof p, {conv, b, a, A, dt_bias, q, k, v, decay, beta},
               stride_groups(uint64_t(T) * Hv * Dv));
}

void Kernels::gdn_step(Recorder& r, const BufRef& S0, const BufRef& S, const BufRef& q, const BufRef& k,
                       const BufRef& v, const BufRef& decay, const BufRef& beta, const BufRef& out,
                       uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv) {
    check(Hk > 0 && Hv % Hk == 0, "gdn_step", "value heads must be a multiple of key heads");
    check(Dk > 0 && Dk <= 256, "gdn_step", "key head dim " + std::to_string(Dk) + " outside 1..256");
    need(S0, uint64_t(Hv) * Dk * Dv, "gdn_step", "S0");
    need(S, uint64_t(Hv) * Dk * Dv, "gdn_step", "S");
    need(q, uint64_t(T) * Hk * Dk, "gdn_step", "q");
    need(k, uint64_t(T) * Hk * Dk, "gdn_step", "k");
    need(v, uint64_t(T) * Hv * Dv, "gdn_step", "v");
    need(decay, uint64_t(T) * Hv, "gdn_step", "decay");
    need(beta, uint64_t(T) * Hv, "gdn_step", "beta");
    need(out, uint64_t(T) * Hv * Dv, "gdn_step", "out");
    struct { uint32_t T, Hk, Hv, Dk, Dv, commit; float scale, eps; } p{T, Hk, Hv, Dk, Dv, T, 1.0f, 0.0f};
    // kGdnParts threads per state column where they split the key dim evenly, else one
    const uint32_t parts = Dk % kGdnParts == 0 ? kGdnParts : 1, columns = kWorkgroup / parts;
    r.dispatch(pipeline("gdn.wgsl", "gdn_step",
                        {{"DK", std::to_string(Dk)}, {"CWG", std::to_string(kWorkgroup)}, {"PARTS", std::to_string(parts)}}),
               &p, sizeof p, {q, k, v, decay, beta, S, out, S0}, Hv, (Dv + columns - 1) / columns);
}

void Kernels::gdn_inputs_step(Recorder& r, const BufRef& conv, const BufRef& b, const BufRef& a, uint32_t ld_ba,
                              const BufRef& A, const BufRef& dt_bias, const BufRef& S0, const BufRef& S,
                              const BufRef& out, uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv,
                              uint32_t b_off, uint32_t a_off) {
    check(Hk > 0 && Hv % Hk == 0, "gdn_inputs_step", "value heads must be a multiple of key heads");
    check(Dk > 0 && Dk <= 256 && Dk % kGdnParts == 0, "gdn_inputs_step",
          "key head dim " + std::to_string(Dk) + " not a multiple of " + std::to_string(kGdnParts) + " in 1..256");
    check(ld_ba >= Hv, "gdn_inputs_step", "b/a row stride below the value heads");
    uint64_t conv_dim = 2ull * Hk * Dk + uint64_t(Hv) * Dv;
    need(conv, T * conv_dim, "gdn_inputs_step", "conv");
    need(b, b_off + uint64_t(T - 1) * ld_ba + Hv, "gdn_inputs_step", "b");
    need(a, a_off + uint64_t(T - 1) * ld_ba + Hv, "gdn_inputs_step", "a");
    need(A, Hv, "gdn_inputs_step", "A");
    need(dt_bias, Hv, "gdn_inputs_step", "dt_bias");
    need(S0, uint64_t(Hv) * Dk * Dv, "gdn_inputs_step", "S0");
    need(S, uint64_t(Hv) * Dk * Dv, "gdn_inputs_step", "S");
    need(out, uint64_t(T) * Hv * Dv, "gdn_inputs_step", "out");
    struct { uint32_t T, Hk, Hv, Dk, Dv, ld_ba, b_off, a_off; } p{T, Hk, Hv, Dk, Dv, ld_ba, b_off, a_off};
    const uint32_t columns = kWorkgroup / kGdnParts;  // gdn_step's workgroups
    r.dispatch(pipeline("gdn_fused.wgsl", "gdn_inputs_step",
                        {{"DK", std::to_string(Dk)}, {"CWG", std::to_string(kWorkgroup)},
                         {"PARTS", std::to_string(kGdnParts)}}),
               &p, sizeof p, {conv, b, a, A, dt_bias, S0, S, out}, Hv, (Dv + columns - 1) / columns);
}

void Kernels::conv_gdn_inputs_step(Recorder& r, const BufRef& x, uint32_t x_off, uint32_t ldx, const BufRef& w,
                                   const BufRef& hist, uint32_t Kc, const BufRef& b, const BufRef& a, uint32_t ld_ba,
                                   const BufRef& A, const BufRef& dt_bias, const BufRef& S0, const BufRef& S,
                                   const BufRef& out, uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv,
                                   uint32_t b_off, uint32_t a_off) {
    check(Hk > 0 && Hv % Hk == 0, "conv_gdn_inputs_step", "value heads must be a multiple of key heads");
    check(Dk > 0 && Dk <= 256 && Dk % kGdnParts == 0, "conv_gdn_inputs_step",
          "key head dim " + std::to_string(Dk) + " not a multiple of " + std::to_string(kGdnParts) + " in 1..256");
    check(Kc >= 1 && Kc <= 9, "conv_gdn_inputs_step", "kernel size " + std::to_string(Kc) + " outside 1..9");
    check(ld_ba >= Hv, "conv_gdn_inputs_step", "b/a row stride below the value heads");
    const uint64_t C = 2ull * Hk * Dk + uint64_t(Hv) * Dv;
    check(C <= UINT32_MAX && ldx >= C, "conv_gdn_inputs_step", "x row stride below the channels");
    need(x, x_off + uint64_t(T - 1) * ldx + C, "conv_gdn_inputs_step", "x");
    need(w, C * Kc, "conv_gdn_inputs_step", "conv weight");
    need(hist, C * (Kc - 1), "conv_gdn_inputs_step", "history");
    need(b, b_off + uint64_t(T - 1) * ld_ba + Hv, "conv_gdn_inputs_step", "b");
    need(a, a_off + uint64_t(T - 1) * ld_ba + Hv, "conv_gdn_inputs_step", "a");
    need(A, Hv, "conv_gdn_inputs_step", "A");
    need(dt_bias, Hv, "conv_gdn_inputs_step", "dt_bias");
    need(S0, uint64_t(Hv) * Dk * Dv, "conv_gdn_inputs_step", "S0");
    need(S, uint64_t(Hv) * Dk * Dv, "conv_gdn_inputs_step", "S");
    need(out, uint64_t(T) * Hv * Dv, "conv_gdn_inputs_step", "out");
    struct {
        uint32_t T, Hk, Hv, Dk, Dv, ld_ba, b_off, a_off, C, Kc, x_off, ldx;
    } p{T, Hk, Hv, Dk, Dv, ld_ba, b_off, a_off, uint32_t(C), Kc, x_off, ldx};
    const uint32_t columns = kWorkgroup / kGdnParts;  // gdn_step's workgroups
    r.dispatch(pipeline("gdn_conv_fused.wgsl", "conv_gdn_inputs_step",
                        {{"DK", std::to_string(Dk)}, {"DK2", std::to_string(2 * Dk)},
                         {"CWG", std::to_string(kWorkgroup)}, {"PARTS", std::to_string(kGdnParts)}}),
               &p, sizeof p, {x, w, hist, b, a, A, dt_bias, S0, S, out}, Hv, (Dv + columns - 1) / columns);
}

void Kernels::moe_combine(Recorder& r, const BufRef& D, uint32_t d_rows, const BufRef& slot, const BufRef& w,
                          uint32_t T, uint32_t k, uint32_t H, const BufRef& shared, const BufRef& shared_gate,
                          const BufRef& out) {
    need(D, uint64_t(d_rows) * H, "moe_combine", "D");
    need(slot, uint64_t(T) * k, "moe_combine", "slot");
    need(w, uint64_t(T) * k, "moe_combine", "w");
    need(out, uint64_t(T) * H, "moe_combine", "out");
    if (shared) {
        need(shared, uint64_t(T) * H, "moe_combine", "shared");
        need(shared_gate, T, "moe_combine", "shared_gate");
    }
    struct { uint32_t T, k, H, has_shared; } p{T, k, H, shared ? 1u : 0u};
    r.dispatch(pipeline("moe.wgsl", "moe_combine"), &p, sizeof p,
               {D, slot, w, shared ? shared : D, shared ? shared_gate : w, out}, stride_groups(uint64_t(T) * H));
}

void Kernels::moe_combine_add_rmsnorm(Recorder& r, const BufRef& D, uint32_t d_rows, const BufRef& slot,
                                      const BufRef& w, uint32_t T, uint32_t k, uint32_t H, const BufRef& shared,
                                      const BufRef& shared_gate, const BufRef& x, const BufRef& nw, const BufRef& y,
                                      float eps) {
    const char* op = "moe_combine_add_rmsnorm";
    need(D, uint64_t(d_rows) * H, op, "D");
    need(slot, uint64_t(T) * k, op, "slot");
    need(w, uint64_t(T) * k, op, "w");
    need(x, uint64_t(T) * H, op, "x");
    need(nw, H, op, "norm weight");
    need(y, uint64_t(T) * H, op, "y");
    if (shared) {
        need(shared, uint64_t(T) * H, op, "shared");
        need(shared_gate, T, op, "shared_gate");
    }
    uint32_t gx = std::min(T, device_.limits().max_workgroups_per_dimension);
    // norm.wgsl's Params: rows, D, eps, weight offset, groups_x, (9 fields unused here), k, has_shared
    struct {
        uint32_t rows, D;
        float eps, off;
        uint32_t gx, unused[9], k, has_shared;
    } p{T, H, eps, 0.0f, gx, {}, k, shared ? 1u : 0u};
    static_assert(sizeof p == 16 * 4, "norm.wgsl's Params up to has_shared");
    r.dispatch(pipeline("moe_norm.wgsl", op, norm_defines(H)), &p, sizeof p,
               {x, nw, y, nullptr, D, slot, w, shared ? shared : D, shared ? shared_gate : w}, gx, (T + gx - 1) / gx);
}

}  // namespace strata::webgpu
