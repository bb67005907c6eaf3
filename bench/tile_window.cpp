// The CPU matmul kernels alone, outside the engine: the matrix products of one decode window of
// the anchor qwen3_moe's shape, the output bits of a kernel edit, and what the FMA units can do.
//
//   g++ -O3 -march=native -fno-math-errno -fno-trapping-math -std=c++17 -Iengine_ext
//       -o /tmp/tile_window bench/tile_window.cpp engine_ext/cpu/matmul.cpp
//       engine_ext/cpu/gemm.cpp engine_ext/format.cpp engine_ext/threadpool.cpp -lpthread
//   (one command line; the CMake build's flags)
//   /tmp/tile_window [window|bits|peak] [f32|bf16] [--experts N] [--reps N]
//
// window: one thread, CPU time, best of --reps passes, ms per pass for T = 1, 2, 4, 8, 16 over
//         the products of a qwen3_moe window of the anchor shape: per layer q, k, v, o (512x512,
//         128x512 x2, 512x512), the router (64x512) and N experts' gate, up (128x512) and down
//         (512x128), 8 layers, then the 32000x512 head; every matrix its own 2 MiB-aligned
//         allocation on huge pages (as the engine's weight copies). Each expert takes all T rows
//         (the anchor's routing sends a window's rows to 4-5 experts in most layers, see
//         bench/README.md, tile branch). Weights 112.7 MB in f32: L3 on a machine with a large
//         one, not L2. Prints cost(T)/cost(1) of the products alone.
// bits:   an FNV-1a hash of the outputs for T = 1..16 over fixed random inputs, for shapes with
//         full and ragged row blocks and columns; a kernel edit that keeps every output's
//         reduction order prints the same hash. Also checks that row t of a T=16 product equals
//         the same row computed alone.
// peak:   16 independent 512-bit FMA chains on registers only, and a 4x4 tile's step (8 loads
//         from L1 per 16 FMAs) on 16 KB; the ceilings the tiles are measured against (AVX-512
//         builds only).
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/matmul.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

using namespace strata;

namespace {

double cpu_s() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Mat {
    MatView m;
    int group;  // index into kGroups
};
const char* const kGroups[] = {"q,k,v,o", "router", "gate,up", "down", "head"};

// rows x cols of random weights in `bf16 ? BF16 : F32`, on 2 MiB-aligned huge-page memory
MatView random_mat(std::mt19937& g, int rows, int cols, bool bf16) {
    const size_t n = size_t(rows) * cols, bytes = n * (bf16 ? 2 : 4), huge = size_t(2) << 20;
    const size_t len = (bytes + huge - 1) / huge * huge;
    void* p = aligned_alloc(huge, len);
    if (!p) {
        std::fprintf(stderr, "tile_window: out of memory\n");
        std::exit(1);
    }
    madvise(p, len, MADV_HUGEPAGE);
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < n; ++i) {
        float f = nd(g);
        if (bf16) {
            uint32_t u;
            std::memcpy(&u, &f, 4);
            static_cast<uint16_t*>(p)[i] = uint16_t(u >> 16);
        } else {
            static_cast<float*>(p)[i] = f;
        }
    }
    return make_mat(p, bf16 ? WFormat::BF16 : WFormat::F32, rows, cols);
}

// T rows of random floats, `ld` apart, 64-byte aligned (what matmul_jobs hands the tiles); the
// values do not depend on where the allocator puts them, so that `bits` compares builds
struct Rows {
    float* p;
    explicit Rows(std::mt19937& g, int T, int ld) {
        const size_t n = (size_t(T) * ld + 15) / 16 * 16;
        p = static_cast<float*>(aligned_alloc(64, n * sizeof(float)));
        std::normal_distribution<float> nd;
        for (size_t i = 0; i < n; ++i) p[i] = nd(g);
    }
    ~Rows() { std::free(p); }
    Rows(const Rows&) = delete;
    Rows& operator=(const Rows&) = delete;
};

int window(bool bf16, int experts, int reps) {
    std::mt19937 g(1);
    std::vector<Mat> ms;
    auto add = [&](int rows, int cols, int group) { ms.push_back({random_mat(g, rows, cols, bf16), group}); };
    for (int l = 0; l < 8; ++l) {
        add(512, 512, 0);
        add(128, 512, 0);
        add(128, 512, 0);
        add(512, 512, 0);
        add(64, 512, 1);
        for (int e = 0; e < experts; ++e) {
            add(128, 512, 2);
            add(128, 512, 2);
            add(512, 128, 3);
        }
    }
    add(32000, 512, 4);
    Rows xb(g, 16, 512);
    const float* X = xb.p;
    std::vector<float> y(size_t(16) * 32000);
    double bytes = 0;
    for (const auto& m : ms) bytes += double(m.m.bytes());
    std::printf("%s weights %.1f MB, %d experts per layer; one thread, CPU time, best of %d passes\n\n",
                bf16 ? "bf16" : "f32", bytes / 1e6, experts, reps);
    std::printf("| T | ms | GMAC/s | cost(T)/cost(1) |");
    for (const char* n : kGroups) std::printf(" %s ms |", n);
    std::printf("\n|---|---|---|---|---|---|---|---|---|\n");
    double c1 = 0;
    for (int T : {1, 2, 4, 8, 16}) {
        std::vector<double> per(ms.size(), 1e30);
        double best = 1e30, macs = 0;
        for (const auto& m : ms) macs += double(m.m.rows) * m.m.cols * T;
        for (int r = 0; r < reps; ++r) {
            const double t0 = cpu_s();
            for (size_t i = 0; i < ms.size(); ++i) {
                const double a = cpu_s();
                // cols is a multiple of 16 here, so X's rows are already a whole number of lines
                matmul_range(X, T, ms[i].m.cols, ms[i].m, nullptr, y.data(), ms[i].m.rows, 0, ms[i].m.rows);
                per[i] = std::min(per[i], cpu_s() - a);
            }
            best = std::min(best, cpu_s() - t0);
        }
        if (T == 1) c1 = best;
        double grp[5] = {0, 0, 0, 0, 0};
        for (size_t i = 0; i < ms.size(); ++i) grp[ms[i].group] += per[i];
        std::printf("| %d | %.3f | %.1f | %.2f |", T, best * 1e3, macs / best / 1e9, best / c1);
        for (double v : grp) std::printf(" %.3f |", v * 1e3);
        std::printf("\n");
    }
    return 0;
}

uint64_t fnv(const void* p, size_t n, uint64_t h) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

int bits(bool bf16) {
    std::mt19937 g(2);
    const int shapes[][2] = {{1536, 512}, {128, 512}, {512, 128}, {100, 1000}, {37, 77}, {13, 16}, {8, 33}};
    uint64_t h = 1469598103934665603ull;
    int bad = 0;
    for (const auto& s : shapes) {
        const int rows = s[0], cols = s[1], ld = (cols + 15) / 16 * 16;
        MatView m = random_mat(g, rows, cols, bf16);
        Rows xb(g, 16, ld);
        const float* X = xb.p;
        std::vector<float> y(size_t(16) * rows), one(rows);
        for (int T = 1; T <= 16; ++T) {
            matmul_range(X, T, ld, m, nullptr, y.data(), rows, 0, rows);
            h = fnv(y.data(), sizeof(float) * size_t(T) * rows, h);
        }
        for (int t = 0; t < 16; ++t) {  // y holds T=16 now
            matmul_range(X + size_t(t) * ld, 1, ld, m, nullptr, one.data(), rows, 0, rows);
            if (std::memcmp(one.data(), y.data() + size_t(t) * rows, sizeof(float) * rows) != 0) {
                std::printf("row %d of %dx%d differs between T=16 and T=1\n", t, rows, cols);
                ++bad;
            }
        }
        std::free(const_cast<void*>(m.data));
    }
    std::printf("%s outputs for T=1..16: hash %016llx%s\n", bf16 ? "bf16" : "f32", (unsigned long long)h,
                bad ? ", ROWS DEPEND ON T" : "");
    return bad ? 1 : 0;
}

int peak() {
#if defined(__AVX512F__)
    const long n = 12500000;
    float* buf = static_cast<float*>(aligned_alloc(64, 4096 * sizeof(float)));
    for (int i = 0; i < 4096; ++i) buf[i] = 1e-3f * float(i);
    __m512 a[16], acc[16];
    for (int i = 0; i < 16; ++i) a[i] = acc[i] = _mm512_set1_ps(1e-3f * float(i));
    __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-6f);
    double t0 = cpu_s();
    for (long k = 0; k < n; ++k) {
        for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
        __asm__("" : "+v"(b));
    }
    double t = cpu_s() - t0;
    std::printf("registers only: %.1f G FMA/s (%.1f GMAC/s)\n", double(n) * 16 / t / 1e9, double(n) * 256 / t / 1e9);
    t0 = cpu_s();
    for (long k = 0; k < n; ++k) {
        const int o = int(k * 16) & 1023;
        __m512 x[4], w;
        for (int j = 0; j < 4; ++j) {
            x[j] = _mm512_load_ps(buf + 1024 * j + o);
            __asm__("" : "+v"(x[j]));
        }
        for (int i = 0; i < 4; ++i) {
            w = _mm512_load_ps(buf + ((o + 16 * i + 512) & 4095));
            __asm__("" : "+v"(w));
            for (int j = 0; j < 4; ++j) acc[4 * i + j] = _mm512_fmadd_ps(w, x[j], acc[4 * i + j]);
        }
    }
    t = cpu_s() - t0;
    std::printf("4x4 step from L1 (8 loads per 16 FMAs): %.1f G FMA/s (%.1f GMAC/s)\n", double(n) * 16 / t / 1e9,
                double(n) * 256 / t / 1e9);
    alignas(64) float lanes[16];  // use the results, so that the loops are not dropped
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) sum = _mm512_add_ps(sum, _mm512_add_ps(a[i], acc[i]));
    _mm512_store_ps(lanes, sum);
    std::printf("(checksum %g)\n", double(lanes[0]));
    std::free(buf);
    return 0;
#else
    std::printf("peak: an AVX-512 build only\n");
    return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    std::string mode = "window";
    bool bf16 = false;
    int experts = 4, reps = 20;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "window" || a == "bits" || a == "peak") {
            mode = a;
        } else if (a == "f32" || a == "bf16") {
            bf16 = a == "bf16";
        } else if ((a == "--experts" || a == "--reps") && i + 1 < argc) {
            int v = std::atoi(argv[++i]);
            if (v < 1 || v > 64) {
                std::fprintf(stderr, "tile_window: %s takes 1..64\n", a.c_str());
                return 2;
            }
            (a == "--experts" ? experts : reps) = v;
        } else {
            std::fprintf(stderr, "tile_window: unknown argument '%s' (window|bits|peak, f32|bf16, --experts N, --reps N)\n",
                         a.c_str());
            return 2;
        }
    }
    if (mode == "bits") return bits(bf16);
    if (mode == "peak") return peak();
    return window(bf16, experts, reps);
}
