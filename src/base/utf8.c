/* utf8.c -- the one UTF-8 decoder: JSON text for clients, grammars, JSON
 * schemas and the tokenize endpoint all check and decode text here, with
 * the ranges of the Unicode standard's table of well-formed sequences
 * (which rules out overlong forms and surrogates by the second byte). */
#include "base/base.h"

int utf8_sequence(const unsigned char *s, size_t n) {
    unsigned low = 0x80, high = 0xBF; /* the second byte's range */
    int trailing;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        trailing = 1;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        trailing = 2;
        if (s[0] == 0xE0) low = 0xA0;  /* overlong below U+0800 */
        if (s[0] == 0xED) high = 0x9F; /* surrogates U+D800..U+DFFF */
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        trailing = 3;
        if (s[0] == 0xF0) low = 0x90;  /* overlong below U+10000 */
        if (s[0] == 0xF4) high = 0x8F; /* above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i <= trailing; i++) {
        if ((size_t)i >= n || s[i] < low || s[i] > high) return -i;
        low = 0x80;
        high = 0xBF;
    }
    return trailing + 1;
}

int utf8_decode(const unsigned char *s, size_t n, uint32_t *codepoint) {
    int length = utf8_sequence(s, n);
    if (length < 0) return length;
    uint32_t value = length == 1 ? s[0] : s[0] & (0x7Fu >> length);
    for (int i = 1; i < length; i++) value = value << 6 | (s[i] & 0x3Fu);
    *codepoint = value;
    return length;
}

int utf8_valid(const char *s, size_t n) {
    const unsigned char *bytes = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int length = utf8_sequence(bytes + i, n - i);
        if (length < 0) return 0;
        i += (size_t)length;
    }
    return 1;
}
