/* The event loop of tracing/perfetto.py's writer, in C: `emit_events` writes byte for byte what
 * `_emit_events_py` writes (tests/test_perfetto.py compares them), ~10x faster. A traced run
 * encodes ~2 packets per span and ~6 annotations per span; in Python that loop was ~16 us per
 * span, most of a traced simulation's trace-writing time (issue #18).
 *
 * Built on first use with the C compiler, like native/pyhost/pyhost.c
 * (phantora_prof/c_extensions.py); the Python encoder stays the reference and the fallback.
 *
 * emit_events(items, spans, span_uuid, dur_of, flows_out, flows_in, instants, instant_uuid,
 *             instant_counters, samples, sample_uuids, abs_base, head_first, head_next, tables,
 *             ann_cache, annotation_entry, annotation_json, ann_cache_max, buf, chunk, flush)
 *   -> (packets, counter values, instants)
 * Arguments are those of `_emit_events_py`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ growable byte buffer */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->n + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

static int varint_len(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static int buf_varint(Buf *b, uint64_t v) {
    if (buf_reserve(b, 10) < 0) return -1;
    unsigned char *q = (unsigned char *)b->p + b->n;
    while (v >= 0x80) {
        *q++ = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *q++ = (unsigned char)v;
    b->n = (char *)q - b->p;
    return 0;
}

/* a varint field: tag (field << 3 | 0), value */
static int buf_vf(Buf *b, unsigned field, uint64_t v) {
    if (buf_varint(b, (uint64_t)field << 3) < 0) return -1;
    return buf_varint(b, v);
}

/* a length-delimited field: tag (field << 3 | 2), length, bytes */
static int buf_ld(Buf *b, unsigned field, const char *s, Py_ssize_t n) {
    if (buf_varint(b, ((uint64_t)field << 3) | 2) < 0) return -1;
    if (buf_varint(b, (uint64_t)n) < 0) return -1;
    return buf_put(b, s, n);
}

static int buf_fixed64(Buf *b, unsigned field, uint64_t v) {
    if (buf_varint(b, ((uint64_t)field << 3) | 1) < 0) return -1;
    if (buf_reserve(b, 8) < 0) return -1;
    for (int k = 0; k < 8; k++) b->p[b->n++] = (char)((v >> (8 * k)) & 0xFF);
    return 0;
}

static int buf_bytes_obj(Buf *b, PyObject *o) {
    if (!PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "perfetto_events: expected bytes");
        return -1;
    }
    return buf_put(b, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o));
}

/* ------------------------------------------------------------------ Python value helpers */

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)v;
    return 0;
}

/* the uint64 a Python int is varint-encoded as (negative: two's complement, as _varint does) */
static int as_varint_value(PyObject *o, uint64_t *out) {
    PyObject *n = PyNumber_Long(o); /* int(v) */
    if (n == NULL) return -1;
    unsigned long long v = PyLong_AsUnsignedLongLongMask(n);
    Py_DECREF(n);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* UTF-8 of a str, with surrogates passed through as _sf encodes them ("surrogatepass") */
static PyObject *utf8_of(PyObject *s, const char **p, Py_ssize_t *n) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "perfetto_events: a name must be a str, not %.100s", Py_TYPE(s)->tp_name);
        return NULL;
    }
    const char *u = PyUnicode_AsUTF8AndSize(s, n);
    if (u != NULL) {
        *p = u;
        Py_INCREF(s);
        return s;
    }
    PyErr_Clear();
    PyObject *enc = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (enc == NULL) return NULL;
    *p = PyBytes_AS_STRING(enc);
    *n = PyBytes_GET_SIZE(enc);
    return enc;
}

/* ------------------------------------------------------------------ the encoder's state */

typedef struct {
    int64_t end; /* compared first */
    int64_t neg_order;
    uint64_t uuid;
} PendingEnd;

typedef struct {
    PendingEnd *a;
    Py_ssize_t n, cap;
} Heap;

static int heap_less(const PendingEnd *x, const PendingEnd *y) {
    if (x->end != y->end) return x->end < y->end;
    return x->neg_order < y->neg_order;
}

static int heap_push(Heap *h, PendingEnd e) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? h->cap * 2 : 1024;
        PendingEnd *a = PyMem_Realloc(h->a, (size_t)cap * sizeof(PendingEnd));
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h->a = a;
        h->cap = cap;
    }
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!heap_less(&e, &h->a[parent])) break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = e;
    return 0;
}

static PendingEnd heap_pop(Heap *h) {
    PendingEnd top = h->a[0];
    PendingEnd last = h->a[--h->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && heap_less(&h->a[c + 1], &h->a[c])) c++;
        if (!heap_less(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0) h->a[i] = last;
    return top;
}

typedef struct {
    /* output: packets gathered here; `pending_out` mirrors len(buf) so that `flush()` is called
     * exactly where the Python encoder calls it */
    PyObject *buf, *flush;
    Py_ssize_t chunk, buf_len;
    Buf out;
    /* sequence */
    const char *head_first, *head_next;
    Py_ssize_t head_first_n, head_next_n;
    Py_ssize_t packets;
    int64_t abs_base;
    /* interning: global tables (categories, event names, annotation names), this sequence's */
    PyObject *tables[3];
    PyObject *seq_cat, *seq_name, *seq_ann;
    PyObject *ann_cache, *annotation_entry, *annotation_json;
    Py_ssize_t ann_cache_max;
    /* scratch */
    Buf te, interned, entry;
} Enc;

static int enc_push_out(Enc *e) {
    /* move the gathered packets into `buf` (len(buf) == buf_len afterwards) */
    if (e->out.n == 0) return 0;
    Py_ssize_t old = PyByteArray_GET_SIZE(e->buf);
    if (PyByteArray_Resize(e->buf, old + e->out.n) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(e->buf) + old, e->out.p, (size_t)e->out.n);
    e->out.n = 0;
    return 0;
}

static int enc_emit(Enc *e, int64_t ts_abs, const Buf *te, const Buf *interned) {
    const char *head = e->packets == 0 ? e->head_first : e->head_next;
    Py_ssize_t head_n = e->packets == 0 ? e->head_first_n : e->head_next_n;
    e->packets++;
    uint64_t ts = ts_abs > 0 ? (uint64_t)ts_abs : 0;
    Py_ssize_t body = 1 + varint_len(ts) + head_n + 1 + varint_len((uint64_t)te->n) + te->n;
    if (interned != NULL && interned->n) body += 1 + varint_len((uint64_t)interned->n) + interned->n;
    Buf *o = &e->out;
    Py_ssize_t before = o->n;
    if (buf_reserve(o, 1 + 10 + body) < 0) return -1;
    o->p[o->n++] = 0x0A; /* Trace.packet */
    if (buf_varint(o, (uint64_t)body) < 0) return -1;
    o->p[o->n++] = 0x40; /* TracePacket.timestamp */
    if (buf_varint(o, ts) < 0) return -1;
    if (buf_put(o, head, head_n) < 0) return -1;
    if (interned != NULL && interned->n && buf_ld(o, 12, interned->p, interned->n) < 0) return -1;
    if (buf_ld(o, 11, te->p, te->n) < 0) return -1;
    e->buf_len += o->n - before;
    if (e->buf_len >= e->chunk) {
        if (enc_push_out(e) < 0) return -1;
        PyObject *r = PyObject_CallNoArgs(e->flush);
        if (r == NULL) return -1;
        Py_DECREF(r);
        e->buf_len = PyByteArray_GET_SIZE(e->buf);
    }
    return 0;
}

static int enc_end(Enc *e, int64_t ts_abs, uint64_t uuid) {
    Buf *te = &e->te;
    te->n = 0;
    if (buf_vf(te, 9, 2) < 0 || buf_vf(te, 11, uuid) < 0) return -1; /* TYPE_SLICE_END, track */
    return enc_emit(e, ts_abs, te, NULL);
}

/* iid of `name` in global table `kind`, added to this event's interned data (first use on
 * this sequence) and remembered in the sequence's `seq` dict */
static int64_t enc_intern(Enc *e, int kind, PyObject *seq, PyObject *name) {
    PyObject *iid = PyDict_GetItemWithError(seq, name);
    if (iid != NULL) return PyLong_AsLongLong(iid);
    if (PyErr_Occurred()) return -1;
    PyObject *table = e->tables[kind];
    iid = PyDict_GetItemWithError(table, name);
    if (iid == NULL) {
        if (PyErr_Occurred()) return -1;
        PyObject *n = PyLong_FromSsize_t(PyDict_GET_SIZE(table) + 1);
        if (n == NULL) return -1;
        int rc = PyDict_SetItem(table, name, n);
        Py_DECREF(n);
        if (rc < 0) return -1;
        iid = PyDict_GetItemWithError(table, name);
        if (iid == NULL) return -1;
    }
    int64_t v = PyLong_AsLongLong(iid);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (PyDict_SetItem(seq, name, iid) < 0) return -1;
    /* InternedData.{event_categories, event_names, debug_annotation_names}: {iid, name} */
    const char *s;
    Py_ssize_t n;
    PyObject *keep = utf8_of(name, &s, &n);
    if (keep == NULL) return -1;
    Buf *en = &e->entry;
    en->n = 0;
    int rc = buf_vf(en, 1, (uint64_t)v) < 0 || buf_ld(en, 2, s, n) < 0 ? -1 : 0;
    Py_DECREF(keep);
    if (rc < 0 || buf_ld(&e->interned, (unsigned)kind + 1, en->p, en->n) < 0) return -1;
    return v;
}

static int enc_cat_name(Enc *e, PyObject *cat, PyObject *name) {
    int64_t c = enc_intern(e, 0, e->seq_cat, cat);
    if (c < 0) return -1;
    if (buf_vf(&e->te, 3, (uint64_t)c) < 0) return -1; /* category_iids */
    int64_t n = enc_intern(e, 1, e->seq_name, name);
    if (n < 0) return -1;
    return buf_vf(&e->te, 10, (uint64_t)n); /* name_iid */
}

static int enc_annotations(Enc *e, PyObject *args) {
    if (!PyDict_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "perfetto_events: args must be a dict");
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *v;
    while (PyDict_Next(args, &pos, &name, &v)) {
        int64_t n_iid = enc_intern(e, 2, e->seq_ann, name);
        if (n_iid < 0) return -1;
        if (PyLong_CheckExact(v)) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred()) return -1;
            if (!overflow && x >= 0) {
                /* DebugAnnotation{name_iid = 1, int_value = 4}, not cached */
                Py_ssize_t len = 1 + varint_len((uint64_t)n_iid) + 1 + varint_len((uint64_t)x);
                Buf *te = &e->te;
                if (buf_varint(te, (4 << 3) | 2) < 0 || buf_varint(te, (uint64_t)len) < 0
                    || buf_vf(te, 1, (uint64_t)n_iid) < 0 || buf_vf(te, 4, (uint64_t)x) < 0)
                    return -1;
                continue;
            }
        }
        PyObject *iid = PyLong_FromLongLong(n_iid);
        if (iid == NULL) return -1;
        PyObject *key;
        if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v)
            || PyUnicode_CheckExact(v))
            key = PyTuple_Pack(3, iid, (PyObject *)Py_TYPE(v), v);
        else {
            PyObject *json = PyObject_CallOneArg(e->annotation_json, v);
            key = json == NULL ? NULL : PyTuple_Pack(2, iid, json);
            Py_XDECREF(json);
        }
        if (key == NULL) {
            Py_DECREF(iid);
            return -1;
        }
        PyObject *b = PyDict_GetItemWithError(e->ann_cache, key);
        if (b != NULL) {
            Py_INCREF(b);
        } else if (PyErr_Occurred()) {
            Py_DECREF(iid);
            Py_DECREF(key);
            return -1;
        } else {
            if (PyDict_GET_SIZE(e->ann_cache) >= e->ann_cache_max) PyDict_Clear(e->ann_cache);
            b = PyObject_CallFunctionObjArgs(e->annotation_entry, iid, v, NULL);
            if (b == NULL || PyDict_SetItem(e->ann_cache, key, b) < 0) {
                Py_XDECREF(b);
                Py_DECREF(iid);
                Py_DECREF(key);
                return -1;
            }
        }
        Py_DECREF(iid);
        Py_DECREF(key);
        int rc = buf_bytes_obj(&e->te, b);
        Py_DECREF(b);
        if (rc < 0) return -1;
    }
    return 0;
}

static int enc_flows(Enc *e, PyObject *flows, PyObject *index, unsigned field) {
    if (PyDict_GET_SIZE(flows) == 0) return 0;
    PyObject *ids = PyDict_GetItemWithError(flows, index);
    if (ids == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *seq = PySequence_Fast(ids, "perfetto_events: flow ids must be a list");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t fid;
        if (as_varint_value(PySequence_Fast_GET_ITEM(seq, k), &fid) < 0
            || buf_fixed64(&e->te, field, fid) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *attr(PyObject *o, PyObject *name) { return PyObject_GetAttr(o, name); }

static PyObject *s_cat, *s_name, *s_args;

/* the debug annotations of a span's or an instant's `args`, when it has any */
static int enc_args_of(Enc *e, PyObject *event) {
    PyObject *args = attr(event, s_args);
    if (args == NULL) return -1;
    int truth = PyObject_IsTrue(args);
    int rc = truth < 0 ? -1 : truth ? enc_annotations(e, args) : 0;
    Py_DECREF(args);
    return rc;
}

static int flush_ends(Enc *e, Heap *h, int64_t upto, int all) {
    while (h->n && (all || h->a[0].end <= upto)) {
        PendingEnd x = heap_pop(h);
        if (enc_end(e, e->abs_base + x.end, x.uuid) < 0) return -1;
    }
    return 0;
}

static PyObject *emit_events(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 22) {
        PyErr_Format(PyExc_TypeError, "emit_events takes 22 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *items = a[0], *spans = a[1], *span_uuid = a[2], *dur_of = a[3], *flows_out = a[4],
             *flows_in = a[5], *instants = a[6], *instant_uuid = a[7], *instant_counters = a[8],
             *samples = a[9], *sample_uuids = a[10];
    Enc e;
    memset(&e, 0, sizeof e);
    Heap heap = {0};
    Py_ssize_t counter_values = 0, n_instants = 0;
    PyObject *result = NULL;

    if (!PyList_Check(items) || !PyList_Check(spans) || !PyList_Check(span_uuid) || !PyList_Check(dur_of)
        || !PyDict_Check(flows_out) || !PyDict_Check(flows_in) || !PyList_Check(instants)
        || !PyList_Check(instant_uuid) || !PyDict_Check(instant_counters) || !PyList_Check(samples)
        || !PyDict_Check(sample_uuids) || !PyBytes_Check(a[12]) || !PyBytes_Check(a[13]) || !PyList_Check(a[14])
        || PyList_GET_SIZE(a[14]) != 3 || !PyDict_Check(a[15]) || !PyByteArray_Check(a[19])) {
        PyErr_SetString(PyExc_TypeError, "emit_events: arguments of the wrong type");
        return NULL;
    }
    if (as_i64(a[11], &e.abs_base) < 0) return NULL;
    e.head_first = PyBytes_AS_STRING(a[12]);
    e.head_first_n = PyBytes_GET_SIZE(a[12]);
    e.head_next = PyBytes_AS_STRING(a[13]);
    e.head_next_n = PyBytes_GET_SIZE(a[13]);
    for (int k = 0; k < 3; k++) {
        e.tables[k] = PyList_GET_ITEM(a[14], k);
        if (!PyDict_Check(e.tables[k])) {
            PyErr_SetString(PyExc_TypeError, "emit_events: tables must be dicts");
            return NULL;
        }
    }
    e.ann_cache = a[15];
    e.annotation_entry = a[16];
    e.annotation_json = a[17];
    e.ann_cache_max = PyLong_AsSsize_t(a[18]);
    if (e.ann_cache_max == -1 && PyErr_Occurred()) return NULL;
    e.buf = a[19];
    e.chunk = PyLong_AsSsize_t(a[20]);
    if (e.chunk == -1 && PyErr_Occurred()) return NULL;
    e.flush = a[21];
    e.buf_len = PyByteArray_GET_SIZE(e.buf);
    e.seq_cat = PyDict_New();
    e.seq_name = PyDict_New();
    e.seq_ann = PyDict_New();
    if (e.seq_cat == NULL || e.seq_name == NULL || e.seq_ann == NULL) goto done;

    Py_ssize_t n_items = PyList_GET_SIZE(items);
    for (Py_ssize_t order = 0; order < n_items; order++) {
        PyObject *it = PyList_GET_ITEM(items, order);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 4) {
            PyErr_SetString(PyExc_TypeError, "emit_events: items must be 4-tuples");
            goto done;
        }
        int64_t ts, kind, i;
        if (as_i64(PyTuple_GET_ITEM(it, 0), &ts) < 0 || as_i64(PyTuple_GET_ITEM(it, 1), &kind) < 0
            || as_i64(PyTuple_GET_ITEM(it, 3), &i) < 0)
            goto done;
        PyObject *index = PyTuple_GET_ITEM(it, 3);
        if (heap.n && heap.a[0].end <= ts && flush_ends(&e, &heap, ts, 0) < 0) goto done;
        e.te.n = 0;
        e.interned.n = 0;
        if (kind == 1) {
            if (i < 0 || i >= PyList_GET_SIZE(spans)) {
                PyErr_SetString(PyExc_IndexError, "emit_events: span index out of range");
                goto done;
            }
            PyObject *s = PyList_GET_ITEM(spans, i);
            uint64_t u;
            int64_t dur;
            if (as_varint_value(PyList_GET_ITEM(span_uuid, i), &u) < 0 || as_i64(PyList_GET_ITEM(dur_of, i), &dur) < 0)
                goto done;
            if (buf_vf(&e.te, 9, 1) < 0 || buf_vf(&e.te, 11, u) < 0) goto done; /* TYPE_SLICE_BEGIN, track */
            PyObject *cat = attr(s, s_cat), *name = cat ? attr(s, s_name) : NULL;
            int rc = name == NULL ? -1 : enc_cat_name(&e, cat, name);
            Py_XDECREF(cat);
            Py_XDECREF(name);
            if (rc < 0 || enc_args_of(&e, s) < 0 || enc_flows(&e, flows_out, index, 47) < 0
                || enc_flows(&e, flows_in, index, 48) < 0)
                goto done;
            if (enc_emit(&e, e.abs_base + ts, &e.te, &e.interned) < 0) goto done;
            if (dur == 0) {
                if (enc_end(&e, e.abs_base + ts, u) < 0) goto done;
            } else {
                PendingEnd pe = {ts + dur, -order, u};
                if (heap_push(&heap, pe) < 0) goto done;
            }
        } else if (kind == 3) {
            if (i < 0 || i >= PyList_GET_SIZE(samples)) {
                PyErr_SetString(PyExc_IndexError, "emit_events: sample index out of range");
                goto done;
            }
            PyObject *sample = PySequence_Fast(PyList_GET_ITEM(samples, i), "emit_events: a sample must be a tuple");
            if (sample == NULL) goto done;
            if (PySequence_Fast_GET_SIZE(sample) != 4) {
                Py_DECREF(sample);
                PyErr_SetString(PyExc_ValueError, "emit_events: a sample is (ts, device, allocated, reserved)");
                goto done;
            }
            PyObject *uuids = PyDict_GetItemWithError(sample_uuids, PySequence_Fast_GET_ITEM(sample, 1));
            if (uuids == NULL && PyErr_Occurred()) {
                Py_DECREF(sample);
                goto done;
            }
            for (int j = 0; uuids != NULL && j < 2; j++) {
                uint64_t u, v;
                e.te.n = 0;
                if (as_varint_value(PyTuple_GetItem(uuids, j), &u) < 0
                    || as_varint_value(PySequence_Fast_GET_ITEM(sample, 2 + j), &v) < 0
                    || buf_vf(&e.te, 9, 4) < 0 || buf_vf(&e.te, 11, u) < 0 || buf_vf(&e.te, 30, v) < 0
                    || enc_emit(&e, e.abs_base + ts, &e.te, NULL) < 0) {
                    Py_DECREF(sample);
                    goto done;
                }
                counter_values++;
            }
            Py_DECREF(sample);
        } else {
            if (i < 0 || i >= PyList_GET_SIZE(instants)) {
                PyErr_SetString(PyExc_IndexError, "emit_events: instant index out of range");
                goto done;
            }
            PyObject *ins = PyList_GET_ITEM(instants, i);
            uint64_t u;
            if (as_varint_value(PyList_GET_ITEM(instant_uuid, i), &u) < 0) goto done;
            if (buf_vf(&e.te, 9, 3) < 0 || buf_vf(&e.te, 11, u) < 0) goto done; /* TYPE_INSTANT, track */
            PyObject *cat = attr(ins, s_cat), *name = cat ? attr(ins, s_name) : NULL;
            int rc = -1;
            if (name != NULL) {
                int has_cat = PyObject_IsTrue(cat);
                if (has_cat > 0) {
                    rc = enc_cat_name(&e, cat, name);
                } else if (has_cat == 0) {
                    int64_t n = enc_intern(&e, 1, e.seq_name, name);
                    rc = n < 0 ? -1 : buf_vf(&e.te, 10, (uint64_t)n);
                }
            }
            Py_XDECREF(cat);
            Py_XDECREF(name);
            if (rc < 0 || enc_args_of(&e, ins) < 0 || enc_emit(&e, e.abs_base + ts, &e.te, &e.interned) < 0)
                goto done;
            n_instants++;
            PyObject *counters = PyDict_GetItemWithError(instant_counters, index);
            if (counters == NULL && PyErr_Occurred()) goto done;
            if (counters != NULL) {
                PyObject *seq = PySequence_Fast(counters, "emit_events: instant counters must be a list");
                if (seq == NULL) goto done;
                for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
                    e.te.n = 0;
                    if (buf_bytes_obj(&e.te, PySequence_Fast_GET_ITEM(seq, k)) < 0
                        || enc_emit(&e, e.abs_base + ts, &e.te, NULL) < 0) {
                        Py_DECREF(seq);
                        goto done;
                    }
                    counter_values++;
                }
                Py_DECREF(seq);
            }
        }
    }
    if (flush_ends(&e, &heap, 0, 1) < 0 || enc_push_out(&e) < 0) goto done;
    result = Py_BuildValue("(nnn)", e.packets, counter_values, n_instants);
done:
    if (result == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "emit_events failed");
    PyMem_Free(e.out.p);
    PyMem_Free(e.te.p);
    PyMem_Free(e.interned.p);
    PyMem_Free(e.entry.p);
    PyMem_Free(heap.a);
    Py_XDECREF(e.seq_cat);
    Py_XDECREF(e.seq_name);
    Py_XDECREF(e.seq_ann);
    return result;
}

static PyMethodDef methods[] = {
    {"emit_events", (PyCFunction)(void (*)(void))emit_events, METH_FASTCALL,
     "Every TrackEvent packet of one rank's sequence (tracing.perfetto._emit_events_py's bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "phantora_perfetto", NULL, -1, methods};

PyMODINIT_FUNC PyInit_phantora_perfetto(void) {
    s_cat = PyUnicode_InternFromString("cat");
    s_name = PyUnicode_InternFromString("name");
    s_args = PyUnicode_InternFromString("args");
    if (s_cat == NULL || s_name == NULL || s_args == NULL) return NULL;
    return PyModule_Create(&module);
}
