/* The probes' hot paths in C: AuditedProducer.produce() (HotProduce, with its SeqLock) and
 * AuditedConsumer.mark_processed() (RangeMarker), and the poll() of an audited consumer whose probe
 * stores the offsets (HandedPositions).
 *
 * HotProduce, the AuditedProducer's produce() hot path: the same steps as the pure-Python closure
 * in auditor/probes/producer.py (_make_produce), without the interpreter's cost per step.
 *
 * produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,
 *         headers=None, *, callback=None)
 *
 * With headers, a per-call callback or a key function the call goes to the Python slow path
 * unchanged. Otherwise, under the producer's sequence lock (the same threading.Lock the
 * Python side takes): look the topic's stream up (or create it through new_topic), pack the
 * 33-byte contract-v2 `audit` header (version 2, session id, seq, produce time in ms, all
 * big-endian), call the wrapped confluent_kafka produce with it, and only when that
 * succeeds advance stream.next_seq, append the key to stream.keys, and append
 * (seq, ts_ms) to stream.stamps when the millisecond changed. Built by
 * auditor/probes/build_native.py; auditor/probes/producer.py falls back to the Python
 * closure when the module is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <structmember.h>

#define HEADER_SIZE 33
#define N_PARAMS 8

static PyObject *s_next_seq, *s_keys, *s_stamps, *s_last_ms;
static const char *param_names[N_PARAMS] = {"topic",     "value",   "key",      "partition",
                                           "on_delivery", "timestamp", "headers", "callback"};
static PyObject *param_strs[N_PARAMS];
static PyObject *minus_one, *zero;

/* --- SeqLock: the producer's sequence lock, shareable with Python -----------------------
 * A non-reentrant lock like threading.Lock (acquire(blocking=True, timeout=-1), release(),
 * a context manager, locked()), whose raw lock HotProduce takes without a method call. */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    int held;
} SeqLock;

static PyTypeObject SeqLockType;

static int seqlock_take(SeqLock *self, PY_TIMEOUT_T timeout_us) {
    /* 1 taken, 0 timed out; the GIL is released only when the lock is contended. */
    PyLockStatus status = PyThread_acquire_lock_timed(self->lock, 0, 0);
    if (status != PY_LOCK_ACQUIRED && timeout_us != 0) {
        Py_BEGIN_ALLOW_THREADS
        status = PyThread_acquire_lock_timed(self->lock, timeout_us, 0);
        Py_END_ALLOW_THREADS
    }
    if (status != PY_LOCK_ACQUIRED) return 0;
    self->held = 1;
    return 1;
}

static int seqlock_give(SeqLock *self) {
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return -1;
    }
    self->held = 0;
    PyThread_release_lock(self->lock);
    return 0;
}

static PyObject *seqlock_acquire(SeqLock *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pd:acquire", kwlist, &blocking, &timeout)) return NULL;
    PY_TIMEOUT_T timeout_us = -1;
    if (!blocking) {
        if (timeout != -1) {
            PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
            return NULL;
        }
        timeout_us = 0;
    } else if (timeout >= 0) {
        timeout_us = (PY_TIMEOUT_T)(timeout * 1e6);
    } else if (timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    return PyBool_FromLong(seqlock_take(self, timeout_us));
}

static PyObject *seqlock_enter(SeqLock *self, PyObject *Py_UNUSED(ignored)) {
    seqlock_take(self, -1);
    Py_RETURN_TRUE;
}

static PyObject *seqlock_release(SeqLock *self, PyObject *Py_UNUSED(ignored)) {
    if (seqlock_give(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *seqlock_exit(SeqLock *self, PyObject *const *args, Py_ssize_t nargs) {
    if (seqlock_give(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *seqlock_locked(SeqLock *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->held);
}

static PyObject *seqlock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "SeqLock() takes no arguments");
        return NULL;
    }
    SeqLock *self = (SeqLock *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void seqlock_dealloc(SeqLock *self) {
    if (self->lock != NULL) {
        if (self->held) PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef seqlock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))seqlock_acquire, METH_VARARGS | METH_KEYWORDS, NULL},
    {"release", (PyCFunction)seqlock_release, METH_NOARGS, NULL},
    {"locked", (PyCFunction)seqlock_locked, METH_NOARGS, NULL},
    {"__enter__", (PyCFunction)seqlock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))seqlock_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SeqLockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "auditor.probes._hotpath.SeqLock",
    .tp_basicsize = sizeof(SeqLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The AuditedProducer's sequence lock (a threading.Lock that C code takes directly).",
    .tp_new = seqlock_new,
    .tp_dealloc = (destructor)seqlock_dealloc,
    .tp_methods = seqlock_methods,
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *streams;   /* dict: topic -> _TopicStream */
    PyObject *new_topic; /* callable(topic) -> _TopicStream, called under the lock */
    PyObject *inner;     /* the wrapped Producer.produce */
    PyObject *slow;      /* callable(topic, value, key, partition, callback, timestamp, headers) */
    SeqLock *lock;       /* the producer's sequence lock, taken directly */
    PyObject *name;      /* "audit" */
    int has_key_fn;
    unsigned char session[16];
    PyTypeObject *stream_type; /* _TopicStream: its slots are read at their offsets */
    Py_ssize_t off_next_seq, off_keys, off_stamps, off_last_ms;
    /* The headers list of the previous call, [("audit", value)], refilled in place when
     * nothing else kept it or its tuple (the client copies headers into its own message):
     * no container is allocated per record, so records do not drive the cyclic GC. */
    PyObject *headers;
    /* last_ms as read the previous time (a held reference) and its value: the epoch ms do
     * not fit one int digit, so converting them costs more than an identity check. */
    PyObject *last_ms_obj;
    long long last_ms_value;
} HotProduce;

/* A field of a stream (new reference): read at its slot's offset when the stream is exactly
 * stream_type (what the member descriptor does, without the attribute lookup), else the
 * generic way. */
static PyObject *get_field(HotProduce *self, PyObject *stream, Py_ssize_t off, PyObject *name) {
    if (Py_TYPE(stream) == self->stream_type) {
        PyObject *v = *(PyObject **)((char *)stream + off);
        if (v == NULL) {
            PyErr_SetObject(PyExc_AttributeError, name);
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_GetAttr(stream, name);
}

static int set_field(HotProduce *self, PyObject *stream, Py_ssize_t off, PyObject *name, PyObject *value) {
    if (Py_TYPE(stream) == self->stream_type) {
        PyObject **slot = (PyObject **)((char *)stream + off);
        PyObject *old = *slot;
        Py_INCREF(value);
        *slot = value;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(stream, name, value);
}

static int member_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset) {
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        return -1;
    }
    *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    return 0;
}

static void put_u64(unsigned char *out, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static int parse_args(PyObject *const *args, size_t nargsf, PyObject *kwnames, PyObject **slots) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    for (int i = 0; i < N_PARAMS; i++) slots[i] = NULL;
    if (nargs > N_PARAMS - 1) {
        PyErr_Format(PyExc_TypeError, "produce() takes at most %d positional arguments (%zd given)", N_PARAMS - 1,
                     nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) slots[i] = args[i];
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nkw; k++) {
            PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
            int found = -1;
            for (int i = 0; i < N_PARAMS; i++) {
                if (kw == param_strs[i]) {
                    found = i;
                    break;
                }
            }
            if (found < 0) {
                for (int i = 0; i < N_PARAMS; i++) {
                    int eq = PyUnicode_Compare(kw, param_strs[i]);
                    if (eq == -1 && PyErr_Occurred()) return -1;
                    if (eq == 0) {
                        found = i;
                        break;
                    }
                }
            }
            if (found < 0) {
                PyErr_Format(PyExc_TypeError, "produce() got an unexpected keyword argument '%U'", kw);
                return -1;
            }
            if (slots[found] != NULL) {
                PyErr_Format(PyExc_TypeError, "produce() got multiple values for argument '%s'", param_names[found]);
                return -1;
            }
            slots[found] = args[nargs + k];
        }
    }
    if (slots[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "produce() missing 1 required positional argument: 'topic'");
        return -1;
    }
    return 0;
}

/* Python's truth value of an optional argument: absent and None are false. */
static int truth(PyObject *value) {
    if (value == NULL || value == Py_None) return 0;
    return PyObject_IsTrue(value);
}

static int append_stamp(HotProduce *self, PyObject *stream, long long seq, long long ts_ms) {
    PyObject *last = get_field(self, stream, self->off_last_ms, s_last_ms);
    if (last == NULL) return -1;
    long long last_ms;
    if (last == self->last_ms_obj) {
        last_ms = self->last_ms_value;
        Py_DECREF(last);
    } else {
        last_ms = PyLong_AsLongLong(last);
        if (last_ms == -1 && PyErr_Occurred()) {
            Py_DECREF(last);
            return -1;
        }
        Py_XSETREF(self->last_ms_obj, last); /* the reference moves to the cache */
        self->last_ms_value = last_ms;
    }
    if (last_ms == ts_ms) return 0;
    PyObject *ts = PyLong_FromLongLong(ts_ms);
    if (ts == NULL) return -1;
    PyObject *stamp = Py_BuildValue("(LO)", seq, ts);
    if (stamp == NULL) {
        Py_DECREF(ts);
        return -1;
    }
    PyObject *stamps = get_field(self, stream, self->off_stamps, s_stamps);
    int rc = stamps == NULL ? -1 : PyList_Append(stamps, stamp);
    Py_XDECREF(stamps);
    Py_DECREF(stamp);
    if (rc == 0) rc = set_field(self, stream, self->off_last_ms, s_last_ms, ts);
    Py_DECREF(ts);
    return rc;
}

/* The locked part: returns 0 on success, -1 with an exception set. */
static int produce_locked(HotProduce *self, PyObject **slots, long long ts_ms) {
    PyObject *topic = slots[0];
    PyObject *stream = PyDict_GetItemWithError(self->streams, topic); /* borrowed */
    if (stream != NULL) {
        Py_INCREF(stream);
    } else {
        if (PyErr_Occurred()) return -1;
        stream = PyObject_CallOneArg(self->new_topic, topic);
        if (stream == NULL) return -1;
    }
    int rc = -1;
    PyObject *seq_obj = get_field(self, stream, self->off_next_seq, s_next_seq);
    if (seq_obj == NULL) goto done;
    long long seq = PyLong_AsLongLong(seq_obj);
    Py_DECREF(seq_obj);
    if (seq == -1 && PyErr_Occurred()) goto done;

    unsigned char raw[HEADER_SIZE];
    raw[0] = 2;
    memcpy(raw + 1, self->session, 16);
    put_u64(raw + 17, (uint64_t)seq);
    put_u64(raw + 25, (uint64_t)ts_ms);
    PyObject *headers = self->headers;
    /* Reused only as it was left: one item, our own tuple, nobody else holding either (a
     * wrapper may have added headers to the list or kept it). */
    PyObject *header = headers != NULL && Py_REFCNT(headers) == 1 && PyList_GET_SIZE(headers) == 1
                           ? PyList_GET_ITEM(headers, 0)
                           : NULL;
    PyObject *value;
    if (header != NULL && Py_REFCNT(header) == 1 && PyTuple_CheckExact(header) && PyTuple_GET_SIZE(header) == 2 &&
        PyTuple_GET_ITEM(header, 0) == self->name) {
        PyObject *old_value = PyTuple_GET_ITEM(header, 1);
        if (PyBytes_CheckExact(old_value) && Py_REFCNT(old_value) == 1 && PyBytes_GET_SIZE(old_value) == HEADER_SIZE) {
            /* Only this tuple holds the previous value: nobody can see it change. */
            memcpy(PyBytes_AS_STRING(old_value), raw, HEADER_SIZE);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            ((PyBytesObject *)old_value)->ob_shash = -1; /* no stale cached hash */
#pragma GCC diagnostic pop
        } else {
            value = PyBytes_FromStringAndSize((const char *)raw, HEADER_SIZE);
            if (value == NULL) goto done;
            PyTuple_SET_ITEM(header, 1, value);
            Py_DECREF(old_value);
        }
        Py_INCREF(headers);
    } else {
        value = PyBytes_FromStringAndSize((const char *)raw, HEADER_SIZE);
        if (value == NULL) goto done;
        header = PyTuple_New(2);
        if (header == NULL) {
            Py_DECREF(value);
            goto done;
        }
        Py_INCREF(self->name);
        PyTuple_SET_ITEM(header, 0, self->name);
        PyTuple_SET_ITEM(header, 1, value);
        headers = PyList_New(1);
        if (headers == NULL) {
            Py_DECREF(header);
            goto done;
        }
        PyList_SET_ITEM(headers, 0, header);
        Py_INCREF(headers);
        Py_XSETREF(self->headers, headers);
    }

    /* Positional on purpose, as in the Python closure: slot 5 is `callback`. */
    PyObject *call_args[8] = {topic,
                              slots[1] ? slots[1] : Py_None,
                              slots[2] ? slots[2] : Py_None,
                              slots[3] ? slots[3] : minus_one,
                              Py_None,
                              Py_None,
                              slots[5] ? slots[5] : zero,
                              headers};
    PyObject *result = PyObject_Vectorcall(self->inner, call_args, 8, NULL);
    Py_DECREF(headers);
    if (result == NULL) goto done; /* not produced: the sequence is not used up */
    Py_DECREF(result);

    PyObject *next = PyLong_FromLongLong(seq + 1);
    if (next == NULL) goto done;
    int set = set_field(self, stream, self->off_next_seq, s_next_seq, next);
    Py_DECREF(next);
    if (set < 0) goto done;
    PyObject *keys = get_field(self, stream, self->off_keys, s_keys);
    if (keys == NULL) goto done;
    int appended = PyList_Append(keys, slots[2] ? slots[2] : Py_None);
    Py_DECREF(keys);
    if (appended < 0) goto done;
    rc = append_stamp(self, stream, seq, ts_ms);
done:
    Py_DECREF(stream);
    return rc;
}

static PyObject *hot_produce_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    HotProduce *self = (HotProduce *)callable;
    PyObject *slots[N_PARAMS];
    if (parse_args(args, nargsf, kwnames, slots) < 0) return NULL;

    /* Python's `headers or on_delivery or callback or key_fn` */
    int options = self->has_key_fn;
    const int optional[3] = {6, 4, 7};
    for (int i = 0; !options && i < 3; i++) {
        options = truth(slots[optional[i]]);
        if (options < 0) return NULL;
    }
    if (options) {
        /* `on_delivery or callback` */
        int t = truth(slots[4]);
        if (t < 0) return NULL;
        PyObject *cb = t ? slots[4] : (slots[7] ? slots[7] : Py_None);
        PyObject *slow_args[7] = {slots[0],
                                  slots[1] ? slots[1] : Py_None,
                                  slots[2] ? slots[2] : Py_None,
                                  slots[3] ? slots[3] : minus_one,
                                  cb,
                                  slots[5] ? slots[5] : zero,
                                  slots[6] ? slots[6] : Py_None};
        PyObject *result = PyObject_Vectorcall(self->slow, slow_args, 7, NULL);
        if (result == NULL) return NULL;
        Py_DECREF(result);
        Py_RETURN_NONE;
    }

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ts_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;

    seqlock_take(self->lock, -1);
    int rc = produce_locked(self, slots, ts_ms);
    seqlock_give(self->lock); /* held here: cannot fail */
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static int hot_traverse(HotProduce *self, visitproc visit, void *arg) {
    Py_VISIT(self->streams);
    Py_VISIT(self->new_topic);
    Py_VISIT(self->inner);
    Py_VISIT(self->slow);
    Py_VISIT(self->lock);
    Py_VISIT(self->name);
    Py_VISIT(self->stream_type);
    Py_VISIT(self->headers);
    return 0;
}

static int hot_clear(HotProduce *self) {
    Py_CLEAR(self->headers);
    Py_CLEAR(self->last_ms_obj);
    Py_CLEAR(self->streams);
    Py_CLEAR(self->new_topic);
    Py_CLEAR(self->inner);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->name);
    Py_CLEAR(self->stream_type);
    return 0;
}

static void hot_dealloc(HotProduce *self) {
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"streams", "new_topic", "inner", "slow", "lock", "session", "name", "has_key_fn",
                             "stream_type", NULL};
    PyObject *streams, *new_topic, *inner, *slow, *lock, *name, *stream_type;
    Py_buffer session;
    int has_key_fn;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOOO!y*UpO!:HotProduce", kwlist, &PyDict_Type, &streams,
                                     &new_topic, &inner, &slow, &SeqLockType, &lock, &session, &name, &has_key_fn,
                                     &PyType_Type, &stream_type))
        return NULL;
    if (session.len != 16) {
        PyBuffer_Release(&session);
        PyErr_SetString(PyExc_ValueError, "session must be 16 bytes");
        return NULL;
    }
    HotProduce *self = (HotProduce *)type->tp_alloc(type, 0);
    if (self == NULL) {
        PyBuffer_Release(&session);
        return NULL;
    }
    memcpy(self->session, session.buf, 16);
    PyBuffer_Release(&session);
    Py_INCREF(stream_type);
    self->stream_type = (PyTypeObject *)stream_type;
    if (member_offset(self->stream_type, "next_seq", &self->off_next_seq) < 0 ||
        member_offset(self->stream_type, "keys", &self->off_keys) < 0 ||
        member_offset(self->stream_type, "stamps", &self->off_stamps) < 0 ||
        member_offset(self->stream_type, "last_ms", &self->off_last_ms) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->vectorcall = hot_produce_call;
    self->has_key_fn = has_key_fn;
    Py_INCREF(lock);
    self->lock = (SeqLock *)lock;
    Py_INCREF(streams);
    self->streams = streams;
    Py_INCREF(new_topic);
    self->new_topic = new_topic;
    Py_INCREF(inner);
    self->inner = inner;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(name);
    self->name = name;
    return (PyObject *)self;
}

static PyTypeObject HotProduceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "auditor.probes._hotpath.HotProduce",
    .tp_basicsize = sizeof(HotProduce),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "produce() of an AuditedProducer (contract v2), in C.",
    .tp_new = hot_new,
    .tp_dealloc = (destructor)hot_dealloc,
    .tp_traverse = (traverseproc)hot_traverse,
    .tp_clear = (inquiry)hot_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(HotProduce, vectorcall),
};

/* --- RangeMarker: AuditedConsumer.mark_processed() ------------------------------------------
 * marker(msg) skips an error event, else extends the current run of consecutive offsets of
 * one topic-partition or starts a new one (a repeat, a gap, a seek back or another partition
 * breaks a run: reprocessing stays visible), exactly as consumer.offset_ranges does with
 * held messages. Whenever `every` closed runs are waiting it calls compact() (outside its
 * lock), which takes the runs: take() returns [(topic, partition, first, last), ...] in
 * marking order, the open run included, and starts afresh. A run costs a tuple whatever
 * its length, so consecutive marks never call back into Python; the consumer's background
 * flush takes the runs every second. The first mark after a take() reads the wall clock
 * once: taken_since_ms() gives the taken marks' lower bound (the ranges' first_ms), the
 * moment the first of them was made rather than the take() before it (an idle spell would
 * date the first mark after it up to a flush interval early).
 *
 * Reading a Message: confluent-kafka's Message methods each build a Python object (an int
 * per partition and offset). The marker instead reads the four fields from the object's C
 * struct when it can be sure where they are: at construction it builds two Messages with
 * distinctive values through the type's own constructor and looks for each value in their
 * memory; only fields found exactly once in both, at the same place, and not overlapping are
 * used. When the calibration fails (another confluent-kafka layout, a type without that
 * constructor), for a subclass, or for a field the methods would render as None (no topic,
 * an unassigned partition, a negative offset) it calls the methods as before. */
/* How a confluent-kafka Message is read (RangeMarker and HandedPositions). */
typedef struct {
    /* Where a Message keeps its fields (byte offsets into the object), -1 when unknown. */
    Py_ssize_t at_topic, at_error, at_partition, at_offset;
    PyTypeObject *message_type;
    PyObject *m_error, *m_topic, *m_partition, *m_offset; /* the Message methods (descriptors) */
} MessageFields;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int busy;          /* a marking or take() is between its reads and writes (see marker_lock) */
    PyObject *runs;    /* list of closed runs */
    PyObject *topic;   /* the open run's topic, NULL when none */
    long long partition, first, last;
    Py_ssize_t pending; /* marks since the last take() */
    long long since_ms;       /* wall clock (ms) at the first of them, 0 when none */
    long long taken_since_ms; /* since_ms of the marks the last take() returned */
    Py_ssize_t every;   /* closed runs that make compact() run */
    PyObject *compact;
    MessageFields fields;
} RangeMarker;

static PyObject *s_error, *s_topic, *s_partition, *s_offset;

static PyObject *call_message(MessageFields *self, PyObject *msg, PyObject *descr, PyObject *name) {
    if (Py_IS_TYPE(msg, self->message_type)) {
        PyObject *args[1] = {msg};
        return PyObject_Vectorcall(descr, args, 1, NULL);
    }
    return PyObject_CallMethodNoArgs(msg, name);
}

#ifdef Py_GIL_DISABLED
#error "RangeMarker's lock relies on the GIL"
#endif
/* The marker's state is only touched by C code holding the GIL, so a flag checked and set
 * under the GIL excludes other markings and take()s; it is needed at all because building
 * a run's tuple may run the cyclic GC, whose finalizers may let another thread run. A
 * thread finding it set lets the holder finish (releasing the GIL) and looks again. */
static void marker_lock(RangeMarker *self) {
    while (self->busy) {
        Py_BEGIN_ALLOW_THREADS
        sched_yield();
        Py_END_ALLOW_THREADS
    }
    self->busy = 1;
}

static void marker_unlock(RangeMarker *self) { self->busy = 0; }

/* Close the open run into self->runs (under the lock). */
static int close_run(RangeMarker *self) {
    if (self->topic == NULL) return 0;
    PyObject *run = Py_BuildValue("(OLLL)", self->topic, self->partition, self->first, self->last);
    if (run == NULL) return -1;
    int rc = PyList_Append(self->runs, run);
    Py_DECREF(run);
    if (rc < 0) return -1;
    Py_CLEAR(self->topic);
    return 0;
}

/* The message's topic (a new reference), partition and offset, NULL for an error event
 * (*is_event set) or a failure (an exception set). */
static PyObject *read_message(MessageFields *self, PyObject *msg, int *is_event, long long *partition,
                              long long *offset) {
    *is_event = 0;
    if (self->at_topic >= 0 && Py_IS_TYPE(msg, self->message_type)) {
        char *base = (char *)msg;
        PyObject *error = *(PyObject **)(base + self->at_error);
        if (error != NULL && error != Py_None) {
            *is_event = 1;
            return NULL;
        }
        PyObject *topic = *(PyObject **)(base + self->at_topic);
        int32_t p = *(int32_t *)(base + self->at_partition);
        int64_t o = *(int64_t *)(base + self->at_offset);
        if (topic != NULL && p >= 0 && o >= 0) {
            Py_INCREF(topic);
            *partition = p;
            *offset = o;
            return topic;
        }
    }
    PyObject *error = call_message(self, msg, self->m_error, s_error);
    if (error == NULL) return NULL;
    *is_event = error != Py_None;
    Py_DECREF(error);
    if (*is_event) return NULL; /* an error event is not a record */
    PyObject *topic = call_message(self, msg, self->m_topic, s_topic);
    if (topic == NULL) return NULL;
    PyObject *partition_obj = call_message(self, msg, self->m_partition, s_partition);
    if (partition_obj == NULL) {
        Py_DECREF(topic);
        return NULL;
    }
    PyObject *offset_obj = call_message(self, msg, self->m_offset, s_offset);
    if (offset_obj == NULL) {
        Py_DECREF(topic);
        Py_DECREF(partition_obj);
        return NULL;
    }
    *partition = PyLong_AsLongLong(partition_obj);
    *offset = PyLong_AsLongLong(offset_obj);
    Py_DECREF(partition_obj);
    Py_DECREF(offset_obj);
    if (PyErr_Occurred()) {
        Py_DECREF(topic);
        return NULL;
    }
    return topic;
}

static PyObject *marker_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    RangeMarker *self = (RangeMarker *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "mark_processed() takes exactly one argument (the message)");
        return NULL;
    }
    int is_event;
    long long partition, offset;
    PyObject *topic = read_message(&self->fields, args[0], &is_event, &partition, &offset);
    if (topic == NULL) {
        if (is_event) Py_RETURN_NONE;
        return NULL;
    }
    int same_topic = 0;
    marker_lock(self);
    if (self->topic != NULL && self->partition == partition && self->last + 1 == offset) {
        same_topic = self->topic == topic;
        if (!same_topic && PyUnicode_CheckExact(topic) && PyUnicode_CheckExact(self->topic) &&
            PyUnicode_IS_READY(topic) && PyUnicode_IS_READY(self->topic)) {
            /* confluent-kafka makes a new str per message: compare the text, not via dispatch */
            Py_ssize_t length = PyUnicode_GET_LENGTH(topic);
            int kind = PyUnicode_KIND(topic);
            same_topic = length == PyUnicode_GET_LENGTH(self->topic) && kind == PyUnicode_KIND(self->topic) &&
                         memcmp(PyUnicode_DATA(topic), PyUnicode_DATA(self->topic), (size_t)length * kind) == 0;
        } else if (!same_topic) {
            int eq = PyObject_RichCompareBool(self->topic, topic, Py_EQ);
            if (eq < 0) {
                marker_unlock(self);
                Py_DECREF(topic);
                return NULL;
            }
            same_topic = eq;
        }
    }
    if (same_topic) {
        self->last = offset;
        Py_DECREF(topic);
    } else {
        if (close_run(self) < 0) {
            marker_unlock(self);
            Py_DECREF(topic);
            return NULL;
        }
        self->topic = topic; /* the reference moves to the marker */
        self->partition = partition;
        self->first = self->last = offset;
    }
    if (self->pending++ == 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        self->since_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    }
    Py_ssize_t waiting = PyList_GET_SIZE(self->runs);
    marker_unlock(self);
    if (waiting >= self->every) {
        PyObject *done = PyObject_CallNoArgs(self->compact);
        if (done == NULL) return NULL;
        Py_DECREF(done);
    }
    Py_RETURN_NONE;
}

static PyObject *marker_take(RangeMarker *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL) return NULL;
    marker_lock(self);
    if (close_run(self) < 0) {
        marker_unlock(self);
        Py_DECREF(fresh);
        return NULL;
    }
    PyObject *taken = self->runs;
    self->runs = fresh;
    self->pending = 0;
    self->taken_since_ms = self->since_ms;
    self->since_ms = 0;
    marker_unlock(self);
    return taken;
}

static Py_ssize_t marker_len(RangeMarker *self) { return self->pending; }

static int marker_traverse(RangeMarker *self, visitproc visit, void *arg) {
    Py_VISIT(self->runs);
    Py_VISIT(self->topic);
    Py_VISIT(self->compact);
    Py_VISIT(self->fields.message_type);
    Py_VISIT(self->fields.m_error);
    Py_VISIT(self->fields.m_topic);
    Py_VISIT(self->fields.m_partition);
    Py_VISIT(self->fields.m_offset);
    return 0;
}

static int marker_clear(RangeMarker *self) {
    Py_CLEAR(self->runs);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->compact);
    Py_CLEAR(self->fields.message_type);
    Py_CLEAR(self->fields.m_error);
    Py_CLEAR(self->fields.m_topic);
    Py_CLEAR(self->fields.m_partition);
    Py_CLEAR(self->fields.m_offset);
    return 0;
}

static void marker_dealloc(RangeMarker *self) {
    PyObject_GC_UnTrack(self);
    marker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Looks for a Message's fields in its memory (see the RangeMarker comment); leaves the
 * at_* fields -1 unless all four are found exactly once in two probe messages. */
#define N_PROBES 2
static int calibrate(MessageFields *self) {
    self->at_topic = self->at_error = self->at_partition = self->at_offset = -1;
    PyTypeObject *type = self->message_type;
    Py_ssize_t size = type->tp_basicsize;
    const int32_t partitions[N_PROBES] = {0x2A5A1C3D, 0x13579BDF};
    const int64_t offsets[N_PROBES] = {0x0123456789ABCDEFLL, 0x0FEDCBA987654321LL};
    PyObject *messages[N_PROBES] = {NULL, NULL}, *topics[N_PROBES] = {NULL, NULL}, *errors[N_PROBES] = {NULL, NULL};
    int ok = 1;
    for (int i = 0; i < N_PROBES && ok; i++) {
        topics[i] = PyUnicode_FromFormat("auditor-calibration-%d", i);
        errors[i] = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        PyObject *kwargs = topics[i] && errors[i] ? Py_BuildValue("{sOsisLsO}", "topic", topics[i], "partition",
                                                                   (int)partitions[i], "offset", (long long)offsets[i],
                                                                   "error", errors[i])
                                                  : NULL;
        PyObject *empty = PyTuple_New(0);
        if (kwargs != NULL && empty != NULL) messages[i] = PyObject_Call((PyObject *)type, empty, kwargs);
        Py_XDECREF(kwargs);
        Py_XDECREF(empty);
        ok = messages[i] != NULL && Py_IS_TYPE(messages[i], type);
    }
    Py_ssize_t found[4] = {-1, -1, -1, -1};
    int counts[4] = {0, 0, 0, 0};
    Py_ssize_t start = sizeof(PyObject);
    for (Py_ssize_t at = start; ok && at + 8 <= size; at += 4) {
        int hits[4] = {1, 1, 1, 1};
        for (int i = 0; i < N_PROBES; i++) {
            char *base = (char *)messages[i];
            int aligned = at % 8 == 0;
            hits[0] &= aligned && *(PyObject **)(base + at) == topics[i];
            hits[1] &= aligned && *(PyObject **)(base + at) == errors[i];
            hits[2] &= *(int32_t *)(base + at) == partitions[i];
            hits[3] &= aligned && *(int64_t *)(base + at) == offsets[i];
        }
        for (int f = 0; f < 4; f++)
            if (hits[f]) {
                found[f] = at;
                counts[f]++;
            }
    }
    if (ok && counts[0] == 1 && counts[1] == 1 && counts[2] == 1 && counts[3] == 1) {
        /* the four fields must not overlap: each pointer and the offset take 8 bytes, the partition 4 */
        Py_ssize_t widths[4] = {8, 8, 4, 8};
        int overlap = 0;
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++)
                if (found[a] < found[b] + widths[b] && found[b] < found[a] + widths[a]) overlap = 1;
        if (!overlap) {
            self->at_topic = found[0];
            self->at_error = found[1];
            self->at_partition = found[2];
            self->at_offset = found[3];
        }
    }
    for (int i = 0; i < N_PROBES; i++) {
        Py_XDECREF(messages[i]);
        Py_XDECREF(topics[i]);
        Py_XDECREF(errors[i]);
    }
    /* A type that cannot be built this way just keeps the method calls. */
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError)) PyErr_Clear();
    return PyErr_Occurred() ? -1 : 0;
}

/* The Message type's methods and the place of its fields (calibrate); -1 with an exception set. */
static int message_fields_init(MessageFields *self, PyObject *message_type) {
    self->at_topic = self->at_error = self->at_partition = self->at_offset = -1;
    Py_INCREF(message_type);
    self->message_type = (PyTypeObject *)message_type;
    self->m_error = PyObject_GetAttr(message_type, s_error);
    self->m_topic = PyObject_GetAttr(message_type, s_topic);
    self->m_partition = PyObject_GetAttr(message_type, s_partition);
    self->m_offset = PyObject_GetAttr(message_type, s_offset);
    if (!self->m_error || !self->m_topic || !self->m_partition || !self->m_offset) return -1;
    return calibrate(self);
}

static PyObject *marker_runs_waiting(RangeMarker *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(PyList_GET_SIZE(self->runs));
}

static PyObject *marker_taken_since_ms(RangeMarker *self, PyObject *Py_UNUSED(ignored)) {
    if (self->taken_since_ms == 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->taken_since_ms);
}

static PyObject *marker_reads_fields(RangeMarker *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->fields.at_topic >= 0);
}

static PyObject *marker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"every", "compact", "message_type", NULL};
    Py_ssize_t every;
    PyObject *compact, *message_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nOO!:RangeMarker", kwlist, &every, &compact, &PyType_Type,
                                     &message_type))
        return NULL;
    if (every < 1) {
        PyErr_SetString(PyExc_ValueError, "every must be at least 1");
        return NULL;
    }
    RangeMarker *self = (RangeMarker *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = marker_call;
    self->every = every;
    self->runs = PyList_New(0);
    Py_INCREF(compact);
    self->compact = compact;
    if (self->runs == NULL || message_fields_init(&self->fields, message_type) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyMethodDef marker_methods[] = {
    {"take", (PyCFunction)marker_take, METH_NOARGS, NULL},
    {"taken_since_ms", (PyCFunction)marker_taken_since_ms, METH_NOARGS, NULL},
    {"reads_fields", (PyCFunction)marker_reads_fields, METH_NOARGS, NULL},
    {"runs_waiting", (PyCFunction)marker_runs_waiting, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods marker_as_sequence = {.sq_length = (lenfunc)marker_len};

static PyTypeObject RangeMarkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "auditor.probes._hotpath.RangeMarker",
    .tp_basicsize = sizeof(RangeMarker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "mark_processed() of an AuditedConsumer (contract v2), in C.",
    .tp_new = marker_new,
    .tp_dealloc = (destructor)marker_dealloc,
    .tp_traverse = (traverseproc)marker_traverse,
    .tp_clear = (inquiry)marker_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(RangeMarker, vectorcall),
    .tp_methods = marker_methods,
    .tp_as_sequence = &marker_as_sequence,
};

/* --- HandedPositions: an audited consumer's poll() where the probe stores offsets -----------
 * positions(timeout=None) calls the client's poll (None becomes -1, as the probe's Python
 * poll passes it) and, for a record (not an event or None), keeps it as the last record
 * handed on its topic-partition: no TopicPartition, no store call, no Python frame per record.
 * note(messages) does the same for each record of a consume() batch. take() returns the
 * records kept since the last take(), the last one of each partition, in no set order, and
 * forgets them: the probe's store (auditor/probes/offset_store.py) stores their positions
 * with its commit metadata. Its state is only touched by C code holding the GIL; take() reads
 * the count after allocating the list it returns (an allocation may run the cyclic GC,
 * whose finalizers may let another thread run), so it never misses or splits a record.
 *
 * Who stores, and when (confluent-kafka lets one thread at a time into a client's calls: a
 * store from another thread waits while the application polls, and a rebalance callback
 * waiting for that store inside poll() would never return):
 * - the polling thread, after a poll() that returns, when STORE_INTERVAL_S passed since the
 *   poll's last store (store(), given at construction), still counted as in a call;
 * - the store's own thread, only through try_begin_store(), which lets it in when no call is
 *   in progress and the last one returned at least `idle` seconds ago (an application busy or
 *   stuck processing a record), and keeps every poll() out until end_store() (enter() waits,
 *   with the GIL released). The check and the mark are one step under the GIL, so no poll can
 *   start between them. enter()/leave() bracket consume() the same way. */
typedef struct {
    PyObject *topic;        /* the partition's topic */
    long long partition;
    PyObject *msg;          /* the last record handed since the last take(), NULL when none */
} HandedSlot;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *poll;         /* the client's poll */
    HandedSlot *slots;      /* one per topic-partition ever handed a record */
    Py_ssize_t n_slots, capacity, last_slot;
    Py_ssize_t pending;     /* slots holding a record */
    MessageFields fields;
    PyObject *store;        /* stores the kept records' positions (the probe's), or NULL */
    PyObject *piece;        /* the interval as a float: a long poll's usual piece */
    double interval;        /* seconds between the polling thread's stores */
    double last_store;      /* monotonic seconds of the polling thread's last store */
    double last_return;     /* monotonic seconds the last call returned */
    int in_call;            /* calls in progress (poll, consume) */
    int storing;            /* the store's own thread is storing: calls wait */
} HandedPositions;

static double monotonic_s(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Wait (the GIL released) until the store's own thread is done, then count a call in. */
static void handed_enter_call(HandedPositions *self) {
    while (self->storing) {
        Py_BEGIN_ALLOW_THREADS
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
        Py_END_ALLOW_THREADS
    }
    self->in_call++;
}

/* The polling thread's store when due (kept records and STORE_INTERVAL_S since its last one):
 * 1 when it stored, 0 when not due, or -1 with the error set when the store raised something that is not an Exception (a
 * KeyboardInterrupt: it goes to the application); an Exception is reported, never raised into
 * the poll, and the poll's own error, if any, is kept. */
static int handed_store_if_due(HandedPositions *self, double now) {
    if (self->store == NULL || self->pending == 0 || now - self->last_store < self->interval) return 0;
    int stored = 1;
    self->last_store = now;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *done = PyObject_CallNoArgs(self->store);
    if (done != NULL) {
        Py_DECREF(done);
    } else if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_WriteUnraisable(self->store);
    } else {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    PyErr_Restore(type, value, traceback);
    return stored;
}

/* The store when due, then the call counted out (whatever the store did): 0 or -1 as above.
 * `now` is the clock read last in the call (one read on the busy path: a poll that hands a record
 * at once); after a store, the clock is read again. */
static int handed_leave_call(HandedPositions *self, double now) {
    int stored = handed_store_if_due(self, now);
    self->in_call--;
    self->last_return = stored ? monotonic_s() : now; /* a store took time: read the clock again */
    return stored < 0 ? -1 : 0;
}

static int same_text(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b)) {
        /* confluent-kafka makes a new str per message: compare the text, not via dispatch */
        Py_ssize_t length = PyUnicode_GET_LENGTH(a);
        int kind = PyUnicode_KIND(a);
        return length == PyUnicode_GET_LENGTH(b) && kind == PyUnicode_KIND(b) &&
               memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)length * kind) == 0;
    }
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* Keep `msg` (a record or an event) as its partition's last handed record; 0 or -1. */
static int handed_note(HandedPositions *self, PyObject *msg) {
    int is_event;
    long long partition, offset;
    PyObject *topic = read_message(&self->fields, msg, &is_event, &partition, &offset);
    if (topic == NULL) return is_event ? 0 : -1;
    HandedSlot *slot = NULL;
    if (self->last_slot < self->n_slots) {
        HandedSlot *last = &self->slots[self->last_slot];
        int same = last->partition == partition ? same_text(last->topic, topic) : 0;
        if (same < 0) goto fail;
        if (same) slot = last;
    }
    for (Py_ssize_t i = 0; slot == NULL && i < self->n_slots; i++) {
        if (self->slots[i].partition != partition) continue;
        int same = same_text(self->slots[i].topic, topic);
        if (same < 0) goto fail;
        if (same) {
            slot = &self->slots[i];
            self->last_slot = i;
        }
    }
    if (slot == NULL) {
        if (self->n_slots == self->capacity) {
            Py_ssize_t capacity = self->capacity ? self->capacity * 2 : 8;
            HandedSlot *grown = PyMem_Realloc(self->slots, (size_t)capacity * sizeof(HandedSlot));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            self->slots = grown;
            self->capacity = capacity;
        }
        slot = &self->slots[self->n_slots];
        slot->topic = topic; /* the reference moves to the slot */
        slot->partition = partition;
        slot->msg = NULL;
        self->last_slot = self->n_slots++;
    } else {
        Py_DECREF(topic);
    }
    PyObject *old = slot->msg;
    Py_INCREF(msg);
    slot->msg = msg; /* the state is whole before the old record goes (its deallocation may run code) */
    if (old == NULL)
        self->pending++;
    else
        Py_DECREF(old);
    return 0;
fail:
    Py_DECREF(topic);
    return -1;
}

static PyObject *handed_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    HandedPositions *self = (HandedPositions *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    if (total > 1) {
        PyErr_SetString(PyExc_TypeError, "poll() takes at most one argument (timeout)");
        return NULL;
    }
    PyObject *timeout = total == 1 ? args[0] : Py_None;
    double wait = -1.0; /* seconds; below 0: no end */
    if (timeout != Py_None) {
        wait = PyFloat_AsDouble(timeout);
        if (wait == -1.0 && PyErr_Occurred()) return NULL;
    }
    handed_enter_call(self);
    double now = monotonic_s();
    PyObject *msg;
    if (self->store == NULL || (wait >= 0 && wait <= self->interval)) {
        PyObject *given[1] = {timeout == Py_None ? minus_one : timeout};
        msg = PyObject_Vectorcall(self->poll, given, 1, NULL);
    } else {
        /* A long poll, in pieces of at most STORE_INTERVAL_S, storing between them when due: what
         * was handed before it is stored while it waits, as librdkafka's own store holds it. */
        double deadline = now + wait; /* unused when wait < 0: no end */
        PyObject *piece = self->piece;
        Py_INCREF(piece);
        for (;;) {
            PyObject *given[1] = {piece};
            msg = PyObject_Vectorcall(self->poll, given, 1, NULL);
            Py_DECREF(piece);
            if (msg != Py_None) break;
            now = monotonic_s();
            if (wait >= 0 && now >= deadline) break; /* None: the whole timeout passed */
            Py_DECREF(msg);
            if (handed_store_if_due(self, now) < 0) {
                msg = NULL;
                break;
            }
            double left = wait < 0 ? self->interval : deadline - now;
            if (left >= self->interval) {
                piece = self->piece;
                Py_INCREF(piece);
            } else {
                piece = PyFloat_FromDouble(left);
            }
            if (piece == NULL) {
                msg = NULL;
                break;
            }
        }
    }
    if (msg != NULL && msg != Py_None && handed_note(self, msg) < 0) Py_CLEAR(msg);
    if (handed_leave_call(self, now) < 0) Py_CLEAR(msg);
    return msg;
}

static PyObject *handed_enter(HandedPositions *self, PyObject *Py_UNUSED(ignored)) {
    handed_enter_call(self);
    Py_RETURN_NONE;
}

static PyObject *handed_leave(HandedPositions *self, PyObject *Py_UNUSED(ignored)) {
    if (self->in_call <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "leave() without enter()");
        return NULL;
    }
    if (handed_leave_call(self, monotonic_s()) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *handed_store_due(HandedPositions *self, PyObject *Py_UNUSED(ignored)) {
    if (handed_store_if_due(self, monotonic_s()) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *handed_try_begin_store(HandedPositions *self, PyObject *arg) {
    double idle = PyFloat_AsDouble(arg);
    if (idle == -1.0 && PyErr_Occurred()) return NULL;
    if (self->in_call > 0 || self->storing || self->pending == 0 || monotonic_s() - self->last_return < idle)
        Py_RETURN_FALSE;
    self->storing = 1;
    Py_RETURN_TRUE;
}

static PyObject *handed_end_store(HandedPositions *self, PyObject *Py_UNUSED(ignored)) {
    self->storing = 0;
    Py_RETURN_NONE;
}

static PyObject *handed_note_all(HandedPositions *self, PyObject *messages) {
    PyObject *items = PySequence_Fast(messages, "note() takes a list of messages");
    if (items == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
        if (handed_note(self, PySequence_Fast_GET_ITEM(items, i)) < 0) {
            Py_DECREF(items);
            return NULL;
        }
    }
    Py_DECREF(items);
    Py_RETURN_NONE;
}

static PyObject *handed_take(HandedPositions *self, PyObject *Py_UNUSED(ignored)) {
    for (;;) {
        Py_ssize_t count = self->pending;
        PyObject *taken = PyList_New(count);
        if (taken == NULL) return NULL;
        if (count != self->pending) { /* another thread handed a record meanwhile */
            Py_DECREF(taken);
            continue;
        }
        Py_ssize_t at = 0;
        for (Py_ssize_t i = 0; i < self->n_slots && at < count; i++) {
            if (self->slots[i].msg == NULL) continue;
            PyList_SET_ITEM(taken, at++, self->slots[i].msg); /* the reference moves to the list */
            self->slots[i].msg = NULL;
        }
        self->pending = 0;
        return taken;
    }
}

static Py_ssize_t handed_len(HandedPositions *self) { return self->pending; }

static int handed_traverse(HandedPositions *self, visitproc visit, void *arg) {
    Py_VISIT(self->poll);
    Py_VISIT(self->store);
    for (Py_ssize_t i = 0; i < self->n_slots; i++) {
        Py_VISIT(self->slots[i].topic);
        Py_VISIT(self->slots[i].msg);
    }
    Py_VISIT(self->fields.message_type);
    Py_VISIT(self->fields.m_error);
    Py_VISIT(self->fields.m_topic);
    Py_VISIT(self->fields.m_partition);
    Py_VISIT(self->fields.m_offset);
    return 0;
}

static int handed_clear(HandedPositions *self) {
    Py_CLEAR(self->poll);
    Py_CLEAR(self->store);
    Py_CLEAR(self->piece);
    HandedSlot *slots = self->slots;
    Py_ssize_t n_slots = self->n_slots;
    self->slots = NULL;
    self->n_slots = self->capacity = self->last_slot = self->pending = 0;
    for (Py_ssize_t i = 0; i < n_slots; i++) {
        Py_CLEAR(slots[i].topic);
        Py_CLEAR(slots[i].msg);
    }
    PyMem_Free(slots);
    Py_CLEAR(self->fields.message_type);
    Py_CLEAR(self->fields.m_error);
    Py_CLEAR(self->fields.m_topic);
    Py_CLEAR(self->fields.m_partition);
    Py_CLEAR(self->fields.m_offset);
    return 0;
}

static void handed_dealloc(HandedPositions *self) {
    PyObject_GC_UnTrack(self);
    handed_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *handed_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"poll", "message_type", "store", "interval", NULL};
    PyObject *poll, *message_type, *store = Py_None;
    double interval = 0.05;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!|Od:HandedPositions", kwlist, &poll, &PyType_Type,
                                     &message_type, &store, &interval))
        return NULL;
    if (store != Py_None && !PyCallable_Check(store)) {
        PyErr_SetString(PyExc_TypeError, "store must be callable or None");
        return NULL;
    }
    HandedPositions *self = (HandedPositions *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = handed_call;
    Py_INCREF(poll);
    self->poll = poll;
    if (store != Py_None) {
        Py_INCREF(store);
        self->store = store;
    }
    self->interval = interval;
    self->piece = PyFloat_FromDouble(interval);
    if (self->piece == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->last_store = -1e300; /* the first poll that hands records stores them */
    self->last_return = monotonic_s();
    if (message_fields_init(&self->fields, message_type) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *handed_reads_fields(HandedPositions *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->fields.at_topic >= 0);
}

static PyMethodDef handed_methods[] = {
    {"note", (PyCFunction)handed_note_all, METH_O, NULL},
    {"take", (PyCFunction)handed_take, METH_NOARGS, NULL},
    {"enter", (PyCFunction)handed_enter, METH_NOARGS, NULL},
    {"leave", (PyCFunction)handed_leave, METH_NOARGS, NULL},
    {"store_if_due", (PyCFunction)handed_store_due, METH_NOARGS, NULL},
    {"try_begin_store", (PyCFunction)handed_try_begin_store, METH_O, NULL},
    {"end_store", (PyCFunction)handed_end_store, METH_NOARGS, NULL},
    {"reads_fields", (PyCFunction)handed_reads_fields, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods handed_as_sequence = {.sq_length = (lenfunc)handed_len};

static PyTypeObject HandedPositionsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "auditor.probes._hotpath.HandedPositions",
    .tp_basicsize = sizeof(HandedPositions),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "poll() of an audited consumer whose probe stores the offsets, in C.",
    .tp_new = handed_new,
    .tp_dealloc = (destructor)handed_dealloc,
    .tp_traverse = (traverseproc)handed_traverse,
    .tp_clear = (inquiry)handed_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(HandedPositions, vectorcall),
    .tp_methods = handed_methods,
    .tp_as_sequence = &handed_as_sequence,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath",
                                    "The probes' hot paths in C: produce(), mark_processed() and the consumer's poll().", -1, NULL};

PyMODINIT_FUNC PyInit__hotpath(void) {
    s_next_seq = PyUnicode_InternFromString("next_seq");
    s_keys = PyUnicode_InternFromString("keys");
    s_stamps = PyUnicode_InternFromString("stamps");
    s_last_ms = PyUnicode_InternFromString("last_ms");
    minus_one = PyLong_FromLong(-1);
    zero = PyLong_FromLong(0);
    if (!s_next_seq || !s_keys || !s_stamps || !s_last_ms || !minus_one || !zero) return NULL;
    for (int i = 0; i < N_PARAMS; i++) {
        param_strs[i] = PyUnicode_InternFromString(param_names[i]);
        if (param_strs[i] == NULL) return NULL;
    }
    s_error = PyUnicode_InternFromString("error");
    s_topic = PyUnicode_InternFromString("topic");
    s_partition = PyUnicode_InternFromString("partition");
    s_offset = PyUnicode_InternFromString("offset");
    if (!s_error || !s_topic || !s_partition || !s_offset) return NULL;
    if (PyType_Ready(&HotProduceType) < 0 || PyType_Ready(&SeqLockType) < 0 || PyType_Ready(&RangeMarkerType) < 0 ||
        PyType_Ready(&HandedPositionsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&HotProduceType);
    if (PyModule_AddObject(m, "HotProduce", (PyObject *)&HotProduceType) < 0) {
        Py_DECREF(&HotProduceType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SeqLockType);
    if (PyModule_AddObject(m, "SeqLock", (PyObject *)&SeqLockType) < 0) {
        Py_DECREF(&SeqLockType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RangeMarkerType);
    if (PyModule_AddObject(m, "RangeMarker", (PyObject *)&RangeMarkerType) < 0) {
        Py_DECREF(&RangeMarkerType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&HandedPositionsType);
    if (PyModule_AddObject(m, "HandedPositions", (PyObject *)&HandedPositionsType) < 0) {
        Py_DECREF(&HandedPositionsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
