/* error.c -- an error message into a caller's buffer: library code reports
 * failures as -1 and a sentence in (err, errlen), never by exiting, and this
 * is the one place that writes such a sentence. */
#include "base/base.h"

#include <stdio.h>

int error_vformat_at(char *err, size_t errlen, const char *where, const char *format,
                     va_list args) {
    if (err == NULL || errlen == 0) return -1;
    int used = where ? snprintf(err, errlen, "%s: ", where) : 0;
    if (used >= 0 && (size_t)used < errlen)
        vsnprintf(err + used, errlen - (size_t)used, format, args);
    return -1;
}
