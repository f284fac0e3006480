/*
 * resident_mlp.cu -- the resident W8A16 model step (csrc/cuda/resident_mlp.cu) driven from C, with
 * no Python and no library around it: what `tickgpu.quant`'s resident step costs at its floor, and
 * whether its answers are right.
 *
 * For each model (LayerNorm, in -> hidden -> hidden -> out, random int8 weights with per-channel
 * scales) and plan (capacity rows, channels a block), the kernel is launched once (cooperative),
 * then every request is one tg_mailbox_rows_step (csrc/hot/mailbox.c: the caller's float32 rows
 * into the mailbox, post, wait, the answer's rows out), timed on the host clock. The first answer
 * of each row count is compared with a float64 reference of the same quantized math (float16
 * input and hidden activations, exact int8 x float16 products, float32 epilogue).
 *
 * Output lines have the floor programs' format (tickgpu.bench.gpu.parse_floor reads them):
 *   NATIVE resident mlp w8a16 64-256-256-4 cap 64 ch 16 rows 1   p50=... us  p99=... us  min=... us  err=...
 *
 * Build and run (scripts/device-check does):
 *   nvcc -O2 -arch=sm_90 -fmad=false -Icsrc benchmarks/floor/resident_mlp.cu csrc/hot/mailbox.c csrc/cpu/stage.c
 */
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <unistd.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../../csrc/cuda/resident_mlp.cu"

#define CK(x)                                                                                             \
    do {                                                                                                  \
        cudaError_t ck_ = (x);                                                                            \
        if (ck_ != cudaSuccess) {                                                                         \
            printf("ERR %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(ck_));                          \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

namespace {

struct Layer {
    int n, k;
    std::vector<int8_t> w;     // (n, k)
    std::vector<float> scale, bias;
};

struct Model {
    int in;
    std::vector<float> gamma, beta;
    std::vector<Layer> layers;
};

Model make_model(const std::vector<int> &dims, unsigned seed)
{
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> wq(-127, 127);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Model m;
    m.in = dims[0];
    for (int j = 0; j < m.in; ++j) {
        m.gamma.push_back(1.0f + 0.5f * u(gen));
        m.beta.push_back(0.1f * u(gen));
    }
    for (size_t l = 0; l + 1 < dims.size(); ++l) {
        Layer L;
        L.k = dims[l];
        L.n = dims[l + 1];
        L.w.resize((size_t)L.n * L.k);
        for (auto &v : L.w)
            v = (int8_t)wq(gen);
        for (int i = 0; i < L.n; ++i) {
            L.scale.push_back((1.0f + 0.5f * u(gen)) / (73.0f * std::sqrt((float)L.k)));
            L.bias.push_back(0.1f * u(gen));
        }
        m.layers.push_back(L);
    }
    return m;
}

float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }

// The reference: LayerNorm in float64 rounded to float32, float16 activations, float64 sums of the
// exact products rounded to float32, the float32 epilogue, float16 between layers.
std::vector<float> reference(const Model &m, const std::vector<float> &x, int rows)
{
    std::vector<float> h(x.begin(), x.begin() + (size_t)rows * m.in);
    for (int r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int j = 0; j < m.in; ++j)
            mean += h[r * m.in + j];
        mean /= m.in;
        for (int j = 0; j < m.in; ++j)
            var += (h[r * m.in + j] - mean) * (h[r * m.in + j] - mean);
        var /= m.in;
        for (int j = 0; j < m.in; ++j)
            h[r * m.in + j] = (float)((h[r * m.in + j] - mean) / std::sqrt(var + 1e-5) * m.gamma[j] + m.beta[j]);
    }
    for (auto &v : h)
        v = __half2float(__float2half_rn(v));
    for (size_t l = 0; l < m.layers.size(); ++l) {
        const Layer &L = m.layers[l];
        const bool last = l + 1 == m.layers.size();
        std::vector<float> o((size_t)rows * L.n);
        for (int r = 0; r < rows; ++r)
            for (int i = 0; i < L.n; ++i) {
                double s = 0;
                for (int j = 0; j < L.k; ++j)
                    s += (double)h[r * L.k + j] * L.w[(size_t)i * L.k + j];
                float v = (float)s * L.scale[i];
                v = v + L.bias[i];
                if (!last)
                    v = __half2float(__float2half_rn(gelu(v)));
                o[(size_t)r * L.n + i] = v;
            }
        h.swap(o);
    }
    return h;
}

int round_up(int v, int m) { return (v + m - 1) / m * m; }

struct Resident {
    tg_rm_plan plan{};
    void *box = nullptr;
    tg_mb_header *box_dev = nullptr;
    int64_t box_bytes = 0;
    std::vector<void *> device;
    tg_rm_plan *plan_dev = nullptr;
    cudaStream_t stream{};
    bool launched = false;
};

void *upload(Resident &R, const void *src, size_t bytes)
{
    void *p;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
    R.device.push_back(p);
    return p;
}

void *zeros(Resident &R, size_t bytes)
{
    void *p;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMemset(p, 0, bytes));
    R.device.push_back(p);
    return p;
}

// The plan tickgpu.quant.resident builds, the same rules: slices, strides, offsets.
bool start(Resident &R, const Model &m, int capacity, int channels, bool fuse)
{
    tg_rm_plan &P = R.plan;
    P.magic = TG_RM_MAGIC;
    P.version = TG_RM_VERSION;
    P.n_layers = (uint32_t)m.layers.size();
    P.in_features = (uint32_t)m.in;
    P.out_features = (uint32_t)m.layers.back().n;
    P.capacity = (uint32_t)capacity;
    P.channels = (uint32_t)channels;
    P.fuse_last = fuse && m.layers.size() >= 2 && P.out_features <= TG_RM_FUSED_OUT;
    const size_t computed = m.layers.size() - (P.fuse_last ? 1 : 0);
    int widest = 0, k64max = 0;
    for (size_t l = 0; l < computed; ++l) {
        widest = std::max(widest, m.layers[l].n);
        k64max = std::max(k64max, round_up(m.layers[l].k, 64));
    }
    P.channel_blocks = (uint32_t)((widest + channels - 1) / channels);
    P.token_groups = (uint32_t)((capacity + TG_RM_TOKENS - 1) / TG_RM_TOKENS);
    P.has_ln = 1;
    P.ln_eps = 1e-5f;
    uint32_t off = 0;
    for (size_t l = 0; l < m.layers.size(); ++l) {
        const Layer &L = m.layers[l];
        tg_rm_layer &D = P.layer[l];
        const bool fused = P.fuse_last && l + 1 == m.layers.size();
        D.n = (uint32_t)L.n;
        D.k = (uint32_t)L.k;
        D.k_pad = (uint32_t)round_up(L.k, 16);
        D.k64 = (uint32_t)round_up(L.k, 64);
        D.gelu = l + 1 < m.layers.size();
        D.rows_w = fused ? (uint32_t)L.n : (uint32_t)std::min(channels, round_up(L.n, 16));
        D.stride_w = fused ? 0 : (uint32_t)(round_up((int)D.k64, 128) + 64);
        D.smem_w = off;
        off += D.rows_w * D.stride_w;
        D.smem_sb = off;
        off += round_up(2 * D.rows_w * 4, 16);
        std::vector<int8_t> padded((size_t)L.n * D.k_pad, 0);
        for (int i = 0; i < L.n; ++i)
            memcpy(&padded[(size_t)i * D.k_pad], &L.w[(size_t)i * L.k], L.k);
        D.weight = (uint64_t)upload(R, padded.data(), padded.size());
        D.scale = (uint64_t)upload(R, L.scale.data(), L.scale.size() * 4);
        D.bias = (uint64_t)upload(R, L.bias.data(), L.bias.size() * 4);
        D.input = fused ? 0 : (uint64_t)zeros(R, (size_t)capacity * D.k64 * 2);
    }
    if (P.fuse_last) {
        P.smem_last = off;
        off += TG_RM_FUSED_OUT * channels + TG_RM_TOKENS * channels * 4;
        P.partial = (uint64_t)zeros(R, (size_t)P.token_groups * P.channel_blocks * TG_RM_TOKENS * P.out_features * 4);
    }
    P.stride_a = (uint32_t)(k64max + 8);
    P.smem_a = off;
    off += TG_RM_TOKENS * P.stride_a * 2;
    P.smem_part = off;
    off += 8 * TG_RM_TOKENS * channels * 4;
    P.smem_x = off;
    off += TG_RM_TOKENS * m.in * 4;
    P.smem_bytes = off;
    P.gamma = (uint64_t)upload(R, m.gamma.data(), m.gamma.size() * 4);
    P.beta = (uint64_t)upload(R, m.beta.data(), m.beta.size() * 4);
    P.sync = (uint64_t)zeros(R, TG_RM_SYNC_BYTES);
    R.plan_dev = (tg_rm_plan *)upload(R, &P, sizeof P);

    R.box_bytes = tg_mailbox_rows_bytes(capacity, m.in, P.out_features);
    CK(cudaHostAlloc(&R.box, R.box_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostGetDevicePointer((void **)&R.box_dev, R.box, 0));
    if (tg_mailbox_init_rows(R.box, R.box_bytes, capacity, m.in, P.out_features, 0, 10000000, 2000) != TG_OK) {
        printf("ERR tg_mailbox_init_rows\n");
        exit(1);
    }
    CK(cudaFuncSetAttribute(tg_resident_mlp_w8a16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)P.smem_bytes));
    CK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
    void *args[] = {&R.box_dev, &R.plan_dev};
    const unsigned grid = P.token_groups * P.channel_blocks;
    cudaError_t e = cudaLaunchCooperativeKernel((void *)tg_resident_mlp_w8a16_kernel, dim3(grid),
                                                dim3(TG_RM_THREADS), args, P.smem_bytes, R.stream);
    if (e != cudaSuccess) {
        printf("# cap %d ch %d: %u blocks, %u B shared: %s\n", capacity, channels, grid, P.smem_bytes,
               cudaGetErrorName(e));
        cudaGetLastError();
        return false;
    }
    R.launched = true;
    return true;
}

void stop(Resident &R)
{
    if (R.launched) {
        tg_mailbox_quit(R.box);
        // A kernel that does not return is a fault of its own: say so, never hang.
        auto t0 = std::chrono::steady_clock::now();
        cudaError_t q;
        while ((q = cudaStreamQuery(R.stream)) == cudaErrorNotReady)
            if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(3)) {
                printf("ERR the kernel did not return after quit\n");
                fflush(stdout);
                _exit(2);
            }
        CK(q);
        uint32_t exited = 0;
        tg_mailbox_state(R.box, nullptr, nullptr, &exited, nullptr);
        if (exited != TG_MB_RUNNING)
            printf("# kernel exited with %u\n", exited);
    }
    if (R.stream)
        CK(cudaStreamDestroy(R.stream));
    for (void *p : R.device)
        CK(cudaFree(p));
    if (R.box)
        CK(cudaFreeHost(R.box));
    R = Resident();
}

double pct(std::vector<double> v, double q)
{
    std::sort(v.begin(), v.end());
    return v[(size_t)(q * (v.size() - 1))];
}

#ifdef TG_RM_TRACE
// Medians over the last 64 requests of each stage's stamp less block 0's first, for a few blocks
// (globaltimer, us), and block 0's SM cycles between consecutive stages (clock64, with the clock
// rate they imply over the whole request).
void print_trace(const char *name, int rows, unsigned blocks)
{
    static uint64_t tr[RM_TRACE_BLOCKS][RM_TRACE_REQUESTS][RM_TRACE_STAGES];
    static uint64_t ck[RM_TRACE_BLOCKS][RM_TRACE_REQUESTS][RM_TRACE_STAGES];
    CK(cudaMemcpyFromSymbol(tr, tg_rm_trace, sizeof tr));
    CK(cudaMemcpyFromSymbol(ck, tg_rm_clock, sizeof ck));
    const unsigned show[] = {0, 1, blocks / 2, blocks - 1};
    for (unsigned b : show) {
        if (b >= blocks || b >= RM_TRACE_BLOCKS)
            continue;
        printf("TRACE %s rows %d block %u us:", name, rows, b);
        for (int st = 0; st < RM_TRACE_STAGES; ++st) {
            std::vector<double> d;
            for (int r = 0; r < RM_TRACE_REQUESTS; ++r)
                if (tr[b][r][st] && tr[0][r][0] && tr[b][r][st] >= tr[0][r][0] && tr[b][r][st] - tr[0][r][0] < 100000)
                    d.push_back(((double)tr[b][r][st] - (double)tr[0][r][0]) * 1e-3);
            if (d.empty())
                printf("    -");
            else
                printf(" %5.2f", pct(d, 0.5));
        }
        printf("\n");
        if (b != 0)
            continue;
        printf("CYCLES %s rows %d block 0 kcyc from stage 0:", name, rows);
        std::vector<double> mhz;
        for (int st = 1; st < RM_TRACE_STAGES; ++st) {
            std::vector<double> d;
            for (int r = 0; r < RM_TRACE_REQUESTS; ++r)
                if (ck[0][r][st] > ck[0][r][0] && ck[0][r][st] - ck[0][r][0] < 1000000) {
                    d.push_back((double)(ck[0][r][st] - ck[0][r][0]) * 1e-3);
                    if (tr[0][r][st] > tr[0][r][0] + 2000)
                        mhz.push_back((double)(ck[0][r][st] - ck[0][r][0]) * 1e3 / (double)(tr[0][r][st] - tr[0][r][0]));
                }
            if (d.empty())
                printf("     -");
            else
                printf(" %6.2f", pct(d, 0.5));
        }
        if (!mhz.empty())
            printf("  (SM clock ~%.0f MHz)", pct(mhz, 0.5));
        printf("\n");
    }
}
#endif

void run(const std::vector<int> &dims, int capacity, int channels, bool fuse, const std::vector<int> &row_counts,
         int iters)
{
    Model m = make_model(dims, 1234u + dims[1]);
    Resident R;
    char name[64];
    snprintf(name, sizeof name, "%d-%d-%d-%d", dims[0], dims[1], dims[2], dims[3]);
    if (!start(R, m, capacity, channels, fuse)) {
        stop(R);
        return;
    }
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    const int out = dims.back();
    for (int rows : row_counts) {
        if (rows > capacity)
            continue;
        std::vector<float> x((size_t)rows * m.in), y((size_t)rows * out);
        for (auto &v : x)
            v = nd(gen);
        int64_t bad = 0;
        int kind = 0;
        uint32_t kst = 0;
        int st = tg_mailbox_rows_step(R.box, x.data(), 0, rows, m.in, out, 1, INFINITY, &bad, &kind, y.data(),
                                      2000000000LL, &kst);
        if (st != TG_OK) {
            printf("ERR %s rows %d: step status %d kernel %u\n", name, rows, st, kst);
            break;
        }
        std::vector<float> want = reference(m, x, rows);
        double peak = 0, err = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            peak = std::max(peak, (double)std::fabs(want[i]));
            err = std::max(err, (double)std::fabs(want[i] - y[i]));
        }
        for (int i = 0; i < 200; ++i)
            tg_mailbox_rows_step(R.box, x.data(), 0, rows, m.in, out, 1, INFINITY, &bad, &kind, y.data(),
                                 2000000000LL, &kst);
        std::vector<double> us;
        us.reserve(iters);
        for (int i = 0; i < iters; ++i) {
            x[i % x.size()] += 1e-3f;
            auto t0 = std::chrono::steady_clock::now();
            st = tg_mailbox_rows_step(R.box, x.data(), 0, rows, m.in, out, 1, INFINITY, &bad, &kind, y.data(),
                                      2000000000LL, &kst);
            auto t1 = std::chrono::steady_clock::now();
            if (st != TG_OK) {
                printf("ERR %s rows %d: step %d status %d\n", name, rows, i, st);
                break;
            }
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        printf("NATIVE resident mlp w8a16 %s cap %d ch %d fuse %d rows %d  p50=%.2f us  p99=%.2f us  min=%.2f us  "
               "err=%.2e  blocks=%u  smem=%u\n",
               name, capacity, channels, (int)R.plan.fuse_last, rows, pct(us, 0.5), pct(us, 0.99), pct(us, 0.0),
               err / (peak > 0 ? peak : 1), R.plan.token_groups * R.plan.channel_blocks, R.plan.smem_bytes);
#ifdef TG_RM_TRACE
        print_trace(name, rows, R.plan.token_groups * R.plan.channel_blocks);
#endif
    }
    stop(R);
}

}  // namespace

int main(int argc, char **argv)
{
    const int iters = argc > 1 ? atoi(argv[1]) : 5000;
    const bool sweep = !(argc > 2 && strcmp(argv[2], "short") == 0);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# resident mlp probe on %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    for (int h : {256, 512, 1024}) {
        std::vector<int> dims = {64, h, h, 4};
        if (sweep) {
            for (int cap : {16, 64})
                for (int ch : {16, 32})
                    for (int fuse : {0, 1})
                        run(dims, cap, ch, fuse, {1, 16, 64}, iters);
        } else {
            run(dims, 64, h == 1024 ? 32 : 16, true, {1, 16, 64}, iters);
        }
    }
    if (!sweep)   // one block a token group: no hand-over between blocks
        run({64, 64, 64, 4}, 64, 64, true, {1, 16, 64}, iters);
    // The shipped signal model's shape.
    run({12, 32, 32, 1}, 64, 16, true, {1, 64}, iters);
    return 0;
}
