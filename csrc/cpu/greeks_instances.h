/*
 * greeks_instances.h -- greeks_kernel.h instantiated for double and for float, for includers that
 * need only the per-option functions: greeks_element_f64 / greeks_limit_f64 and greeks_element_f32 /
 * greeks_limit_f32 (static; static __device__ under nvcc). Used by the greeks tick's C reference
 * (benchmarks/floor/greeks_tick.cu) and the tests' stand-in mailbox server
 * (tests/cpu/mailbox_server.c). The CPU backend (greeks.c, which also defines the range function)
 * and the resident kernel (csrc/cuda/mailbox.cu, which may build one dtype alone) instantiate the
 * kernel themselves. The includer includes <math.h> first.
 */
#ifndef TICKGPU_GREEKS_INSTANCES_H
#define TICKGPU_GREEKS_INSTANCES_H

#define REAL double
#define M(name) name
#define C(x) (x)
#define KERNEL_ELEMENT greeks_element_f64
#define KERNEL_LIMIT greeks_limit_f64
#include "greeks_kernel.h"
#undef REAL
#undef M
#undef C
#undef KERNEL_ELEMENT
#undef KERNEL_LIMIT

#define REAL float
#define M(name) name##f
#define C(x) (x##f)
#define KERNEL_ELEMENT greeks_element_f32
#define KERNEL_LIMIT greeks_limit_f32
#include "greeks_kernel.h"
#undef REAL
#undef M
#undef C
#undef KERNEL_ELEMENT
#undef KERNEL_LIMIT

#endif /* TICKGPU_GREEKS_INSTANCES_H */
