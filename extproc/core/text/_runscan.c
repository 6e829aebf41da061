/* One pass over a Python string's own storage (its 1-, 2- or 4-byte characters, PyUnicode_KIND): the
   run and character counts of extproc.core.text.runs, equal to runs.count_runs_numpy() and to the plain
   Python oracle tests/core/text/runs_oracle.py (tests/core/text/test_runscan.py): per run kind its maximal runs
   and characters, blobs (a chunk between whitespace that passes the blob test moves to the blob kind,
   as one run) and gaps (space runs of >= 2 characters, or of 1 before a digit run). Every rule comes
   from run_rules.py through configure(); none is written here. window_words() gives run_languages.py
   the word counts of a text's first characters.
   Kept is what buys about 5 % or more of the router's CPU per request on the benchmark bodies
   (docs/performance.md, "Run counter"; benchmarks/runscan_paths.py): the scalar pass, the SSE2
   classification of 64 ASCII characters at a time (built with and without POPCNT, picked by the CPU;
   -DRUNSCAN_NO_POPCNT builds one) and the word counts. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) /* the 64-character classification below (SSE2: every x86-64) */
#include <emmintrin.h>
#define BLOCKS 1
#else
#define BLOCKS 0
#endif
#if BLOCKS && defined(__GNUC__) && defined(__x86_64__) && !defined(RUNSCAN_NO_POPCNT)
#define POPCNT_CLONE 1 /* scan() built twice, with POPCNT and without, picked by the CPU at load */
#endif
#define INLINE static inline __attribute__((always_inline))
#define POPC(x) ((unsigned)__builtin_popcountll(x))
#define MAX_KINDS 64
#define LANES 4

static unsigned char table[0x10000];
static int blocks_on; /* the ASCII kinds are those the 64-character classification computes */
static int configured = 0, n_kinds = 0;
static int K_LETTER, K_DIGIT, K_PUNCT, K_SPACE, K_NEWLINE, K_BLOB, K_EMOJI, K_HAN, K_OTHER;
/* Beyond U+FFFF (run_rules.EMOJI_ASTRAL, HAN_ASTRAL): emoji in [lo, hi), Han in [lo, hi], else other. */
static unsigned int EMOJI_LO, EMOJI_HI, HAN_EXT_LO, HAN_EXT_HI;
/* The blob test (run_rules.BLOB_*) */
static int blob_min_chars;
static int64_t blob_min_digits;
static double blob_alnum_share, blob_digit_share, blob_case_share;

#define F_WS 1u    /* space or newline: ends a chunk */
#define F_SPACE 2u /* the space kind */
#define F_SOD 4u   /* the space or the digit kind (what may follow a gap's last space) */
/* Per kind: its flags and its increment of the packed running totals (digits in the low 32 bits,
   ASCII letters + digits in the high 32: n < 2^32, so neither half carries into the other). */
static struct { uint64_t inc; unsigned flags; } kinfo[MAX_KINDS];

/* gap_lut[h]: 1 when the middle of the last three characters is a space that starts a run and the
   newest is a space or a digit (h: Pass.h) */
static unsigned char gap_lut[64];

typedef struct { int64_t runs[MAX_KINDS], chars[MAX_KINDS], gaps; } Counts;

/* The state of one pass: the text, the counts so far, the current chunk. */
typedef struct {
    int ukind;
    const void *data;
    Counts *out;                 /* blob_test moves runs and characters here */
    uint64_t (*hist)[MAX_KINDS]; /* [LANES][kind]: characters (low 32 bits), runs (high 32), n < 2^32; in
                                    LANES copies, so that a kind repeated does not wait on its own store */
    int64_t gaps;
    unsigned prev, h;            /* the last character's kind; the space / space-or-digit flags of the
                                    last three (two bits each, the newest lowest) */
    Py_ssize_t start;            /* the current chunk starts here */
    uint64_t tot, tot0;          /* packed digit and letter+digit totals: now, at start */
} Pass;

/* Kind of code point c (any value a str holds: 0 .. 0x10FFFF). */
INLINE unsigned kind_of(Py_UCS4 c) {
    if (c < 0x10000) return table[c];
    if (c >= EMOJI_LO && c < EMOJI_HI) return (unsigned)K_EMOJI;
    if (c >= HAN_EXT_LO && c <= HAN_EXT_HI) return (unsigned)K_HAN;
    return (unsigned)K_OTHER;
}

/* The blob test of run_rules.py on the chunk [start, end) (no whitespace inside, at least
   blob_min_chars characters; d: its digits and ASCII letters + digits, packed as kinfo's inc); a
   blob's runs and characters are re-counted and moved to the blob kind. */
static __attribute__((noinline)) void blob_test(int ukind, const void *data, Counts *out, Py_ssize_t start,
                                                Py_ssize_t end, uint64_t d) {
    int64_t len = (int64_t)(end - start), digits = (int64_t)(uint32_t)d, alnum = (int64_t)(d >> 32);
    if (digits < blob_min_digits || !((double)alnum >= blob_alnum_share * (double)len)) return;
    if ((double)digits < blob_digit_share * (double)alnum) { /* word-like unless mixed case */
        int64_t letters = alnum - digits, upper = 0;
        for (Py_ssize_t i = start; i < end; i++) upper += (Py_UCS4)(PyUnicode_READ(ukind, data, i) - 65) < 26;
        double floor = blob_case_share * (double)letters;
        if (!((double)upper >= floor && (double)(letters - upper) >= floor)) return;
    }
    int prev = -1;
    for (Py_ssize_t i = start; i < end; i++) {
        int k = (int)kind_of(PyUnicode_READ(ukind, data, i));
        out->chars[k] -= 1;
        out->runs[k] -= (k != prev);
        prev = k;
    }
    out->runs[K_BLOB] += 1;
    out->chars[K_BLOB] += len;
}

/* The scalar step: character I of kind k. Its character count and, when a run starts, its kind's run
   count in one add; the gaps from the flags of the last three characters (the middle one a space that
   starts a run, the newest a space or a digit); the running totals; at whitespace, the chunk that ends
   there enters the blob test when it is long enough (the only branch). */
INLINE void step(Pass *p, unsigned k, Py_ssize_t i, int lane) {
    unsigned f = kinfo[k].flags, h;
    p->hist[lane][k] += 1u | ((uint64_t)(k != p->prev) << 32);
    p->h = h = ((p->h << 2) | ((f >> 1) & 3u)) & 63u;
    p->gaps += gap_lut[h];
    p->tot += kinfo[k].inc;
    if ((f & F_WS) && i - p->start >= blob_min_chars) blob_test(p->ukind, p->data, p->out, p->start, i, p->tot - p->tot0);
    p->start = (f & F_WS) ? i + 1 : p->start;
    p->tot0 = (f & F_WS) ? p->tot : p->tot0;
    p->prev = k;
}

/* The kind of character i of a text of width w (1, 2 or 4 bytes: PyUnicode_KIND). */
INLINE unsigned kind_at(int w, const void *data, Py_ssize_t i) {
    if (w == 4) return kind_of(((const Py_UCS4 *)data)[i]);
    return table[w == 1 ? ((const Py_UCS1 *)data)[i] : ((const Py_UCS2 *)data)[i]];
}

/* Scalar steps over [i, e) of a text of width w. */
INLINE void steps(Pass *p, int w, Py_ssize_t i, Py_ssize_t e) {
    for (; i + LANES <= e; i += LANES) {
        for (int l = 0; l < LANES; l++) step(p, kind_at(w, p->data, i + l), i + l, l);
    }
    for (; i < e; i++) step(p, kind_at(w, p->data, i), i, 0);
}

#if BLOCKS
/* The 64-character classification. Most text is long stretches of ASCII letters, digits, punctuation,
   spaces and newlines: SIMD compares give one 64-bit mask per ASCII kind of the longest ASCII prefix
   of the next 64 characters, and every count of the scalar steps follows from the masks by shifts and
   popcounts, exactly (runs: a mask's bits less the mask shifted by one). The first non-ASCII character
   takes the scalar step. Needs the ASCII kinds of run_rules.py (checked at configure(): blocks_on). */
typedef uint64_t bits_t; /* bit t: character t of the 64 */
typedef struct { bits_t ascii, nl, sp, dig, let; } Masks;

/* 16 characters of any width narrowed to 16 bytes that keep ASCII and make the rest >= 0x80:
   2 bytes: saturating v + 0x7F80 then the sign flip make ASCII -128..-1 and the rest 0..0x7FFF, the
   signed pack keeps or clamps it to 127; 4 bytes: v - 0x80 is -128..-1 for ASCII, >= 0 for the rest
   (< 2^21), the signed packs keep or clamp it; flipping bit 7 restores ASCII. */
INLINE __m128i narrow16(int w, const void *data, Py_ssize_t i) {
    const __m128i *q = (const __m128i *)((const char *)data + i * w);
    if (w == PyUnicode_1BYTE_KIND) return _mm_loadu_si128(q);
    if (w == PyUnicode_2BYTE_KIND) {
        const __m128i off = _mm_set1_epi16(0x7F80), sgn = _mm_set1_epi16((short)0x8000);
        __m128i a = _mm_xor_si128(_mm_adds_epu16(_mm_loadu_si128(q), off), sgn);
        __m128i b = _mm_xor_si128(_mm_adds_epu16(_mm_loadu_si128(q + 1), off), sgn);
        return _mm_xor_si128(_mm_packs_epi16(a, b), _mm_set1_epi8((char)0x80));
    }
    const __m128i o = _mm_set1_epi32(0x80);
    __m128i v0 = _mm_sub_epi32(_mm_loadu_si128(q), o), v1 = _mm_sub_epi32(_mm_loadu_si128(q + 1), o);
    __m128i v2 = _mm_sub_epi32(_mm_loadu_si128(q + 2), o), v3 = _mm_sub_epi32(_mm_loadu_si128(q + 3), o);
    __m128i v = _mm_packs_epi16(_mm_packs_epi32(v0, v1), _mm_packs_epi32(v2, v3));
    return _mm_xor_si128(v, _mm_set1_epi8((char)0x80));
}

#define SET(c) _mm_set1_epi8((char)(c))
#define LE8(v, c) _mm_cmpeq_epi8(_mm_subs_epu8((v), SET(c)), _mm_setzero_si128())
#define EQ8(v, c) _mm_cmpeq_epi8((v), SET(c))
#define BITS(x, t) ((bits_t)(unsigned)_mm_movemask_epi8(x) << (16 * (t)))
INLINE Masks masks64(int w, const void *data, Py_ssize_t i) {
    Masks m = {0, 0, 0, 0, 0};
    for (int t = 0; t < 4; t++) {
        __m128i v = narrow16(w, data, i + 16 * t);
        __m128i nl = _mm_or_si128(EQ8(v, 0x0A), EQ8(v, 0x0D));
        __m128i sp = _mm_or_si128(_mm_andnot_si128(nl, LE8(v, 0x1F)), _mm_or_si128(EQ8(v, 0x20), EQ8(v, 0x7F)));
        m.ascii |= BITS(LE8(v, 0x7F), t);
        m.nl |= BITS(nl, t);
        m.sp |= BITS(sp, t);
        m.dig |= BITS(LE8(_mm_sub_epi8(v, SET('0')), 9), t);
        m.let |= BITS(LE8(_mm_sub_epi8(_mm_or_si128(v, SET(0x20)), SET('a')), 25), t);
    }
    return m;
}

INLINE void kind_add(Pass *p, int kind, bits_t m) {
    bits_t starts = m & ~((m << 1) | (bits_t)(p->prev == (unsigned)kind));
    p->hist[0][kind] += POPC(m) | ((uint64_t)POPC(starts) << 32);
}

/* Counts the longest ASCII prefix (up to 64 characters) from index I; returns its length. */
INLINE unsigned block(Pass *p, int w, Py_ssize_t I) {
    Masks m = masks64(w, p->data, I);
    unsigned j = ~m.ascii ? (unsigned)__builtin_ctzll(~m.ascii) : 64u;
    if (!j) return 0;
    bits_t lim = j == 64u ? ~(bits_t)0 : ((bits_t)1 << j) - 1u;
    bits_t sp = m.sp & lim, nl = m.nl & lim, dg = m.dig & lim, lt = m.let & lim;
    bits_t ws = sp | nl, an = dg | lt, pu = lim & ~(ws | an);
    /* a gap at t: t - 1 is a space, t - 2 is not, t is a space or a digit (the two before from h) */
    bits_t p1 = (sp << 1) | (p->h & 1u), p2 = (sp << 2) | ((p->h & 1u) << 1) | ((p->h >> 2) & 1u);
    p->gaps += POPC(p1 & ~p2 & (sp | dg));
#define PACKED(m) (POPC(dg & (m)) + ((uint64_t)POPC(an & (m)) << 32)) /* as kinfo's inc, of the bits m */
    if (ws) { /* the chunks that end at whitespace here and are long: the blob test */
        int bmc = blob_min_chars;
        bits_t y = ~ws; /* y: bit t when t .. t + have - 1 are not whitespace */
        for (int have = 1; have < bmc;) {
            int sh = have < bmc - have ? have : bmc - have;
            y &= y >> sh;
            have += sh;
        }
        /* whitespace after a long chunk that starts here, and the first (its chunk may start before) */
        bits_t ends = ((y << bmc) & ws) | (ws & (~ws + 1u));
        while (ends) {
            unsigned e = (unsigned)__builtin_ctzll(ends);
            ends &= ends - 1u;
            bits_t before = ws & (((bits_t)1 << e) - 1u);
            Py_ssize_t s = p->start; /* the chunk starts before this block, or after the whitespace before e */
            uint64_t base = p->tot0;
            if (before) {
                unsigned q = 63u - (unsigned)__builtin_clzll(before);
                s = I + q + 1;
                base = p->tot + PACKED(((bits_t)2 << q) - 1u);
            }
            if (I + (Py_ssize_t)e - s >= bmc) blob_test(p->ukind, p->data, p->out, s, I + e, p->tot + PACKED(((bits_t)1 << e) - 1u) - base);
        }
        unsigned last = 63u - (unsigned)__builtin_clzll(ws);
        p->tot0 = p->tot + PACKED(((bits_t)1 << last) - 1u);
        p->start = I + (Py_ssize_t)last + 1;
    }
    p->tot += PACKED(~(bits_t)0);
    kind_add(p, K_SPACE, sp);
    kind_add(p, K_NEWLINE, nl);
    kind_add(p, K_DIGIT, dg);
    kind_add(p, K_LETTER, lt);
    kind_add(p, K_PUNCT, pu);
    for (unsigned t = j > 3u ? j - 3u : 0u; t < j; t++)
        p->h = ((p->h << 2) | (unsigned)((sp >> t) & 1u) | (unsigned)((((sp | dg) >> t) & 1u) << 1)) & 63u;
    unsigned t = j - 1u; /* the kind of the prefix's last character (one mask holds it) */
    p->prev = (unsigned)(((sp >> t) & 1u) * (unsigned)K_SPACE + ((nl >> t) & 1u) * (unsigned)K_NEWLINE +
                         ((dg >> t) & 1u) * (unsigned)K_DIGIT + ((lt >> t) & 1u) * (unsigned)K_LETTER +
                         ((pu >> t) & 1u) * (unsigned)K_PUNCT);
    return j;
}
#endif

/* The pass over a text of width w: 64-character blocks while they hold ASCII (a block that stops
   early hands one character to the scalar step; dense non-ASCII text takes 16 .. 64 scalar steps,
   longer after each failure in a row), then scalar steps to the end. */
INLINE void scan_width(Pass *p, int w, Py_ssize_t n) {
    Py_ssize_t i = 0;
#if BLOCKS
    Py_ssize_t backoff = 16;
    while (blocks_on && i + 64 <= n) {
        unsigned j = block(p, w, i);
        i += j;
        if (j == 64u) {
            backoff = 16;
        } else if (j >= 2u) {
            steps(p, w, i, i + 1);
            i++;
        } else {
            Py_ssize_t e = i + backoff < n ? i + backoff : n;
            steps(p, w, i, e);
            i = e;
            backoff = backoff < 64 ? 2 * backoff : 64;
        }
    }
#endif
    steps(p, w, i, n);
    if (n - p->start >= blob_min_chars) blob_test(p->ukind, p->data, p->out, p->start, n, p->tot - p->tot0);
}

#ifdef POPCNT_CLONE
__attribute__((target_clones("popcnt", "default")))
#endif
static void scan(PyObject *text, Py_ssize_t start, Py_ssize_t n, Counts *out) { /* characters [start, start + n) */
    uint64_t hist[LANES][MAX_KINDS];
    memset(hist, 0, sizeof(hist));
    memset(out, 0, sizeof(*out));
    int ukind = PyUnicode_KIND(text);
    const void *data = (const char *)PyUnicode_DATA(text) + start * ukind;
    Pass p = {.ukind = ukind, .data = data, .out = out, .hist = hist, .prev = MAX_KINDS};
    if (p.ukind == PyUnicode_1BYTE_KIND) scan_width(&p, PyUnicode_1BYTE_KIND, n);
    else if (p.ukind == PyUnicode_2BYTE_KIND) scan_width(&p, PyUnicode_2BYTE_KIND, n);
    else scan_width(&p, PyUnicode_4BYTE_KIND, n);
    for (int k = 0; k < n_kinds; k++) { /* blob_test subtracted from out; add the histograms */
        for (int l = 0; l < LANES; l++) out->chars[k] += (int64_t)(hist[l][k] & 0xFFFFFFFFu);
        for (int l = 0; l < LANES; l++) out->runs[k] += (int64_t)(hist[l][k] >> 32);
    }
    out->gaps = p.gaps;
}

static PyObject *py_configure(PyObject *self, PyObject *args) {
    Py_buffer tbl;
    int nk;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*i(iiiiiiiii)(IIII)(iLddd)", &tbl, &nk, &K_LETTER, &K_DIGIT, &K_PUNCT, &K_SPACE,
                          &K_NEWLINE, &K_BLOB, &K_EMOJI, &K_HAN, &K_OTHER, &EMOJI_LO, &EMOJI_HI, &HAN_EXT_LO,
                          &HAN_EXT_HI, &blob_min_chars, &blob_min_digits, &blob_alnum_share, &blob_digit_share,
                          &blob_case_share))
        return NULL;
    configured = 0;
    const unsigned char *t = (const unsigned char *)tbl.buf;
    int codes[] = {K_LETTER, K_DIGIT, K_PUNCT, K_SPACE, K_NEWLINE, K_BLOB, K_EMOJI, K_HAN, K_OTHER};
    int bad = tbl.len != 0x10000 || nk <= 0 || nk > MAX_KINDS || blob_min_chars < 2 || blob_min_chars > 63;
    for (size_t j = 0; j < sizeof(codes) / sizeof(codes[0]); j++) bad |= codes[j] < 0 || codes[j] >= nk;
    for (Py_ssize_t i = 0; !bad && i < 0x10000; i++) bad |= t[i] >= nk;
    if (!bad) memcpy(table, t, 0x10000);
    PyBuffer_Release(&tbl);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "configure: a 65,536-byte table of kinds < n_kinds (1..64), kind codes "
                                          "< n_kinds, a blob of 2..63 characters at least");
        return NULL;
    }
    memset(kinfo, 0, sizeof(kinfo));
    kinfo[K_SPACE].flags = F_WS | F_SPACE | F_SOD;
    kinfo[K_NEWLINE].flags = F_WS;
    kinfo[K_DIGIT].flags = F_SOD;
    kinfo[K_DIGIT].inc = 1u | ((uint64_t)1 << 32);
    kinfo[K_LETTER].inc = (uint64_t)1 << 32;
    blocks_on = 1; /* the ASCII layout the 64-character classification computes */
    for (unsigned c = 0; c < 0x80u; c++) {
        int want = c == '\n' || c == '\r'     ? K_NEWLINE
                   : c <= 0x20u || c == 0x7Fu ? K_SPACE
                   : c - '0' < 10u            ? K_DIGIT
                   : (c | 0x20u) - 'a' < 26u  ? K_LETTER
                                              : K_PUNCT;
        blocks_on &= table[c] == (unsigned char)want;
    }
    for (unsigned h = 0; h < 64; h++) gap_lut[h] = (h >> 2) & ~(h >> 4) & (h >> 1) & 1u;
    n_kinds = nk;
    configured = 1;
    /* the pass count_runs runs: the 64-character classification with POPCNT or without, or scalar
       steps only (no SSE2, or another ASCII layout than run_rules.py's) */
    if (!BLOCKS || !blocks_on) return PyUnicode_FromString("scalar");
#ifdef POPCNT_CLONE
    if (__builtin_cpu_supports("popcnt")) return PyUnicode_FromString("sse2+popcnt");
#endif
    return PyUnicode_FromString("sse2");
}

static PyObject *py_count_runs(PyObject *self, PyObject *args) {
    PyObject *arg;
    Py_ssize_t start = 0, end = PY_SSIZE_T_MAX;
    (void)self;
    if (!PyArg_ParseTuple(args, "O|nn", &arg, &start, &end)) return NULL;
    int is_str = PyUnicode_Check(arg);
    if (!is_str || !configured || (uint64_t)PyUnicode_GET_LENGTH(arg) > UINT32_MAX) {
        PyErr_SetString(!is_str ? PyExc_TypeError : !configured ? PyExc_RuntimeError : PyExc_OverflowError,
                        "count_runs: a str of under 2**32 characters, after configure()");
        return NULL;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(arg); /* [start, end) clamped to the text, as a slice */
    start = start < 0 ? 0 : start > len ? len : start;
    end = end > len ? len : end < start ? start : end;
    Counts c;
    scan(arg, start, end - start, &c); /* the GIL stays held: 100 KB take ~0.1 ms, less than a GIL hand-over */
    /* runs[n_kinds], chars[n_kinds], gaps as native int64 in one bytes object */
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizeof(int64_t) * (2 * n_kinds + 1)));
    if (out == NULL) return NULL;
    int64_t *p = (int64_t *)PyBytes_AS_STRING(out);
    memcpy(p, c.runs, sizeof(int64_t) * n_kinds);
    memcpy(p + n_kinds, c.chars, sizeof(int64_t) * n_kinds);
    p[2 * n_kinds] = c.gaps;
    return out;
}

/* ---- run_languages.window_words: the word counts of a text's first characters (the Python code
   there is the reference these equal, tests/core/text/test_runscan.py). ---- */

#define WORD_SETS 4
#define MAX_WORD_LEN 16
#define WORD_SLOTS 512 /* open addressing, at most half full */
typedef struct {
    int len;       /* 0: an empty slot */
    unsigned sets; /* bit s: a word of set s */
    Py_UCS4 ch[MAX_WORD_LEN];
} Word;
static Word words[WORD_SLOTS];
static int n_words = 0, n_word_sets = 0; /* the highest configured set id + 1 */
static Py_ssize_t max_word_len = 0;

/* The slot of w[0..len): the word's, or the empty one where it would go. */
static Word *word_slot(const Py_UCS4 *w, Py_ssize_t len) {
    unsigned h = (unsigned)len * 2654435761u;
    for (Py_ssize_t t = 0; t < len; t++) h = (h ^ (unsigned)w[t]) * 16777619u;
    for (h = (h >> 8) & (WORD_SLOTS - 1);; h = (h + 1) & (WORD_SLOTS - 1)) {
        Word *e = &words[h];
        if (!e->len || (e->len == len && !memcmp(e->ch, w, sizeof(Py_UCS4) * (size_t)len))) return e;
    }
}

typedef struct {
    long counts[WORD_SETS];
    Py_ssize_t last_tok[WORD_SETS]; /* the index of the set's last counted token */
    const Word *last[WORD_SETS];    /* and its word */
} WordCounts;

/* The token [b, b + len) (token index `token`, between two spaces): lower-cased, and counted for
   every set holding it unless it repeats the set's last counted token right before it ("w w": the
   middle space is shared, str.count counts one). Characters are lower-cased one by one
   (Py_UNICODE_TOLOWER); str.lower differs from that only for U+0130 (to "i" + U+0307) and a final
   sigma (to U+03C2), neither in any word: a token holding them is no word either way. */
static void count_token(int ukind, const void *data, Py_ssize_t b, Py_ssize_t len, Py_ssize_t token, WordCounts *wc) {
    Py_UCS4 tok[MAX_WORD_LEN];
    for (Py_ssize_t t = 0; t < len; t++) {
        Py_UCS4 c = PyUnicode_READ(ukind, data, b + t);
        if (c == 0x130 || c == 0x3A3) return;
        tok[t] = c < 0x80 ? (c - 'A' < 26u ? c + 32u : c) : Py_UNICODE_TOLOWER(c);
    }
    const Word *e = word_slot(tok, len);
    for (int set = 0; set < n_word_sets; set++) {
        if (!((e->sets >> set) & 1u) || (token == wc->last_tok[set] + 1 && wc->last[set] == e)) continue;
        wc->counts[set]++;
        wc->last_tok[set] = token;
        wc->last[set] = e;
    }
}

/* (spaces, then per word set 0 .. n_word_sets - 1 the occurrences of " w " for its words w in the
   lower-cased first n characters, as sum(window.count(f" {w} ") for w in words) counts them). */
static PyObject *py_window_words(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "Un", &text, &limit)) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (limit < n) n = limit < 0 ? 0 : limit;
    int ukind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    WordCounts wc;
    memset(&wc, 0, sizeof(wc));
    for (int set = 0; set < WORD_SETS; set++) wc.last_tok[set] = -2;
    long spaces = 0;
    Py_ssize_t token = 0, prev_space = -1; /* index of the token a space ends; the last space */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyUnicode_READ(ukind, data, i) != ' ') continue;
        Py_ssize_t len = i - prev_space - 1;
        if (prev_space >= 0 && len >= 1 && len <= max_word_len) count_token(ukind, data, prev_space + 1, len, token, &wc);
        token++;
        prev_space = i;
        spaces++;
    }
    PyObject *out = PyTuple_New(1 + n_word_sets);
    for (int t = 0; out != NULL && t <= n_word_sets; t++) {
        PyObject *v = PyLong_FromLong(t == 0 ? spaces : wc.counts[t - 1]);
        if (v == NULL) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, t, v);
    }
    return out;
}

static PyObject *py_configure_words(PyObject *self, PyObject *args) {
    int set_id;
    PyObject *ws;
    (void)self;
    if (!PyArg_ParseTuple(args, "iO!", &set_id, &PyTuple_Type, &ws)) return NULL;
    if (set_id < 0 || set_id >= WORD_SETS || n_words + PyTuple_GET_SIZE(ws) > WORD_SLOTS / 2) {
        PyErr_SetString(PyExc_ValueError, "configure_words: set 0..3, at most 256 words in all");
        return NULL;
    }
    for (int i = 0; i < WORD_SLOTS; i++) words[i].sets &= ~(1u << set_id); /* the set holds these words only */
    for (Py_ssize_t w = 0; w < PyTuple_GET_SIZE(ws); w++) {
        PyObject *word = PyTuple_GET_ITEM(ws, w);
        Py_UCS4 ch[MAX_WORD_LEN];
        Py_ssize_t len = PyUnicode_Check(word) ? PyUnicode_GET_LENGTH(word) : 0;
        for (Py_ssize_t t = 0; t < len && t < MAX_WORD_LEN; t++) ch[t] = PyUnicode_READ_CHAR(word, t);
        if (len < 1 || len > MAX_WORD_LEN || PyUnicode_FindChar(word, ' ', 0, len, 1) != -1) {
            for (int i = 0; i < WORD_SLOTS; i++) words[i].sets &= ~(1u << set_id); /* left empty */
            PyErr_SetString(PyExc_ValueError, "configure_words: words of 1..16 characters without spaces");
            return NULL;
        }
        Word *e = word_slot(ch, len);
        if (!e->len) {
            e->len = (int)len;
            memcpy(e->ch, ch, sizeof(Py_UCS4) * (size_t)len);
            n_words++;
        }
        e->sets |= 1u << set_id;
        max_word_len = len > max_word_len ? len : max_word_len;
    }
    if (set_id >= n_word_sets) n_word_sets = set_id + 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = { /* signatures and errors: _runscan.pyi */
    {"configure", py_configure, METH_VARARGS, "The rules of extproc.core.text.run_rules; returns the pass count_runs runs."},
    {"count_runs", py_count_runs, METH_VARARGS, "runs[n_kinds], chars[n_kinds], gaps of text[start:end], int64."},
    {"configure_words", py_configure_words, METH_VARARGS, "Word set 0..3 of window_words."},
    {"window_words", py_window_words, METH_VARARGS, "The spaces of text[:n] and per word set its words' "
                                                    "occurrences ' w ' in text[:n].lower(), as str.count counts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runscan",
                                    "One-pass run counts of a str (the C path of extproc.core.text.runs.count_runs).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__runscan(void) { return PyModule_Create(&module); }
