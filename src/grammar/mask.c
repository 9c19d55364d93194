/* mask.c -- which tokens a state allows: a walk of the vocabulary's trie
 * through the automaton, with a memo.
 *
 * The walk goes down the trie in depth-first order, keeping for each
 * depth the set reached by the bytes above it (struct grammar_level); a
 * byte the set rejects skips the node's whole subtree, so the cost is the
 * part of the trie the grammar can read, not the vocabulary. Every token
 * that ends at a node reached is allowed; end tokens are allowed when the
 * state can end.
 *
 * The memo turns the automaton into a lazily built DFA: each set met is
 * interned (hashed by its words and partial character) as a memo state
 * with a table of 256 transitions filled as the walk needs them, so a
 * byte from a known state costs one table read instead of a step; and the
 * mask computed from a state is kept (a bitset), since the same state
 * recurs (inside a JSON string almost every token leads back to it) and a
 * kept mask is a copy. The memo holds at most its limit (default
 * GRAMMAR_MEMO_BYTES, counted as the states, their words and tables, and
 * the masks): past it, new states are not interned (their transitions are
 * computed and forgotten) and the whole memo is emptied before the next
 * mask. It serves one vocabulary: a mask with another empties it.
 *
 * A memo is shared by a state and its copies, so its use is under its
 * lock and its reference count is atomic. */
#include "grammar_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define GRAMMAR_UNKNOWN   (-1) /* a transition not computed yet */
#define GRAMMAR_REJECTED  (-2) /* a byte the state rejects */
#define GRAMMAR_TRANSIENT (-3) /* a set not interned: it is in the level's words */
#define GRAMMAR_NO_MEMORY (-4) /* out of memory */

/* A set the memo knows. */
struct grammar_memo_state {
    uint32_t words;   /* offset of its words in memo->words */
    uint32_t n_words; /* their count */
    uint32_t partial; /* its partial character */
    uint32_t hash;    /* of words and partial */
    int32_t mask;     /* its kept mask's index in memo->masks, or -1 */
};

/* The set reached at one depth of the walk. */
struct grammar_level {
    int32_t id;                 /* its memo state, or -1: it is in words and partial */
    uint32_t partial;           /* when id < 0 */
    struct grammar_words words; /* when id < 0 */
};

struct grammar_memo {
    pthread_mutex_t lock;              /* held for every use of what follows */
    atomic_int refs;                   /* states sharing it */
    size_t limit;                      /* bytes it may hold */
    size_t bytes;                      /* bytes it holds (its states and masks) */
    uint64_t vocab;                    /* serial of the vocabulary its masks are for */
    struct grammar_memo_state *states; /* (cap_states) */
    uint32_t n_states, cap_states;     /* in use, allocated */
    int32_t *next;                     /* (cap_states * 256) transitions, or GRAMMAR_UNKNOWN,
                                        * GRAMMAR_REJECTED */
    struct grammar_words words;        /* every state's set */
    uint32_t *table;                   /* (table_cap) hash table of state ids + 1, 0 empty */
    uint32_t table_cap;                /* a power of two, or 0 */
    uint64_t *masks;                   /* (cap_masks * mask_words) kept masks as bitsets */
    uint32_t *mask_counts;             /* (cap_masks) tokens each allows */
    uint32_t n_masks, cap_masks;       /* in use, allocated */
    uint32_t mask_words;               /* 64-bit words of one mask */
    struct grammar_scratch scratch;    /* the steps' working memory */
    struct grammar_words out;          /* a step's result */
    struct grammar_level *levels;      /* (n_levels) the walk's sets by depth */
    uint32_t n_levels;                 /* allocated */
};

/* ------------------------------------------------------------ lifetime */

static struct grammar_memo *memo_create(size_t limit) {
    struct grammar_memo *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    if (pthread_mutex_init(&m->lock, NULL)) {
        free(m);
        return NULL;
    }
    atomic_init(&m->refs, 1);
    m->limit = limit;
    return m;
}

struct grammar_memo *grammar_memo_share(struct grammar_memo *memo) {
    if (memo) atomic_fetch_add(&memo->refs, 1);
    return memo;
}

void grammar_memo_release(struct grammar_memo *memo) {
    if (!memo || atomic_fetch_sub(&memo->refs, 1) != 1) return;
    pthread_mutex_destroy(&memo->lock);
    free(memo->states);
    free(memo->next);
    free(memo->words.w);
    free(memo->table);
    free(memo->masks);
    free(memo->mask_counts);
    grammar_scratch_free(&memo->scratch);
    free(memo->out.w);
    for (uint32_t d = 0; d < memo->n_levels; d++) free(memo->levels[d].words.w);
    free(memo->levels);
    free(memo);
}

/* Forgets every state and mask (keeps the allocations). */
static void memo_clear(struct grammar_memo *m) {
    m->n_states = 0;
    m->words.n = 0;
    m->n_masks = 0;
    m->bytes = 0;
    if (m->table) memset(m->table, 0, (size_t)m->table_cap * sizeof(*m->table));
}

void grammar_state_set_memo_limit(struct grammar_state *s, size_t bytes) {
    s->memo_limit = bytes;
    if (!s->memo) return;
    pthread_mutex_lock(&s->memo->lock);
    s->memo->limit = bytes;
    memo_clear(s->memo);
    pthread_mutex_unlock(&s->memo->lock);
}

/* ------------------------------------------------------------ interning */

static uint32_t hash_set(const uint32_t *w, uint32_t n, uint32_t partial) {
    uint64_t h = 0x2545F4914F6CDD1Dull ^ ((uint64_t)partial << 32) ^ n;
    for (uint32_t i = 0; i < n; i++) h = (h ^ w[i]) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h ^ (h >> 29));
}

/* The table slot holding the state equal to (w, n, partial), or the empty
 * slot where it would go. */
static uint32_t find_slot(const struct grammar_memo *m, const uint32_t *w, uint32_t n,
                          uint32_t partial, uint32_t h) {
    uint32_t mask = m->table_cap - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
        if (m->table[i] == 0) return i;
        const struct grammar_memo_state *s = &m->states[m->table[i] - 1];
        if (s->hash == h && s->n_words == n && s->partial == partial &&
            !memcmp(m->words.w + s->words, w, (size_t)n * sizeof(*w)))
            return i;
    }
}

/* Makes room for one more state: its row of transitions and its slot. */
static int reserve_state(struct grammar_memo *m) {
    if (m->n_states == m->cap_states) {
        uint32_t cap = m->cap_states ? 2 * m->cap_states : 64;
        struct grammar_memo_state *states = realloc(m->states, cap * sizeof(*states));
        if (!states) return -1;
        m->states = states;
        int32_t *next = realloc(m->next, (size_t)cap * 256 * sizeof(*next));
        if (!next) return -1;
        m->next = next;
        m->cap_states = cap;
    }
    if (2 * (m->n_states + 1) <= m->table_cap) return 0;
    uint32_t cap = m->table_cap ? 2 * m->table_cap : 128;
    uint32_t *table = calloc(cap, sizeof(*table));
    if (!table) return -1;
    free(m->table);
    m->table = table;
    m->table_cap = cap;
    for (uint32_t id = 0; id < m->n_states; id++) {
        const struct grammar_memo_state *s = &m->states[id];
        m->table[find_slot(m, m->words.w + s->words, s->n_words, s->partial, s->hash)] = id + 1;
    }
    return 0;
}

/* The memo state of the set (w, n, partial), interned if new and the memo
 * has room; GRAMMAR_TRANSIENT if not, GRAMMAR_NO_MEMORY. */
static int32_t intern(struct grammar_memo *m, const uint32_t *w, uint32_t n, uint32_t partial) {
    uint32_t h = hash_set(w, n, partial);
    if (m->table_cap) {
        uint32_t slot = find_slot(m, w, n, partial, h);
        if (m->table[slot]) return (int32_t)m->table[slot] - 1;
    }
    if (m->bytes >= m->limit) return GRAMMAR_TRANSIENT;
    /* a word more than needed: the words stay allocated even for empty sets */
    if (reserve_state(m) || grammar_words_reserve(&m->words, m->words.n + n + 1))
        return GRAMMAR_NO_MEMORY;
    uint32_t id = m->n_states++;
    m->states[id] = (struct grammar_memo_state){m->words.n, n, partial, h, -1};
    memcpy(m->words.w + m->words.n, w, (size_t)n * sizeof(*w));
    m->words.n += n;
    for (int b = 0; b < 256; b++) m->next[(size_t)id * 256 + b] = GRAMMAR_UNKNOWN;
    m->table[find_slot(m, w, n, partial, h)] = id + 1;
    m->bytes += sizeof(struct grammar_memo_state) + 256 * sizeof(int32_t) + 2 * sizeof(uint32_t) +
                (size_t)n * sizeof(*w);
    return (int32_t)id;
}

/* The set of a level (a memo state's or its own). */
static struct grammar_set level_set(const struct grammar_memo *m, const struct grammar_level *l) {
    if (l->id < 0) return (struct grammar_set){l->words.w, l->words.n, l->partial};
    const struct grammar_memo_state *s = &m->states[l->id];
    return (struct grammar_set){m->words.w + s->words, s->n_words, s->partial};
}

/* Sets level l to the set (w, n, partial): interned, or copied into it. */
static int32_t enter(struct grammar_memo *m, struct grammar_level *l, const uint32_t *w, uint32_t n,
                     uint32_t partial) {
    int32_t id = intern(m, w, n, partial);
    if (id == GRAMMAR_TRANSIENT) {
        if (grammar_words_reserve(&l->words, n ? n : 1)) return GRAMMAR_NO_MEMORY;
        memcpy(l->words.w, w, (size_t)n * sizeof(*w));
        l->words.n = n;
        l->partial = partial;
        l->id = -1;
    } else if (id >= 0) {
        l->id = id;
    }
    return id;
}

/* ------------------------------------------------------------ the walk */

/* The set parent reaches by byte, into child: a memo state id,
 * GRAMMAR_TRANSIENT (child holds it), GRAMMAR_REJECTED or
 * GRAMMAR_NO_MEMORY. */
static int32_t transition(struct grammar_memo *m, const struct grammar *g,
                          const struct grammar_level *parent, uint8_t byte,
                          struct grammar_level *child) {
    struct grammar_set from = level_set(m, parent);
    uint32_t partial;
    int rc = grammar_step(g, &from, byte, &m->scratch, &m->out, &partial);
    if (rc < 0) return GRAMMAR_NO_MEMORY;
    int32_t id = rc == 0 ? GRAMMAR_REJECTED : enter(m, child, m->out.w, m->out.n, partial);
    if (parent->id >= 0 && (id >= 0 || id == GRAMMAR_REJECTED))
        m->next[(size_t)parent->id * 256 + byte] = id;
    return id;
}

/* Makes room for a walk as deep as the vocabulary's longest token. */
static int reserve_levels(struct grammar_memo *m, uint32_t depth) {
    if (depth + 1 <= m->n_levels) return 0;
    struct grammar_level *levels = realloc(m->levels, ((size_t)depth + 1) * sizeof(*levels));
    if (!levels) return -1;
    memset(levels + m->n_levels, 0, (depth + 1 - m->n_levels) * sizeof(*levels));
    m->levels = levels;
    m->n_levels = depth + 1;
    return 0;
}

/* Walks the trie from levels[0]: allowed[t] = 1 for every token whose
 * bytes the set reads. Returns their count, or -1 if out of memory. */
static int walk(struct grammar_memo *m, const struct grammar *g, const struct grammar_vocab *v,
                uint8_t *allowed) {
    const struct grammar_node *nodes = v->nodes;
    struct grammar_level *levels = m->levels;
    int count = 0;
    for (uint32_t i = 0; i < v->n_nodes;) {
        const struct grammar_node *node = &nodes[i];
        const struct grammar_level *parent = &levels[node->depth - 1];
        struct grammar_level *child = &levels[node->depth];
        int32_t id =
            parent->id >= 0 ? m->next[(size_t)parent->id * 256 + node->byte] : GRAMMAR_UNKNOWN;
        if (id == GRAMMAR_UNKNOWN) id = transition(m, g, parent, node->byte, child);
        if (id == GRAMMAR_NO_MEMORY) return -1;
        if (id == GRAMMAR_REJECTED) {
            i = node->end;
            continue;
        }
        if (id >= 0) child->id = id;
        for (uint32_t k = 0; k < node->n_tokens; k++) allowed[v->tokens[node->tokens + k]] = 1;
        count += (int)node->n_tokens;
        i++;
    }
    return count;
}

/* ------------------------------------------------------------ kept masks */

/* Writes kept mask `index` to allowed; returns its count. */
static int copy_mask(const struct grammar_memo *m, const struct grammar_vocab *v, int32_t index,
                     uint8_t *allowed) {
    const uint64_t *bits = m->masks + (size_t)index * m->mask_words;
    uint32_t n = (uint32_t)v->n_tokens, whole = n / 8;
    for (uint32_t i = 0; i < whole; i++) {
        uint8_t byte = (uint8_t)(bits[i / 8] >> (8 * (i % 8)));
        memcpy(allowed + 8 * i, v->spread[byte], 8);
    }
    for (uint32_t t = 8 * whole; t < n; t++) allowed[t] = (uint8_t)((bits[t / 64] >> (t % 64)) & 1);
    return (int)m->mask_counts[index];
}

/* Keeps allowed (count tokens) as the mask of memo state id, if there is
 * room. */
static void keep_mask(struct grammar_memo *m, const struct grammar_vocab *v, int32_t id,
                      const uint8_t *allowed, int count) {
    size_t size = (size_t)m->mask_words * sizeof(uint64_t) + sizeof(uint32_t);
    if (m->bytes + size > m->limit) return;
    if (m->n_masks == m->cap_masks) {
        uint32_t cap = m->cap_masks ? 2 * m->cap_masks : 16;
        uint64_t *masks = realloc(m->masks, (size_t)cap * m->mask_words * sizeof(*masks));
        if (!masks) return;
        m->masks = masks;
        uint32_t *counts = realloc(m->mask_counts, cap * sizeof(*counts));
        if (!counts) return;
        m->mask_counts = counts;
        m->cap_masks = cap;
    }
    uint64_t *bits = m->masks + (size_t)m->n_masks * m->mask_words;
    memset(bits, 0, (size_t)m->mask_words * sizeof(*bits));
    for (uint32_t t = 0; t < (uint32_t)v->n_tokens; t++)
        bits[t / 64] |= (uint64_t)(allowed[t] & 1) << (t % 64);
    m->mask_counts[m->n_masks] = (uint32_t)count;
    m->states[id].mask = (int32_t)m->n_masks++;
    m->bytes += size;
}

/* Empties the memo when it is full or serves another vocabulary. */
static void memo_prepare(struct grammar_memo *m, const struct grammar_vocab *v) {
    if (m->vocab != v->serial) {
        memo_clear(m);
        /* masks of another size may be kept: start their storage again */
        free(m->masks);
        free(m->mask_counts);
        m->masks = NULL;
        m->mask_counts = NULL;
        m->cap_masks = 0;
        m->mask_words = ((uint32_t)v->n_tokens + 63) / 64;
        m->vocab = v->serial;
    } else if (m->bytes >= m->limit) {
        memo_clear(m);
    }
}

/* The mask of s under its memo's lock. */
static int mask_locked(struct grammar_state *s, const struct grammar_vocab *v, uint8_t *allowed) {
    struct grammar_memo *m = s->memo;
    memo_prepare(m, v);
    if (reserve_levels(m, v->max_depth)) return -1;
    int32_t root = enter(m, &m->levels[0], s->set.w, s->set.n, s->partial);
    if (root == GRAMMAR_NO_MEMORY) return -1;
    if (root >= 0 && m->states[root].mask >= 0)
        return copy_mask(m, v, m->states[root].mask, allowed);
    memset(allowed, 0, (size_t)v->n_tokens);
    int count = walk(m, s->g, v, allowed);
    if (count < 0) return -1;
    if (grammar_can_end(s)) {
        for (int k = 0; k < v->n_end; k++) allowed[v->end_tokens[k]] = 1;
        count += v->n_end;
    }
    if (root >= 0) keep_mask(m, v, root, allowed, count);
    return count;
}

int grammar_mask(struct grammar_state *s, const struct grammar_vocab *v, uint8_t *allowed) {
    if (!s->memo && !(s->memo = memo_create(s->memo_limit))) {
        memset(allowed, 0, (size_t)v->n_tokens);
        return -1;
    }
    pthread_mutex_lock(&s->memo->lock);
    int count = mask_locked(s, v, allowed);
    pthread_mutex_unlock(&s->memo->lock);
    if (count < 0) memset(allowed, 0, (size_t)v->n_tokens);
    return count;
}
