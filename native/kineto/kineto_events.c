/* The event part of tracing/kineto.py's writer, in C: `render_events` renders and sorts the
 * X / flow / instant events of a RankTrace exactly as `_render_events_py` does (the same bytes,
 * tests/test_kineto_native.py compares them), ~3x faster over a whole file's text. A traced
 * GPT-2 step has ~7,500 spans and ~1,400 flows; in Python their text was ~4 us per event, the
 * largest part of the Kineto file's writing (issue #18).
 *
 * Built on first use with the C compiler, like native/perfetto/perfetto_events.c
 * (phantora_prof/c_extensions.py); the Python renderer stays the reference and the fallback
 * (any exception here: the caller renders in Python, which raises its own error if there is one).
 *
 * render_events(spans, flows, instants, host_pid, shift, names, dumps)
 *   -> (events: bytes, used_streams: set, used_threads: set, min_ns, max_ns)
 * `names` caches a name's JSON (str -> bytes, from `dumps`); `dumps(value)` is the writer's
 * orjson.dumps (bytes). min_ns / max_ns: the spans' extent (None without spans).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ growable byte buffer */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->n + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + extra) cap *= 2;
    char *p = PyMem_RawRealloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

#define PUT_LIT(b, lit) put((b), (lit), (Py_ssize_t)(sizeof(lit) - 1))

/* a decimal integer, as Python's str(int) */
static int put_int(Buf *b, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + (u % 10));
        u /= 10;
    } while (u);
    if (v < 0) tmp[n++] = '-';
    if (buf_reserve(b, n) < 0) return -1;
    for (int i = n - 1; i >= 0; i--) b->p[b->n++] = tmp[i];
    return 0;
}

/* integer ns (>= 0) as microseconds with three decimals: f"{q}.{r:03d}" of divmod(ns, 1000) */
static int put_us(Buf *b, int64_t ns) {
    int64_t q = ns / 1000, r = ns % 1000;
    if (r < 0) { /* Python's divmod floors */
        r += 1000;
        q -= 1;
    }
    if (put_int(b, q) < 0) return -1;
    if (buf_reserve(b, 4) < 0) return -1;
    b->p[b->n++] = '.';
    b->p[b->n++] = (char)('0' + r / 100);
    b->p[b->n++] = (char)('0' + (r / 10) % 10);
    b->p[b->n++] = (char)('0' + r % 10);
    return 0;
}

/* a str as the f-string puts it (UTF-8; a str that cannot be encoded fails, as .encode() does) */
static int put_str(Buf *b, PyObject *s) {
    if (!PyUnicode_CheckExact(s)) {
        PyErr_SetString(PyExc_TypeError, "kineto_events: expected a str");
        return -1;
    }
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) return -1;
    return put(b, u, n);
}

static int put_bytes(Buf *b, PyObject *o) {
    if (!PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "kineto_events: dumps must return bytes");
        return -1;
    }
    return put(b, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o));
}

/* ------------------------------------------------------------------ Python value helpers */

static PyObject *s_cat, *s_name, *s_tid, *s_ts_ns, *s_dur_ns, *s_args, *s_on_gpu, *s_device, *s_id, *s_start,
    *s_end, *s_scope, *s_gpu_user_annotation;

/* an exact int attribute (a bool or a float would print differently: refused) */
static int attr_i64(PyObject *o, PyObject *name, int64_t *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    if (!PyLong_CheckExact(v)) {
        Py_DECREF(v);
        PyErr_SetString(PyExc_TypeError, "kineto_events: expected an int");
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)x;
    return 0;
}

static int attr_truth(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* the JSON of a name, cached in `names` */
static int put_qname(Buf *b, PyObject *names, PyObject *dumps, PyObject *name) {
    PyObject *q = PyDict_GetItemWithError(names, name); /* borrowed */
    if (q == NULL) {
        if (PyErr_Occurred()) return -1;
        q = PyObject_CallOneArg(dumps, name);
        if (q == NULL) return -1;
        if (PyDict_SetItem(names, name, q) < 0) {
            Py_DECREF(q);
            return -1;
        }
        int r = put_bytes(b, q);
        Py_DECREF(q);
        return r;
    }
    return put_bytes(b, q);
}

/* `_args_field(args)`: nothing for empty args, else the JSON object's members on their own lines */
static int put_args(Buf *b, PyObject *dumps, PyObject *args) {
    int t = PyObject_IsTrue(args);
    if (t <= 0) return t;
    PyObject *body = PyObject_CallOneArg(dumps, args);
    if (body == NULL) return -1;
    if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) < 2) {
        Py_DECREF(body);
        PyErr_SetString(PyExc_TypeError, "kineto_events: dumps must return a JSON object");
        return -1;
    }
    int r = PUT_LIT(b, ",\n    \"args\": {\n      ");
    if (r == 0) r = put(b, PyBytes_AS_STRING(body) + 1, PyBytes_GET_SIZE(body) - 2);
    if (r == 0) r = PUT_LIT(b, "\n    }");
    Py_DECREF(body);
    return r;
}

static int add_pair(PyObject *set, int64_t a, int64_t c) {
    PyObject *t = Py_BuildValue("(LL)", (long long)a, (long long)c);
    if (t == NULL) return -1;
    int r = PySet_Add(set, t);
    Py_DECREF(t);
    return r;
}

static int add_int(PyObject *set, int64_t a) {
    PyObject *v = PyLong_FromLongLong((long long)a);
    if (v == NULL) return -1;
    int r = PySet_Add(set, v);
    Py_DECREF(v);
    return r;
}

/* ------------------------------------------------------------------ entries and their order */

typedef struct {
    int64_t ts;
    int64_t kind;
    int64_t order;
    int64_t seq;
    Py_ssize_t off, len; /* the text in the arena */
} Entry;

typedef struct {
    Entry *a;
    Py_ssize_t n, cap;
} Entries;

static int entries_add(Entries *e, int64_t ts, int64_t kind, int64_t order, int64_t seq, Py_ssize_t off,
                       Py_ssize_t len) {
    if (e->n == e->cap) {
        Py_ssize_t cap = e->cap ? e->cap * 2 : 4096;
        Entry *a = PyMem_RawRealloc(e->a, (size_t)cap * sizeof(Entry));
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        e->a = a;
        e->cap = cap;
    }
    Entry *x = &e->a[e->n++];
    x->ts = ts;
    x->kind = kind;
    x->order = order;
    x->seq = seq;
    x->off = off;
    x->len = len;
    return 0;
}

/* (ts, kind, order, seq): unique, so the sort needs no stability */
static int entry_cmp(const void *pa, const void *pb) {
    const Entry *a = pa, *b = pb;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    if (a->order != b->order) return a->order < b->order ? -1 : 1;
    if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------ the renderer */

static PyObject *render_events(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 7) {
        PyErr_SetString(PyExc_TypeError, "render_events takes 7 arguments");
        return NULL;
    }
    PyObject *spans = argv[0], *flows = argv[1], *instants = argv[2];
    long long host_pid_ll = PyLong_AsLongLong(argv[3]);
    if (host_pid_ll == -1 && PyErr_Occurred()) return NULL;
    long long shift_ll = PyLong_AsLongLong(argv[4]);
    if (shift_ll == -1 && PyErr_Occurred()) return NULL;
    PyObject *names = argv[5], *dumps = argv[6];
    if (!PyList_Check(spans) || !PyList_Check(flows) || !PyList_Check(instants) || !PyDict_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "render_events: spans, flows, instants must be lists, names a dict");
        return NULL;
    }
    const int64_t host_pid = (int64_t)host_pid_ll, shift = (int64_t)shift_ll;

    Buf arena = {0};
    Entries ent = {0};
    PyObject *used_streams = PySet_New(NULL), *used_threads = PySet_New(NULL);
    PyObject *result = NULL;
    int have_extent = 0;
    int64_t min_ns = 0, max_ns = 0;
    if (used_streams == NULL || used_threads == NULL) goto fail;

    /* ---- spans: kind 0, order -dur */
    for (Py_ssize_t seq = 0; seq < PyList_GET_SIZE(spans); seq++) {
        PyObject *s = PyList_GET_ITEM(spans, seq);
        int64_t ts, dur, tid, pid;
        if (attr_i64(s, s_ts_ns, &ts) < 0 || attr_i64(s, s_dur_ns, &dur) < 0 || attr_i64(s, s_tid, &tid) < 0)
            goto fail;
        if (dur < 0) dur = 0;
        int on_gpu = attr_truth(s, s_on_gpu);
        if (on_gpu < 0) goto fail;
        PyObject *cat = PyObject_GetAttr(s, s_cat);
        if (cat == NULL) goto fail;
        if (on_gpu) {
            if (attr_i64(s, s_device, &pid) < 0 || add_pair(used_streams, pid, tid) < 0) {
                Py_DECREF(cat);
                goto fail;
            }
            int is_ann = PyUnicode_Check(cat) ? PyUnicode_Compare(cat, s_gpu_user_annotation) == 0 : 0;
            if (is_ann) { /* kineto: 1 ns earlier, 2 ns longer */
                ts -= 1;
                dur += 2;
            }
        } else {
            pid = host_pid;
            if (add_int(used_threads, tid) < 0) {
                Py_DECREF(cat);
                goto fail;
            }
        }
        if (!have_extent || ts < min_ns) min_ns = ts;
        if (!have_extent || ts + dur > max_ns) max_ns = ts + dur;
        have_extent = 1;
        int64_t rel = ts + shift;
        if (rel < 0) rel = 0;
        Py_ssize_t off = arena.n;
        int r = PUT_LIT(&arena, "\n  {\n    \"ph\": \"X\", \"cat\": \"");
        if (r == 0) r = put_str(&arena, cat);
        Py_DECREF(cat);
        if (r == 0) r = PUT_LIT(&arena, "\", \"name\": ");
        if (r < 0) goto fail;
        PyObject *name = PyObject_GetAttr(s, s_name);
        if (name == NULL) goto fail;
        r = put_qname(&arena, names, dumps, name);
        Py_DECREF(name);
        if (r < 0 || PUT_LIT(&arena, ", \"pid\": ") < 0 || put_int(&arena, pid) < 0 ||
            PUT_LIT(&arena, ", \"tid\": ") < 0 || put_int(&arena, tid) < 0 ||
            PUT_LIT(&arena, ",\n    \"ts\": ") < 0 || put_us(&arena, rel) < 0 || PUT_LIT(&arena, ", \"dur\": ") < 0 ||
            put_us(&arena, dur) < 0)
            goto fail;
        PyObject *args = PyObject_GetAttr(s, s_args);
        if (args == NULL) goto fail;
        r = put_args(&arena, dumps, args);
        Py_DECREF(args);
        if (r < 0 || PUT_LIT(&arena, "\n  },") < 0) goto fail;
        if (entries_add(&ent, ts, 0, -dur, seq, off, arena.n - off) < 0) goto fail;
    }

    /* ---- flows: kind 1, order 0 (start) / 1 (end) */
    for (Py_ssize_t seq = 0; seq < PyList_GET_SIZE(flows); seq++) {
        PyObject *f = PyList_GET_ITEM(flows, seq);
        int64_t fid;
        if (attr_i64(f, s_id, &fid) < 0) goto fail;
        PyObject *fcat = PyObject_GetAttr(f, s_cat);
        if (fcat == NULL) goto fail;
        for (int end = 0; end < 2; end++) {
            PyObject *pt = PyObject_GetAttr(f, end ? s_end : s_start);
            if (pt == NULL) {
                Py_DECREF(fcat);
                goto fail;
            }
            if (pt == Py_None) { /* another end of a flow started by an earlier Flow (CUDA graph nodes) */
                Py_DECREF(pt);
                continue;
            }
            int64_t ts, tid, pid;
            int on_gpu = attr_truth(pt, s_on_gpu);
            int bad = on_gpu < 0 || attr_i64(pt, s_ts_ns, &ts) < 0 || attr_i64(pt, s_tid, &tid) < 0;
            if (!bad) {
                if (on_gpu)
                    bad = attr_i64(pt, s_device, &pid) < 0 || add_pair(used_streams, pid, tid) < 0;
                else {
                    pid = host_pid;
                    bad = add_int(used_threads, tid) < 0;
                }
            }
            Py_DECREF(pt);
            if (bad) {
                Py_DECREF(fcat);
                goto fail;
            }
            int64_t rel = ts + shift;
            if (rel < 0) rel = 0;
            Py_ssize_t off = arena.n;
            if (PUT_LIT(&arena, "\n  {\n    \"ph\": \"") < 0 || put(&arena, end ? "f" : "s", 1) < 0 ||
                PUT_LIT(&arena, "\", \"id\": ") < 0 || put_int(&arena, fid) < 0 ||
                PUT_LIT(&arena, ", \"pid\": ") < 0 || put_int(&arena, pid) < 0 ||
                PUT_LIT(&arena, ", \"tid\": ") < 0 || put_int(&arena, tid) < 0 ||
                PUT_LIT(&arena, ", \"ts\": ") < 0 || put_us(&arena, rel) < 0 ||
                PUT_LIT(&arena, ",\n    \"cat\": \"") < 0 || put_str(&arena, fcat) < 0 ||
                PUT_LIT(&arena, "\", \"name\": \"") < 0 || put_str(&arena, fcat) < 0 || PUT_LIT(&arena, "\"") < 0 ||
                (end && PUT_LIT(&arena, ", \"bp\": \"e\"") < 0) || PUT_LIT(&arena, "\n  },") < 0 ||
                entries_add(&ent, ts, 1, end, seq, off, arena.n - off) < 0) {
                Py_DECREF(fcat);
                goto fail;
            }
        }
        Py_DECREF(fcat);
    }

    /* ---- instants: kind 2, order 0 */
    for (Py_ssize_t seq = 0; seq < PyList_GET_SIZE(instants); seq++) {
        PyObject *in = PyList_GET_ITEM(instants, seq);
        int64_t ts, tid;
        if (attr_i64(in, s_ts_ns, &ts) < 0 || attr_i64(in, s_tid, &tid) < 0 || add_int(used_threads, tid) < 0)
            goto fail;
        int64_t rel = ts + shift;
        if (rel < 0) rel = 0;
        Py_ssize_t off = arena.n;
        PyObject *cat = PyObject_GetAttr(in, s_cat);
        if (cat == NULL) goto fail;
        int has_cat = PyObject_IsTrue(cat);
        int r = has_cat < 0 ? -1 : PUT_LIT(&arena, "\n  {\n    \"ph\": \"i\", ");
        if (r == 0 && has_cat) {
            r = PUT_LIT(&arena, "\"cat\": \"");
            if (r == 0) r = put_str(&arena, cat);
            if (r == 0) r = PUT_LIT(&arena, "\", ");
        }
        Py_DECREF(cat);
        if (r < 0 || PUT_LIT(&arena, "\"s\": \"") < 0) goto fail;
        PyObject *scope = PyObject_GetAttr(in, s_scope);
        if (scope == NULL) goto fail;
        r = put_str(&arena, scope);
        Py_DECREF(scope);
        if (r < 0 || PUT_LIT(&arena, "\", \"name\": ") < 0) goto fail;
        PyObject *name = PyObject_GetAttr(in, s_name);
        if (name == NULL) goto fail;
        r = put_qname(&arena, names, dumps, name);
        Py_DECREF(name);
        if (r < 0 || PUT_LIT(&arena, ",\n    \"pid\": ") < 0 || put_int(&arena, host_pid) < 0 ||
            PUT_LIT(&arena, ", \"tid\": ") < 0 || put_int(&arena, tid) < 0 ||
            PUT_LIT(&arena, ",\n    \"ts\": ") < 0 || put_us(&arena, rel) < 0)
            goto fail;
        PyObject *args = PyObject_GetAttr(in, s_args);
        if (args == NULL) goto fail;
        r = put_args(&arena, dumps, args);
        Py_DECREF(args);
        if (r < 0 || PUT_LIT(&arena, "\n  },") < 0) goto fail;
        if (entries_add(&ent, ts, 2, 0, seq, off, arena.n - off) < 0) goto fail;
    }

    if (ent.n > 1) qsort(ent.a, (size_t)ent.n, sizeof(Entry), entry_cmp);
    PyObject *text = PyBytes_FromStringAndSize(NULL, arena.n);
    if (text == NULL) goto fail;
    char *dst = PyBytes_AS_STRING(text);
    for (Py_ssize_t i = 0; i < ent.n; i++) {
        memcpy(dst, arena.p + ent.a[i].off, (size_t)ent.a[i].len);
        dst += ent.a[i].len;
    }
    if (have_extent)
        result = Py_BuildValue("(NOOLL)", text, used_streams, used_threads, (long long)min_ns, (long long)max_ns);
    else
        result = Py_BuildValue("(NOOOO)", text, used_streams, used_threads, Py_None, Py_None);
fail:
    Py_XDECREF(used_streams);
    Py_XDECREF(used_threads);
    PyMem_RawFree(arena.p);
    PyMem_RawFree(ent.a);
    return result;
}

static PyMethodDef methods[] = {
    {"render_events", (PyCFunction)(void (*)(void))render_events, METH_FASTCALL,
     "The sorted X / flow / instant events of a Kineto trace (tracing.kineto._render_events_py's text)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "phantora_kineto", NULL, -1, methods};

PyMODINIT_FUNC PyInit_phantora_kineto(void) {
    /* the attribute names read per span, interned once */
    static const struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&s_cat, "cat"},     {&s_name, "name"},     {&s_tid, "tid"},     {&s_ts_ns, "ts_ns"},
                 {&s_dur_ns, "dur_ns"}, {&s_args, "args"},   {&s_on_gpu, "on_gpu"}, {&s_device, "device"},
                 {&s_id, "id"},       {&s_start, "start"},   {&s_end, "end"},     {&s_scope, "scope"},
                 {&s_gpu_user_annotation, "gpu_user_annotation"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
