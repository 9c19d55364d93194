/* gguf_internal.h -- what the GGUF reader's files (gguf.c, gguf_value.c) and
 * writer (gguf_writer.c) share and the rest of the program does not see: the
 * bounds-checked cursor over a file image, the arena that holds the element
 * offset tables of string and nested arrays, and the size of each metadata
 * value type. */
#ifndef LOCKSTEP_GGUF_INTERNAL_H
#define LOCKSTEP_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define GGUF_MAGIC             0x46554747u /* "GGUF" read as a little-endian uint32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH   8  /* arrays of arrays nest at most this deep */
#define GGUF_TYPE_COUNT        13 /* value types are 0 .. GGUF_TYPE_COUNT-1 */

/* Fewest bytes each record can take in a file: used to refuse a count that
 * the file cannot hold before anything is allocated for it. */
#define GGUF_MIN_KV_BYTES 13 /* key length (8) + type (4) + a 1-byte value */
#define GGUF_MIN_TENSOR_INFO_BYTES                                                                 \
    32                           /* name length (8) + n_dims (4) + 1 dim (8) + type (4) +          \
                                    offset (8) */
#define GGUF_MIN_NESTED_BYTES 12 /* element type (4) + count (8) */

/* One chunk of the arena; tables are carved from data. */
struct gguf_arena_chunk {
    struct gguf_arena_chunk *next; /* older chunk */
    size_t used;                   /* words of data handed out */
    size_t capacity;               /* words of data */
    uint64_t data[];               /* (capacity) */
};

/* Where parsing stands: the image, the read position, and what is being
 * read (for error messages). */
struct gguf_reader {
    const uint8_t *base; /* first byte of the image */
    size_t size;         /* bytes of the image */
    size_t pos;          /* next byte to read */
    const char *name;    /* file name for messages */
    char *err;           /* message buffer (errlen bytes) */
    size_t errlen;
    char context[128];               /* the record being read, e.g. "metadata key 'x'" */
    struct gguf_arena_chunk **arena; /* tables allocated while parsing; owned by the file */
};

/* Writes "<name>: <context>: <formatted>" to the error buffer; returns -1. */
int gguf_fail(struct gguf_reader *reader, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Copies s into buf (size bytes) for a message: bounded, non-printable bytes
 * shown as '?'. Returns buf. */
const char *gguf_printable(char *buf, size_t size, struct gguf_string s);

/* Readers of little-endian fields; what names the field for messages. Each
 * fails (returning -1 with a message) if the field extends past the end. */
int gguf_read_u32(struct gguf_reader *reader, uint32_t *out, const char *what);
int gguf_read_u64(struct gguf_reader *reader, uint64_t *out, const char *what);
int gguf_read_string(struct gguf_reader *reader, struct gguf_string *out, const char *what);
/* Reads a value of the given type (already read and checked). */
int gguf_read_value(struct gguf_reader *reader, enum gguf_type type, struct gguf_value *out);

/* Bytes of one element of a scalar type, 0 for STRING and ARRAY, -1 for an
 * unknown type id. */
int gguf_type_size(uint32_t type);
/* Decodes the scalar of the given type at p. */
void gguf_decode_scalar(enum gguf_type type, const uint8_t *p, struct gguf_value *out);

/* Frees every chunk of an arena. */
void gguf_arena_free(struct gguf_arena_chunk *arena);

#endif
