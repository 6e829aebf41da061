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

   The language tests (English-like, Western European, Arabic/Persian/Urdu) decide in Python on
   counts of a 4,096-character window that this module also takes (window_words, window_letters,
   count_chars; run_languages.py holds their Python references). Equality with the numpy and Python
   references is tested on every corpus and on generated text (tests/core/test_runscan.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define BLOCKS 1 /* the 64-character fast path below (SSE2: every x86-64) */
#else
#define BLOCKS 0
#endif

#define MAX_KINDS 64

static unsigned char table[0x10000];
/* iv_lo[c], iv_hi[c]: the widest interval of BMP code points around c that all have c's kind */
static uint16_t iv_lo[0x10000], iv_hi[0x10000];
static int blocks_on; /* the ASCII kinds are runs.py's (the fast path computes them by compares) */
static int ascii_letters_spaces; /* no character beyond U+007F is of the letter or the space kind */
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

#define BLOCK_CHARS 64u /* characters of one fast-path block (bits of a mask) */
#ifndef BACKOFF_MAX
#define BACKOFF_MAX 64 /* the most scalar steps after a failed block in a row (dense mixed text) */
#endif
#ifndef JUMP_MIN
#define JUMP_MIN 2u /* a prefix at least this long retries after one scalar step */
#endif

#if BLOCKS
/* The 64-character fast path. Most text is long stretches of ASCII letters, digits, punctuation,
   spaces and newlines mixed with characters of up to three other kinds, each filling an interval of
   code points (a script's letters; emoji; symbols): the widest interval of one kind around a
   character of it, found from the block's first such characters and kept while the next blocks'
   other characters all fall in the intervals kept (no table look-up on the way).
   For 64 such characters, SIMD compares give one 64-bit mask per kind, and every count of the scalar
   steps follows from the masks by shifts and popcounts, exactly (tests/core/test_runscan.py holds it
   to the numpy reference): a kind's characters are its mask's popcount, its run starts those of the
   mask less the mask shifted by one, the gaps and the chunk bounds those of the space and whitespace
   masks, the blob test's digit and letter counts of a chunk those of its bits. The prefix stops
   before any other character, which takes the scalar step. Needs the ASCII kinds of runs.py (checked
   at configure(): blocks_on). */
typedef uint64_t bits_t; /* a mask of the block's characters (bit t: character t) */
typedef struct {
    bits_t ascii, nl, sp, dig, let; /* bit t: character t is ASCII / of that kind */
} Masks;
typedef struct {
    unsigned ascii, nl, sp, dig, let;
} Masks16; /* the same of 16 characters */

static inline unsigned mask_of(__m128i bytes) { return (unsigned)_mm_movemask_epi8(bytes); }

/* The interval [*lo, *lo + *span] of code points around the non-ASCII c0 that all have its kind *k,
   when that kind can be a K (no flags, not counted as letters or digits, not punctuation: those are
   the ASCII kinds' masks); 0 otherwise. Beyond U+FFFF: the emoji and Han ranges of kind_of. */
static inline int k_interval(Py_UCS4 c0, Py_UCS4 maxc, unsigned *lo, unsigned *span, unsigned *k) {
    unsigned l, hgh;
    if (c0 < 0x10000u) {
        *k = table[c0];
        l = iv_lo[c0] < 0x80u ? 0x80u : iv_lo[c0];
        hgh = iv_hi[c0];
    } else if (c0 >= EMOJI_LO && c0 < EMOJI_HI) {
        *k = (unsigned)K_EMOJI;
        l = EMOJI_LO;
        hgh = EMOJI_HI - 1u;
    } else if (c0 >= HAN_EXT_LO && c0 <= HAN_EXT_HI) {
        *k = (unsigned)K_HAN;
        l = HAN_EXT_LO;
        hgh = HAN_EXT_HI;
    } else {
        return 0;
    }
    if (kinfo[*k].flags != 0 || kinfo[*k].inc != 0 || *k == (unsigned)K_PUNCT) return 0;
    if (hgh > maxc) hgh = maxc;
    *lo = l;
    *span = hgh - l;
    return 1;
}

/* The masks are computed on bytes: 16 characters of any width are first narrowed to 16 bytes that
   keep every ASCII character and turn every other one into a byte >= 0x80 (masks16_ucs2/4). The
   interval masks compare characters at their own width: lo <= v <= lo + span (unsigned) is one
   signed compare after adding 2^(w-1) - lo (span <= 2^w - 2 at every width here). */

/* 8-bit lanes (Latin-1, and the narrowed bytes) */
#define SET(c) _mm_set1_epi8((char)(c))
#define SUB(v, c) _mm_sub_epi8((v), SET(c))
#define LE8(v, c) _mm_cmpeq_epi8(_mm_subs_epu8((v), SET(c)), _mm_setzero_si128())
#define EQ8(v, c) _mm_cmpeq_epi8((v), SET(c))
static inline Masks16 masks16_bytes(__m128i v) {
    __m128i nl = _mm_or_si128(EQ8(v, 0x0A), EQ8(v, 0x0D));
    __m128i as = LE8(v, 0x7F);
    __m128i sp = _mm_or_si128(_mm_andnot_si128(nl, LE8(v, 0x1F)), _mm_or_si128(EQ8(v, 0x20), EQ8(v, 0x7F)));
    __m128i dg = LE8(SUB(v, '0'), 9);
    __m128i lt = LE8(SUB(_mm_or_si128(v, SET(0x20)), 'a'), 25);
    Masks16 m = {mask_of(as), mask_of(nl), mask_of(sp), mask_of(dg), mask_of(lt)};
    return m;
}
static inline Masks16 masks16_ucs1(const Py_UCS1 *p) { return masks16_bytes(_mm_loadu_si128((const __m128i *)p)); }
static inline unsigned kmask16_ucs1(const Py_UCS1 *p, unsigned lo, unsigned span) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    return mask_of(_mm_cmpgt_epi8(SET(span + 1u - 0x80u), _mm_add_epi8(v, SET(0x80u - lo))));
}
#undef SET
#undef SUB
#undef LE8
#undef EQ8

/* 16-bit lanes (BMP) */
#define SET(c) _mm_set1_epi16((short)(c))
#define PK16(x, y) mask_of(_mm_packs_epi16((x), (y)))
static inline Masks16 masks16_ucs2(const Py_UCS2 *p) {
    /* to bytes: ASCII exact, every other character >= 0x80 (v + 0x7F80 saturating puts ASCII below
       0x8000 and the rest at or above; flipping the sign bit makes ASCII -128..-1 and the rest
       0..0x7FFF, which the signed pack keeps or clamps to 127; flipping bit 7 restores ASCII) */
    const __m128i off = SET(0x7F80), sgn = SET(0x8000);
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 8));
    a = _mm_xor_si128(_mm_adds_epu16(a, off), sgn);
    b = _mm_xor_si128(_mm_adds_epu16(b, off), sgn);
    __m128i v = _mm_xor_si128(_mm_packs_epi16(a, b), _mm_set1_epi8((char)0x80));
    return masks16_bytes(v);
}
static inline unsigned kmask16_ucs2(const Py_UCS2 *p, unsigned lo, unsigned span) {
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 8));
    const __m128i add = SET(0x8000u - lo), bound = SET(span + 1u - 0x8000u);
    return PK16(_mm_cmpgt_epi16(bound, _mm_add_epi16(a, add)), _mm_cmpgt_epi16(bound, _mm_add_epi16(b, add)));
}
#undef SET
#undef PK16

/* 32-bit lanes (any code point < 2^21: signed compares hold) */
#define SET(c) _mm_set1_epi32((int)(c))
#define SUB(v, c) _mm_sub_epi32((v), SET(c))
#define PK32(x0, x1, x2, x3) mask_of(_mm_packs_epi16(_mm_packs_epi32((x0), (x1)), _mm_packs_epi32((x2), (x3))))
static inline Masks16 masks16_ucs4(const Py_UCS4 *p) {
    /* to bytes: ASCII exact, every other character >= 0x80 (v - 0x80 is -128..-1 for ASCII and
       >= 0 for the rest; the two signed packs keep the former and clamp the latter to 0..127;
       flipping bit 7 restores ASCII) */
    __m128i v0 = SUB(_mm_loadu_si128((const __m128i *)p), 0x80), v1 = SUB(_mm_loadu_si128((const __m128i *)(p + 4)), 0x80);
    __m128i v2 = SUB(_mm_loadu_si128((const __m128i *)(p + 8)), 0x80), v3 = SUB(_mm_loadu_si128((const __m128i *)(p + 12)), 0x80);
    __m128i v = _mm_xor_si128(_mm_packs_epi16(_mm_packs_epi32(v0, v1), _mm_packs_epi32(v2, v3)), _mm_set1_epi8((char)0x80));
    return masks16_bytes(v);
}
static inline unsigned kmask16_ucs4(const Py_UCS4 *p, unsigned lo, unsigned span) {
    __m128i v0 = _mm_loadu_si128((const __m128i *)p), v1 = _mm_loadu_si128((const __m128i *)(p + 4));
    __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 8)), v3 = _mm_loadu_si128((const __m128i *)(p + 12));
    const __m128i add = SET(0x80000000u - lo), bound = SET(span + 1u - 0x80000000u);
    return PK32(_mm_cmpgt_epi32(bound, _mm_add_epi32(v0, add)), _mm_cmpgt_epi32(bound, _mm_add_epi32(v1, add)),
                _mm_cmpgt_epi32(bound, _mm_add_epi32(v2, add)), _mm_cmpgt_epi32(bound, _mm_add_epi32(v3, add)));
}
#undef SET
#undef SUB
#undef PK32

/* 64 characters: four 16-character quarters (bit t of each mask: character t) */
#define Q(x) ((bits_t)q0.x | (bits_t)q1.x << 16 | (bits_t)q2.x << 32 | (bits_t)q3.x << 48)
#define MASKS64(W, CHAR_T)                                                                         \
    static inline Masks masks_##W(const CHAR_T *p) {                                               \
        Masks16 q0 = masks16_##W(p), q1 = masks16_##W(p + 16), q2 = masks16_##W(p + 32), q3 = masks16_##W(p + 48); \
        Masks m = {Q(ascii), Q(nl), Q(sp), Q(dig), Q(let)};                                       \
        return m;                                                                                  \
    }                                                                                              \
    static inline bits_t kmask_##W(const CHAR_T *p, unsigned lo, unsigned span) {                  \
        return (bits_t)kmask16_##W(p, lo, span) | (bits_t)kmask16_##W(p + 16, lo, span) << 16 |    \
               (bits_t)kmask16_##W(p + 32, lo, span) << 32 | (bits_t)kmask16_##W(p + 48, lo, span) << 48;\
    }
MASKS64(ucs1, Py_UCS1)
MASKS64(ucs2, Py_UCS2)
MASKS64(ucs4, Py_UCS4)

#undef Q

/* Count one kind's characters and run starts among the prefix (mask m, bits < j) */
#define POPC(x) ((unsigned)__builtin_popcountll(x))
#define KIND_ADD(kind, m)                                                                          \
    {                                                                                              \
        unsigned rs_ = POPC((m) & ~(((m) << 1) | (bits_t)(prev == (unsigned)(kind))));            \
        hist[0][kind] += POPC(m) | ((uint64_t)rs_ << 32);                                          \
    }

/* The fast path on the characters from index I: counts the longest prefix (up to 64) that needs no
   scalar step and sets j to its length (0..64). MASKS / KMASK: masks_ucs1/2/4, kmask_ucs1/2/4;
   MAXC: the largest code point of the width. */
#define BLOCK_PREFIX(MASKS, KMASK, MAXC, I, j)                                                           \
    {                                                                                              \
        Masks m_ = MASKS(s + (I));                                                                 \
        bits_t other = ~m_.ascii, mk = 0, mk1 = 0, mk2 = 0, bad = 0;                               \
        unsigned k0 = iv_k[0], k1 = iv_k[1], k2 = iv_k[2];                                         \
        if (other) {                                                                               \
            /* the intervals the last block that had other characters needed (most text repeats    \
               them: no look-up on the way), else found anew from the block's characters */        \
            bits_t i0 = 0, i1 = 0, i2 = 0;                                                         \
            if (iv_n > 0) i0 = KMASK(s + (I), iv_lo_[0], iv_span[0]) & other;                      \
            if (iv_n > 1) i1 = KMASK(s + (I), iv_lo_[1], iv_span[1]) & other;                      \
            if (iv_n > 2) i2 = KMASK(s + (I), iv_lo_[2], iv_span[2]) & other;                      \
            if (other & ~(i0 | i1 | i2)) {                                                         \
                bits_t o_ = other;                                                                 \
                iv_n = 0;                                                                          \
                i0 = i1 = i2 = 0;                                                                  \
                iv_k[0] = iv_k[1] = iv_k[2] = 0;                                                   \
                while (o_ && iv_n < 3) {                                                           \
                    unsigned lo_, sp_, kk_;                                                        \
                    if (!k_interval(s[(I) + (unsigned)__builtin_ctzll(o_)], MAXC, &lo_, &sp_, &kk_)) break;\
                    bits_t m2_ = KMASK(s + (I), lo_, sp_) & o_;                                    \
                    o_ &= ~m2_;                                                                    \
                    if (iv_n == 0) i0 = m2_;                                                       \
                    else if (iv_n == 1) i1 = m2_;                                                  \
                    else i2 = m2_;                                                                 \
                    iv_lo_[iv_n] = lo_, iv_span[iv_n] = sp_, iv_k[iv_n] = kk_;                     \
                    iv_n++;                                                                        \
                }                                                                                  \
                /* intervals of one kind count as one mask: that of the first of the kind */       \
                iv_e10 = iv_k[1] == iv_k[0] ? ~(bits_t)0 : 0;                                      \
                iv_e20 = iv_k[2] == iv_k[0] ? ~(bits_t)0 : 0;                                      \
                iv_e21 = iv_k[2] == iv_k[1] && !iv_e20 ? ~(bits_t)0 : 0;                           \
                k0 = iv_k[0], k1 = iv_k[1], k2 = iv_k[2];                                          \
            }                                                                                      \
            mk = i0 | (i1 & iv_e10) | (i2 & iv_e20);                                               \
            mk1 = (i1 & ~iv_e10) | (i2 & iv_e21);                                                  \
            mk2 = i2 & ~(iv_e20 | iv_e21);                                                         \
            bad = other & ~(i0 | i1 | i2);                                                         \
        }                                                                                          \
        j = bad ? (unsigned)__builtin_ctzll(bad) : BLOCK_CHARS;                                    \
        bits_t lim = j == BLOCK_CHARS ? ~(bits_t)0 : ((bits_t)1 << j) - 1u;                        \
        bits_t ws = (m_.sp | m_.nl) & lim;                                                         \
        if (j) {                                                                                   \
            bits_t sp = m_.sp & lim, nl = m_.nl & lim, dg = m_.dig & lim, lt = m_.let & lim;      \
            bits_t pu = m_.ascii & lim & ~(sp | nl | dg | lt);                                     \
            mk &= lim;                                                                             \
            mk1 &= lim;                                                                            \
            mk2 &= lim;                                                                            \
            /* a gap token at t: t - 1 is a space, t - 2 is not, t is a space or a digit (the two  \
               characters before the block from h) */                                              \
            bits_t p1 = (sp << 1) | (h & 1u), p2 = (sp << 2) | ((h & 1u) << 1) | ((h >> 2) & 1u);  \
            gaps += POPC(p1 & ~p2 & (sp | dg));                                                    \
            bits_t an = dg | lt;                                                                   \
            if (ws) { /* every whitespace that ends a chunk of >= 20: the blob test of the chunk */ \
                bits_t x = ~ws, y = x & (x >> 1); /* y: x's ones starting runs of >= 20 (zeros above) */ \
                y &= y >> 2;                                                                       \
                y &= y >> 4;                                                                       \
                y &= y >> 8;                                                                       \
                y &= y >> 4;                                                                       \
                bits_t ends = (y << BLOB_MIN) & ws; /* whitespace after 20 others */               \
                unsigned w0 = (unsigned)__builtin_ctzll(ws);                                       \
                if ((I) + (Py_ssize_t)w0 - start >= BLOB_MIN) { /* a chunk from before the block */ \
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
            KIND_ADD(k0, mk)                                                                       \
            KIND_ADD(k1, mk1)                                                                      \
            KIND_ADD(k2, mk2)                                                                      \
            for (unsigned t = j > 3u ? j - 3u : 0u; t < j; t++)                                    \
                h = ((h << 2) | (unsigned)((sp >> t) & 1u) | (unsigned)((((sp | dg) >> t) & 1u) << 1)) & 63u; \
            unsigned t1_ = j - 1u; /* the kind of the prefix's last character (one mask holds it) */\
            prev = (unsigned)(((sp >> t1_) & 1u) * (unsigned)K_SPACE + ((nl >> t1_) & 1u) * (unsigned)K_NEWLINE +\
                              ((dg >> t1_) & 1u) * (unsigned)K_DIGIT + ((lt >> t1_) & 1u) * (unsigned)K_LETTER +\
                              ((pu >> t1_) & 1u) * (unsigned)K_PUNCT + ((mk >> t1_) & 1u) * k0 +   \
                              ((mk1 >> t1_) & 1u) * k1 + ((mk2 >> t1_) & 1u) * k2);                \
        }                                                                                          \
    }
/* The fast path's state across blocks: the intervals of the last block that had other characters
   (up to three), and which of them share a kind */
#define BLOCK_STATE                                                                                \
    unsigned iv_n = 0, iv_lo_[3] = {0, 0, 0}, iv_span[3] = {0, 0, 0}, iv_k[3] = {0, 0, 0};       \
    bits_t iv_e10 = 0, iv_e20 = 0, iv_e21 = 0;
#else
#define BLOCK_STATE
#define BLOCK_PREFIX(MASKS, KMASK, MAXC, I, j) j = 0;
#endif

#define SCAN_BODY(CHAR_T, KIND, MASKS, KMASK, MAXC)                                                      \
    {                                                                                              \
        const CHAR_T *s = (const CHAR_T *)data;                                                    \
        unsigned prev = MAX_KINDS, h = 0;                                                          \
        Py_ssize_t start = 0, i = 0;  /* the current chunk starts at start */                      \
        uint64_t tot = 0, tot0 = 0;   /* packed digit and letter+digit totals: now, at start */    \
        if (BLOCKS && blocks_on) {                                                                 \
            BLOCK_STATE                                                                            \
            Py_ssize_t backoff = 16;                                                               \
            while (i + (Py_ssize_t)BLOCK_CHARS <= n) {                                             \
                unsigned j;                                                                        \
                BLOCK_PREFIX(MASKS, KMASK, MAXC, i, j)                                                   \
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
                /* dense text: scalar steps, longer after each failure in a row (16 .. 64) */      \
                Py_ssize_t e4 = i + backoff <= n ? i + backoff : i + ((n - i) & ~(Py_ssize_t)(LANES - 1)); \
                for (; i < e4; i += LANES) {                                                       \
                    STEP(KIND, 0, i)                                                               \
                    STEP(KIND, 1, i + 1)                                                           \
                    STEP(KIND, 2, i + 2)                                                           \
                    STEP(KIND, 3, i + 3)                                                           \
                }                                                                                  \
                backoff = backoff < BACKOFF_MAX ? 2 * backoff : BACKOFF_MAX;                                      \
            }                                                                                      \
        }                                                                                          \
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

/* The whole pass; defined twice: for the baseline ISA, and with the POPCNT instruction (every x86-64
   CPU since 2008; the fast path's masks are counted by popcounts, which are library calls without
   it), chosen at configure() by what the CPU reports. */
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
        SCAN_BODY(Py_UCS1, KIND_NARROW, masks_ucs1, kmask_ucs1, 0xFFu)                                    \
        break;                                                                                     \
    case PyUnicode_2BYTE_KIND:                                                                     \
        SCAN_BODY(Py_UCS2, KIND_NARROW, masks_ucs2, kmask_ucs2, 0xFFFFu)                                    \
        break;                                                                                     \
    default:                                                                                       \
        SCAN_BODY(Py_UCS4, KIND_WIDE, masks_ucs4, kmask_ucs4, 0x10FFFFu)                                      \
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

#if BLOCKS && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_POPCNT_VARIANT 1
SCAN_DEF(scan_popcnt, __attribute__((target("popcnt"))))
#else
#define HAVE_POPCNT_VARIANT 0
#endif
SCAN_DEF(scan_base, )
static void (*scan)(PyObject *, Counts *) = scan_base;

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
    for (unsigned c = 0; c < 0x10000u; c++) iv_lo[c] = (uint16_t)(c && table[c] == table[c - 1] ? iv_lo[c - 1] : c);
    for (unsigned c = 0x10000u; c-- > 0;) iv_hi[c] = (uint16_t)(c < 0xFFFFu && table[c] == table[c + 1] ? iv_hi[c + 1] : c);
    ascii_letters_spaces = 1;
    for (unsigned c = 0x80u; c < 0x10000u; c++) {
        if (table[c] == K_LETTER || table[c] == K_SPACE) ascii_letters_spaces = 0;
    }
    if (K_EMOJI == K_LETTER || K_EMOJI == K_SPACE || K_HAN == K_LETTER || K_HAN == K_SPACE || K_OTHER == K_LETTER ||
        K_OTHER == K_SPACE)
        ascii_letters_spaces = 0;
    blocks_on = 1;
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
        Py_ssize_t i = 0;
#if BLOCKS
        /* 8 characters per step: 2 bytes more than one, less 1 per character below U+0080 and 1 per
           character below U+0800 (16-bit lane counts, added up before they could overflow) */
        const __m128i zero = _mm_setzero_si128();
        while (n - i >= 8) {
            Py_ssize_t begin = i, end = n - i >= 8 * 16384 ? i + 8 * 16384 : i + ((n - i) & ~(Py_ssize_t)7);
            __m128i below80 = zero, below800 = zero; /* minus the count of such characters, per lane */
            for (; i < end; i += 8) {
                __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
                below80 = _mm_add_epi16(below80, _mm_cmpeq_epi16(_mm_srli_epi16(v, 7), zero));
                below800 = _mm_add_epi16(below800, _mm_cmpeq_epi16(_mm_srli_epi16(v, 11), zero));
            }
            uint16_t a[8], b[8];
            _mm_storeu_si128((__m128i *)a, below80);
            _mm_storeu_si128((__m128i *)b, below800);
            total += 2 * (int64_t)(end - begin);
            for (int l = 0; l < 8; l++) total -= (int64_t)(uint16_t)(0u - a[l]) + (int64_t)(uint16_t)(0u - b[l]);
        }
#endif
        for (; i < n; i++) total += (s[i] >= 0x80) + (s[i] >= 0x800);
    } else {
        const Py_UCS4 *s = (const Py_UCS4 *)data;
        Py_ssize_t i = 0;
#if BLOCKS
        /* 8 characters per step, narrowed to 16-bit lanes by a signed saturating pack of v - 0x8001:
           v - 0x8001 for 1 <= v <= U+FFFF (U+0000 gives U+0001's value: both one byte), 0x7FFF for
           every v beyond U+FFFF. One byte per character, plus one per character at or above
           U+0080, U+0800 and U+10000 each (16-bit lane counts, added up before they could overflow) */
        const __m128i off = _mm_set1_epi32(0x8001), ge80 = _mm_set1_epi16((short)(0x80 - 0x8001 - 1)),
                      ge800 = _mm_set1_epi16((short)(0x800 - 0x8001 - 1)), astral = _mm_set1_epi16(0x7FFF);
        while (n - i >= 8) {
            Py_ssize_t end = n - i >= 8 * 16384 ? i + 8 * 16384 : i + ((n - i) & ~(Py_ssize_t)7);
            __m128i above = _mm_setzero_si128(); /* minus the count of (character, bound) pairs at or above */
            for (; i < end; i += 8) {
                __m128i v = _mm_packs_epi32(_mm_sub_epi32(_mm_loadu_si128((const __m128i *)(s + i)), off),
                                            _mm_sub_epi32(_mm_loadu_si128((const __m128i *)(s + i + 4)), off));
                above = _mm_add_epi16(above, _mm_cmpgt_epi16(v, ge80));
                above = _mm_add_epi16(above, _mm_cmpgt_epi16(v, ge800));
                above = _mm_add_epi16(above, _mm_cmpeq_epi16(v, astral));
            }
            uint16_t c[8];
            _mm_storeu_si128((__m128i *)c, above);
            for (int l = 0; l < 8; l++) total += (int64_t)(uint16_t)(0u - c[l]);
        }
#endif
        for (; i < n; i++) total += (s[i] >= 0x80) + (s[i] >= 0x800) + (s[i] >= 0x10000);
    }
    return PyLong_FromLongLong((long long)total);
}

/* ---- The language tests' window (extproc/core/run_languages.py; the Python code there is the
   reference these equal, tests/core/test_runscan.py). ---- */

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

/* may_start[c >> 3] bit (c & 7): Py_UNICODE_TOLOWER(c) starts a word of some configured set (c a BMP
   code point; no code point beyond U+FFFF lower-cases into the BMP, and every word is BMP text) */
static unsigned char may_start[0x10000 / 8];
static int n_word_sets = 0; /* the highest configured set id + 1 */
static int max_word_len = 0; /* over all sets configured (a bound: a set configured again keeps it) */

/* Space positions of 16 characters as a 16-bit mask (the window scan below) */
#if BLOCKS
static inline unsigned spaces16_ucs1(const Py_UCS1 *p) {
    return mask_of(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8(' ')));
}
static inline unsigned spaces16_ucs2(const Py_UCS2 *p) {
    const __m128i sp = _mm_set1_epi16(' ');
    return mask_of(_mm_packs_epi16(_mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)p), sp),
                                   _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(p + 8)), sp)));
}
static inline unsigned spaces16_ucs4(const Py_UCS4 *p) {
    const __m128i sp = _mm_set1_epi32(' ');
    __m128i a = _mm_packs_epi32(_mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)p), sp),
                                _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(p + 4)), sp));
    __m128i b = _mm_packs_epi32(_mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(p + 8)), sp),
                                _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(p + 12)), sp));
    return mask_of(_mm_packs_epi16(a, b));
}
#define SPACES16(W, p) spaces16_##W(p)
#else
#define SPACES16(W, p) 0u
#endif

/* One token w_[b .. b + len) between two spaces (token index `token`): lower-cased, and counted for
   every set holding it unless it repeats the set's last counted token right before it. */
#define WORD_TOKEN(b, len)                                                                         \
    {                                                                                              \
        Py_UCS4 c0_ = w_[b];                                                                       \
        if ((len) <= max_word_len && c0_ < 0x10000u && (may_start[c0_ >> 3] >> (c0_ & 7u) & 1u)) { \
            int word_like = 1;                                                                     \
            for (Py_ssize_t t = 0; t < (len); t++) {                                               \
                Py_UCS4 c = w_[(b) + t];                                                           \
                if (c < 0x80) {                                                                    \
                    tok[t] = c - 'A' < 26u ? c + 32u : c;                                          \
                } else if (c == 0x130 || c == 0x3A3) {                                             \
                    word_like = 0;                                                                 \
                    break;                                                                         \
                } else {                                                                           \
                    tok[t] = Py_UNICODE_TOLOWER(c);                                                \
                }                                                                                  \
            }                                                                                      \
            for (int set = 0; word_like && set < n_word_sets; set++) {                             \
                if ((len) > word_sets[set].max_len || !in_set(&word_sets[set], tok, (len))) continue; \
                if (token == last_tok[set] + 1 && last_len[set] == (len) &&                        \
                    memcmp(last[set], tok, sizeof(Py_UCS4) * (size_t)(len)) == 0)                   \
                    continue; /* " w w ": the middle space is shared, str.count counts one */      \
                counts[set]++;                                                                     \
                last_tok[set] = token;                                                             \
                last_len[set] = (len);                                                             \
                memcpy(last[set], tok, sizeof(Py_UCS4) * (size_t)(len));                           \
            }                                                                                      \
        }                                                                                          \
    }

/* The word scan of py_window_words over the storage of one width (CHAR_T, W: ucs1/2/4): the spaces
   16 characters at a time, then each token between two of them. */
#define WORD_SCAN(CHAR_T, W)                                                                       \
    {                                                                                              \
        const CHAR_T *w_ = (const CHAR_T *)data;                                                   \
        Py_ssize_t i = 0;                                                                          \
        for (;;) {                                                                                 \
            unsigned m = 0;                                                                        \
            Py_ssize_t base = i;                                                                   \
            if (BLOCKS && n - i >= 16) {                                                           \
                m = SPACES16(W, w_ + i);                                                           \
                i += 16;                                                                           \
            } else if (i < n) {                                                                    \
                m = w_[i] == ' ';                                                                  \
                i += 1;                                                                            \
            } else {                                                                               \
                break;                                                                             \
            }                                                                                      \
            while (m) {                                                                            \
                Py_ssize_t at = base + __builtin_ctz(m);                                           \
                m &= m - 1u;                                                                       \
                Py_ssize_t len = at - prev_space - 1;                                              \
                if (prev_space >= 0 && len >= 1) WORD_TOKEN(prev_space + 1, len)                   \
                token++;                                                                           \
                prev_space = at;                                                                   \
                spaces++;                                                                          \
            }                                                                                      \
        }                                                                                          \
    }

/* run_languages.window_words: (spaces, then per word set 0 .. n_word_sets - 1 the occurrences of " w "
   for its words w in the lower-cased first n characters, as str.count counts them per word:
   consecutive equal words share their space, every second one is not counted). Characters are
   lower-cased one by one (Py_UNICODE_TOLOWER); str.lower differs from that only for U+0130 (to "i" +
   U+0307) and a final sigma (to U+03C2), neither in any word: a token holding them is no word either
   way. */
static PyObject *py_window_words(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "Un", &text, &limit)) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (limit < n) n = limit < 0 ? 0 : limit;
    int ukind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    long counts[WORD_SETS] = {0}, spaces = 0;
    Py_ssize_t token = 0, prev_space = -1; /* index of the token a space ends; the last space */
    Py_ssize_t last_tok[WORD_SETS], last_len[WORD_SETS];
    Py_UCS4 tok[MAX_WORD_LEN], last[WORD_SETS][MAX_WORD_LEN];
    for (int set = 0; set < WORD_SETS; set++) last_tok[set] = -2, last_len[set] = 0;
    switch (ukind) {
    case PyUnicode_1BYTE_KIND:
        WORD_SCAN(Py_UCS1, ucs1)
        break;
    case PyUnicode_2BYTE_KIND:
        WORD_SCAN(Py_UCS2, ucs2)
        break;
    default:
        WORD_SCAN(Py_UCS4, ucs4)
        break;
    }
    PyObject *out = PyTuple_New(1 + n_word_sets);
    if (out == NULL) return NULL;
    for (int t = 0; t <= n_word_sets; t++) {
        PyObject *v = PyLong_FromLong(t == 0 ? spaces : counts[t - 1]);
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
    /* may_start gains the characters that lower-case to a first character of this set's words (a
       filter before the set look-up: bits of a set configured again before stay, costing only a
       look-up) */
    Py_UCS4 firsts[MAX_WORDS];
    int n_firsts = 0;
    for (int w = 0; w < ws.n; w++) {
        int seen = 0;
        for (int f = 0; f < n_firsts; f++) seen |= firsts[f] == ws.ch[w][0];
        if (!seen) firsts[n_firsts++] = ws.ch[w][0];
    }
    for (Py_UCS4 c = 0; c < 0x10000u; c++) {
        Py_UCS4 lc = Py_UNICODE_TOLOWER(c);
        for (int f = 0; f < n_firsts; f++) {
            if (firsts[f] == lc) may_start[c >> 3] |= (unsigned char)(1u << (c & 7u));
        }
    }
    Py_RETURN_NONE;
}

/* run_languages.english_like's punctuation test on the kinds of the first n characters of text:
   (letter runs, letter-space-letter triples). */
static PyObject *py_window_letters(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "Un", &text, &limit)) return NULL;
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "window_letters: configure() first");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (limit < n) n = limit < 0 ? 0 : limit;
    int ukind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    long runs = 0, prose = 0;
    int k2 = -1, k1 = -1; /* the kinds of the two characters before */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(ukind, data, i);
        int k = c < 0x80u || !ascii_letters_spaces ? kind_of(c) : -1; /* -1: neither kind */
        runs += k == K_LETTER && k1 != K_LETTER;
        prose += k == K_LETTER && k1 == K_SPACE && k2 == K_LETTER;
        k2 = k1;
        k1 = k;
    }
    return Py_BuildValue("ll", runs, prose);
}

/* sum(text[:n].count(c) for c in chars): characters of text's first n that are among chars (a str of
   at most 16 characters; run_languages.arabic_script_language). */
static PyObject *py_count_chars(PyObject *self, PyObject *args) {
    PyObject *text, *chars;
    Py_ssize_t limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "UnU", &text, &limit, &chars)) return NULL;
    Py_ssize_t nc = PyUnicode_GET_LENGTH(chars);
    if (nc > 16) {
        PyErr_SetString(PyExc_ValueError, "count_chars: at most 16 characters");
        return NULL;
    }
    Py_UCS4 set[16];
    for (Py_ssize_t t = 0; t < nc; t++) set[t] = PyUnicode_READ_CHAR(chars, t);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (limit < n) n = limit < 0 ? 0 : limit;
    int ukind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    long count = 0;
    if (ukind != PyUnicode_1BYTE_KIND || nc == 0) { /* Latin-1 text holds none of the letters asked */
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(ukind, data, i);
            for (Py_ssize_t t = 0; t < nc; t++) count += c == set[t];
        }
    } else {
        const Py_UCS1 *w = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++) {
            for (Py_ssize_t t = 0; t < nc; t++) count += w[i] == set[t];
        }
    }
    return PyLong_FromLong(count);
}

/* Which pass count_runs runs: "sse2+popcnt", "sse2" (the 64-character fast path, with POPCNT or
   without) or "scalar" (no SSE2, or another ASCII layout than runs.py's). */
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
     "configure(table: bytes, n_kinds: int, (letter, digit, punct, space, newline, blob, emoji, han, "
     "other), (emoji_lo, emoji_hi, han_ext_lo, han_ext_hi)) -> None: the kind of every BMP code point, "
     "the kind codes and the astral ranges (extproc.core.runs)."},
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
    {"count_chars", py_count_chars, METH_VARARGS,
     "count_chars(text: str, n: int, chars: str) -> int: characters of text[:n] among chars (<= 16)."},
    {"window_letters", py_window_letters, METH_VARARGS,
     "window_letters(text: str, n: int) -> (letter_runs, letter_space_letter): of the first n characters."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_runscan",
    "One-pass run counts of a str (the C path of extproc.core.runs.count_runs).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__runscan(void) { return PyModule_Create(&module); }
