/*
 * fasttick.c -- tickgpu._fasttick: a staged tick entered from Python straight into C.
 *
 * Why a CPython extension of its own. A tick of 1,024 options spends as long in the Python that
 * looks at its arguments, finds its plan and hands out its results (10 us on the H200's host) as
 * in the GPU round trip it wraps. The common call -- NumPy arrays of one length and the
 * requested dtype, single Python numbers, a bool `call` -- needs none of that Python: here its
 * arguments are read from the arrays' own structs, the plan is the one the Python path made (found
 * in the same dict, by the same key, checked by the same epoch), and the results are rows of one
 * NumPy block, as there. Anything else -- another shape, dtype, kind of argument, backend, an
 * unknown size -- answers None, and the caller takes the Python path, which defines the semantics.
 *
 * What a call here does, under the context's lock as the Python path does: make the context
 * current; point the plan's copy table at the arrays (and size each row); fill single values
 * into their staging slots; mark the runner's staging as no plan's (the Python path then trusts
 * none of what its slots hold); allocate the output blocks and what the results are handed out
 * in; with the GIL released, the inputs into staging and the graph launched; the rows as arrays
 * of n, while the GPU runs; with the GIL released again, the wait (and the results out of
 * staging, where they are not written in place). Errors of either half go to a Python function
 * that raises the runtime's CudaError.
 *
 * What runs while the GPU runs. Handing out ten rows costs the host about as long as the kernel
 * takes, and needs only the rows' addresses, so it is done between the launch and the wait. It
 * must not run Python code: a garbage collection there could run a finalizer that makes another
 * call on this thread (the lock is reentrant), which would rewrite the staging the running graph
 * reads. So everything that may allocate a tracked object or call into Python -- the tuple, or the
 * result object and its __dict__ -- is made before the launch, and the window allocates only
 * arrays (untracked) and dict entries. Nothing in it reads the results.
 *
 * The two halves of the round trip and the context switch are function pointers handed in at
 * setup (the native core's tg_hot_roundtrip_begin / _end and tg_hot_ctx_set_current, or a test's
 * stand-ins), so this module links against nothing but Python and NumPy.
 *
 * GPU arrays. Calls on CuPy arrays or PyTorch CUDA tensors (Ticker.device) are taken here too:
 * each array's address, length, dtype, contiguity and device read from its own attributes, the
 * stream from the first CuPy array's interface or PyTorch's current stream, the results from a
 * Python function (arrays.empty_outputs: arrays of the inputs' library, CuPy's a dropped set
 * handed out again), and one launch -- of a plan per size, stream and alignment whose other
 * parameters were packed once -- with no wait, as runtime/direct.py does it. The launch is a
 * function pointer too (tg_hot_launch_desc_run). Anything but seven such arrays of one kind and
 * one length answers None.
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The native core's copy row (csrc/tickgpu.h, tg_hot_copy): {dst, src, bytes}. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} hot_copy;

typedef int (*begin_fn)(const hot_copy *in, int n_in, uintptr_t graph_exec, uintptr_t stream, int *cu_result);
typedef int (*end_fn)(uintptr_t stream, const hot_copy *out, int n_out, int *cu_result);
typedef int (*enter_fn)(uintptr_t ctx, int *cu_result);
/* tg_hot_launch_desc_run (csrc/tickgpu.h): one prepared launch, its parameters read at the call. */
typedef int (*launch_fn)(const void *desc, int sync, int *cu_result);
typedef int (*htod_fn)(uintptr_t dst, const void *src, size_t bytes, uintptr_t stream, int *cu_result);

enum { MAX_INPUTS = 16, MAX_BLOCKS = 4, MAX_OUTPUTS = 16, MAX_RESULTS = 8 };

/* Bytes per element of the output types a plan may have (0: not one of them). */
static int typenum_size(int t)
{
    switch (t) {
    case NPY_FLOAT64: case NPY_INT64: return 8;
    case NPY_FLOAT32: case NPY_INT32: return 4;
    case NPY_INT8: case NPY_UINT8: case NPY_BOOL: return 1;
    default: return 0;
    }
}

/* ---- Results: blocks of pinned, device-mapped host memory that results are handed out in --------
 *
 * A result block is one uint8 NumPy array over its memory, held here only: while the arrays a call
 * handed out (views whose base is the block) live, its reference count is above one and it is
 * busy; once they are gone it is free, and a tick's graph of its own writes the next results
 * into it through its device mapping. So a call copies nothing out of staging. */
typedef struct {
    PyObject_HEAD
    int n;
    PyObject *block[MAX_RESULTS];
} Results;

static void results_dealloc(Results *self)
{
    for (int k = 0; k < self->n; k++)
        Py_XDECREF(self->block[k]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Results(blocks): a list of 1-D, C-contiguous, writeable uint8 arrays (their memory must outlive
 * this object and every array it hands out: pinned staging the runtime never frees). */
static PyObject *results_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *blocks;
    if (!PyArg_ParseTuple(args, "O:Results", &blocks))
        return NULL;
    PyObject *fast = PySequence_Fast(blocks, "Results: blocks must be a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(fast);
    if (k < 1 || k > MAX_RESULTS) {
        PyErr_Format(PyExc_ValueError, "Results: 1 to %d blocks, got %zd", MAX_RESULTS, k);
        Py_DECREF(fast);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, i);
        if (Py_TYPE(b) != &PyArray_Type || PyArray_NDIM((PyArrayObject *)b) != 1 ||
            PyArray_TYPE((PyArrayObject *)b) != NPY_UINT8 ||
            !PyArray_CHKFLAGS((PyArrayObject *)b, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE)) {
            PyErr_Format(PyExc_TypeError, "Results: blocks[%zd] must be a writeable 1-D uint8 NumPy array", i);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Results *self = (Results *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    self->n = (int)k;
    for (int i = 0; i < self->n; i++) {
        self->block[i] = PySequence_Fast_GET_ITEM(fast, i);
        Py_INCREF(self->block[i]);
    }
    Py_DECREF(fast);
    return (PyObject *)self;
}

static PyObject *results_busy(Results *self, void *closure)
{
    PyObject *out = PyTuple_New(self->n);
    for (int k = 0; out != NULL && k < self->n; k++)
        PyTuple_SET_ITEM(out, k, PyBool_FromLong(Py_REFCNT(self->block[k]) > 1));
    return out;
}

static PyGetSetDef results_getset[] = {
    {"busy", (getter)results_busy, NULL, "per block, whether arrays handed out in it are alive", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ResultsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tickgpu._fasttick.Results",
    .tp_basicsize = sizeof(Results),
    .tp_dealloc = (destructor)results_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Blocks of pinned, device-mapped memory that a tick's results are handed out in.",
    .tp_getset = results_getset,
    .tp_new = results_new,
};

/* ---- Plan: what one tick plan (staged._TickPlan) holds for this path ---------------------------- */
typedef struct {
    PyObject_HEAD
    hot_copy *t_in;           /* the plan's copy table (owned by the plan's ffi arrays) */
    hot_copy *t_out;
    int k_in, k_blocks, k_outputs;
    Py_ssize_t m;             /* the bucket: staging slots and output rows hold m elements */
    long long epoch;          /* the bundle's scratch epoch the plan was built at */
    char *slot[MAX_INPUTS];   /* each input's staging slot (host address) */
    int itemsize[MAX_INPUTS];
    int block_typenum[MAX_BLOCKS];
    Py_ssize_t block_rows[MAX_BLOCKS];
    int out_block[MAX_OUTPUTS], out_row[MAX_OUTPUTS];
    PyObject *graph;          /* TickGraph: its .exec is read each call (0 once destroyed) */
    PyObject *runner;         /* GraphRunner: .staged_by set to None after staging here */
    uintptr_t stream;
    Py_ssize_t block_offset[MAX_BLOCKS];   /* of each output block in staging and in a result block */
    Results *results;         /* or NULL: results always leave staging by a copy */
    PyObject *result_graph[MAX_RESULTS];   /* TickGraph writing into results->block[k] */
    unsigned long long calls, direct;      /* ticks run here; of them, in a result block */
} Plan;

/* Plans and tickers take part in the cyclic GC: a runner's staged_by may name the plan that holds
 * this Plan, and a context holds its tickers, which hold it. */
static int plan_traverse(Plan *self, visitproc visit, void *arg)
{
    Py_VISIT(self->graph);
    Py_VISIT(self->runner);
    if (self->results != NULL)
        for (int k = 0; k < self->results->n; k++)
            Py_VISIT(self->result_graph[k]);
    Py_VISIT((PyObject *)self->results);
    return 0;
}

static int plan_clear(Plan *self)
{
    Py_CLEAR(self->graph);
    Py_CLEAR(self->runner);
    if (self->results != NULL)
        for (int k = 0; k < self->results->n; k++)
            Py_CLEAR(self->result_graph[k]);
    Py_CLEAR(self->results);
    return 0;
}

static void plan_dealloc(Plan *self)
{
    PyObject_GC_UnTrack(self);
    plan_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_int_list(PyObject *seq, const char *what, int *dst, int cap, int lo, int hi)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(fast);
    if (k > cap) {
        PyErr_Format(PyExc_ValueError, "%s: at most %d entries, got %zd", what, cap, k);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (v < lo || v > hi) {
            PyErr_Format(PyExc_ValueError, "%s[%zd]: must be in [%d, %d], got %ld", what, i, lo, hi, v);
            Py_DECREF(fast);
            return -1;
        }
        dst[i] = (int)v;
    }
    Py_DECREF(fast);
    return (int)k;
}

/* -1 with an exception set unless parse_int_list gave `want` entries (or failed already). */
static int expect_count(int got, int want, const char *what)
{
    if (got < 0)
        return -1;
    if (got != want) {
        PyErr_Format(PyExc_ValueError, "Plan: %s has %d entries, %d expected", what, got, want);
        return -1;
    }
    return 0;
}

/* The result blocks a plan hands results out in, with its graph writing into each and the output
 * blocks' offsets (staging's layout): every output row must fit every block. */
static int plan_take_results(Plan *self, PyObject *offsets, PyObject *results, PyObject *graphs)
{
    if (Py_TYPE(results) != &ResultsType) {
        PyErr_SetString(PyExc_TypeError, "Plan: results must be a Results (or None)");
        return -1;
    }
    Results *res = (Results *)results;
    PyObject *fo = PySequence_Fast(offsets, "Plan: block_offsets must be a sequence");
    PyObject *fg = fo ? PySequence_Fast(graphs, "Plan: result_graphs must be a sequence") : NULL;
    int rc = -1;
    if (fg == NULL)
        goto done;
    if (PySequence_Fast_GET_SIZE(fo) != self->k_blocks || PySequence_Fast_GET_SIZE(fg) != res->n) {
        PyErr_SetString(PyExc_ValueError, "Plan: one offset per output block and one graph per result block");
        goto done;
    }
    for (int b = 0; b < self->k_blocks; b++) {
        Py_ssize_t off = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fo, b));
        if (off == -1 && PyErr_Occurred())
            goto done;
        Py_ssize_t end = off + self->block_rows[b] * self->m * typenum_size(self->block_typenum[b]);
        for (int k = 0; k < res->n; k++)
            if (off < 0 || off % 16 || end > PyArray_NBYTES((PyArrayObject *)res->block[k])) {
                PyErr_Format(PyExc_ValueError, "Plan: output block %d ([%zd, %zd) bytes) is outside result block %d "
                             "or not 16-byte aligned", b, off, end, k);
                goto done;
            }
        self->block_offset[b] = off;
    }
    for (int k = 0; k < res->n; k++) {
        self->result_graph[k] = PySequence_Fast_GET_ITEM(fg, k);
        Py_INCREF(self->result_graph[k]);
    }
    Py_INCREF(results);
    self->results = res;
    rc = 0;
done:
    Py_XDECREF(fo);
    Py_XDECREF(fg);
    return rc;
}

/* Plan(t_in, k_in, t_out, m, epoch, slots, itemsizes, block_typenums, block_rows, out_blocks,
 *      out_rows, graph, runner, stream): addresses as ints; see the struct. */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    unsigned long long t_in, t_out, stream;
    int k_in;
    Py_ssize_t m;
    long long epoch;
    PyObject *slots, *itemsizes, *typenums, *rows, *out_blocks, *out_rows, *graph, *runner;
    PyObject *offsets = Py_None, *results = Py_None, *result_graphs = Py_None;
    if (!PyArg_ParseTuple(args, "KiKnLOOOOOOOOK|OOO:Plan", &t_in, &k_in, &t_out, &m, &epoch, &slots, &itemsizes,
                          &typenums, &rows, &out_blocks, &out_rows, &graph, &runner, &stream, &offsets, &results,
                          &result_graphs))
        return NULL;
    if (t_in == 0 || t_out == 0 || m < 1 || k_in < 1 || k_in > MAX_INPUTS) {
        PyErr_SetString(PyExc_ValueError, "Plan: null copy table, m < 1 or k_in out of range");
        return NULL;
    }
    Plan *self = (Plan *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->t_in = (hot_copy *)(uintptr_t)t_in;
    self->t_out = (hot_copy *)(uintptr_t)t_out;
    self->k_in = k_in;
    self->m = m;
    self->epoch = epoch;
    self->stream = (uintptr_t)stream;
    int rws[MAX_BLOCKS];
    PyObject *fast = NULL;
    if (expect_count(parse_int_list(itemsizes, "itemsizes", self->itemsize, MAX_INPUTS, 1, 8), k_in,
                     "itemsizes") < 0 ||
        (self->k_blocks = parse_int_list(typenums, "block_typenums", self->block_typenum, MAX_BLOCKS, 0,
                                         NPY_CLONGDOUBLE)) < 0 ||
        expect_count(self->k_blocks, self->k_blocks ? self->k_blocks : 1, "block_typenums") < 0 ||
        expect_count(parse_int_list(rows, "block_rows", rws, MAX_BLOCKS, 1, 64), self->k_blocks, "block_rows") < 0 ||
        (self->k_outputs = parse_int_list(out_blocks, "out_blocks", self->out_block, MAX_OUTPUTS, 0,
                                          self->k_blocks - 1)) < 0 ||
        expect_count(self->k_outputs, self->k_outputs ? self->k_outputs : 1, "out_blocks") < 0 ||
        expect_count(parse_int_list(out_rows, "out_rows", self->out_row, MAX_OUTPUTS, 0, 63), self->k_outputs,
                     "out_rows") < 0)
        goto fail;
    for (int i = 0; i < k_in; i++)
        if (self->itemsize[i] != 1 && self->itemsize[i] != 4 && self->itemsize[i] != 8) {
            PyErr_Format(PyExc_ValueError, "Plan: itemsizes[%d] must be 1, 4 or 8, got %d", i, self->itemsize[i]);
            goto fail;
        }
    for (int b = 0; b < self->k_blocks; b++) {
        if (typenum_size(self->block_typenum[b]) == 0) {
            PyErr_Format(PyExc_ValueError, "Plan: block_typenums[%d] = %d is not an output type", b,
                         self->block_typenum[b]);
            goto fail;
        }
        self->block_rows[b] = rws[b];
    }
    for (int j = 0; j < self->k_outputs; j++)
        if (self->out_row[j] >= rws[self->out_block[j]]) {
            PyErr_Format(PyExc_ValueError, "Plan: output %d's row %d is beyond its block's %d rows", j,
                         self->out_row[j], rws[self->out_block[j]]);
            goto fail;
        }
    fast = PySequence_Fast(slots, "slots");
    if (fast == NULL)
        goto fail;
    if (PySequence_Fast_GET_SIZE(fast) != k_in) {
        PyErr_SetString(PyExc_ValueError, "Plan: one staging slot per input");
        goto fail;
    }
    for (int i = 0; i < k_in; i++) {
        unsigned long long a = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred())
            goto fail;
        self->slot[i] = (char *)(uintptr_t)a;
    }
    Py_CLEAR(fast);
    Py_INCREF(graph);
    self->graph = graph;
    Py_INCREF(runner);
    self->runner = runner;
    if (results != Py_None && plan_take_results(self, offsets, results, result_graphs) != 0)
        goto fail;
    return (PyObject *)self;
fail:
    Py_XDECREF(fast);
    Py_DECREF(self);
    return NULL;
}

static PyObject *plan_calls(Plan *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->calls);
}

static PyObject *plan_direct(Plan *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->direct);
}

static PyGetSetDef plan_getset[] = {
    {"calls", (getter)plan_calls, NULL, "ticks this plan ran through this path", NULL},
    {"direct", (getter)plan_direct, NULL, "of them, ticks whose results were written into a result block", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tickgpu._fasttick.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)plan_traverse,
    .tp_clear = (inquiry)plan_clear,
    .tp_doc = "A staged tick plan's copy table, staging slots and output blocks, for Ticker.",
    .tp_getset = plan_getset,
    .tp_new = plan_new,
};

/* ---- DevicePlan: a launch on GPU arrays of one size, stream and alignment ---------------------- */
/* The kernel's parameters packed once (strides, n, scratch) in a buffer of the plan's own; a call
 * writes the inputs' and outputs' addresses at their offsets and runs the launch description. */
typedef struct {
    PyObject_HEAD
    uintptr_t desc;           /* tg_hot_launch_desc * (its params point into the buffer) */
    char *values;             /* the parameter values' buffer */
    int off_in[MAX_INPUTS], off_out[MAX_OUTPUTS];
    int n_in, n_out;
    long long epoch;          /* the bundle's scratch epoch it was packed at */
    PyObject *owner;          /* what keeps desc and values alive */
} DevicePlan;

static void device_plan_dealloc(DevicePlan *self)
{
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* DevicePlan(desc, values, in_offsets, out_offsets, epoch, owner) */
static PyObject *device_plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    unsigned long long desc, values;
    PyObject *ins, *outs, *owner;
    long long epoch;
    if (!PyArg_ParseTuple(args, "KKOOLO:DevicePlan", &desc, &values, &ins, &outs, &epoch, &owner))
        return NULL;
    if (desc == 0 || values == 0) {
        PyErr_SetString(PyExc_ValueError, "DevicePlan: desc and values must be addresses");
        return NULL;
    }
    DevicePlan *self = (DevicePlan *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->desc = (uintptr_t)desc;
    self->values = (char *)(uintptr_t)values;
    self->epoch = epoch;
    Py_INCREF(owner);
    self->owner = owner;
    if ((self->n_in = parse_int_list(ins, "DevicePlan in_offsets", self->off_in, MAX_INPUTS, 0, 1 << 20)) < 0 ||
        (self->n_out = parse_int_list(outs, "DevicePlan out_offsets", self->off_out, MAX_OUTPUTS, 0, 1 << 20)) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyTypeObject DevicePlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tickgpu._fasttick.DevicePlan",
    .tp_basicsize = sizeof(DevicePlan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A launch on GPU arrays of one size, stream and alignment, its other parameters packed once.",
    .tp_dealloc = (destructor)device_plan_dealloc,
    .tp_new = device_plan_new,
};

/* ---- Ticker: one operation at one dtype -------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *ctx;            /* the runtime Context: .ticks read each call (it may be rebound) */
    PyObject *bundle;         /* its Bundle: .scratch_epoch read each call */
    PyObject *acquire, *release;   /* the context lock's bound methods */
    PyObject *op, *dtype_char;     /* the key of ctx.ticks: (op, dtype char, n) */
    PyObject *dtype_type, *dtype_descr;   /* what `dtype=` may be: np.float64 or np.dtype('float64') */
    PyArray_Descr *want;      /* the numeric inputs' dtype (identity, as the Python path checks) */
    PyObject *env, *disable_key;   /* os.environ's mapping and TICKGPU_DISABLE_GPU as its key */
    PyObject *resident;       /* ops.RESIDENT: while not empty the Python path decides */
    PyObject *raise_error;    /* raise_error(status, cu_result): raises the runtime's CudaError */
    begin_fn begin;           /* inputs into staging, graph launched */
    end_fn end;               /* wait, results out of staging */
    enter_fn enter;
    uintptr_t cu_ctx;
    PyObject *other;          /* the ticker of the same operation at another dtype (or None) */
    PyObject *result_type;    /* None: the results as a tuple; else a class, made as object.__new__ */
    PyObject *result_names;   /* with a class: the attribute of each output, set in its __dict__ */
    int n_inputs, flag;       /* flag: the input index of the call/put flags (-1: none) */
    Py_ssize_t auto_lo, auto_hi;   /* backend="auto" runs here for auto_lo <= n < auto_hi (-1: none) */
    unsigned long long calls;
    /* GPU arrays (CuPy's, PyTorch's), where `device` set them up: */
    launch_fn launch;         /* NULL: such calls take the Python path */
    PyObject *dev_plans;      /* {(n, stream, aligned): DevicePlan} */
    PyObject *dev_factory;    /* factory(n, stream, aligned) -> DevicePlan or None */
    PyObject *dev_outputs;    /* outputs(x, n, stream) -> (arrays, addresses) */
    PyObject *dev_type;       /* cupy.ndarray, found on the first such call */
    PyObject *torch_spec;     /* torch_spec(dtype) -> TORCH_* tuple or None, asked once torch is imported */
    PyObject *torch;          /* its answer (NULL: not asked yet) */
    PyObject *ring;           /* the context's ConstantRing: single values mixed in (NULL: not taken) */
    htod_fn htod;             /* tg_hot_copy_htod_async's type: the values to their slots */
    long long ordinal;        /* the context's device */
    Py_ssize_t dev_max_n;     /* the most elements one launch takes */
    int dev_k_out;            /* the operation's outputs */
    unsigned long long dev_calls;
} Ticker;

static PyTypeObject TickerType;
static PyArray_Descr *bool_descr;   /* np.dtype(bool): the one a bool array holds */
static PyArray_Descr *u8_descr;     /* np.dtype(uint8): flags may be bytes too on the GPU path */
static PyObject *s_cupy, *s_ndarray, *s_dtype, *s_ndim, *s_size, *s_flags, *s_c_contiguous, *s_data, *s_ptr,
    *s_device_id, *s_cai, *s_stream;
static PyObject *s_torch, *s_requires_grad, *s_is_cuda, *s_get_device, *s_is_contiguous, *s_data_ptr;
static PyObject *s_cursor, *s_slots, *s_host, *s_dev, *s_slot;
static PyObject *s_plans, *s_staging_elements;
static PyObject *s_ticks, *s_fast, *s_exec, *s_scratch_epoch, *s_staged_by, *s_gpu, *s_auto;
static PyObject *empty_tuple;

#define TICKER_FIELDS(X)                                                                           \
    X(self->ctx) X(self->bundle) X(self->acquire) X(self->release) X(self->op) X(self->dtype_char)   \
    X(self->dtype_type) X(self->dtype_descr) X(self->want) X(self->env) X(self->disable_key)         \
    X(self->resident) X(self->raise_error) X(self->other) X(self->result_type) X(self->result_names)   \
    X(self->dev_plans) X(self->dev_factory) X(self->dev_outputs) X(self->dev_type) X(self->torch_spec)    \
    X(self->torch) X(self->ring)

static int ticker_traverse(Ticker *self, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT((PyObject *)(f));
    TICKER_FIELDS(VISIT)
#undef VISIT
    return 0;
}

static int ticker_clear(Ticker *self)
{
#define CLEAR(f) Py_CLEAR(f);
    TICKER_FIELDS(CLEAR)
#undef CLEAR
    return 0;
}

static void ticker_dealloc(Ticker *self)
{
    PyObject_GC_UnTrack(self);
    ticker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Ticker(ctx, bundle, lock, op, dtype_char, dtype_type, dtype_descr, n_inputs, flag, env,
 *        disable_key, resident, raise_error, begin_addr, end_addr, enter_addr, cu_ctx, auto_lo,
 *        auto_hi[, result_type, result_names]) */
static PyObject *ticker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *ctx, *bundle, *lock, *op, *dch, *dtt, *dtd, *env, *dkey, *resident, *raise_error;
    PyObject *rtype = Py_None, *rnames = Py_None;
    int n_inputs, flag;
    unsigned long long bg, nd, en, cu_ctx;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "OOOUUOOiiOOOOKKKKnn|OO:Ticker", &ctx, &bundle, &lock, &op, &dch, &dtt, &dtd,
                          &n_inputs, &flag, &env, &dkey, &resident, &raise_error, &bg, &nd, &en, &cu_ctx, &lo,
                          &hi, &rtype, &rnames))
        return NULL;
    if (n_inputs < 1 || n_inputs > MAX_INPUTS || flag < -1 || flag >= n_inputs || bg == 0 || nd == 0) {
        PyErr_SetString(PyExc_ValueError, "Ticker: n_inputs, flag, begin or end out of range");
        return NULL;
    }
    if (rtype != Py_None) {
        int ok = PyType_Check(rtype) && PyTuple_Check(rnames) && PyTuple_GET_SIZE(rnames) >= 1 &&
                 PyTuple_GET_SIZE(rnames) <= MAX_OUTPUTS;
        for (Py_ssize_t j = 0; ok && j < PyTuple_GET_SIZE(rnames); j++)
            ok = PyUnicode_CheckExact(PyTuple_GET_ITEM(rnames, j));
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "Ticker: result_type a class and result_names a tuple of 1 to 16 str");
            return NULL;
        }
    } else if (rnames != Py_None) {
        PyErr_SetString(PyExc_TypeError, "Ticker: result_names without a result_type");
        return NULL;
    }
    if (!PyArray_DescrCheck(dtd) || !PyDict_Check(resident) || (env != Py_None && !PyDict_Check(env)) ||
        !PyCallable_Check(raise_error)) {
        PyErr_SetString(PyExc_TypeError, "Ticker: dtype_descr a numpy dtype, resident and env dicts, "
                                         "raise_error callable");
        return NULL;
    }
    Ticker *self = (Ticker *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->acquire = PyObject_GetAttrString(lock, "acquire");
    self->release = PyObject_GetAttrString(lock, "release");
    if (self->acquire == NULL || self->release == NULL) {
        Py_DECREF(self);
        return NULL;
    }
#define KEEP(field, obj) (Py_INCREF(obj), self->field = (obj))
    KEEP(ctx, ctx);
    KEEP(bundle, bundle);
    KEEP(op, op);
    KEEP(dtype_char, dch);
    KEEP(dtype_type, dtt);
    KEEP(dtype_descr, dtd);
    KEEP(env, env);
    KEEP(disable_key, dkey);
    KEEP(resident, resident);
    KEEP(raise_error, raise_error);
    KEEP(result_type, rtype);
    KEEP(result_names, rnames);
#undef KEEP
    Py_INCREF(dtd);
    self->want = (PyArray_Descr *)dtd;
    self->n_inputs = n_inputs;
    self->flag = flag;
    self->begin = (begin_fn)(uintptr_t)bg;
    self->end = (end_fn)(uintptr_t)nd;
    self->enter = en ? (enter_fn)(uintptr_t)en : NULL;
    self->cu_ctx = (uintptr_t)cu_ctx;
    self->auto_lo = lo;
    self->auto_hi = hi;
    Py_INCREF(Py_None);
    self->other = Py_None;
    return (PyObject *)self;
}

/* One input as the tick reads it: an array (data), or a single value (as double / flag byte). */
typedef struct {
    const char *data;
    double value;
} arg_t;

/* A single value as the C entry takes it: for the flag, True or False (1 / 0); else a float or an
 * int a double holds exactly (NumPy's conversion of bigger ones -- rounding, or an OverflowError --
 * stays the Python path's). 1 and *value, or 0: not one. Never raises. */
static int read_value(PyObject *v, int flag, double *value)
{
    if (flag) {
        if (v != Py_True && v != Py_False)
            return 0;
        *value = v == Py_True;
    } else if (PyFloat_CheckExact(v)) {
        *value = PyFloat_AS_DOUBLE(v);
    } else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long q = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || q > (1LL << 53) || q < -(1LL << 53)) {
            PyErr_Clear();
            return 0;
        }
        *value = (double)q;
    } else {
        return 0;
    }
    return 1;
}

/* A single value for a float32 input beyond float32's range would round to inf here and warn on
 * the Python path: that path's. */
static int beyond_float32(double v)
{
    return isfinite(v) && fabs(v) > FLT_MAX;
}

/* 1: every input is what this path takes, *n set; 0: not (the Python path decides). Never raises. */
static int read_inputs(const Ticker *tk, PyObject *const *x, arg_t *a, Py_ssize_t *n)
{
    Py_ssize_t len = -1;
    for (int i = 0; i < tk->n_inputs; i++) {
        PyObject *v = x[i];
        a[i].data = NULL;
        if (Py_TYPE(v) == &PyArray_Type) {
            PyArrayObject *arr = (PyArrayObject *)v;
            if (PyArray_NDIM(arr) != 1 || !(PyArray_FLAGS(arr) & NPY_ARRAY_C_CONTIGUOUS))
                return 0;
            /* The dtype object itself, as the Python path compares (`x.dtype is want`): a bool
             * array for the flags; any other dtype takes the Python path's conversions. */
            if (PyArray_DESCR(arr) != (i == tk->flag ? bool_descr : tk->want))
                return 0;
            Py_ssize_t k = PyArray_DIM(arr, 0);
            if (len < 0)
                len = k;
            else if (k != len)
                return 0;
            a[i].data = PyArray_BYTES(arr);
        } else if (!read_value(v, i == tk->flag, &a[i].value)) {
            return 0;
        }
    }
    if (len < 1)
        return 0;   /* no array (a 0-d result) or an empty one: the Python path's shapes and checks */
    *n = len;
    return 1;
}

static void fill(char *slot, int itemsize, Py_ssize_t n, double v)
{
    if (itemsize == 8) {
        double *p = (double *)slot;
        for (Py_ssize_t j = 0; j < n; j++)
            p[j] = v;
    } else if (itemsize == 4) {
        float *p = (float *)slot;
        const float f = (float)v;
        for (Py_ssize_t j = 0; j < n; j++)
            p[j] = f;
    } else {
        memset(slot, v != 0.0, (size_t)n);
    }
}

/* staged.bucket: n rounded up to 1/8 of its power of two (multiples of 16 below 128), at most chunk. */
static Py_ssize_t bucket(Py_ssize_t n, Py_ssize_t chunk)
{
    int bits = 0;
    for (Py_ssize_t v = n; v; v >>= 1)
        bits++;
    Py_ssize_t step = bits > 4 ? (Py_ssize_t)1 << (bits - 4) : 1;
    if (step < 16)
        step = 16;
    Py_ssize_t b = (n + step - 1) / step * step;
    return b < chunk ? b : chunk;
}

/* ctx.plans.get((op, dtype char, bucket, 0, (), None, None)): new ref or NULL (exception cleared). */
static PyObject *bucket_plan(Ticker *tk, Py_ssize_t n)
{
    PyObject *chunk = PyObject_GetAttr(tk->ctx, s_staging_elements);
    Py_ssize_t c = chunk ? PyLong_AsSsize_t(chunk) : -1;
    Py_XDECREF(chunk);
    if (c < 1 || n > c) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *plans = PyObject_GetAttr(tk->ctx, s_plans);
    PyObject *key = Py_BuildValue("(OOni()OO)", tk->op, tk->dtype_char, bucket(n, c), 0, Py_None, Py_None);
    PyObject *plan = plans && key && PyDict_Check(plans) ? PyDict_GetItemWithError(plans, key) : NULL;
    Py_XINCREF(plan);
    Py_XDECREF(key);
    Py_XDECREF(plans);
    PyErr_Clear();
    return plan;
}

static PyObject *lookup_plan(Ticker *tk, Py_ssize_t n, PyObject **owner)
{
    /* ctx.ticks.get((op, dtype char, n)), and its plan's Plan if it is still current. New refs to
     * both (the plan owns the copy tables the Plan points at) or NULL (no exception set) where the
     * Python path must decide. */
    PyObject *ticks = PyObject_GetAttr(tk->ctx, s_ticks);
    if (ticks == NULL || !PyDict_Check(ticks)) {
        Py_XDECREF(ticks);
        PyErr_Clear();
        return NULL;
    }
    PyObject *key = Py_BuildValue("(OOn)", tk->op, tk->dtype_char, n);
    PyObject *plan = key ? PyDict_GetItemWithError(ticks, key) : NULL;
    Py_XINCREF(plan);
    if (plan == NULL && key != NULL && !PyErr_Occurred()) {
        /* A size not called before: its bucket's plan, as warm-up built it (staged.plan_for's key),
         * remembered for the size as the Python path does (staged.host_call). */
        plan = bucket_plan(tk, n);
        if (plan != NULL) {
            if (PyDict_GET_SIZE(ticks) >= 8192)
                PyDict_Clear(ticks);
            if (PyDict_SetItem(ticks, key, plan) != 0)
                Py_CLEAR(plan);
        }
    }
    Py_XDECREF(key);
    Py_DECREF(ticks);
    if (plan == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *fast = PyObject_GetAttr(plan, s_fast);
    if (fast == NULL || Py_TYPE(fast) != &PlanType) {
        Py_XDECREF(fast);
        Py_DECREF(plan);
        PyErr_Clear();
        return NULL;
    }
    PyObject *epoch = PyObject_GetAttr(tk->bundle, s_scratch_epoch);
    long long e = epoch ? PyLong_AsLongLong(epoch) : -1;
    Py_XDECREF(epoch);
    if (PyErr_Occurred() || e != ((Plan *)fast)->epoch || n > ((Plan *)fast)->m) {
        Py_DECREF(fast);
        Py_DECREF(plan);
        PyErr_Clear();
        return NULL;
    }
    *owner = plan;
    return fast;
}

static PyObject *call_lock(PyObject *method)
{
    return PyObject_CallNoArgs(method);
}

/* The context made current on this thread: 0, or -1 with the runtime's CudaError raised. */
static int enter_ctx(Ticker *tk)
{
    int cu = 0, st;
    if (tk->enter == NULL || (st = tk->enter(tk->cu_ctx, &cu)) == 0)
        return 0;
    PyObject *r = PyObject_CallFunction(tk->raise_error, "iis", st, cu, "cuCtxSetCurrent");
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "cuCtxSetCurrent failed (raise_error raised nothing)");
    return -1;
}

/* The context's lock released whatever happened, an exception already set kept: `result` (a new
 * reference, or NULL with an exception set), or NULL where the release itself failed. */
static PyObject *unlock_with(Ticker *tk, PyObject *result)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = call_lock(tk->release);
    if (r == NULL) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        Py_XDECREF(result);
        return NULL;
    }
    Py_DECREF(r);
    PyErr_Restore(et, ev, tb);
    if (result == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "Ticker.call failed without an exception");
    return result;
}

/* ---- GPU arrays ---------------------------------------------------------------------------------- */
#if !defined(NPY_ABI_VERSION) || NPY_ABI_VERSION < 0x02000000   /* NumPy 1.x headers */
#define PyDataType_ELSIZE(d) ((d)->elsize)
#endif

/* o.name as an integer: 1, or 0 where it is missing or not one (no exception left set). */
static int attr_ull(PyObject *o, PyObject *name, unsigned long long *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL || !PyLong_Check(v)) {
        Py_XDECREF(v);
        PyErr_Clear();
        return 0;
    }
    *out = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* o.name() as an integer: 1, or 0 where the call fails or gives none (no exception left set). */
static int call_ll(PyObject *o, PyObject *name, long long *out)
{
    PyObject *v = PyObject_CallMethodNoArgs(o, name);
    int ok = v != NULL && PyLong_Check(v);
    if (ok) {
        *out = PyLong_AsLongLong(v);
        ok = !PyErr_Occurred();
    }
    Py_XDECREF(v);
    PyErr_Clear();
    return ok;
}

/* What torch_spec tells of PyTorch at the ticker's dtype: torch.Tensor, the dtype, the two flag
 * dtypes (torch.bool, torch.uint8), torch._C._cuda_getCurrentRawStream. */
enum { TORCH_TENSOR, TORCH_WANT, TORCH_BOOL, TORCH_U8, TORCH_STREAM, TORCH_SPEC_SIZE };

/* A PyTorch tensor as the launch reads it: what read_device_array asks of a CuPy array, from the
 * tensor's own attributes (its interface is Python code building a dict), on a CUDA device, and no
 * gradient wanted (the Python path refuses such a tensor, naming it). 1 and its address and length,
 * or 0. */
static int read_torch_tensor(const Ticker *tk, PyObject *x, int flag, unsigned long long *ptr, Py_ssize_t *len)
{
    PyObject *spec = tk->torch;
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    const int ok_dtype = dt != NULL && (flag ? (dt == PyTuple_GET_ITEM(spec, TORCH_BOOL) ||
                                                dt == PyTuple_GET_ITEM(spec, TORCH_U8))
                                             : dt == PyTuple_GET_ITEM(spec, TORCH_WANT));
    Py_XDECREF(dt);
    const long long itemsize = flag ? 1 : (long long)PyDataType_ELSIZE(tk->want);
    unsigned long long ndim;
    long long dev, p;
    if (!ok_dtype || !attr_ull(x, s_ndim, &ndim) || ndim != 1)
        goto no;
    PyObject *grad = PyObject_GetAttr(x, s_requires_grad);
    const int no_grad = grad == Py_False;
    Py_XDECREF(grad);
    PyObject *cuda = PyObject_GetAttr(x, s_is_cuda);   /* other devices number theirs from 0 too */
    const int on_cuda = cuda == Py_True;
    Py_XDECREF(cuda);
    if (!no_grad || !on_cuda || !call_ll(x, s_get_device, &dev) || dev != tk->ordinal)
        goto no;
    PyObject *cc = PyObject_CallMethodNoArgs(x, s_is_contiguous);
    const int contiguous = cc == Py_True;
    Py_XDECREF(cc);
    if (!contiguous || !call_ll(x, s_data_ptr, &p) || p <= 0 || p % itemsize)
        goto no;
    const Py_ssize_t size = PyObject_Size(x);
    if (size < 0)
        goto no;
    *ptr = (unsigned long long)p;
    *len = size;
    return 1;
no:
    PyErr_Clear();
    return 0;
}

/* The kind of GPU array `x` is, if one the C entry reads: 1 CuPy's, 2 PyTorch's, 0 neither.
 * CuPy's type and what torch_spec says are found on the first call that needs them. Never raises. */
static int device_kind(Ticker *tk, PyObject *x)
{
    if (tk->dev_type == NULL) {
        PyObject *mod = PyImport_GetModule(s_cupy);
        PyObject *t = mod ? PyObject_GetAttr(mod, s_ndarray) : NULL;
        Py_XDECREF(mod);
        if (t != NULL && PyType_Check(t) && tk->dev_type == NULL)
            tk->dev_type = t;
        else
            Py_XDECREF(t);
        PyErr_Clear();
    }
    if (tk->dev_type != NULL && Py_TYPE(x) == (PyTypeObject *)tk->dev_type)
        return 1;
    if (tk->torch == NULL && tk->torch_spec != NULL) {
        PyObject *mod = PyImport_GetModule(s_torch);   /* asked only once torch is imported */
        if (mod != NULL) {
            Py_DECREF(mod);
            PyObject *spec = PyObject_CallOneArg(tk->torch_spec, (PyObject *)tk->want);
            /* (Python code: another thread may have asked meanwhile; the first answer stays.) */
            if (spec != NULL && tk->torch == NULL &&
                (spec == Py_None || (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == TORCH_SPEC_SIZE &&
                                     PyType_Check(PyTuple_GET_ITEM(spec, TORCH_TENSOR)))))
                tk->torch = spec;
            else
                Py_XDECREF(spec);   /* a failing spec is asked again next time */
        }
        PyErr_Clear();
    }
    if (tk->torch != NULL && tk->torch != Py_None &&
        Py_TYPE(x) == (PyTypeObject *)PyTuple_GET_ITEM(tk->torch, TORCH_TENSOR))
        return 2;
    return 0;
}

/* The stream a call on arrays of `kind` runs on: CuPy's interface names it (version 3: its current
 * stream), PyTorch's current stream on the context's device. 1, or 0: the Python path decides. */
static int device_stream(Ticker *tk, int kind, PyObject *x, unsigned long long *stream)
{
    PyObject *owned = NULL, *st;
    if (kind == 1) {
        owned = PyObject_GetAttr(x, s_cai);
        st = owned && PyDict_Check(owned) ? PyDict_GetItemWithError(owned, s_stream) : NULL;
    } else {
        st = owned = PyObject_CallFunction(PyTuple_GET_ITEM(tk->torch, TORCH_STREAM), "L", tk->ordinal);
    }
    int ok = st != NULL && PyLong_Check(st);
    if (ok) {
        *stream = PyLong_AsUnsignedLongLong(st);
        ok = !PyErr_Occurred();
    }
    Py_XDECREF(owned);
    PyErr_Clear();
    return ok;
}

/* A CuPy array as the launch reads it: 1-D, C-contiguous, the call's dtype (a flag: bool or uint8),
 * on the context's device, a nonzero address aligned to its elements. 1 and its address and length,
 * or 0: anything else (the Python path checks it and says what is wrong). Never raises. */
static int read_device_array(const Ticker *tk, PyObject *x, int flag, unsigned long long *ptr, Py_ssize_t *len)
{
    unsigned long long ndim, size, dev;
    PyObject *dt = PyObject_GetAttr(x, s_dtype);
    const int ok_dtype = dt != NULL && (flag ? (dt == (PyObject *)bool_descr || dt == (PyObject *)u8_descr)
                                              : dt == (PyObject *)tk->want);
    const int itemsize = ok_dtype ? (int)PyDataType_ELSIZE((PyArray_Descr *)dt) : 0;
    Py_XDECREF(dt);
    if (!ok_dtype || !attr_ull(x, s_ndim, &ndim) || ndim != 1 || !attr_ull(x, s_size, &size))
        goto no;
    PyObject *flags = PyObject_GetAttr(x, s_flags);
    PyObject *cc = flags ? PyObject_GetAttr(flags, s_c_contiguous) : NULL;
    Py_XDECREF(flags);
    const int contiguous = cc == Py_True;
    Py_XDECREF(cc);
    if (!contiguous)
        goto no;
    PyObject *data = PyObject_GetAttr(x, s_data);
    const int ok = data != NULL && attr_ull(data, s_ptr, ptr) && attr_ull(data, s_device_id, &dev);
    Py_XDECREF(data);
    if (!ok || (long long)dev != tk->ordinal || *ptr == 0 || *ptr % (unsigned long long)itemsize)
        goto no;
    *len = (Py_ssize_t)size;
    return 1;
no:
    PyErr_Clear();
    return 0;
}

/* The constants ring's slot size (runtime/device.py, ConstantRing.SLOT; `device` checks it). */
#define RING_SLOT 16

/* The single values of `mask` written into the next slots of the constants ring (ConstantRing:
 * its host buffer, each value at its dtype, in input order; the cursor moved past them), each
 * input's address its device slot: 1 and the first slot's device and host addresses; 0 where the
 * ring must wrap first (the Python path's put, which waits for the context); -1 with an exception
 * set. Under the context's lock, as ConstantRing.put is called. */
static int ring_slots(Ticker *tk, PyObject *const *x, int mask, const double *value, unsigned long long *ptr,
                      unsigned long long *c_dev, unsigned long long *c_host)
{
    unsigned long long cursor, slots, host, dev;
    if (!attr_ull(tk->ring, s_cursor, &cursor) || !attr_ull(tk->ring, s_slots, &slots) ||
        !attr_ull(tk->ring, s_host, &host) || !attr_ull(tk->ring, s_dev, &dev)) {
        PyErr_SetString(PyExc_TypeError, "Ticker: the constants ring lacks cursor, slots, host or dev");
        return -1;
    }
    int k = 0;
    for (int i = 0; i < tk->n_inputs; i++)
        k += (mask >> i) & 1;
    if (cursor + (unsigned long long)k > slots)
        return 0;
    const int itemsize = (int)PyDataType_ELSIZE(tk->want);
    int j = 0;
    for (int i = 0; i < tk->n_inputs; i++) {
        if (!(mask & 1 << i))
            continue;
        char *slot = (char *)(uintptr_t)(host + (cursor + j) * RING_SLOT);
        if (i == tk->flag) {
            *(uint8_t *)slot = value[i] != 0.0;
        } else if (itemsize == 8) {
            memcpy(slot, &value[i], 8);
        } else {
            const float f = (float)value[i];
            memcpy(slot, &f, 4);
        }
        ptr[i] = dev + (cursor + j) * RING_SLOT;
        j++;
    }
    PyObject *moved = PyLong_FromUnsignedLongLong(cursor + (unsigned long long)k);
    if (moved == NULL || PyObject_SetAttr(tk->ring, s_cursor, moved) != 0) {
        Py_XDECREF(moved);
        return -1;
    }
    Py_DECREF(moved);
    *c_dev = dev + cursor * RING_SLOT;
    *c_host = host + cursor * RING_SLOT;
    return 1;
}

/* The call on CuPy arrays or PyTorch tensors: every input one of the same kind and length
 * (anything else answers None), the results made by `dev_outputs` (the inputs' library's arrays,
 * CuPy's handed out again once dropped: arrays.empty_outputs), the launch prepared once per (n,
 * stream, alignment) by `dev_factory` and run on the stream `device_stream` names, with no wait --
 * what runtime/direct.py does, in C. The results as the host path gives them: a `result_type`
 * made in C, or the tuple of arrays. */
static PyObject *device_call(Ticker *tk, PyObject *const *x)
{
    /* Single values (read_value) may be mixed in where the constants ring is at hand; the first
     * other input says the kind, and every other one must be of it. */
    double value[MAX_INPUTS];
    int mask = 0, first = -1, n_values = 0;
    for (int i = 0; i < tk->n_inputs; i++) {
        if (tk->ring != NULL && read_value(x[i], i == tk->flag, &value[i])) {
            if (i != tk->flag && PyDataType_ELSIZE(tk->want) == 4 && beyond_float32(value[i]))
                Py_RETURN_NONE;
            mask |= 1 << i;
            n_values++;
        } else if (first < 0) {
            first = i;
        } else if (Py_TYPE(x[i]) != Py_TYPE(x[first])) {
            Py_RETURN_NONE;
        }
    }
    const int kind = first < 0 ? 0 : device_kind(tk, x[first]);
    if (kind == 0)
        Py_RETURN_NONE;
    unsigned long long ptr[MAX_INPUTS], low = 0, stream = 0;
    Py_ssize_t n = -1;
    for (int i = 0; i < tk->n_inputs; i++) {
        if (mask & 1 << i)
            continue;
        Py_ssize_t len;
        const int ok = kind == 1 ? read_device_array(tk, x[i], i == tk->flag, &ptr[i], &len)
                                 : read_torch_tensor(tk, x[i], i == tk->flag, &ptr[i], &len);
        if (!ok || (n >= 0 && len != n))
            Py_RETURN_NONE;
        n = len;
        low |= ptr[i];
    }
    if (n < 1 || n > tk->dev_max_n || !device_stream(tk, kind, x[first], &stream))
        Py_RETURN_NONE;
    const int k_out = tk->result_type == Py_None ? tk->dev_k_out : (int)PyTuple_GET_SIZE(tk->result_names);
    PyObject *r = call_lock(tk->acquire);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    PyObject *result = NULL, *outs = NULL, *made = NULL, *made_dict = NULL, *key = NULL;
    DevicePlan *plan = NULL;
    unsigned long long c_dev = 0, c_host = 0;   /* the values' slots in the ring (device, host) */
    if (n_values) {
        /* The slots are taken just before the launch (below), once no Python code is left to run
         * that could call again and wrap the ring; their alignment is the ring's (16-byte slots). */
        if (!attr_ull(tk->ring, s_dev, &c_dev)) {
            PyErr_SetString(PyExc_TypeError, "Ticker: the constants ring lacks dev");
            goto unlock;
        }
        low |= c_dev;
    }
    outs = PyObject_CallFunction(tk->dev_outputs, "OnK", x[first], n, stream);
    if (outs == NULL)
        goto unlock;
    if (!PyTuple_Check(outs) || PyTuple_GET_SIZE(outs) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(outs, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(outs, 1)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(outs, 0)) != k_out ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(outs, 1)) != k_out) {
        PyErr_SetString(PyExc_TypeError, "Ticker: the outputs function must give (arrays, addresses), one each");
        goto unlock;
    }
    unsigned long long optr[MAX_OUTPUTS];
    for (int j = 0; j < k_out; j++) {
        optr[j] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(outs, 1), j));
        if (PyErr_Occurred())
            goto unlock;
        low |= optr[j];
    }
    const int aligned = (low & 15) == 0 && n % 16 == 0;
    key = Py_BuildValue("(nKii)", n, stream, aligned, mask);
    if (key == NULL)
        goto unlock;
    PyObject *epoch = PyObject_GetAttr(tk->bundle, s_scratch_epoch);
    const long long e = epoch ? PyLong_AsLongLong(epoch) : -1;
    Py_XDECREF(epoch);
    if (PyErr_Occurred())
        goto unlock;
    plan = (DevicePlan *)PyDict_GetItemWithError(tk->dev_plans, key);
    if (plan == NULL && PyErr_Occurred())
        goto unlock;
    Py_XINCREF(plan);
    if (plan == NULL || plan->epoch != e) {
        /* A size, stream or alignment not seen before, or the kernels' scratch moved since. */
        Py_CLEAR(plan);
        PyObject *made_plan = PyObject_CallFunction(tk->dev_factory, "nKii", n, stream, aligned, mask);
        if (made_plan == NULL)
            goto unlock;
        if (made_plan == Py_None) {
            Py_DECREF(made_plan);
            result = Py_None;
            Py_INCREF(result);
            goto unlock;
        }
        if (Py_TYPE(made_plan) != &DevicePlanType || ((DevicePlan *)made_plan)->n_in != tk->n_inputs ||
            ((DevicePlan *)made_plan)->n_out != k_out) {
            Py_DECREF(made_plan);
            PyErr_SetString(PyExc_TypeError, "Ticker: the plan factory must give a DevicePlan of this operation");
            goto unlock;
        }
        plan = (DevicePlan *)made_plan;
        if (PyDict_GET_SIZE(tk->dev_plans) >= 256)
            PyDict_Clear(tk->dev_plans);
        if (PyDict_SetItem(tk->dev_plans, key, made_plan) != 0)
            goto unlock;
    }
    if (tk->result_type == Py_None) {
        made = PyTuple_GET_ITEM(outs, 0);
        Py_INCREF(made);
    } else {
        PyTypeObject *rt = (PyTypeObject *)tk->result_type;
        made = rt->tp_new(rt, empty_tuple, NULL);
        made_dict = made ? PyObject_GenericGetDict(made, NULL) : NULL;
        if (made_dict == NULL || !PyDict_CheckExact(made_dict)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "Ticker.call: the result type's instances have no __dict__");
            goto unlock;
        }
        for (int j = 0; j < k_out; j++)
            if (PyDict_SetItem(made_dict, PyTuple_GET_ITEM(tk->result_names, j),
                               PyTuple_GET_ITEM(PyTuple_GET_ITEM(outs, 0), j)) != 0)
                goto unlock;
    }
    if (n_values) {
        const int taken = ring_slots(tk, x, mask, value, ptr, &c_dev, &c_host);
        if (taken <= 0) {
            if (taken == 0) {   /* the ring must wrap first: the Python path's ConstantRing.put */
                result = Py_None;
                Py_INCREF(result);
            }
            goto unlock;
        }
    }
    int cu = 0, st;
    if (enter_ctx(tk) != 0)
        goto unlock;
    for (int i = 0; i < tk->n_inputs; i++)
        memcpy(plan->values + plan->off_in[i], &ptr[i], sizeof ptr[i]);
    for (int j = 0; j < k_out; j++)
        memcpy(plan->values + plan->off_out[j], &optr[j], sizeof optr[j]);
    const char *failed = "cuLaunchKernel";
    Py_BEGIN_ALLOW_THREADS
    /* The values to their device slots on the launch's stream, just before the kernel (as
     * ConstantRing.put copies them). */
    st = n_values ? tk->htod((uintptr_t)c_dev, (const void *)(uintptr_t)c_host, (size_t)n_values * RING_SLOT,
                             (uintptr_t)stream, &cu)
                  : 0;
    if (st != 0)
        failed = "cuMemcpyHtoDAsync";
    else
        st = tk->launch((const void *)plan->desc, 0, &cu);
    Py_END_ALLOW_THREADS
    if (st != 0) {
        r = PyObject_CallFunction(tk->raise_error, "iis", st, cu, failed);
        Py_XDECREF(r);
        goto unlock;
    }
    tk->dev_calls++;
    result = made;
    made = NULL;
unlock:
    Py_XDECREF(made);
    Py_XDECREF(made_dict);
    Py_XDECREF(outs);
    Py_XDECREF(key);
    Py_XDECREF((PyObject *)plan);
    return unlock_with(tk, result);
}

/* ticker.call(dtype, backend, *inputs): a tuple of NumPy arrays (the op's outputs in order), or None
 * where the Python path must take the call. */
static PyObject *ticker_call(Ticker *tk, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 + tk->n_inputs) {
        PyErr_Format(PyExc_TypeError, "Ticker.call: %d arguments expected, got %zd", 2 + tk->n_inputs, nargs);
        return NULL;
    }
    PyObject *dtype = args[0], *backend = args[1];
    int on_auto;
    if (dtype != tk->dtype_type && dtype != tk->dtype_descr) {
        if (Py_TYPE(tk->other) == &TickerType && ((Ticker *)tk->other)->n_inputs == tk->n_inputs)
            return ticker_call((Ticker *)tk->other, args, nargs);
        Py_RETURN_NONE;
    }
    if (backend == s_gpu)
        on_auto = 0;
    else if (backend == s_auto)
        on_auto = 1;
    else if (PyUnicode_CheckExact(backend) && PyUnicode_CompareWithASCIIString(backend, "gpu") == 0)
        on_auto = 0;
    else if (PyUnicode_CheckExact(backend) && PyUnicode_CompareWithASCIIString(backend, "auto") == 0)
        on_auto = 1;
    else
        Py_RETURN_NONE;
    if (PyDict_GET_SIZE(tk->resident) != 0)
        Py_RETURN_NONE;
    if (tk->env != Py_None) {   /* TICKGPU_DISABLE_GPU, read on every call as dispatch does */
        PyObject *v = PyDict_GetItemWithError(tk->env, tk->disable_key);
        if (v == NULL && PyErr_Occurred())
            return NULL;
        if (v != NULL && PyObject_IsTrue(v))
            Py_RETURN_NONE;
    }
    arg_t a[MAX_INPUTS];
    Py_ssize_t n;
    if (!read_inputs(tk, args + 2, a, &n)) {
        if (tk->launch != NULL)   /* GPU arrays: backend "auto" runs them on the GPU, as dispatch does */
            return device_call(tk, args + 2);
        Py_RETURN_NONE;
    }
    if (on_auto && (tk->auto_lo < 0 || n < tk->auto_lo || (tk->auto_hi >= 0 && n >= tk->auto_hi)))
        Py_RETURN_NONE;

    PyObject *r = call_lock(tk->acquire);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    PyObject *result = NULL, *made = NULL, *made_dict = NULL;
    PyObject *blocks[MAX_BLOCKS] = {NULL}, *owner = NULL;
    Plan *p = (Plan *)lookup_plan(tk, n, &owner);
    if (p == NULL) {
        result = Py_None;
        Py_INCREF(result);
        goto unlock;
    }
    int cu = 0, st;
    if (enter_ctx(tk) != 0)
        goto unlock;
    PyObject *ex = PyObject_GetAttr(p->graph, s_exec);
    unsigned long long graph_exec = ex ? PyLong_AsUnsignedLongLong(ex) : 0;
    Py_XDECREF(ex);
    if (PyErr_Occurred() || graph_exec == 0) {
        PyErr_Clear();
        result = Py_None;
        Py_INCREF(result);
        goto unlock;
    }
    for (int i = 0; i < tk->n_inputs; i++)
        if (a[i].data == NULL && p->itemsize[i] == 4 && beyond_float32(a[i].value)) {
            result = Py_None;
            Py_INCREF(result);
            goto unlock;
        }
    /* A free result block, if any: its graph writes the results there, and nothing is copied out. */
    PyObject *direct = NULL;
    if (p->results != NULL)
        for (int k = 0; k < p->results->n && direct == NULL; k++) {
            if (Py_REFCNT(p->results->block[k]) != 1)
                continue;
            ex = PyObject_GetAttr(p->result_graph[k], s_exec);
            unsigned long long e = ex ? PyLong_AsUnsignedLongLong(ex) : 0;
            Py_XDECREF(ex);
            if (PyErr_Occurred() || e == 0) {
                PyErr_Clear();
                continue;
            }
            direct = p->results->block[k];
            graph_exec = e;
        }
    if (direct == NULL)
        for (int b = 0; b < p->k_blocks; b++) {
            npy_intp dims[2] = {p->block_rows[b], p->m};
            blocks[b] = PyArray_EMPTY(2, dims, p->block_typenum[b], 0);
            if (blocks[b] == NULL)
                goto unlock;
            p->t_out[b].dst = PyArray_DATA((PyArrayObject *)blocks[b]);
            p->t_out[b].bytes = (size_t)(dims[0] * dims[1]) * (size_t)PyArray_ITEMSIZE((PyArrayObject *)blocks[b]);
        }
    /* What the results are handed out in, made now: the window between launch and wait must not
     * allocate a tracked object (a collection could re-enter; see the top of this file). */
    if (tk->result_type != Py_None) {
        if (PyTuple_GET_SIZE(tk->result_names) != p->k_outputs) {
            result = Py_None;
            Py_INCREF(result);
            goto unlock;
        }
        PyTypeObject *rt = (PyTypeObject *)tk->result_type;
        made = rt->tp_new(rt, empty_tuple, NULL);
        made_dict = made ? PyObject_GenericGetDict(made, NULL) : NULL;
        if (made_dict == NULL || !PyDict_CheckExact(made_dict))
            goto unlock_error;
    } else if ((made = PyTuple_New(p->k_outputs)) == NULL) {
        goto unlock;
    }
    /* Staging: arrays through the copy table (n elements), single values into their slots. Every
     * row is written, so nothing depends on what an earlier call left. */
    for (int i = 0; i < tk->n_inputs; i++) {
        hot_copy *row = &p->t_in[i];
        if (a[i].data != NULL) {
            row->src = a[i].data;
            row->bytes = (size_t)n * (size_t)p->itemsize[i];
        } else {
            row->bytes = 0;
            fill(p->slot[i], p->itemsize[i], n, a[i].value);
        }
    }
    if (PyObject_SetAttr(p->runner, s_staged_by, Py_None) != 0)
        goto unlock;
    Py_BEGIN_ALLOW_THREADS
    st = tk->begin(p->t_in, p->k_in, (uintptr_t)graph_exec, p->stream, &cu);
    Py_END_ALLOW_THREADS
    if (st != 0) {
        r = PyObject_CallFunction(tk->raise_error, "iis", st, cu, "tick launch (cuGraphLaunch)");
        Py_XDECREF(r);
        goto unlock;
    }
    /* The GPU runs: hand out the rows (row out_row of output block out_block: in the result block
     * at the block's offset, or in this call's own NumPy block, which the wait fills). */
    int handed = 1;
    for (int j = 0; j < p->k_outputs && handed; j++) {
        const int b = p->out_block[j];
        PyObject *base = direct ? direct : blocks[b];
        PyArray_Descr *d = PyArray_DescrFromType(p->block_typenum[b]);
        PyObject *v = NULL;
        if (d != NULL) {
            npy_intp dim = n;
            char *data = PyArray_BYTES((PyArrayObject *)base) + (direct ? p->block_offset[b] : 0) +
                         (npy_intp)p->out_row[j] * p->m * typenum_size(p->block_typenum[b]);
            v = PyArray_NewFromDescr(&PyArray_Type, d, 1, &dim, NULL, data, NPY_ARRAY_CARRAY, NULL);
        }
        if (v != NULL) {
            Py_INCREF(base);
            if (PyArray_SetBaseObject((PyArrayObject *)v, base) != 0)
                Py_CLEAR(v);
        }
        if (v == NULL) {
            handed = 0;
        } else if (made_dict != NULL) {
            handed = PyDict_SetItem(made_dict, PyTuple_GET_ITEM(tk->result_names, j), v) == 0;
            Py_DECREF(v);
        } else {
            PyTuple_SET_ITEM(made, j, v);
        }
    }
    {
        /* The wait, whatever happened above (the staging is the graph's until it is over); its
         * error, if any, is the one raised. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        Py_BEGIN_ALLOW_THREADS
        st = tk->end(p->stream, p->t_out, direct ? 0 : p->k_blocks, &cu);
        Py_END_ALLOW_THREADS
        if (st != 0) {
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            r = PyObject_CallFunction(tk->raise_error, "iis", st, cu, "tick wait (cuStreamSynchronize)");
            Py_XDECREF(r);
            goto unlock;
        }
        PyErr_Restore(et, ev, tb);
    }
    if (!handed)
        goto unlock;
    p->calls++;
    p->direct += direct != NULL;
    tk->calls++;
    result = made;
    made = NULL;
    goto unlock;
unlock_error:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "Ticker.call: the result type's instances have no __dict__");
unlock:
    Py_XDECREF(made);
    Py_XDECREF(made_dict);
    for (int b = 0; b < MAX_BLOCKS; b++)
        Py_XDECREF(blocks[b]);
    Py_XDECREF((PyObject *)p);
    Py_XDECREF(owner);
    return unlock_with(tk, result);
}

static PyObject *ticker_then(Ticker *self, PyObject *other)
{
    if (other != Py_None && (Py_TYPE(other) != &TickerType || (Ticker *)other == self ||
                             ((Ticker *)other)->other != Py_None)) {
        PyErr_SetString(PyExc_TypeError, "Ticker.then: another Ticker with none after it, or None");
        return NULL;
    }
    Py_INCREF(other);
    Py_SETREF(self->other, other);
    Py_RETURN_NONE;
}

/* ticker.device(launch, factory, outputs, ordinal, max_n, k_out[, torch_spec, ring, htod]): take
 * calls on CuPy arrays (and PyTorch tensors, where torch_spec is given; single values mixed in,
 * where the context's ConstantRing and the address of a function of tg_hot_copy_htod_async's type
 * are) of up to max_n elements too (see device_call); launch the address of a function of
 * tg_hot_launch_desc_run's type, k_out the number of outputs. */
static PyObject *ticker_device(Ticker *self, PyObject *args)
{
    unsigned long long launch, htod = 0;
    PyObject *factory, *outputs, *torch_spec = Py_None, *ring = Py_None;
    long long ordinal;
    Py_ssize_t max_n;
    int k_out;
    if (!PyArg_ParseTuple(args, "KOOLni|OOK:device", &launch, &factory, &outputs, &ordinal, &max_n, &k_out,
                          &torch_spec, &ring, &htod))
        return NULL;
    if (launch == 0 || !PyCallable_Check(factory) || !PyCallable_Check(outputs) || max_n < 1 ||
        (torch_spec != Py_None && !PyCallable_Check(torch_spec))) {
        PyErr_SetString(PyExc_TypeError, "Ticker.device: a launch address, two or three callables and max_n >= 1");
        return NULL;
    }
    unsigned long long slot = 0;
    if (ring != Py_None && (htod == 0 || !attr_ull(ring, s_slot, &slot) || slot != RING_SLOT)) {
        PyErr_SetString(PyExc_ValueError, "Ticker.device: a ring needs an htod address and slots of 16 bytes");
        return NULL;
    }
    if (k_out < 1 || k_out > MAX_OUTPUTS ||
        (self->result_type != Py_None && k_out != (int)PyTuple_GET_SIZE(self->result_names))) {
        PyErr_SetString(PyExc_ValueError, "Ticker.device: k_out must be the operation's number of outputs");
        return NULL;
    }
    if (self->launch != NULL) {   /* calls may be running on what it holds: set up once */
        PyErr_SetString(PyExc_RuntimeError, "Ticker.device: this ticker takes GPU arrays already");
        return NULL;
    }
    PyObject *plans = PyDict_New();
    if (plans == NULL)
        return NULL;
    Py_XSETREF(self->dev_plans, plans);
    self->dev_max_n = max_n;
    self->dev_k_out = k_out;
    if (torch_spec != Py_None) {
        Py_INCREF(torch_spec);
        self->torch_spec = torch_spec;
    }
    if (ring != Py_None) {
        Py_INCREF(ring);
        self->ring = ring;
        self->htod = (htod_fn)(uintptr_t)htod;
    }
    Py_INCREF(factory);
    Py_XSETREF(self->dev_factory, factory);
    Py_INCREF(outputs);
    Py_XSETREF(self->dev_outputs, outputs);
    self->ordinal = ordinal;
    self->launch = (launch_fn)(uintptr_t)launch;
    Py_RETURN_NONE;
}

static PyObject *ticker_dev_calls(Ticker *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->dev_calls);
}

static PyObject *ticker_calls(Ticker *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->calls);
}

static PyObject *ticker_other(Ticker *self, void *closure)
{
    Py_INCREF(self->other);
    return self->other;
}

static PyGetSetDef ticker_getset[] = {
    {"calls", (getter)ticker_calls, NULL, "calls this ticker ran (the others took the Python path)", NULL},
    {"other", (getter)ticker_other, NULL, "the ticker of the same operation at another dtype, or None", NULL},
    {"device_calls", (getter)ticker_dev_calls, NULL, "calls on GPU arrays this ticker ran", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef ticker_methods[] = {
    {"call", (PyCFunction)(void (*)(void))ticker_call, METH_FASTCALL,
     "call(dtype, backend, *inputs): the outputs as a tuple of NumPy arrays, or None (take the Python path)"},
    {"device", (PyCFunction)ticker_device, METH_VARARGS,
     "device(launch, factory, outputs, ordinal, max_n, k_out[, torch_spec, ring, htod]): take calls on CuPy "
     "arrays (and PyTorch tensors, and single values mixed in) too"},
    {"then", (PyCFunction)ticker_then, METH_O,
     "then(other): calls whose dtype is not this ticker's go to `other` (a Ticker of the same operation)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TickerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tickgpu._fasttick.Ticker",
    .tp_basicsize = sizeof(Ticker),
    .tp_dealloc = (destructor)ticker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)ticker_traverse,
    .tp_clear = (inquiry)ticker_clear,
    .tp_doc = "A staged tick of one operation at one dtype, entered from Python straight into C.",
    .tp_methods = ticker_methods,
    .tp_getset = ticker_getset,
    .tp_new = ticker_new,
};

static struct PyModuleDef fasttick_module = {
    PyModuleDef_HEAD_INIT, "tickgpu._fasttick",
    "A staged tick entered from Python straight into C (see csrc/ext/fasttick.c).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fasttick(void)
{
    import_array();
    if (PyType_Ready(&ResultsType) < 0 || PyType_Ready(&PlanType) < 0 || PyType_Ready(&TickerType) < 0 ||
        PyType_Ready(&DevicePlanType) < 0)
        return NULL;
    bool_descr = PyArray_DescrFromType(NPY_BOOL);   /* kept for the module's life */
    u8_descr = PyArray_DescrFromType(NPY_UINT8);
    if (bool_descr == NULL || u8_descr == NULL)
        return NULL;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_cupy, "cupy") INTERN(s_ndarray, "ndarray") INTERN(s_dtype, "dtype") INTERN(s_ndim, "ndim")
    INTERN(s_size, "size") INTERN(s_flags, "flags") INTERN(s_c_contiguous, "c_contiguous") INTERN(s_data, "data")
    INTERN(s_ptr, "ptr") INTERN(s_device_id, "device_id") INTERN(s_cai, "__cuda_array_interface__")
    INTERN(s_stream, "stream") INTERN(s_torch, "torch") INTERN(s_requires_grad, "requires_grad")
    INTERN(s_is_cuda, "is_cuda")
    INTERN(s_get_device, "get_device") INTERN(s_is_contiguous, "is_contiguous") INTERN(s_data_ptr, "data_ptr")
    INTERN(s_cursor, "cursor") INTERN(s_slots, "slots") INTERN(s_host, "host") INTERN(s_dev, "dev")
    INTERN(s_slot, "SLOT")
#undef INTERN
    s_plans = PyUnicode_InternFromString("plans");
    s_staging_elements = PyUnicode_InternFromString("staging_elements");
    s_ticks = PyUnicode_InternFromString("ticks");
    s_fast = PyUnicode_InternFromString("fast");
    s_exec = PyUnicode_InternFromString("exec");
    s_scratch_epoch = PyUnicode_InternFromString("scratch_epoch");
    s_staged_by = PyUnicode_InternFromString("staged_by");
    s_gpu = PyUnicode_InternFromString("gpu");
    s_auto = PyUnicode_InternFromString("auto");
    empty_tuple = PyTuple_New(0);
    if (!empty_tuple || !s_plans || !s_staging_elements || !s_ticks || !s_fast || !s_exec || !s_scratch_epoch || !s_staged_by || !s_gpu || !s_auto)
        return NULL;
    PyObject *m = PyModule_Create(&fasttick_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ResultsType);
    Py_INCREF(&PlanType);
    Py_INCREF(&TickerType);
    Py_INCREF(&DevicePlanType);
    if (PyModule_AddObject(m, "DevicePlan", (PyObject *)&DevicePlanType) < 0 ||
        PyModule_AddObject(m, "Results", (PyObject *)&ResultsType) < 0 ||
        PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0 ||
        PyModule_AddObject(m, "Ticker", (PyObject *)&TickerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
