/* One pass over a Python string's own storage: the run and character counts of extproc.core.runs.

   count_runs() in extproc/core/runs.py is the reference (numpy passes over the code points); this
   module computes the same numbers in one C loop over the str's 1-, 2- or 4-byte characters
   (PyUnicode_KIND), without encoding the text:

     * runs[k], chars[k]: maximal runs and characters of each run kind, the character kinds taken
       from the table that runs.py builds (configure());
     * blobs: a chunk (the characters between two whitespace runs) of >= 20 characters that is
       >= 75 % ASCII letters/digits, holds >= 2 digits and is hex-like (digits >= 30 % of its
       letters and digits) or base64-like (upper and lower case letters each >= 25 %) moves all its
       runs and characters to the blob kind (one run);
     * gaps: space runs of >= 2 characters, and single-space runs followed by a digit run;
     * utf8_length(): UTF-8 bytes of the text (a lone surrogate counts 3, as surrogatepass).

   The language tests (English-like, Western European, Arabic/Persian/Urdu) stay in Python: they
   read a 4,096-character window. Equality with the numpy reference is tested on every corpus and
   on generated text (tests/core/test_runscan.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_KINDS 64

static unsigned char table[0x10000];
static int configured = 0;
static int n_kinds = 0;
static int K_LETTER, K_DIGIT, K_PUNCT, K_SPACE, K_NEWLINE, K_BLOB, K_EMOJI, K_HAN, K_OTHER;
/* Beyond U+FFFF (runs.py: _EMOJI_LO/_EMOJI_HI, _HAN_EXT_LO/_HAN_EXT_HI): emoji in [lo, hi), Han in
   [lo, hi], everything else other. */
static unsigned int EMOJI_LO, EMOJI_HI, HAN_EXT_LO, HAN_EXT_HI;

typedef struct {
    int64_t runs[MAX_KINDS];
    int64_t chars[MAX_KINDS];
    int64_t gaps;
} Counts;

/* Kind of code point c (any value a str holds: 0 .. 0x10FFFF). */
static inline int kind_of(Py_UCS4 c) {
    if (c < 0x10000) return table[c];
    if (c >= EMOJI_LO && c < EMOJI_HI) return K_EMOJI;
    if (c >= HAN_EXT_LO && c <= HAN_EXT_HI) return K_HAN;
    return K_OTHER;
}

/* Re-count the runs of [start, end) (a blob chunk: no whitespace inside) and move them to the
   blob kind. */
static __attribute__((noinline)) void take_blob(int ukind, const void *data, Py_ssize_t start, Py_ssize_t end, Counts *out) {
    int prev = -1;
    for (Py_ssize_t i = start; i < end; i++) {
        int k = kind_of(PyUnicode_READ(ukind, data, i));
        out->chars[k] -= 1;
        out->runs[k] -= (k != prev);
        prev = k;
    }
    out->runs[K_BLOB] += 1;
    out->chars[K_BLOB] += (int64_t)(end - start);
}

/* The blob test of runs.py::_blobs on the chunk [start, end) (no whitespace inside, >= 20
   characters, digits of them digits and alnum ASCII letters or digits): >= 2 digits, >= 75 %
   letters and digits, and hex-like (digits >= 30 % of them) or mixed case (upper and lower case
   letters each >= 25 % of the letters). */
static __attribute__((noinline)) void blob_test(int ukind, const void *data, Py_ssize_t start, Py_ssize_t end, int64_t digits,
                      int64_t alnum, Counts *out) {
    int64_t len = (int64_t)(end - start);
    if (digits < 2 || !((double)alnum >= 0.75 * (double)len)) return;
    if ((double)digits < 0.3 * (double)alnum) { /* word-like unless mixed case */
        int64_t letters = alnum - digits, upper = 0;
        for (Py_ssize_t i = start; i < end; i++) upper += (Py_UCS4)(PyUnicode_READ(ukind, data, i) - 65) < 26;
        double floor = 0.25 * (double)letters;
        if (!((double)upper >= floor && (double)(letters - upper) >= floor)) return;
    }
    take_blob(ukind, data, start, end, out);
}

#define LANES 4
#define BLOB_MIN 20
#define F_WS 1u    /* space or newline: ends a chunk */
#define F_SPACE 2u /* the space kind */
#define F_SOD 4u   /* the space or the digit kind (what may follow a gap's last space) */

/* Per kind: its flags and its increment of the packed running totals (digits in the low 32 bits,
   ASCII letters + digits in the high 32: n < 2^32, so neither half carries into the other). */
typedef struct {
    uint64_t inc;
    unsigned flags;
} KindInfo;
static KindInfo kinfo[MAX_KINDS];
/* gap_lut[h]: h holds (space, space-or-digit) of the last three characters, two bits each, the
   newest lowest; 1 when the middle one is a space that starts a run (the oldest is not a space) and
   the newest is a space or a digit: a space run of >= 2, or of 1 before a digit, costs a token. */
static unsigned char gap_lut[64];

/* The kind of a Latin-1 or BMP character (one look-up), or of any code point (kind_of). */
#define KIND_NARROW(c) ((unsigned)table[(c)])
#define KIND_WIDE(c) ((unsigned)kind_of(c))

/* One character at index I in histogram lane LANE: its kind and flags (one look-up each); its
   character count and, when a run starts, its kind's run count, in one add to a packed 64-bit
   counter (characters low, runs high) of the lane's histogram (LANES interleaved histograms, so that
   repeated kinds do not wait on each other's stores); the whitespace gaps by a look-up of the last
   three characters' flags; the running digit and letter+digit totals; at whitespace, the chunk that
   ends there enters the blob test when it has >= 20 characters (the only branch), and the next chunk
   starts after it. */
#define STEP(KIND, LANE, I)                                                                        \
    {                                                                                              \
        unsigned k = KIND(s[I]);                                                                   \
        const KindInfo *ki = &kinfo[k];                                                            \
        unsigned f = ki->flags;                                                                    \
        hist[LANE][k] += 1u | ((uint64_t)(k != prev) << 32);                                       \
        h = ((h << 2) | ((f >> 1) & 3u)) & 63u;                                                    \
        gaps += gap_lut[h];                                                                        \
        tot += ki->inc;                                                                            \
        if ((f & F_WS) && (I) - start >= BLOB_MIN) {                                               \
            uint64_t d = tot - tot0;                                                               \
            blob_test(ukind, data, start, (I), (int64_t)(uint32_t)d, (int64_t)(d >> 32), out);     \
        }                                                                                          \
        start = (f & F_WS) ? (I) + 1 : start;                                                      \
        tot0 = (f & F_WS) ? tot : tot0;                                                            \
        prev = k;                                                                                  \
    }

#define SCAN_BODY(CHAR_T, KIND)                                                                    \
    {                                                                                              \
        const CHAR_T *s = (const CHAR_T *)data;                                                    \
        unsigned prev = MAX_KINDS, h = 0;                                                          \
        Py_ssize_t start = 0, i = 0;  /* the current chunk starts at start */                      \
        uint64_t tot = 0, tot0 = 0;   /* packed digit and letter+digit totals: now, at start */    \
        for (; i + LANES <= n; i += LANES) {                                                       \
            STEP(KIND, 0, i)                                                                       \
            STEP(KIND, 1, i + 1)                                                                   \
            STEP(KIND, 2, i + 2)                                                                   \
            STEP(KIND, 3, i + 3)                                                                   \
        }                                                                                          \
        for (; i < n; i++) STEP(KIND, 0, i)                                                        \
        if (n - start >= BLOB_MIN) {                                                               \
            uint64_t d = tot - tot0;                                                               \
            blob_test(ukind, data, start, n, (int64_t)(uint32_t)d, (int64_t)(d >> 32), out);       \
        }                                                                                          \
    }

static void scan(PyObject *text, Counts *out) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int ukind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    uint64_t hist[LANES][MAX_KINDS]; /* per kind: characters (low 32 bits), runs (high 32); n < 2^32 */
    int64_t gaps = 0;
    memset(out, 0, sizeof(*out));
    memset(hist, 0, sizeof(hist));
    switch (ukind) {
    case PyUnicode_1BYTE_KIND:
        SCAN_BODY(Py_UCS1, KIND_NARROW)
        break;
    case PyUnicode_2BYTE_KIND:
        SCAN_BODY(Py_UCS2, KIND_NARROW)
        break;
    default:
        SCAN_BODY(Py_UCS4, KIND_WIDE)
        break;
    }
    /* blob_test subtracted from out->runs / out->chars; add the histograms */
    for (int k = 0; k < n_kinds; k++) {
        for (int l = 0; l < LANES; l++) {
            out->chars[k] += (int64_t)(hist[l][k] & 0xFFFFFFFFu);
            out->runs[k] += (int64_t)(hist[l][k] >> 32);
        }
    }
    out->gaps = gaps;
}

static PyObject *py_configure(PyObject *self, PyObject *args) {
    Py_buffer tbl;
    int nk;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*i(iiiiiiiii)(IIII)", &tbl, &nk, &K_LETTER, &K_DIGIT, &K_PUNCT, &K_SPACE,
                          &K_NEWLINE, &K_BLOB, &K_EMOJI, &K_HAN, &K_OTHER, &EMOJI_LO, &EMOJI_HI, &HAN_EXT_LO,
                          &HAN_EXT_HI))
        return NULL;
    if (tbl.len != 0x10000 || nk <= 0 || nk > MAX_KINDS) {
        PyBuffer_Release(&tbl);
        PyErr_SetString(PyExc_ValueError, "configure: a 65,536-byte table and 1..64 kinds");
        return NULL;
    }
    const unsigned char *t = (const unsigned char *)tbl.buf;
    for (Py_ssize_t i = 0; i < 0x10000; i++) {
        if (t[i] >= nk) {
            PyBuffer_Release(&tbl);
            PyErr_SetString(PyExc_ValueError, "configure: table entry out of range");
            return NULL;
        }
    }
    int codes[] = {K_LETTER, K_DIGIT, K_PUNCT, K_SPACE, K_NEWLINE, K_BLOB, K_EMOJI, K_HAN, K_OTHER};
    for (size_t j = 0; j < sizeof(codes) / sizeof(codes[0]); j++) {
        if (codes[j] < 0 || codes[j] >= nk) {
            PyBuffer_Release(&tbl);
            PyErr_SetString(PyExc_ValueError, "configure: kind code out of range");
            return NULL;
        }
    }
    memcpy(table, t, 0x10000);
    PyBuffer_Release(&tbl);
    memset(kinfo, 0, sizeof(kinfo));
    kinfo[K_SPACE].flags = F_WS | F_SPACE | F_SOD;
    kinfo[K_NEWLINE].flags = F_WS;
    kinfo[K_DIGIT].flags = F_SOD;
    kinfo[K_DIGIT].inc = 1u | ((uint64_t)1 << 32);
    kinfo[K_LETTER].inc = (uint64_t)1 << 32;
    for (unsigned hh = 0; hh < 64; hh++) {
        unsigned newest_sod = (hh >> 1) & 1u, mid_space = (hh >> 2) & 1u, oldest_space = (hh >> 4) & 1u;
        gap_lut[hh] = (unsigned char)(mid_space & ~oldest_space & newest_sod & 1u);
    }
    n_kinds = nk;
    configured = 1;
    Py_RETURN_NONE;
}

static PyObject *py_count_runs(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "count_runs: a str");
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "count_runs: configure() first");
        return NULL;
    }
    if ((uint64_t)PyUnicode_GET_LENGTH(arg) > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "count_runs: over 2**32 characters");
        return NULL;
    }
    Counts c;
    scan(arg, &c);  /* the GIL stays held: a 100 KB text takes ~0.1 ms, less than a GIL hand-over */
    /* runs[n_kinds], chars[n_kinds], gaps as little-endian-native int64 in one bytes object */
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizeof(int64_t) * (2 * n_kinds + 1)));
    if (out == NULL) return NULL;
    int64_t *p = (int64_t *)PyBytes_AS_STRING(out);
    memcpy(p, c.runs, sizeof(int64_t) * n_kinds);
    memcpy(p + n_kinds, c.chars, sizeof(int64_t) * n_kinds);
    p[2 * n_kinds] = c.gaps;
    return out;
}

static PyObject *py_utf8_length(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "utf8_length: a str");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    int ukind = PyUnicode_KIND(arg);
    const void *data = PyUnicode_DATA(arg);
    int64_t total = (int64_t)n;
    if (ukind == PyUnicode_1BYTE_KIND) {
        if (PyUnicode_IS_ASCII(arg)) return PyLong_FromSsize_t(n);
        const Py_UCS1 *s = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++) total += s[i] >> 7;
    } else if (ukind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *s = (const Py_UCS2 *)data;
        for (Py_ssize_t i = 0; i < n; i++) total += (s[i] >= 0x80) + (s[i] >= 0x800);
    } else {
        const Py_UCS4 *s = (const Py_UCS4 *)data;
        for (Py_ssize_t i = 0; i < n; i++) total += (s[i] >= 0x80) + (s[i] >= 0x800) + (s[i] >= 0x10000);
    }
    return PyLong_FromLongLong((long long)total);
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(table: bytes, n_kinds: int, (letter, digit, punct, space, newline, blob, emoji, han, "
     "other), (emoji_lo, emoji_hi, han_ext_lo, han_ext_hi)) -> None: the kind of every BMP code point, "
     "the kind codes and the astral ranges (extproc.core.runs)."},
    {"count_runs", py_count_runs, METH_O,
     "count_runs(text: str) -> bytes: runs[n_kinds], chars[n_kinds], gaps as native int64."},
    {"utf8_length", py_utf8_length, METH_O, "utf8_length(text: str) -> int: UTF-8 bytes (surrogatepass)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_runscan",
    "One-pass run counts of a str (the C path of extproc.core.runs.count_runs).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__runscan(void) { return PyModule_Create(&module); }
