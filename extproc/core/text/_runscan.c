/* One pass over a Python string's own storage: the run and character counts of extproc.core.text.runs.

   count_runs() computes, in one C loop over the str's 1-, 2- or 4-byte characters (PyUnicode_KIND),
   without encoding the text, what runs.count_runs_numpy() computes by numpy passes and the test
   oracle (tests/core/text/runs_oracle.py) by plain Python:

     * runs[k], chars[k]: maximal runs and characters of each run kind, the character kinds taken
       from the table that runs.py builds from run_rules.py (configure());
     * blobs: a chunk (the characters between two whitespace runs) that passes the blob test of
       run_rules.py (its thresholds are given by configure(): none is written here) moves all its
       runs and characters to the blob kind (one run);
     * gaps: space runs of >= 2 characters, and single-space runs followed by a digit run.

   utf8_length() gives chat_messages.py the UTF-8 bytes of a text, window_words() gives
   run_languages.py the word counts of a text's first characters.

   What is here is what buys about 5 % or more of the router's CPU per request on the benchmark
   bodies (docs/performance.md, "Run counter"; benchmarks/runscan_paths.py measures each part): the
   scalar pass, the SSE2 pass over 64 ASCII characters at a time (with a POPCNT build picked at run
   time; -DRUNSCAN_NO_POPCNT leaves it out), the UTF-8 length and the word counts. Equality with the
   numpy path and the oracle: tests/core/text/test_runscan.py. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define BLOCKS 1 /* the 64-character pass below (SSE2: every x86-64) */
#else
#define BLOCKS 0
#endif

#define MAX_KINDS 64

static unsigned char table[0x10000];
static int blocks_on; /* the ASCII kinds are runs.py's (the 64-character pass computes them by compares) */
static int configured = 0;
static int n_kinds = 0;
static int K_LETTER, K_DIGIT, K_PUNCT, K_SPACE, K_NEWLINE, K_BLOB, K_EMOJI, K_HAN, K_OTHER;
/* Beyond U+FFFF (run_rules.EMOJI_ASTRAL, HAN_ASTRAL): emoji in [lo, hi), Han in [lo, hi], else other. */
static unsigned int EMOJI_LO, EMOJI_HI, HAN_EXT_LO, HAN_EXT_HI;
/* The blob test (run_rules.BLOB_*) */
static int blob_min_chars;
static int64_t blob_min_digits;
static double blob_alnum_share, blob_digit_share, blob_case_share;

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

/* The blob test of run_rules.py on the chunk [start, end) (no whitespace inside, at least
   blob_min_chars characters; digits: its digits, alnum: its ASCII letters and digits). */
static __attribute__((noinline)) void blob_test(int ukind, const void *data, Py_ssize_t start, Py_ssize_t end, int64_t digits,
                      int64_t alnum, Counts *out) {
    int64_t len = (int64_t)(end - start);
    if (digits < blob_min_digits || !((double)alnum >= blob_alnum_share * (double)len)) return;
    if ((double)digits < blob_digit_share * (double)alnum) { /* word-like unless mixed case */
        int64_t letters = alnum - digits, upper = 0;
        for (Py_ssize_t i = start; i < end; i++) upper += (Py_UCS4)(PyUnicode_READ(ukind, data, i) - 65) < 26;
        double floor = blob_case_share * (double)letters;
        if (!((double)upper >= floor && (double)(letters - upper) >= floor)) return;
    }
    take_blob(ukind, data, start, end, out);
}

#define LANES 4
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
   ends there enters the blob test when it is long enough (the only branch). */
#define STEP(KIND, LANE, I)                                                                        \
    {                                                                                              \
        unsigned k = KIND(s[I]);                                                                   \
        const KindInfo *ki = &kinfo[k];                                                            \
        unsigned f = ki->flags;                                                                    \
        hist[LANE][k] += 1u | ((uint64_t)(k != prev) << 32);                                       \
        h = ((h << 2) | ((f >> 1) & 3u)) & 63u;                                                    \
        gaps += gap_lut[h];                                                                        \
        tot += ki->inc;                                                                            \
        if ((f & F_WS) && (I) - start >= blob_min_chars) {                                         \
            uint64_t d = tot - tot0;                                                               \
            blob_test(ukind, data, start, (I), (int64_t)(uint32_t)d, (int64_t)(d >> 32), out);     \
        }                                                                                          \
        start = (f & F_WS) ? (I) + 1 : start;                                                      \
        tot0 = (f & F_WS) ? tot : tot0;                                                            \
        prev = k;                                                                                  \
    }

#define BLOCK_CHARS 64u /* characters of one block of the SSE2 pass (bits of a mask) */
#define BACKOFF_MAX 64  /* the most scalar steps after a failed block in a row (dense non-ASCII text) */
#define JUMP_MIN 2u     /* a prefix at least this long retries after one scalar step */

#if BLOCKS
/* The 64-character pass. Most text is long stretches of ASCII letters, digits, punctuation, spaces
   and newlines. For 64 characters, SIMD compares give one 64-bit mask per ASCII kind, and every
   count of the scalar steps follows from the masks by shifts and popcounts, exactly: a kind's
   characters are its mask's popcount, its run starts those of the mask less the mask shifted by one,
   the gaps and the chunk bounds those of the space and whitespace masks, the blob test's digit and
   letter counts of a chunk those of its bits. The prefix stops before the first non-ASCII character,
   which takes the scalar step. Needs the ASCII kinds of run_rules.py (checked at configure():
   blocks_on). */
typedef uint64_t bits_t; /* a mask of the block's characters (bit t: character t) */
typedef struct {
    bits_t ascii, nl, sp, dig, let; /* bit t: character t is ASCII / of that kind */
} Masks;
typedef struct {
    unsigned ascii, nl, sp, dig, let;
} Masks16; /* the same of 16 characters */

static inline unsigned mask_of(__m128i bytes) { return (unsigned)_mm_movemask_epi8(bytes); }

/* The masks are computed on bytes: 16 characters of any width are first narrowed to 16 bytes that
   keep every ASCII character and turn every other one into a byte >= 0x80 (masks16_ucs2/4). */
#define SET(c) _mm_set1_epi8((char)(c))
#define LE8(v, c) _mm_cmpeq_epi8(_mm_subs_epu8((v), SET(c)), _mm_setzero_si128())
#define EQ8(v, c) _mm_cmpeq_epi8((v), SET(c))
static inline Masks16 masks16_bytes(__m128i v) {
    __m128i nl = _mm_or_si128(EQ8(v, 0x0A), EQ8(v, 0x0D));
    __m128i as = LE8(v, 0x7F);
    __m128i sp = _mm_or_si128(_mm_andnot_si128(nl, LE8(v, 0x1F)), _mm_or_si128(EQ8(v, 0x20), EQ8(v, 0x7F)));
    __m128i dg = LE8(_mm_sub_epi8(v, SET('0')), 9);
    __m128i lt = LE8(_mm_sub_epi8(_mm_or_si128(v, SET(0x20)), SET('a')), 25);
    Masks16 m = {mask_of(as), mask_of(nl), mask_of(sp), mask_of(dg), mask_of(lt)};
    return m;
}
#undef SET
#undef LE8
#undef EQ8
static inline Masks16 masks16_ucs1(const Py_UCS1 *p) { return masks16_bytes(_mm_loadu_si128((const __m128i *)p)); }
static inline Masks16 masks16_ucs2(const Py_UCS2 *p) {
    /* to bytes: v + 0x7F80 saturating puts ASCII below 0x8000 and the rest at or above; flipping the
       sign bit makes ASCII -128..-1 and the rest 0..0x7FFF, which the signed pack keeps or clamps to
       127; flipping bit 7 restores ASCII */
    const __m128i off = _mm_set1_epi16(0x7F80), sgn = _mm_set1_epi16((short)0x8000);
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 8));
    a = _mm_xor_si128(_mm_adds_epu16(a, off), sgn);
    b = _mm_xor_si128(_mm_adds_epu16(b, off), sgn);
    return masks16_bytes(_mm_xor_si128(_mm_packs_epi16(a, b), _mm_set1_epi8((char)0x80)));
}
static inline Masks16 masks16_ucs4(const Py_UCS4 *p) {
    /* to bytes: v - 0x80 is -128..-1 for ASCII and >= 0 for the rest (any code point < 2^21); the two
       signed packs keep the former and clamp the latter to 0..127; flipping bit 7 restores ASCII */
    const __m128i o = _mm_set1_epi32(0x80);
    __m128i v0 = _mm_sub_epi32(_mm_loadu_si128((const __m128i *)p), o);
    __m128i v1 = _mm_sub_epi32(_mm_loadu_si128((const __m128i *)(p + 4)), o);
    __m128i v2 = _mm_sub_epi32(_mm_loadu_si128((const __m128i *)(p + 8)), o);
    __m128i v3 = _mm_sub_epi32(_mm_loadu_si128((const __m128i *)(p + 12)), o);
    __m128i v = _mm_packs_epi16(_mm_packs_epi32(v0, v1), _mm_packs_epi32(v2, v3));
    return masks16_bytes(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
}

/* 64 characters: four 16-character quarters (bit t of each mask: character t) */
#define Q(x) ((bits_t)q0.x | (bits_t)q1.x << 16 | (bits_t)q2.x << 32 | (bits_t)q3.x << 48)
#define MASKS64(W, CHAR_T)                                                                         \
    static inline Masks masks_##W(const CHAR_T *p) {                                               \
        Masks16 q0 = masks16_##W(p), q1 = masks16_##W(p + 16), q2 = masks16_##W(p + 32), q3 = masks16_##W(p + 48); \
        Masks m = {Q(ascii), Q(nl), Q(sp), Q(dig), Q(let)};                                       \
        return m;                                                                                  \
    }
MASKS64(ucs1, Py_UCS1)
MASKS64(ucs2, Py_UCS2)
MASKS64(ucs4, Py_UCS4)
#undef Q

/* Count one kind's characters and run starts among the prefix (mask m) */
#define POPC(x) ((unsigned)__builtin_popcountll(x))
#define KIND_ADD(kind, m)                                                                          \
    {                                                                                              \
        unsigned rs_ = POPC((m) & ~(((m) << 1) | (bits_t)(prev == (unsigned)(kind))));            \
        hist[0][kind] += POPC(m) | ((uint64_t)rs_ << 32);                                          \
    }

/* The pass on the characters from index I: counts the longest ASCII prefix (up to 64) and sets j
   to its length (0..64). MASKS: masks_ucs1/2/4. */
#define BLOCK_PREFIX(MASKS, I, j)                                                                  \
    {                                                                                              \
        Masks m_ = MASKS(s + (I));                                                                 \
        bits_t bad = ~m_.ascii;                                                                    \
        j = bad ? (unsigned)__builtin_ctzll(bad) : BLOCK_CHARS;                                    \
        bits_t lim = j == BLOCK_CHARS ? ~(bits_t)0 : ((bits_t)1 << j) - 1u;                        \
        bits_t ws = (m_.sp | m_.nl) & lim;                                                         \
        if (j) {                                                                                   \
            bits_t sp = m_.sp & lim, nl = m_.nl & lim, dg = m_.dig & lim, lt = m_.let & lim;      \
            bits_t pu = lim & ~(sp | nl | dg | lt);                                                \
            /* a gap token at t: t - 1 is a space, t - 2 is not, t is a space or a digit (the two  \
               characters before the block from h) */                                              \
            bits_t p1 = (sp << 1) | (h & 1u), p2 = (sp << 2) | ((h & 1u) << 1) | ((h >> 2) & 1u);  \
            gaps += POPC(p1 & ~p2 & (sp | dg));                                                    \
            bits_t an = dg | lt;                                                                   \
            if (ws) { /* every whitespace that ends a long chunk: the blob test of the chunk */    \
                bits_t y = ~ws; /* y: bit t when t .. t + have - 1 are not whitespace */           \
                for (int have = 1; have < blob_min_chars;) {                                       \
                    int sh = have < blob_min_chars - have ? have : blob_min_chars - have;         \
                    y &= y >> sh;                                                                  \
                    have += sh;                                                                    \
                }                                                                                  \
                bits_t ends = (y << blob_min_chars) & ws; /* whitespace after a long chunk */      \
                unsigned w0 = (unsigned)__builtin_ctzll(ws);                                       \
                if ((I) + (Py_ssize_t)w0 - start >= blob_min_chars) { /* a chunk from before */    \
                    bits_t b_ = ((bits_t)1 << w0) - 1u;                                            \
                    uint64_t d = tot + POPC(dg & b_) + ((uint64_t)POPC(an & b_) << 32) - tot0;     \
                    blob_test(ukind, data, start, (I) + w0, (int64_t)(uint32_t)d, (int64_t)(d >> 32), out); \
                    ends &= ~((bits_t)1 << w0);                                                    \
                }                                                                                  \
                while (ends) {                                                                     \
                    unsigned p_ = (unsigned)__builtin_ctzll(ends);                                 \
                    ends &= ends - 1u;                                                             \
                    bits_t r_ = ws & (((bits_t)1 << p_) - 1u); /* the whitespace before p_ */      \
                    unsigned q_ = 63u - (unsigned)__builtin_clzll(r_);                             \
                    r_ = (((bits_t)1 << p_) - 1u) & ~(((bits_t)2 << q_) - 1u); /* the chunk */     \
                    blob_test(ukind, data, (I) + q_ + 1, (I) + p_, POPC(dg & r_), POPC(an & r_), out); \
                }                                                                                  \
                unsigned last = 63u - (unsigned)__builtin_clzll(ws);                               \
                bits_t below = ((bits_t)1 << last) - 1u;                                           \
                tot0 = tot + POPC(dg & below) + ((uint64_t)POPC(an & below) << 32);                \
                start = (I) + (Py_ssize_t)last + 1;                                                \
            }                                                                                      \
            tot += POPC(dg) + ((uint64_t)POPC(an) << 32);                                          \
            KIND_ADD(K_SPACE, sp)                                                                  \
            KIND_ADD(K_NEWLINE, nl)                                                                \
            KIND_ADD(K_DIGIT, dg)                                                                  \
            KIND_ADD(K_LETTER, lt)                                                                 \
            KIND_ADD(K_PUNCT, pu)                                                                  \
            for (unsigned t = j > 3u ? j - 3u : 0u; t < j; t++)                                    \
                h = ((h << 2) | (unsigned)((sp >> t) & 1u) | (unsigned)((((sp | dg) >> t) & 1u) << 1)) & 63u; \
            unsigned t1_ = j - 1u; /* the kind of the prefix's last character (one mask holds it) */\
            prev = (unsigned)(((sp >> t1_) & 1u) * (unsigned)K_SPACE + ((nl >> t1_) & 1u) * (unsigned)K_NEWLINE +\
                              ((dg >> t1_) & 1u) * (unsigned)K_DIGIT + ((lt >> t1_) & 1u) * (unsigned)K_LETTER +\
                              ((pu >> t1_) & 1u) * (unsigned)K_PUNCT);                             \
        }                                                                                          \
    }
#else
#define BLOCK_PREFIX(MASKS, I, j) j = 0;
#endif

#define SCAN_BODY(CHAR_T, KIND, MASKS)                                                             \
    {                                                                                              \
        const CHAR_T *s = (const CHAR_T *)data;                                                    \
        unsigned prev = MAX_KINDS, h = 0;                                                          \
        Py_ssize_t start = 0, i = 0;  /* the current chunk starts at start */                      \
        uint64_t tot = 0, tot0 = 0;   /* packed digit and letter+digit totals: now, at start */    \
        if (BLOCKS && blocks_on) {                                                                 \
            Py_ssize_t backoff = 16;                                                               \
            while (i + (Py_ssize_t)BLOCK_CHARS <= n) {                                             \
                unsigned j;                                                                        \
                BLOCK_PREFIX(MASKS, i, j)                                                          \
                i += j;                                                                            \
                if (j == BLOCK_CHARS) {                                                            \
                    backoff = 16;                                                                  \
                    continue;                                                                      \
                }                                                                                  \
                if (j >= JUMP_MIN) { /* one character for the scalar step, then try again */       \
                    STEP(KIND, 0, i)                                                               \
                    i++;                                                                           \
                    continue;                                                                      \
                }                                                                                  \
                /* dense non-ASCII text: scalar steps, longer after each failure in a row (16 .. 64) */ \
                Py_ssize_t e4 = i + backoff <= n ? i + backoff : i + ((n - i) & ~(Py_ssize_t)(LANES - 1)); \
                for (; i < e4; i += LANES) {                                                       \
                    STEP(KIND, 0, i)                                                               \
                    STEP(KIND, 1, i + 1)                                                           \
                    STEP(KIND, 2, i + 2)                                                           \
                    STEP(KIND, 3, i + 3)                                                           \
                }                                                                                  \
                backoff = backoff < BACKOFF_MAX ? 2 * backoff : BACKOFF_MAX;                       \
            }                                                                                      \
        }                                                                                          \
        for (; i + LANES <= n; i += LANES) {                                                       \
            STEP(KIND, 0, i)                                                                       \
            STEP(KIND, 1, i + 1)                                                                   \
            STEP(KIND, 2, i + 2)                                                                   \
            STEP(KIND, 3, i + 3)                                                                   \
        }                                                                                          \
        for (; i < n; i++) STEP(KIND, 0, i)                                                        \
        if (n - start >= blob_min_chars) {                                                         \
            uint64_t d = tot - tot0;                                                               \
            blob_test(ukind, data, start, n, (int64_t)(uint32_t)d, (int64_t)(d >> 32), out);       \
        }                                                                                          \
    }

/* The whole pass; defined twice: for the baseline ISA, and with the POPCNT instruction (every x86-64
   CPU since 2008; without it the masks are counted by library calls), chosen at configure() by what
   the CPU reports. */
#define SCAN_DEF(NAME, ATTR)                                                                       \
    static ATTR void NAME(PyObject *text, Counts *out) {                                           \
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);                                                     \
    int ukind = PyUnicode_KIND(text);                                                              \
    const void *data = PyUnicode_DATA(text);                                                       \
    uint64_t hist[LANES][MAX_KINDS]; /* per kind: characters (low 32 bits), runs (high 32); n < 2^32 */\
    int64_t gaps = 0;                                                                              \
    memset(out, 0, sizeof(*out));                                                                  \
    memset(hist, 0, sizeof(hist));                                                                 \
    switch (ukind) {                                                                               \
    case PyUnicode_1BYTE_KIND:                                                                     \
        SCAN_BODY(Py_UCS1, KIND_NARROW, masks_ucs1)                                                \
        break;                                                                                     \
    case PyUnicode_2BYTE_KIND:                                                                     \
        SCAN_BODY(Py_UCS2, KIND_NARROW, masks_ucs2)                                                \
        break;                                                                                     \
    default:                                                                                       \
        SCAN_BODY(Py_UCS4, KIND_WIDE, masks_ucs4)                                                  \
        break;                                                                                     \
    }                                                                                              \
    /* blob_test subtracted from out->runs / out->chars; add the histograms */                     \
    for (int k = 0; k < n_kinds; k++) {                                                            \
        for (int l = 0; l < LANES; l++) {                                                          \
            out->chars[k] += (int64_t)(hist[l][k] & 0xFFFFFFFFu);                                  \
            out->runs[k] += (int64_t)(hist[l][k] >> 32);                                           \
        }                                                                                          \
    }                                                                                              \
    out->gaps = gaps;                                                                              \
    }

#if BLOCKS && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(RUNSCAN_NO_POPCNT)
#define HAVE_POPCNT_VARIANT 1
SCAN_DEF(scan_popcnt, __attribute__((target("popcnt"))))
#else
#define HAVE_POPCNT_VARIANT 0
#endif
SCAN_DEF(scan_base, )
static void (*scan)(PyObject *, Counts *) = scan_base;

static PyObject *configure_error(Py_buffer *tbl, const char *msg) {
    PyBuffer_Release(tbl);
    PyErr_SetString(PyExc_ValueError, msg);
    return NULL;
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
    if (tbl.len != 0x10000 || nk <= 0 || nk > MAX_KINDS)
        return configure_error(&tbl, "configure: a 65,536-byte table and 1..64 kinds");
    if (blob_min_chars < 2 || blob_min_chars > 63)
        return configure_error(&tbl, "configure: a blob of 2..63 characters at least");
    const unsigned char *t = (const unsigned char *)tbl.buf;
    for (Py_ssize_t i = 0; i < 0x10000; i++) {
        if (t[i] >= nk) return configure_error(&tbl, "configure: table entry out of range");
    }
    int codes[] = {K_LETTER, K_DIGIT, K_PUNCT, K_SPACE, K_NEWLINE, K_BLOB, K_EMOJI, K_HAN, K_OTHER};
    for (size_t j = 0; j < sizeof(codes) / sizeof(codes[0]); j++) {
        if (codes[j] < 0 || codes[j] >= nk) return configure_error(&tbl, "configure: kind code out of range");
    }
    memcpy(table, t, 0x10000);
    PyBuffer_Release(&tbl);
    memset(kinfo, 0, sizeof(kinfo));
    kinfo[K_SPACE].flags = F_WS | F_SPACE | F_SOD;
    kinfo[K_NEWLINE].flags = F_WS;
    kinfo[K_DIGIT].flags = F_SOD;
    kinfo[K_DIGIT].inc = 1u | ((uint64_t)1 << 32);
    kinfo[K_LETTER].inc = (uint64_t)1 << 32;
    blocks_on = 1; /* the masks of the 64-character pass are these ASCII kinds */
    for (unsigned c = 0; c < 0x80u; c++) {
        int want = c == '\n' || c == '\r'                            ? K_NEWLINE
                   : c <= 0x20u || c == 0x7Fu                          ? K_SPACE
                   : c - '0' < 10u                                     ? K_DIGIT
                   : (c | 0x20u) - 'a' < 26u                           ? K_LETTER
                                                                       : K_PUNCT;
        if (table[c] != (unsigned char)want) blocks_on = 0;
    }
#if HAVE_POPCNT_VARIANT
    __builtin_cpu_init();
    scan = __builtin_cpu_supports("popcnt") ? scan_popcnt : scan_base;
#endif
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
    scan(arg, &c); /* the GIL stays held: a 100 KB text takes ~0.1 ms, less than a GIL hand-over */
    /* runs[n_kinds], chars[n_kinds], gaps as native int64 in one bytes object */
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizeof(int64_t) * (2 * n_kinds + 1)));
    if (out == NULL) return NULL;
    int64_t *p = (int64_t *)PyBytes_AS_STRING(out);
    memcpy(p, c.runs, sizeof(int64_t) * n_kinds);
    memcpy(p + n_kinds, c.chars, sizeof(int64_t) * n_kinds);
    p[2 * n_kinds] = c.gaps;
    return out;
}

/* UTF-8 bytes of a str (a lone surrogate counts 3, as surrogatepass encodes it): one byte per
   character, plus one per character at or above U+0080, U+0800 and U+10000 each. Plain loops with
   32-bit counts per 2^20 characters, which the compiler vectorises. */
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
    for (Py_ssize_t b = 0; b < n; b += (Py_ssize_t)1 << 20) {
        Py_ssize_t e = n - b < ((Py_ssize_t)1 << 20) ? n : b + ((Py_ssize_t)1 << 20);
        uint32_t extra = 0;
        if (ukind == PyUnicode_1BYTE_KIND) {
            const Py_UCS1 *s = (const Py_UCS1 *)data;
            for (Py_ssize_t i = b; i < e; i++) extra += s[i] >> 7;
        } else if (ukind == PyUnicode_2BYTE_KIND) {
            const Py_UCS2 *s = (const Py_UCS2 *)data;
            for (Py_ssize_t i = b; i < e; i++) extra += (uint32_t)(s[i] >= 0x80) + (uint32_t)(s[i] >= 0x800);
        } else {
            const Py_UCS4 *s = (const Py_UCS4 *)data;
            for (Py_ssize_t i = b; i < e; i++)
                extra += (uint32_t)(s[i] >= 0x80) + (uint32_t)(s[i] >= 0x800) + (uint32_t)(s[i] >= 0x10000);
        }
        total += extra;
    }
    return PyLong_FromLongLong((long long)total);
}

/* ---- run_languages.window_words: the word counts of a text's first characters (the Python code
   there is the reference these equal, tests/core/text/test_runscan.py). ---- */

#define WORD_SETS 4
#define MAX_WORDS 128
#define MAX_WORD_LEN 16
#define WORD_BUCKETS 256
typedef struct {
    int n, max_len;
    int len[MAX_WORDS];
    Py_UCS4 ch[MAX_WORDS][MAX_WORD_LEN];
    int head[WORD_BUCKETS]; /* first word of each hash bucket, -1 when none */
    int next[MAX_WORDS];    /* the next word of the same bucket, -1 at the end */
} WordSet;
static WordSet word_sets[WORD_SETS];
static int n_word_sets = 0;  /* the highest configured set id + 1 */
static int max_word_len = 0; /* over all sets configured (a bound: a set configured again keeps it) */

static inline unsigned word_hash(const Py_UCS4 *w, Py_ssize_t len) {
    unsigned hsh = (unsigned)len * 2654435761u;
    for (Py_ssize_t t = 0; t < len; t++) hsh = (hsh ^ (unsigned)w[t]) * 16777619u;
    return (hsh >> 8) & (WORD_BUCKETS - 1);
}

/* Whether the lower-cased token tok[0..len) is a word of ws. */
static inline int in_set(const WordSet *ws, const Py_UCS4 *tok, Py_ssize_t len) {
    for (int w = ws->head[word_hash(tok, len)]; w >= 0; w = ws->next[w]) {
        if (ws->len[w] == len && memcmp(ws->ch[w], tok, sizeof(Py_UCS4) * (size_t)len) == 0) return 1;
    }
    return 0;
}

typedef struct {
    long counts[WORD_SETS];
    Py_ssize_t last_tok[WORD_SETS], last_len[WORD_SETS]; /* the set's last counted token and its length */
    Py_UCS4 last[WORD_SETS][MAX_WORD_LEN];
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
    for (int set = 0; set < n_word_sets; set++) {
        if (len > word_sets[set].max_len || !in_set(&word_sets[set], tok, len)) continue;
        if (token == wc->last_tok[set] + 1 && wc->last_len[set] == len &&
            memcmp(wc->last[set], tok, sizeof(Py_UCS4) * (size_t)len) == 0)
            continue;
        wc->counts[set]++;
        wc->last_tok[set] = token;
        wc->last_len[set] = len;
        memcpy(wc->last[set], tok, sizeof(Py_UCS4) * (size_t)len);
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
    if (out == NULL) return NULL;
    for (int t = 0; t <= n_word_sets; t++) {
        PyObject *v = PyLong_FromLong(t == 0 ? spaces : wc.counts[t - 1]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, t, v);
    }
    return out;
}

static PyObject *py_configure_words(PyObject *self, PyObject *args) {
    int set_id;
    PyObject *words;
    (void)self;
    if (!PyArg_ParseTuple(args, "iO!", &set_id, &PyTuple_Type, &words)) return NULL;
    Py_ssize_t nw = PyTuple_GET_SIZE(words);
    if (set_id < 0 || set_id >= WORD_SETS || nw > MAX_WORDS) {
        PyErr_SetString(PyExc_ValueError, "configure_words: set 0..3 of at most 128 words");
        return NULL;
    }
    WordSet ws;
    memset(&ws, 0, sizeof(ws));
    for (Py_ssize_t w = 0; w < nw; w++) {
        PyObject *word = PyTuple_GET_ITEM(words, w);
        if (!PyUnicode_Check(word) || PyUnicode_GET_LENGTH(word) < 1 || PyUnicode_GET_LENGTH(word) > MAX_WORD_LEN) {
            PyErr_SetString(PyExc_ValueError, "configure_words: words of 1..16 characters");
            return NULL;
        }
        ws.len[w] = (int)PyUnicode_GET_LENGTH(word);
        for (Py_ssize_t t = 0; t < ws.len[w]; t++) {
            ws.ch[w][t] = PyUnicode_READ_CHAR(word, t);
            if (ws.ch[w][t] == ' ') {
                PyErr_SetString(PyExc_ValueError, "configure_words: a word without spaces");
                return NULL;
            }
        }
    }
    ws.n = (int)nw;
    for (int w = 0; w < ws.n; w++) ws.max_len = ws.len[w] > ws.max_len ? ws.len[w] : ws.max_len;
    for (int bkt = 0; bkt < WORD_BUCKETS; bkt++) ws.head[bkt] = -1;
    for (int w = (int)nw - 1; w >= 0; w--) {
        unsigned bkt = word_hash(ws.ch[w], ws.len[w]);
        ws.next[w] = ws.head[bkt];
        ws.head[bkt] = w;
    }
    word_sets[set_id] = ws;
    if (set_id >= n_word_sets) n_word_sets = set_id + 1;
    if (ws.max_len > max_word_len) max_word_len = ws.max_len;
    Py_RETURN_NONE;
}

/* Which pass count_runs runs: "sse2+popcnt", "sse2" (the 64-character pass, with POPCNT or
   without) or "scalar" (no SSE2, or another ASCII layout than run_rules.py's). */
static PyObject *py_fast_path(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "fast_path: configure() first");
        return NULL;
    }
    if (!BLOCKS || !blocks_on) return PyUnicode_FromString("scalar");
#if HAVE_POPCNT_VARIANT
    if (scan == scan_popcnt) return PyUnicode_FromString("sse2+popcnt");
#endif
    return PyUnicode_FromString("sse2");
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(table, n_kinds, (letter, digit, punct, space, newline, blob, emoji, han, other), "
     "(emoji_lo, emoji_hi, han_ext_lo, han_ext_hi), (blob_min_chars, blob_min_digits, alnum_share, "
     "digit_share, case_share)) -> None: the rules of extproc.core.text.run_rules."},
    {"count_runs", py_count_runs, METH_O,
     "count_runs(text: str) -> bytes: runs[n_kinds], chars[n_kinds], gaps as native int64."},
    {"utf8_length", py_utf8_length, METH_O, "utf8_length(text: str) -> int: UTF-8 bytes (surrogatepass)."},
    {"configure_words", py_configure_words, METH_VARARGS,
     "configure_words(set_id: int, words: tuple[str, ...]) -> None: word set 0..3 (words without spaces)."},
    {"window_words", py_window_words, METH_VARARGS,
     "window_words(text: str, n: int) -> (spaces, count of set 0, ...): the spaces of text[:n], and per "
     "configured word set the occurrences of ' w ' of its words in text[:n].lower(), as "
     "sum(window.count(f' {w} ')) counts them."},
    {"fast_path", py_fast_path, METH_NOARGS,
     "fast_path() -> str: 'sse2+popcnt', 'sse2' or 'scalar', the pass count_runs runs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_runscan",
    "One-pass run counts of a str (the C path of extproc.core.text.runs.count_runs).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__runscan(void) { return PyModule_Create(&module); }
