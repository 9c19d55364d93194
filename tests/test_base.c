/* test_base.c -- src/base: the UTF-8 decoder every text check uses (the
 * Unicode standard's well-formed ranges, and the length of the ill-formed
 * part one U+FFFD replaces), the "where: what" error writer, and the clock. */
#include "base/base.h"
#include "testutil.h"

#include <stdarg.h>
#include <string.h>

/* utf8_sequence of a byte string given as a C literal (its length without
 * the terminator, so a NUL inside counts). */
#define SEQUENCE(bytes) utf8_sequence((const unsigned char *)(bytes), sizeof(bytes) - 1)

static void test_well_formed(void) {
    uint32_t cp = 0;
    CHECK(SEQUENCE("A") == 1);
    CHECK(utf8_decode((const unsigned char *)"\xC3\xA9", 2, &cp) == 2 && cp == 0xE9);
    CHECK(utf8_decode((const unsigned char *)"\xE2\x82\xAC", 3, &cp) == 3 && cp == 0x20AC);
    CHECK(utf8_decode((const unsigned char *)"\xF0\x9F\x98\x80", 4, &cp) == 4 && cp == 0x1F600);
    /* the ends of each range */
    CHECK(utf8_decode((const unsigned char *)"\xC2\x80", 2, &cp) == 2 && cp == 0x80);
    CHECK(utf8_decode((const unsigned char *)"\xED\x9F\xBF", 3, &cp) == 3 && cp == 0xD7FF);
    CHECK(utf8_decode((const unsigned char *)"\xEE\x80\x80", 3, &cp) == 3 && cp == 0xE000);
    CHECK(utf8_decode((const unsigned char *)"\xF4\x8F\xBF\xBF", 4, &cp) == 4 && cp == 0x10FFFF);
    CHECK(utf8_decode((const unsigned char *)"\0", 1, &cp) == 1 && cp == 0);
}

static void test_ill_formed(void) {
    uint32_t cp = 12345;
    CHECK(SEQUENCE("\x80") == -1);             /* a stray continuation byte */
    CHECK(SEQUENCE("\xC0\x80") == -1);         /* overlong NUL: C0 is never a lead */
    CHECK(SEQUENCE("\xE0\x9F\x80") == -1);     /* overlong below U+0800, refused at byte 2 */
    CHECK(SEQUENCE("\xED\xA0\x80") == -1);     /* a surrogate */
    CHECK(SEQUENCE("\xF4\x90\x80\x80") == -1); /* past U+10FFFF */
    CHECK(SEQUENCE("\xF5\x80\x80\x80") == -1); /* no lead byte past F4 */
    CHECK(SEQUENCE("\xE2\x82") == -2);         /* cut short: both bytes are one U+FFFD */
    CHECK(SEQUENCE("\xF0\x9F\x98") == -3);
    CHECK(SEQUENCE("\xE2\x82Z") == -2); /* the Z after is not part of it */
    CHECK(SEQUENCE("\xE2\x00\x80") == -1);
    /* a NUL-terminated string may pass 4: decoding stops at the NUL */
    CHECK(utf8_sequence((const unsigned char *)"\xE2", 4) == -1);
    CHECK(utf8_decode((const unsigned char *)"\xED\xA0\x80", 3, &cp) == -1 && cp == 12345);
}

static void test_valid(void) {
    CHECK(utf8_valid("", 0));
    static const char mixed[] = "plain \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80";
    CHECK(utf8_valid(mixed, sizeof mixed - 1));
    CHECK(utf8_valid("a\0b", 3));
    CHECK(!utf8_valid("ab\xC3", 3));
    CHECK(!utf8_valid("\xEF\xBF\xBF\xED\xBF\xBF", 6));
}

static int call_at(char *err, size_t errlen, const char *where, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int status = error_vformat_at(err, errlen, where, format, args);
    va_end(args);
    return status;
}

static void test_errors(void) {
    char err[32];
    CHECK(call_at(err, sizeof err, "model.gguf:3", "%d bytes short", 12) == -1);
    CHECK_MSG(strcmp(err, "model.gguf:3: 12 bytes short") == 0, "%s", err);
    /* truncated, always terminated */
    CHECK(call_at(err, 8, "somewhere long", "x") == -1 && strcmp(err, "somewhe") == 0);
    CHECK(call_at(err, sizeof err, "0123456789012345678901234567", "tail") == -1);
    CHECK_MSG(strcmp(err, "0123456789012345678901234567: t") == 0, "%s", err);
    /* nowhere to write: still a failure, nothing touched */
    CHECK(call_at(NULL, 0, "w", "x") == -1);
    strcpy(err, "kept");
    CHECK(call_at(err, 0, "w", "x") == -1 && strcmp(err, "kept") == 0);
}

static void test_clock(void) {
    uint64_t first = clock_now_us(), last = first;
    for (int i = 0; i < 1000; i++) {
        uint64_t now = clock_now_us();
        CHECK(now >= last);
        last = now;
    }
    CHECK(first > 0);
}

int main(void) {
    test_well_formed();
    test_ill_formed();
    test_valid();
    test_errors();
    test_clock();
    return test_status("test_base");
}
