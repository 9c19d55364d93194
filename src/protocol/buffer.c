/* buffer.c -- the growable byte buffer the runner protocol appends frames to
 * and reads received bytes into (struct runner_buffer in protocol/protocol.h). Frames are
 * appended at the end and dropped from the front once sent or parsed. */
#include "protocol/protocol.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RUNNER_BUFFER_MIN_CAPACITY 256

void runner_buffer_free(struct runner_buffer *buffer) {
    if (buffer == NULL) return;
    free(buffer->data);
    buffer->data = NULL;
    buffer->length = 0;
    buffer->capacity = 0;
}

void runner_buffer_consume(struct runner_buffer *buffer, size_t n) {
    if (n >= buffer->length) {
        buffer->length = 0;
        return;
    }
    memmove(buffer->data, buffer->data + n, buffer->length - n);
    buffer->length -= n;
}

/* Makes room for at least need bytes in all, doubling so that appending
 * many small fields costs amortised constant time per byte. */
static int runner_buffer_reserve(struct runner_buffer *buffer, size_t need) {
    if (need <= buffer->capacity) return 0;
    size_t capacity = buffer->capacity > 0 ? buffer->capacity : RUNNER_BUFFER_MIN_CAPACITY;
    while (capacity < need) capacity = capacity > SIZE_MAX / 2 ? need : capacity * 2;
    uint8_t *data = realloc(buffer->data, capacity);
    if (data == NULL) return -1;
    buffer->data = data;
    buffer->capacity = capacity;
    return 0;
}

int runner_buffer_append(struct runner_buffer *buffer, const void *bytes, size_t n) {
    if (n == 0) return 0;
    if (n > SIZE_MAX - buffer->length) return -1;
    if (runner_buffer_reserve(buffer, buffer->length + n) != 0) return -1;
    memcpy(buffer->data + buffer->length, bytes, n);
    buffer->length += n;
    return 0;
}
