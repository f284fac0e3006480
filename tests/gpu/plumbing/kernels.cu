// Plumbing kernels: the contract's signatures (CONTRACTS.md, "Kernel bundle") with closed-form
// bodies, so the runtime's packing, layouts, graphs and streams can be checked on a real GPU
// independently of the finance kernels. The formulas match tests/cpu/cuda_mock.py (expected_*).
#include <stdint.h>

template <typename T>
__device__ void greeks_body(const T *spot, int s_spot, const T *strike, int s_strike, const T *t, int s_t,
                            const T *rate, int s_rate, const T *vol, int s_vol, const T *div, int s_div,
                            const uint8_t *call, int s_call, T *price, T *delta, T *gamma, T *vega, T *theta,
                            T *rho, T *phi, T *vanna, T *volga, T *charm, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double S = spot[i * s_spot], K = strike[i * s_strike], tt = t[i * s_t], r = rate[i * s_rate];
    double v = vol[i * s_vol], q = div[i * s_div], c = call[i * s_call];
    double base = S + tt * r + v - q;
    T *outs[10] = {price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm};
    for (int k = 0; k < 10; k++) outs[k][i] = (T)(base + (k + 1) * K + 0.5 * (k + 1) * c);
}

template <typename T>
__device__ void iv_body(const T *price, int s_price, const T *spot, int s_spot, const T *strike, int s_strike,
                        const T *t, int s_t, const T *rate, int s_rate, const T *div, int s_div,
                        const uint8_t *call, int s_call, T *vol_out, int8_t *status_out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double P = price[i * s_price], S = spot[i * s_spot], K = strike[i * s_strike], tt = t[i * s_t];
    double r = rate[i * s_rate], q = div[i * s_div];
    int c = call[i * s_call];
    vol_out[i] = (T)(P / S + K * tt + r - q + c);
    status_out[i] = (int8_t)((strike[i * s_strike] > spot[i * s_spot] ? 1 : 0) + 2 * c);
}

#define GREEKS(NAME, T)                                                                                       \
    extern "C" __global__ void NAME(const T *a, int sa, const T *b, int sb, const T *c, int sc, const T *d,   \
                                    int sd, const T *e, int se, const T *f, int sf, const uint8_t *g, int sg, \
                                    T *o0, T *o1, T *o2, T *o3, T *o4, T *o5, T *o6, T *o7, T *o8, T *o9,     \
                                    int n)                                                                    \
    { greeks_body<T>(a, sa, b, sb, c, sc, d, sd, e, se, f, sf, g, sg, o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, n); }
GREEKS(plumb_greeks_f64, double)
GREEKS(plumb_greeks_f32, float)

#define IV(NAME, T)                                                                                           \
    extern "C" __global__ void NAME(const T *a, int sa, const T *b, int sb, const T *c, int sc, const T *d,   \
                                    int sd, const T *e, int se, const T *f, int sf, const uint8_t *g, int sg, \
                                    T *vol, int8_t *status, int n)                                            \
    { iv_body<T>(a, sa, b, sb, c, sc, d, sd, e, se, f, sf, g, sg, vol, status, n); }
IV(plumb_iv_f64, double)
IV(plumb_iv_f32, float)

extern "C" __global__ void plumb_surface_f64(const double *strikes, const double *expiries, const double *vols,
                                             int nk, int nt, int mode, const double *strike, int s_strike,
                                             const double *t, int s_t, double *out, int what, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double sum = 0;
    for (int j = 0; j < nk * nt; j++) sum += vols[j];
    out[i] = strikes[0] + strikes[nk - 1] + expiries[nt - 1] + sum + strike[i * s_strike] * t[i * s_t]
             + 10.0 * mode + 100.0 * what + 1000.0 * nk + 10000.0 * nt;
}
