/* Count the Python interpreter's work of a simulated rank, deterministically (issue #15).
 *
 * A C-level trace function (PyEval_SetTrace) counts, per OS thread, the Python-level function
 * calls (PyTrace_CALL) and the bytecode instructions (PyTrace_OPCODE: every frame is asked for
 * opcode events and no line events when it starts) the user's program executes:
 * its own code, the frameworks it calls (DTensor dispatch, FSDP2 hooks, DDP's reducer
 * glue, optimizer loops, DataLoader collate, trainer callbacks) and torch's Python layers.
 * The simulator turns the counts into host time on the reference host (runtime/host/pyhost.py).
 * Counts do not depend on the simulating machine's speed or load, so runs stay reproducible.
 *
 * Work of the simulator itself is not counted: a call into a code object whose file lies
 * in phantora_prof's package directory (the capture mode, patched torch.cuda functions,
 * the clock) starts an uncounted region that ends when that frame returns, and everything
 * it calls (FakeTensor's Python, the cost model) is inside it. Files named as exempt (the
 * bootstrap that runs the user's script with runpy) count as the user's.
 *
 * Nor are __eq__ / __ne__ / __hash__ methods (is_hashing_method: hash tables call them a
 * number of times that depends on memory addresses).
 *
 * Nor are an editable install's import hooks (__editable__*.py files).
 *
 * The import system's own frames (<frozen importlib._bootstrap*>) are not counted either,
 * but what they call (a module's body) is: how much of importlib's Python runs depends on
 * whether a module's cached bytecode (__pycache__) already exists, which made the first run
 * of a fresh checkout differ from the second.
 *
 * Built as a CPython extension module with the C compiler alone (no torch), by
 * phantora_prof/runtime/host/pyhost.py, so it works with CPU and CUDA builds of torch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    long long py_calls;
    long long c_calls;  /* bytecode instructions (opcodes) executed */
    long long weighted; /* the same, each weighted by its code's file rate (WEIGHT_ONE = 1) */
    PyCodeObject *last_code;  /* the code of the last counted instruction, and its weight */
    long long last_w;
    long long depth;  /* > 0: inside the simulator's own frames */
    int attached;
    int paused;       /* > 0: the hook is off while the simulator runs (pause/resume) */
    /* the counts when the thread's pending Python was last charged (take()); marked: set */
    long long last_py;
    long long last_c;
    long long last_weighted;
    int marked;
} Counters;

static __thread Counters tls;

static char *g_prefix = NULL;
static size_t g_prefix_len = 0;
static PyObject *g_exempt = NULL; /* set of file names (str) that count as user code */

enum { CODE_OURS = 1, CODE_USER = 2, CODE_IMPORT = 3 };

/* code object -> CODE_*, open addressing by address; the cache holds a reference to every
 * code object in it, so an address cannot be reused by another code object (a freed lambda's
 * address taken by a different function would otherwise inherit its class). */
#define CACHE_BITS 16
#define CACHE_SIZE (1u << CACHE_BITS)
static void *cache_key[CACHE_SIZE];
static unsigned char cache_val[CACHE_SIZE];
static long long cache_w[CACHE_SIZE];

/* Per-file instruction weights (set_rates): the Python of some files costs more per
 * instruction than a training loop's own (a framework's dispatch that calls expensive C
 * functions and touches cold objects). Keyed by the file's path below its site-packages /
 * dist-packages folder ("torch/distributed/tensor/_dispatch.py"), or, for the files not
 * named, by their top-level package ("torch/"), in units of WEIGHT_ONE; the rest (the
 * program's own files, the standard library) weigh WEIGHT_ONE. */
#define WEIGHT_ONE 1024
static PyObject *g_rates = NULL; /* dict str -> int, or NULL; set before threads start (set_rates
                                   * forgets only the calling thread's last-code cache) */

static long long weight_uncached(PyCodeObject *code) {
    if (g_rates == NULL) {
        return WEIGHT_ONE;
    }
    PyObject *fn = code->co_filename;
    if (fn == NULL || !PyUnicode_Check(fn)) {
        return WEIGHT_ONE;
    }
    const char *s = PyUnicode_AsUTF8(fn);
    if (s == NULL) {
        PyErr_Clear();
        return WEIGHT_ONE;
    }
    const char *key = NULL;
    for (const char *m = strstr(s, "-packages/"); m != NULL; m = strstr(m + 1, "-packages/")) {
        key = m + 10;  /* the last site-packages/ or dist-packages/ */
    }
    if (key == NULL) {
        return WEIGHT_ONE;
    }
    /* the file's own weight, else its top-level package's ("torch/") */
    PyObject *v = NULL;
    for (int whole = 1; whole >= 0 && v == NULL; --whole) {
        const char *slash = strchr(key, '/');
        if (!whole && slash == NULL) {
            break;
        }
        PyObject *k = whole ? PyUnicode_FromString(key) : PyUnicode_FromStringAndSize(key, slash - key + 1);
        if (k == NULL) {
            PyErr_Clear();
            return WEIGHT_ONE;
        }
        v = PyDict_GetItemWithError(g_rates, k);  /* borrowed */
        Py_DECREF(k);
        if (v == NULL && PyErr_Occurred()) {
            PyErr_Clear();
        }
    }
    if (v == NULL) {
        return WEIGHT_ONE;
    }
    long long w = PyLong_AsLongLong(v);
    if (w < 0) {
        PyErr_Clear();
        return WEIGHT_ONE;
    }
    return w;
}

static const char IMPORT_PREFIX[] = "<frozen importlib.";

/* __eq__ / __ne__ / __hash__ are not counted, nor what they call. Hash tables call __eq__
 * when two keys' hashes collide, and which keys collide depends on where objects live in
 * memory: DTensor's C++ sharding-propagation cache compares DTensorSpecs (and through them
 * DeviceMeshes and placements) a different number of times in every run, which made 8-rank
 * FSDP2 x TP traces differ by ~0.4 us of host time. Approximate: an explicit `a == b` in
 * Python costs no host time either (in the FSDP2 x TP example, ~0.5% of counted opcodes). */
static int is_hashing_method(PyCodeObject *code) {
    PyObject *name = code->co_name;
    if (name == NULL || !PyUnicode_Check(name)) {
        return 0;
    }
    return PyUnicode_CompareWithASCIIString(name, "__eq__") == 0 ||
           PyUnicode_CompareWithASCIIString(name, "__ne__") == 0 ||
           PyUnicode_CompareWithASCIIString(name, "__hash__") == 0;
}

static int classify_uncached(PyCodeObject *code) {
    PyObject *fn = code->co_filename;
    if (fn == NULL || !PyUnicode_Check(fn)) {
        return CODE_USER;
    }
    if (g_exempt != NULL) {
        int r = PySet_Contains(g_exempt, fn);
        if (r == 1) {
            return CODE_USER;
        }
        if (r < 0) {
            PyErr_Clear();
        }
    }
    const char *s = PyUnicode_AsUTF8(fn);
    if (s == NULL) {
        PyErr_Clear();
        return CODE_USER;
    }
    if (g_prefix != NULL && strncmp(s, g_prefix, g_prefix_len) == 0) {
        return CODE_OURS;
    }
    if (strncmp(s, IMPORT_PREFIX, sizeof(IMPORT_PREFIX) - 1) == 0) {
        return CODE_IMPORT;
    }
    if (is_hashing_method(code)) {
        return CODE_OURS;
    }
    /* The removal callbacks of weakref.WeakValueDictionary / WeakKeyDictionary run wherever
     * the program happens to be when a value dies. The dictionaries that fill during a
     * simulated step are FakeTensorMode's memos (meta_utils' storage_memo and tensor_memo),
     * which a CUDA run does not have, and how many entries they hold depends on the
     * simulator's dispatch path (its fast path makes none). Approximate: a program's own weak
     * dictionaries' removals are not counted either. */
    if (PyUnicode_CompareWithASCIIString(code->co_name, "remove") == 0) {
        size_t n = strlen(s);
        if (n >= 11 && strcmp(s + n - 11, "/weakref.py") == 0) {
            return CODE_OURS;
        }
    }
    /* An editable install's import hook (setuptools' __editable___<name>_finder.py) is import
     * machinery of how phantora-prof was installed, not the program's work: a regular install
     * has none, and counting it made the same run differ between the two. */
    const char *base = strrchr(s, '/');
    base = base != NULL ? base + 1 : s;
    if (strncmp(base, "__editable__", 12) == 0) {
        return CODE_OURS;
    }
    return CODE_USER;
}

/* Diagnostics (by_code(1)): what was counted, per code object (slot of the cache). */
static int g_by_code = 0;
static long long slot_calls[CACHE_SIZE];
static long long slot_ops[CACHE_SIZE];

/* The class of `code`; *slot is its cache slot, or -1 when it could not be cached; *w its
 * weight (w may be NULL). */
static int lookup_w(PyCodeObject *code, int *slot, long long *w) {
    uintptr_t h = ((uintptr_t)code >> 4) * 2654435761u;
    unsigned i = (unsigned)(h & (CACHE_SIZE - 1));
    for (unsigned probe = 0; probe < 64; ++probe, i = (i + 1) & (CACHE_SIZE - 1)) {
        if (cache_key[i] == (void *)code) {
            *slot = (int)i;
            if (w != NULL) {
                *w = cache_w[i];
            }
            return cache_val[i];
        }
        if (cache_key[i] == NULL) {
            int c = classify_uncached(code);
            Py_INCREF(code);
            cache_key[i] = (void *)code;
            cache_val[i] = (unsigned char)c;
            cache_w[i] = weight_uncached(code);
            *slot = (int)i;
            if (w != NULL) {
                *w = cache_w[i];
            }
            return c;
        }
    }
    *slot = -1;
    if (w != NULL) {
        *w = weight_uncached(code);
    }
    return classify_uncached(code); /* a crowded neighbourhood: no caching */
}

static int lookup(PyCodeObject *code, int *slot) {
    return lookup_w(code, slot, NULL);
}

/* The weight of the instruction about to run in `frame` (the last code's, cached). */
static long long frame_weight(PyFrameObject *frame) {
    if (g_rates == NULL) {
        return WEIGHT_ONE;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
    if (code != tls.last_code) {
        int slot;
        lookup_w(code, &slot, &tls.last_w);
        /* compared by address only: safe while the cache holds a reference to it */
        tls.last_code = slot >= 0 ? code : NULL;
    }
    Py_DECREF(code);
    return tls.last_w;
}

static int classify(PyCodeObject *code) {
    int slot;
    return lookup(code, &slot);
}

static void count_opcode_by_code(PyFrameObject *frame) {
    PyCodeObject *code = PyFrame_GetCode(frame);
    int slot;
    lookup(code, &slot);
    Py_DECREF(code);
    if (slot >= 0) {
        slot_ops[slot]++;
    }
}

static void clear_cache(void) {
    for (unsigned i = 0; i < CACHE_SIZE; ++i) {
        if (cache_key[i] != NULL) {
            Py_DECREF((PyObject *)cache_key[i]);
            cache_key[i] = NULL;
        }
    }
    tls.last_code = NULL;
}

static PyObject *str_trace_opcodes = NULL;
static PyObject *str_trace_lines = NULL;

/* Python 3.12 implements PyEval_SetTrace with sys.monitoring: switching a thread's trace
 * function on or off re-instruments the interpreter's code and walks every thread's frames,
 * and doing so after torch's autograd threads have run crashed the process at exit (seen on
 * 3.12.3 with a CUDA build of torch 2.11: segmentation fault in the last pause()). There,
 * pause() leaves the hook installed and the hook ignores everything while paused; frames
 * that start while paused get no line events. */
#if PY_VERSION_HEX >= 0x030C0000
#define PAUSE_IN_HOOK 1
#else
#define PAUSE_IN_HOOK 0
#endif

static int profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    (void)obj;
    (void)arg;
    if (PAUSE_IN_HOOK && tls.paused > 0) {
        if (what == PyTrace_CALL &&
            PyObject_SetAttr((PyObject *)frame, str_trace_lines, Py_False) < 0) {
            PyErr_Clear();
        }
        return 0;
    }
    switch (what) {
        case PyTrace_OPCODE:
            if (tls.depth == 0) {
                tls.c_calls++;
                tls.weighted += frame_weight(frame);
                if (g_by_code) {
                    count_opcode_by_code(frame);
                }
            }
            break;
        case PyTrace_CALL: {
            PyCodeObject *code = PyFrame_GetCode(frame);
            int slot;
            int cls = lookup(code, &slot);
            Py_DECREF(code);
            if (g_by_code && cls == CODE_USER && tls.depth == 0 && slot >= 0) {
                slot_calls[slot]++;
            }
            if (cls == CODE_OURS) {
                tls.depth++;
            } else if (cls == CODE_IMPORT) {
                /* neither opcode nor line events for the import system's frames */
                if (PyObject_SetAttr((PyObject *)frame, str_trace_opcodes, Py_False) < 0 ||
                    PyObject_SetAttr((PyObject *)frame, str_trace_lines, Py_False) < 0) {
                    PyErr_Clear();
                }
            } else if (tls.depth == 0) {
                tls.py_calls++;
                /* opcode events for this frame, and no line events */
                if (PyObject_SetAttr((PyObject *)frame, str_trace_opcodes, Py_True) < 0 ||
                    PyObject_SetAttr((PyObject *)frame, str_trace_lines, Py_False) < 0) {
                    PyErr_Clear();
                }
            }
            break;
        }
        case PyTrace_RETURN: {
            if (tls.depth > 0) {
                PyCodeObject *code = PyFrame_GetCode(frame);
                if (classify(code) == CODE_OURS) {
                    tls.depth--;
                }
                Py_DECREF(code);
            }
            break;
        }
        case PyTrace_LINE: {
            /* A frame whose call event was not seen still reports lines: one that started
             * before counting began, or one of ours that started while the hook was paused
             * and goes on after resume(). Its opcodes count only if it is the program's. */
            PyCodeObject *code = PyFrame_GetCode(frame);
            int cls = classify(code);
            Py_DECREF(code);
            if (PyObject_SetAttr((PyObject *)frame, str_trace_lines, Py_False) < 0 ||
                PyObject_SetAttr((PyObject *)frame, str_trace_opcodes,
                                 cls == CODE_USER ? Py_True : Py_False) < 0) {
                PyErr_Clear();
            }
            break;
        }
        default:
            break;
    }
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    const char *prefix;
    PyObject *exempt;
    if (!PyArg_ParseTuple(args, "sO", &prefix, &exempt)) {
        return NULL;
    }
    free(g_prefix);
    g_prefix = strdup(prefix);
    g_prefix_len = strlen(prefix);
    Py_XDECREF(g_exempt);
    g_exempt = PySet_New(exempt);
    if (g_exempt == NULL) {
        return NULL;
    }
    clear_cache();
    Py_RETURN_NONE;
}

/* Python 3.12 delivers opcode events to a trace function only if, when the function was set,
 * some frame had already asked for them (the interpreter's f_opcode_trace_set flag, raised by
 * the first `frame.f_trace_opcodes = True`): the frames this hook asks later got none, and no
 * instruction was counted on 3.12. Raise the flag first, with the caller's frame (its own
 * setting put back). 3.11 and 3.13 do not need it. */
static void enable_opcode_events(void) {
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
    PyFrameObject *frame = PyEval_GetFrame();  /* borrowed */
    if (frame == NULL) {
        return;
    }
    PyObject *was = PyObject_GetAttr((PyObject *)frame, str_trace_opcodes);
    if (was == NULL || PyObject_SetAttr((PyObject *)frame, str_trace_opcodes, Py_True) < 0 ||
        PyObject_SetAttr((PyObject *)frame, str_trace_opcodes, was) < 0) {
        PyErr_Clear();
    }
    Py_XDECREF(was);
#endif
}

/* Start counting on the calling thread (idempotent). */
static PyObject *attach(PyObject *self, PyObject *noargs) {
    if (!tls.attached) {
        enable_opcode_events();
        PyEval_SetTrace(profile, NULL);
        tls.attached = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *detach(PyObject *self, PyObject *noargs) {
    if (tls.attached) {
        PyEval_SetTrace(NULL, NULL);
        tls.attached = 0;
    }
    Py_RETURN_NONE;
}

/* The simulator's hot path (the capture mode) runs with the hook off: with a profile
 * function set, CPython 3.11 materializes every frame and leaves its specialized fast path,
 * which would make the simulator's own Python several times slower. pause() at its entry,
 * resume() before it returns (nested calls count, the outermost resume restores the hook);
 * the frame that paused is one of ours, so its return event, seen after resume, balances
 * the depth its call event added. */
static void pause_here(void) {
    if (tls.attached && tls.paused++ == 0 && !PAUSE_IN_HOOK) {
        PyEval_SetTrace(NULL, NULL);
    }
}

static void resume_here(void) {
    if (tls.attached && tls.paused > 0 && --tls.paused == 0 && !PAUSE_IN_HOOK) {
        PyEval_SetTrace(profile, NULL);
    }
}

static PyObject *pause_hook(PyObject *self, PyObject *noargs) {
    pause_here();
    Py_RETURN_NONE;
}

static PyObject *resume_hook(PyObject *self, PyObject *noargs) {
    resume_here();
    Py_RETURN_NONE;
}

/* A wrapper of ours that calls back into the program's code (a DataLoader fetch in a
 * worker) lets that code count: user_begin() returns the depth of our frames and clears it,
 * user_end(depth) puts it back. */
static PyObject *user_begin(PyObject *self, PyObject *noargs) {
    long long d = tls.depth;
    tls.depth = 0;
    return PyLong_FromLongLong(d);
}

static PyObject *user_end(PyObject *self, PyObject *arg) {
    long long d = PyLong_AsLongLong(arg);
    if (d == -1 && PyErr_Occurred()) {
        return NULL;
    }
    tls.depth = d;
    Py_RETURN_NONE;
}

/* mark_ours(code): `code` (and what it calls) is the simulator's work, wherever its file lies:
 * torch functions that run only because the simulator's dispatch mode is active. */
static PyObject *mark_ours(PyObject *self, PyObject *arg) {
    if (!PyCode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "mark_ours() takes a code object");
        return NULL;
    }
    int slot;
    lookup((PyCodeObject *)arg, &slot);
    if (slot < 0) {
        PyErr_SetString(PyExc_RuntimeError, "mark_ours(): the code cache has no room near this object");
        return NULL;
    }
    cache_val[slot] = CODE_OURS;
    Py_RETURN_NONE;
}

/* (python calls, bytecode instructions, attached) of the calling thread since it started. */
static PyObject *counts(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("(LLi)", tls.py_calls, tls.c_calls, tls.attached);
}

/* take() -> (python calls, instructions, weighted instructions) counted on this thread since the last take(), or
 * None when there is no earlier mark (the thread's first take, or after reset()); marks
 * the counts as charged either way. Kept here, not in Python, so that the clock-read
 * trampoline can tell in C that nothing is pending (the common case: a record's end, the
 * records of the ops a captured op calls). */
static PyObject *take(PyObject *self, PyObject *noargs) {
    long long dpy = tls.py_calls - tls.last_py, dc = tls.c_calls - tls.last_c;
    long long dw = tls.weighted - tls.last_weighted;
    int had = tls.marked;
    tls.last_py = tls.py_calls;
    tls.last_c = tls.c_calls;
    tls.last_weighted = tls.weighted;
    tls.marked = 1;
    if (!had) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LLL)", dpy, dc, dw);
}

/* The clock's question at every read (runtime/host/pyhost.py pending_ns), answered in one C
 * call: None when this thread does not count (not attached), 0 when nothing was counted since
 * the last take(), else take()'s answer. */
static PyObject *pending(PyObject *self, PyObject *noargs) {
    if (!tls.attached) {
        Py_RETURN_NONE;
    }
    if (tls.marked && tls.py_calls == tls.last_py && tls.c_calls == tls.last_c) {
        return PyLong_FromLong(0);
    }
    return take(self, noargs);
}

/* In a child process after fork: the thread that forked keeps its counts; start over. */
static PyObject *reset(PyObject *self, PyObject *noargs) {
    tls.py_calls = 0;
    tls.c_calls = 0;
    tls.weighted = 0;
    tls.last_weighted = 0;
    tls.last_code = NULL;
    tls.depth = 0;
    tls.paused = 0;
    tls.last_py = 0;
    tls.last_c = 0;
    tls.marked = 0;
    Py_RETURN_NONE;
}

/* set_rates(dict or None): per-file instruction weights (see g_rates); recomputes the
 * weights of the code objects already seen, keeping their classes (mark_ours). */
static PyObject *set_rates(PyObject *self, PyObject *arg) {
    if (arg != Py_None && !PyDict_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "set_rates() takes a dict {file below site-packages: weight} or None");
        return NULL;
    }
    Py_XDECREF(g_rates);
    g_rates = NULL;
    if (arg != Py_None && PyDict_Size(arg) > 0) {
        g_rates = PyDict_Copy(arg);
        if (g_rates == NULL) {
            return NULL;
        }
    }
    for (unsigned i = 0; i < CACHE_SIZE; ++i) {
        if (cache_key[i] != NULL) {
            cache_w[i] = weight_uncached((PyCodeObject *)cache_key[i]);
        }
    }
    tls.last_code = NULL;
    Py_RETURN_NONE;
}

/* by_code(on): count per code object from now on (diagnostics; slower). */
static PyObject *by_code(PyObject *self, PyObject *arg) {
    g_by_code = PyObject_IsTrue(arg);
    Py_RETURN_NONE;
}

/* [(file, first line, name, calls, opcodes)] of the code objects counted (by_code(1)). */
static PyObject *code_counts(PyObject *self, PyObject *noargs) {
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    for (unsigned i = 0; i < CACHE_SIZE; ++i) {
        if (cache_key[i] == NULL || (slot_calls[i] == 0 && slot_ops[i] == 0)) {
            continue;
        }
        PyCodeObject *code = (PyCodeObject *)cache_key[i];
#if PY_VERSION_HEX >= 0x030B0000
        PyObject *name = code->co_qualname;
#else
        PyObject *name = code->co_name;
#endif
        PyObject *row = Py_BuildValue("(OiOLL)", code->co_filename, code->co_firstlineno, name,
                                      slot_calls[i], slot_ops[i]);
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(row);
    }
    return out;
}

/* The clock read that charges a thread's pending Python, called by the native op recorder
 * before it stamps a record (runtime/dispatch/op_recorder.py set_charge). A RecordFunction may
 * start or end while an exception is being raised, on a thread that does not hold the GIL
 * (autograd's engine): the trampoline takes the GIL and keeps the error indicator as it was. */
static PyObject *g_charge_cb = NULL;

static void charge_trampoline(void) {
    if (g_charge_cb == NULL || !Py_IsInitialized()) {
        return;
    }
    if (tls.attached && tls.marked && tls.py_calls == tls.last_py && tls.c_calls == tls.last_c) {
        return;  /* nothing counted since the last charge: the callback would charge 0 */
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    /* the callback is the simulator's Python: run with the hook off, as pause() would (a
     * traced frame runs on CPython's slow tracing path; issue #18); switched with no error set */
    pause_here();
    PyObject *r = PyObject_CallNoArgs(g_charge_cb);
    if (r == NULL) {
        PyErr_WriteUnraisable(g_charge_cb);
    } else {
        Py_DECREF(r);
    }
    resume_here();
    PyErr_Restore(et, ev, tb);
    PyGILState_Release(gil);
}

/* set_charge(callable or None) -> the address of the C function that calls it. */
static PyObject *set_charge(PyObject *self, PyObject *cb) {
    (void)self;
    PyObject *old = g_charge_cb;
    if (cb == Py_None) {
        g_charge_cb = NULL;
    } else {
        Py_INCREF(cb);
        g_charge_cb = cb;
    }
    Py_XDECREF(old);
    return PyLong_FromVoidPtr((void *)charge_trampoline);
}

/* The capture mode's entry from C++ (runtime/dispatch/capture.py): torch calls the mode's
 * `__torch_dispatch__`, which the mode sets on itself to types.MethodType(dispatch_entry,
 * mode) (torch requires a method bound to the mode). Two things happen here without a Python
 * frame (issue #18):
 *  - prim::device, which C++ asks of fake tensors more often than all ops together (~4,800
 *    times per GPT-2 step, from autograd's checks), is answered from the tensor's instance
 *    dict: its fake device, when it belongs to the configured FakeTensorMode and that mode is
 *    not inside a kernel invocation (FakeTensor.device's own rule);
 *  - everything else runs the mode's Python method with the hook paused: a frame of the
 *    simulator's entered while the hook is on runs on CPython's slow tracing path until it
 *    pauses.
 * set_dispatch(impl, prim_device, fake_mode, device_key) configures it: `impl` the Python
 * method's function, called as impl(mode, func, types, args, kwargs); a fake_mode or
 * device_key of None leaves prim::device to it too. */
static PyObject *g_prim_device = NULL;
static PyObject *g_fake_mode = NULL;
static PyObject *g_device_key = NULL;
static PyObject *str_fake_mode = NULL;
static PyObject *str_in_kernel = NULL;
static PyObject *str_dict = NULL;

static PyObject *g_dispatch_impl = NULL;

static PyObject *set_dispatch(PyObject *self, PyObject *args) {
    PyObject *impl, *prim, *mode, *key;
    if (!PyArg_ParseTuple(args, "OOOO", &impl, &prim, &mode, &key)) {
        return NULL;
    }
    Py_XSETREF(g_dispatch_impl, Py_NewRef(impl));
    Py_XSETREF(g_prim_device, prim == Py_None ? NULL : Py_NewRef(prim));
    Py_XSETREF(g_fake_mode, mode == Py_None ? NULL : Py_NewRef(mode));
    Py_XSETREF(g_device_key, key == Py_None ? NULL : Py_NewRef(key));
    Py_RETURN_NONE;
}

/* The fake device of `t` (a new reference), or NULL without an error when the fast answer
 * does not apply. */
static PyObject *fake_device_of(PyObject *t) {
    if (g_prim_device == NULL || g_fake_mode == NULL || g_device_key == NULL) {
        return NULL;
    }
    PyObject *d = PyObject_GetAttr(t, str_dict);
    if (d == NULL || !PyDict_Check(d)) {
        PyErr_Clear();
        Py_XDECREF(d);
        return NULL;
    }
    PyObject *dev = NULL;
    if (PyDict_GetItemWithError(d, str_fake_mode) == g_fake_mode) {
        PyObject *in_kernel = PyObject_GetAttr(g_fake_mode, str_in_kernel);
        if (in_kernel != NULL && in_kernel == Py_False) {
            dev = PyDict_GetItemWithError(d, g_device_key);
            if (dev == Py_None) {
                dev = NULL;
            }
            Py_XINCREF(dev);
        }
        Py_XDECREF(in_kernel);
    }
    PyErr_Clear();
    Py_DECREF(d);
    return dev;
}

static PyObject *dispatch_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
    (void)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || g_dispatch_impl == NULL) {
        PyErr_SetString(PyExc_TypeError, "dispatch_entry(mode, func, types, args, kwargs) before set_dispatch()");
        return NULL;
    }
    if (kwnames == NULL && nargs >= 4 && args[1] == g_prim_device && PyTuple_Check(args[3]) &&
        PyTuple_GET_SIZE(args[3]) == 1) {
        PyObject *dev = fake_device_of(PyTuple_GET_ITEM(args[3], 0));
        if (dev != NULL) {
            return dev;
        }
    }
    pause_here();
    PyObject *r = PyObject_Vectorcall(g_dispatch_impl, args, nargs, kwnames);
    resume_here();
    return r;
}

/* paused_call(fn, *args, **kwargs): fn(*args, **kwargs) with the hook paused, entered from C.
 * types.MethodType(paused_call, fn) is a callable to hand to code that calls the simulator's
 * (or torch's mode-only) Python from C++ while the hook is on: no Python frame of the
 * wrapper, and fn's frames off the slow tracing path (issue #18). */
static PyObject *paused_call(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
    (void)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "paused_call(fn, *args, **kwargs)");
        return NULL;
    }
    pause_here();
    PyObject *r = PyObject_Vectorcall(args[0], args + 1, nargs - 1, kwnames);
    resume_here();
    return r;
}

/* rule_lookup(state, op, cls): torch's find_torch_dispatch_rule(op, cls) without its Python.
 * C++ asks it before every call into a Python dispatch mode (~6,000 times per GPT-2 step,
 * prim::device queries included). `state` is (rules_of, cache, fallback): rules_of(op) returns the live
 * dict of rules torch's registry keeps for `op` (class -> rule), remembered in `cache` per op;
 * the answer is that dict's entry for `cls` (None when absent), so a rule registered later is
 * seen. The cache is keyed by the op's address, its entry holding the op itself (so the
 * address cannot be reused while the entry lives): OpOverload's __hash__ is Python, which a
 * dict keyed by the op would run at every lookup. Bound with types.MethodType(rule_lookup,
 * state) (runtime/host/pyhost.py). A call with keywords or another argument count goes to
 * `fallback` (torch's own function). */
static PyObject *rule_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
    (void)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 3 ||
        !PyDict_Check(PyTuple_GET_ITEM(args[0], 1))) {
        PyErr_SetString(PyExc_TypeError, "rule_lookup((rules_of, cache, fallback), op, cls)");
        return NULL;
    }
    if (kwnames != NULL || nargs != 3) {  /* another way of calling: torch's own function answers */
        pause_here();
        PyObject *r = PyObject_Vectorcall(PyTuple_GET_ITEM(args[0], 2), args + 1, nargs - 1, kwnames);
        resume_here();
        return r;
    }
    PyObject *rules_of = PyTuple_GET_ITEM(args[0], 0), *cache = PyTuple_GET_ITEM(args[0], 1);
    PyObject *op = args[1], *cls = args[2];
    PyObject *key = PyLong_FromVoidPtr(op);
    if (key == NULL) {
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(cache, key);  /* borrowed: (op, rules) */
    if (entry == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
        pause_here();
        PyObject *fresh = PyObject_CallOneArg(rules_of, op);
        resume_here();
        if (fresh == NULL || !PyDict_Check(fresh)) {
            if (fresh != NULL) {
                Py_DECREF(fresh);
                PyErr_SetString(PyExc_TypeError, "rule_lookup: rules_of(op) must return a dict");
            }
            Py_DECREF(key);
            return NULL;
        }
        PyObject *pair = PyTuple_Pack(2, op, fresh);
        Py_DECREF(fresh);
        if (pair == NULL || PyDict_SetItem(cache, key, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(pair);
        entry = PyDict_GetItemWithError(cache, key);
    }
    Py_DECREF(key);
    if (entry == NULL) {
        return NULL;
    }
    PyObject *rule = PyDict_GetItemWithError(PyTuple_GET_ITEM(entry, 1), cls);
    if (rule == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return Py_NewRef(rule);
}

static PyMethodDef methods[] = {
    {"set_dispatch", set_dispatch, METH_VARARGS, "set_dispatch(impl, prim_device, fake_mode, device_key): configure dispatch_entry"},
    {"dispatch_entry", (PyCFunction)(void (*)(void))dispatch_entry, METH_FASTCALL | METH_KEYWORDS,
     "dispatch_entry(mode, func, types, args, kwargs): a capture mode's entry (prim::device in C, the rest paused)"},
    {"rule_lookup", (PyCFunction)(void (*)(void))rule_lookup, METH_FASTCALL | METH_KEYWORDS,
     "rule_lookup((rules_of, cache, fallback), op, cls): torch's find_torch_dispatch_rule in C"},
    {"paused_call", (PyCFunction)(void (*)(void))paused_call, METH_FASTCALL | METH_KEYWORDS,
     "paused_call(fn, *args, **kwargs): fn's result, run with the hook paused"},
    {"set_charge", set_charge, METH_O, "set_charge(fn): address of a C function that calls fn (error state kept)"},
    {"set_rates", set_rates, METH_O, "set_rates({file below site-packages: weight, 1024 = one instruction} or None)"},
    {"by_code", by_code, METH_O, "by_code(on): also count per code object (diagnostics)"},
    {"code_counts", code_counts, METH_NOARGS, "[(file, line, qualname, calls, opcodes)] counted by code object"},
    {"configure", configure, METH_VARARGS, "configure(prefix, exempt_files): what counts as the simulator's code"},
    {"mark_ours", mark_ours, METH_O, "mark_ours(code): count a code object as the simulator's"},
    {"attach", attach, METH_NOARGS, "start counting on this thread"},
    {"detach", detach, METH_NOARGS, "stop counting on this thread"},
    {"counts", counts, METH_NOARGS, "(python calls, bytecode instructions, attached) of this thread"},
    {"take", take, METH_NOARGS, "(calls, instructions) since the last take() on this thread, or None; marks them"},
    {"pause", pause_hook, METH_NOARGS, "switch the hook off on this thread (nested)"},
    {"user_begin", user_begin, METH_NOARGS, "count the program's code called from a wrapper of ours"},
    {"user_end", user_end, METH_O, "back to the wrapper (user_begin's value)"},
    {"resume", resume_hook, METH_NOARGS, "switch it back on after the outermost pause"},
    {"reset", reset, METH_NOARGS, "zero this thread's counts"},
    {"pending", pending, METH_NOARGS, "None if this thread is not counting, 0 if nothing since the last take(), else take()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "phantora_pyhost", NULL, -1, methods};

PyMODINIT_FUNC PyInit_phantora_pyhost(void) {
    str_trace_opcodes = PyUnicode_InternFromString("f_trace_opcodes");
    str_trace_lines = PyUnicode_InternFromString("f_trace_lines");
    str_fake_mode = PyUnicode_InternFromString("fake_mode");
    str_in_kernel = PyUnicode_InternFromString("in_kernel_invocation");
    str_dict = PyUnicode_InternFromString("__dict__");
    if (str_trace_opcodes == NULL || str_trace_lines == NULL || str_fake_mode == NULL || str_in_kernel == NULL ||
        str_dict == NULL) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "WEIGHT_ONE", WEIGHT_ONE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
