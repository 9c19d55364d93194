/* test_grammar.c -- the grammar engine (src/grammar): GBNF compile errors
 * with their exact messages; texts accepted and rejected by many grammars
 * (literals, classes over UTF-8 ranges, negated classes, bounded
 * repetitions, nested rules, a JSON grammar); characters split across
 * tokens; grammar_can_end and grammar_is_done; and grammar_mask against a
 * brute-force reference (for every token: copy the state, accept its
 * bytes) at states reached by random walks, over a synthetic vocabulary
 * (always) and the shared tiny model's (when ../shared is there), with the
 * memo on, off and nearly full, and from two threads sharing one memo.
 *
 * ctest-labels: concurrency */
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A JSON grammar in the manner of llama.cpp's json.gbnf (written here). */
static const char json_gbnf[] =
    "# JSON text: one value, the start rule below\n"
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "\n"
    "# optional space, at most one line break\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static struct grammar *compile(const char *gbnf) {
    char err[512];
    struct grammar *g = NULL;
    int rc = grammar_compile(&g, gbnf, strlen(gbnf), err, sizeof(err));
    CHECK_MSG(rc == 0, "compile %s: %s", gbnf, err);
    return rc == 0 ? g : NULL;
}

/* ------------------------------------------------------------ compile errors */

struct error_case {
    const char *gbnf;
    const char *message;
};

static void check_error(const char *gbnf, size_t length, const char *expected) {
    char err[512] = "";
    struct grammar *g = NULL;
    int rc = grammar_compile(&g, gbnf, length, err, sizeof(err));
    CHECK_MSG(rc == -1 && g == NULL, "compiled: %.60s", gbnf);
    CHECK_MSG(!strcmp(err, expected), "for %.60s\n  got      %s\n  expected %s", gbnf, err,
              expected);
    grammar_free(g);
}

static void test_compile_errors(void) {
    static const struct error_case cases[] = {
        {"", "1:1: empty grammar (no rules)"},
        {"  # only a comment\n\n", "3:1: empty grammar (no rules)"},
        {"root ::= value\n", "1:10: undefined rule 'value'"},
        {"rot ::= \"a\"", "1:1: no rule named 'root' (the start rule)"},
        {"root ::= \"a\\q\"", "1:12: unknown escape '\\q'"},
        {"root ::= \"\\", "1:11: unknown escape: '\\' followed by the end of the grammar"},
        {"root ::= \"\\x4\"", "1:11: '\\x' needs 2 hex digits"},
        {"root ::= \"\\u12G4\"", "1:11: '\\u' needs 4 hex digits"},
        {"root ::= \"\\U00110000\"", "1:11: U+110000 is past the last code point U+10FFFF"},
        {"root ::= \"\\uD800\"", "1:11: U+D800 is a surrogate, which UTF-8 text cannot hold"},
        {"root ::= \"\xff\"", "1:11: invalid UTF-8 in the grammar"},
        {"root ::= \"\xc0\x80\"", "1:11: invalid UTF-8 in the grammar"},
        {"root ::= [a-z", "1:10: unterminated character class"},
        {"root ::= [z-a]", "1:11: range U+007A-U+0061 is reversed"},
        {"root ::= \"abc", "1:10: unterminated string literal"},
        {"root ::= (\"a\" | \"b\"",
         "1:20: missing ')' for the '(' at 1:10 (found the end of the grammar)"},
        {"root ::= (\"a\"\n  | \"b\" ]", "2:9: missing ')' for the '(' at 1:10 (found ']')"},
        {"root ::= \"a\")", "1:13: unmatched ')'"},
        {"root ::= \"a\" ]", "1:14: expected the end of the line after rule 'root', found ']'"},
        {"root \"a\"", "1:6: expected '::=' after the rule name 'root', found '\"'"},
        {")", "1:1: unmatched ')'"},
        {"root ::= \"a\"\n= \"b\"", "2:1: expected a rule name, found '='"},
        {"root ::= \"a\"\nroot ::= \"b\"", "2:1: rule 'root' is defined twice (first at 1:1)"},
        {"root ::= \"a\" |\nb ::= \"b\"",
         "2:1: rule 'b' begins inside another rule's body (after a '|' or inside parentheses "
         "the body goes on past the end of the line)"},
        {"root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]",
         "2:1: rule 'expr' is left-recursive (it can reach itself again before reading a "
         "character); left recursion is not supported: write it with repetition, e.g. a ::= a "
         "\"x\" | \"y\" as a ::= \"y\" \"x\"*"},
        {"root ::= a\na ::= b? a \"x\" | \"y\"\nb ::= \"b\"",
         "2:1: rule 'a' is left-recursive (it can reach itself again before reading a "
         "character); left recursion is not supported: write it with repetition, e.g. a ::= a "
         "\"x\" | \"y\" as a ::= \"y\" \"x\"*"},
        {"root ::= \"a\"{1001}",
         "1:14: repetition count 1001 is over the limit of 1000 (GRAMMAR_MAX_REPEAT)"},
        {"root ::= \"a\"{2,99999999999999999999}",
         "1:16: repetition count 99999999999999999999 is over the limit of 1000 "
         "(GRAMMAR_MAX_REPEAT)"},
        {"root ::= \"a\"{3,2}", "1:13: repetition {3,2} has its maximum below its minimum"},
        {"root ::= \"a\"{2", "1:15: expected '}' to close the repetition, found the end of the "
                             "grammar"},
        {"root ::= \"a\"{x}", "1:14: expected a number in the repetition, found 'x'"},
        {"root ::= *\"a\"", "1:10: '*' has nothing before it to repeat"},
        {"root ::= \"\"+", "1:12: '+' has nothing before it to repeat"},
        {"root ::= <think> \"a\"",
         "1:10: token references (<...>, <[id]>, !<...>) are not supported"},
        {"root ::= !<[12]>", "1:10: token references (<...>, <[id]>, !<...>) are not supported"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_error(cases[i].gbnf, strlen(cases[i].gbnf), cases[i].message);
}

/* Grammars past the size limits, made here. */
static void test_size_limits(void) {
    char *text = malloc(1 << 16);
    if (!text) return;
    /* 17 x {0,1000}: 1000 rules each */
    strcpy(text, "root ::= ");
    for (int i = 0; i < 17; i++) strcat(text, "\"a\"{0,1000} ");
    check_error(text, strlen(text),
                "1:213: grammar too large: more than 16384 rules (GRAMMAR_MAX_RULES)");
    /* 263 x {1000}: 1000 elements each */
    strcpy(text, "root ::= ");
    for (int i = 0; i < 263; i++) strcat(text, "[a]{1000} ");
    check_error(text, strlen(text),
                "1:2639: grammar too large: more than 262144 elements (GRAMMAR_MAX_ELEMENTS)");
    /* 300 parentheses deep */
    strcpy(text, "root ::= ");
    for (int i = 0; i < 300; i++) strcat(text, "(");
    strcat(text, "\"a\"");
    for (int i = 0; i < 300; i++) strcat(text, ")");
    check_error(text, strlen(text),
                "1:266: parentheses nested deeper than 256 (GRAMMAR_MAX_NESTING)");
    /* 4097 alternatives open at once at the start */
    strcpy(text, "root ::= \"a\"");
    for (int i = 0; i < 4096; i++) strcat(text, " | \"a\"");
    check_error(text, strlen(text),
                "1:1: root opens more than 4096 alternatives (or nests rules deeper than 2048) at "
                "its first character: shorten its largest alternation (a long list of literals, "
                "a JSON Schema enum or anyOf)");
    /* 2100 rules each opening the next before its first character */
    strcpy(text, "# deep\nroot ::= r0\n");
    for (int i = 0; i < 2100; i++) sprintf(text + strlen(text), "r%d ::= r%d \"x\"\n", i, i + 1);
    strcat(text, "r2100 ::= \"y\"\n");
    check_error(text, strlen(text),
                "2:1: root opens more than 4096 alternatives (or nests rules deeper than 2048) at "
                "its first character: shorten its largest alternation (a long list of literals, "
                "a JSON Schema enum or anyOf)");
    /* a NUL byte in the text is a character like any other, not an end */
    check_error("root ::= \"a\"\0", 13,
                "1:13: expected the end of the line after rule 'root', found byte 0x00");
    free(text);
}

/* ------------------------------------------------------------ accept and reject */

/* 'M' the whole text matches, 'P' it is a prefix of a match, 'R' rejected. */
static char judge(const struct grammar *g, const char *text, size_t length) {
    struct grammar_state *s = grammar_state_create(g);
    char verdict = 'R';
    if (s && grammar_accept(s, text, length) == 0) verdict = grammar_can_end(s) ? 'M' : 'P';
    grammar_state_free(s);
    return verdict;
}

struct text_case {
    const char *text;
    char verdict;
};

static void check_texts(const char *gbnf, const struct text_case *cases) {
    struct grammar *g = compile(gbnf);
    if (!g) return;
    for (int i = 0; cases[i].text; i++) {
        char got = judge(g, cases[i].text, strlen(cases[i].text));
        CHECK_MSG(got == cases[i].verdict, "grammar %s, text \"%s\": %c, expected %c", gbnf,
                  cases[i].text, got, cases[i].verdict);
    }
    grammar_free(g);
}

static void test_literals_and_classes(void) {
    check_texts("root ::= \"abc\"",
                (struct text_case[]){
                    {"abc", 'M'}, {"ab", 'P'}, {"", 'P'}, {"abd", 'R'}, {"abcd", 'R'}, {NULL, 0}});
    check_texts("root ::= [a-z]+ [0-9]?", (struct text_case[]){{"hello", 'M'},
                                                               {"hello5", 'M'},
                                                               {"hello55", 'R'},
                                                               {"Hello", 'R'},
                                                               {"", 'P'},
                                                               {NULL, 0}});
    check_texts("root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"", (struct text_case[]){{"\"hi there\"", 'M'},
                                                                              {"\"a\\b\"", 'R'},
                                                                              {"\"\xc3\xa9\"", 'M'},
                                                                              {"\"", 'P'},
                                                                              {NULL, 0}});
    /* Greek small letters: U+03B1..U+03C9 */
    check_texts("root ::= [\xce\xb1-\xcf\x89]+",
                (struct text_case[]){{"\xce\xb1\xce\xb2\xce\xb3", 'M'},
                                     {"a", 'R'},
                                     {"\xce\xa9", 'R'},
                                     {"\xce", 'P'},
                                     {"\xcf\x89", 'M'},
                                     {NULL, 0}});
    check_texts("root ::= [^a]", (struct text_case[]){{"b", 'M'},
                                                      {"a", 'R'},
                                                      {"\xc3\xa9", 'M'},
                                                      {"\xf0\x9f\x98\x80", 'M'},
                                                      {"\xc0\x80", 'R'},
                                                      {"\xed\xa0\x80", 'R'},
                                                      {"\xf4\x90\x80\x80", 'R'},
                                                      {"\xff", 'R'},
                                                      {"\x80", 'R'},
                                                      {NULL, 0}});
    check_texts("root ::= [\\]\\[\\\\^-]+ [-a]",
                (struct text_case[]){{"]-^[\\-", 'M'}, {"^a", 'M'}, {"x", 'R'}, {NULL, 0}});
    check_texts("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\\[\\]\"",
                (struct text_case[]){{"A\xc3\xa9\xf0\x9f\x98\x80\t\n\r\\\"[]", 'M'}, {NULL, 0}});
    check_texts("root ::= \"<\" .{3} \">\"",
                (struct text_case[]){{"<abc>", 'M'},
                                     {"<\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e>", 'M'},
                                     {"<ab>", 'P'},
                                     {"<abcd", 'R'},
                                     {NULL, 0}});
}

static void test_repetitions(void) {
    check_texts(
        "root ::= \"a\"{2,3}",
        (struct text_case[]){{"a", 'P'}, {"aa", 'M'}, {"aaa", 'M'}, {"aaaa", 'R'}, {NULL, 0}});
    check_texts(
        "root ::= \"ab\"{2}",
        (struct text_case[]){{"abab", 'M'}, {"ab", 'P'}, {"ababab", 'R'}, {"aba", 'P'}, {NULL, 0}});
    check_texts("root ::= [x]{,2} \"y\"",
                (struct text_case[]){{"y", 'M'}, {"xxy", 'M'}, {"xxxy", 'R'}, {NULL, 0}});
    check_texts("root ::= \"a\"{2,} \"b\"",
                (struct text_case[]){{"ab", 'R'}, {"aab", 'M'}, {"aaaaaab", 'M'}, {NULL, 0}});
    check_texts(
        "root ::= \"a\"{0} \"b\" { 1 , 2 }",
        (struct text_case[]){{"b", 'M'}, {"bb", 'M'}, {"ab", 'R'}, {"bbb", 'R'}, {NULL, 0}});
    check_texts("root ::= (\"a\"?)* \"b\"",
                (struct text_case[]){{"aab", 'M'}, {"b", 'M'}, {"ba", 'R'}, {NULL, 0}});
    check_texts(
        "root ::= (\"x\" | \"yz\")+ \"!\"?",
        (struct text_case[]){{"xyzx", 'M'}, {"xyzx!", 'M'}, {"y", 'P'}, {"!", 'R'}, {NULL, 0}});
}

static void test_rules(void) {
    check_texts(
        "root ::= greeting \", \" name\n"
        "greeting ::= \"hello\" |\n"
        "   \"hi\"   # continues after '|'\n"
        "name ::= ( [A-Z]\n"
        "  [a-z]* )\n",
        (struct text_case[]){
            {"hello, Bob", 'M'}, {"hi, Al", 'M'}, {"hey, Bob", 'R'}, {"hi, ", 'P'}, {NULL, 0}});
    check_texts(
        "root ::= \"(\" root \")\" | \"\"",
        (struct text_case[]){{"((()))", 'M'}, {"(()", 'P'}, {"())", 'R'}, {"", 'M'}, {NULL, 0}});
    check_texts("root ::= | \"x\"", (struct text_case[]){{"", 'M'}, {"x", 'M'}, {NULL, 0}});
    check_texts("root ::= \"a\" \"b\" | \"c\"",
                (struct text_case[]){{"ab", 'M'}, {"c", 'M'}, {"ac", 'R'}, {NULL, 0}});
    check_texts("root ::= my_rule-2\nmy_rule-2 ::= \"z\"",
                (struct text_case[]){{"z", 'M'}, {NULL, 0}});
    /* a rule that only reaches itself in last position matches nothing */
    check_texts("root ::= b\nb ::= b", (struct text_case[]){{"", 'P'}, {"a", 'R'}, {NULL, 0}});
    /* reaching a rule again in last position is no left recursion */
    check_texts("root ::= \"x\"? root | \"y\"",
                (struct text_case[]){{"y", 'M'}, {"xxy", 'M'}, {"xx", 'P'}, {NULL, 0}});
}

static void test_json(void) {
    check_texts(json_gbnf,
                (struct text_case[]){
                    {"{}", 'M'},
                    {"{\"a\": 1}", 'M'},
                    {"{\"name\": \"Bob\", \"age\": -12.5e+3, \"tags\": [true, false, null, "
                     "{\"x\": []}], \"s\": \"\\u00e9\\n\\\"\xe6\x97\xa5\"}",
                     'M'},
                    {"{\n  \"a\": [1, 2,\n    3]\n}", 'M'},
                    {"{\"a\": 01}", 'R'},
                    {"{\"a\": 1,}", 'R'},
                    {"{\"a\" 1}", 'R'},
                    {"[1]", 'R'},
                    {"{\"a\": \"\x01\"}", 'R'},
                    {"{\"a\": \"\\x\"}", 'R'},
                    {"{\"key\": \"val", 'P'},
                    {"{\"a\": 12345678901234567}", 'R'},
                    {NULL, 0}});
}

/* ------------------------------------------------------------ UTF-8, ends */

static void test_split_characters(void) {
    struct grammar *g = compile("root ::= [\xe4\xb8\x80-\xe9\xbe\xa5]+ \"\xc3\xa9\"?");
    if (!g) return;
    struct grammar_state *s = grammar_state_create(g);
    /* U+65E5 (e6 97 a5) in three pieces, then a rejected byte in between */
    CHECK(grammar_accept(s, "\xe6", 1) == 0);
    CHECK(!grammar_can_end(s));
    CHECK(grammar_accept(s, "a", 1) == -1); /* not a continuation byte */
    CHECK(grammar_accept(s, "\x97\xa5\xe6", 3) == 0);
    CHECK(grammar_accept(s, "\x97\xa5", 2) == 0);
    CHECK(grammar_can_end(s) && !grammar_is_done(s));
    CHECK(grammar_accept(s, "\xc3", 1) == 0); /* é begins */
    CHECK(!grammar_can_end(s) && !grammar_is_done(s));
    CHECK(grammar_accept(s, "\xa8", 1) == -1); /* è: U+00E8 is not é */
    CHECK(grammar_accept(s, "\xa9", 1) == 0);
    CHECK(grammar_can_end(s) && grammar_is_done(s));
    CHECK(grammar_accept(s, "\xe6", 1) == -1);
    /* a lead byte no character of the class starts with */
    struct grammar_state *t = grammar_state_create(g);
    CHECK(grammar_accept(t, "\xe3", 1) == -1);     /* U+3000..U+3FFF: below U+4E00 */
    CHECK(grammar_accept(t, "\xe4\xb7", 2) == -1); /* U+4DC0..U+4DFF */
    CHECK(grammar_accept(t, "\xe4\xb8", 2) == 0);
    grammar_state_free(t);
    grammar_state_free(s);
    grammar_free(g);
}

static void test_can_end_and_done(void) {
    struct grammar *g = compile("root ::= \"a\" \"b\"?");
    struct grammar *star = compile("root ::= \"x\"*");
    if (!g || !star) return;
    struct grammar_state *s = grammar_state_create(g);
    CHECK(!grammar_can_end(s) && !grammar_is_done(s));
    CHECK(grammar_accept(s, "a", 1) == 0);
    CHECK(grammar_can_end(s) && !grammar_is_done(s));
    struct grammar_state *c = grammar_state_copy(s);
    CHECK(grammar_accept(c, "b", 1) == 0);
    CHECK(grammar_can_end(c) && grammar_is_done(c));
    CHECK(grammar_can_end(s) && !grammar_is_done(s)); /* the copy moved alone */
    CHECK(grammar_accept(s, "ab", 2) == -1);
    CHECK(grammar_accept(s, "", 0) == 0);
    grammar_state_free(c);
    grammar_state_free(s);
    s = grammar_state_create(star);
    CHECK(grammar_can_end(s) && !grammar_is_done(s));
    CHECK(grammar_accept(s, "xxx", 3) == 0);
    CHECK(grammar_can_end(s) && !grammar_is_done(s));
    grammar_state_free(s);
    grammar_free(g);
    grammar_free(star);
}

/* ------------------------------------------------------------ masks */

/* A vocabulary for the mask tests: texts, lengths and end tokens. */
struct test_vocab {
    int n;           /* tokens */
    char **bytes;    /* (n) each token's bytes (malloc'd) */
    size_t *lengths; /* (n) */
    int end[2];      /* end tokens */
    int n_end;       /* how many */
    struct grammar_vocab *trie;
};

static uint64_t next_random(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void vocab_set(struct test_vocab *v, int id, const char *bytes, size_t length) {
    v->bytes[id] = malloc(length + 1);
    memcpy(v->bytes[id], bytes, length);
    v->lengths[id] = length;
}

/* Pieces of JSON and of UTF-8 (whole, split and invalid). */
static const char *const pieces[] = {
    "{",
    "}",
    "{\"",
    "\":",
    "\": ",
    "\", \"",
    ",",
    ", ",
    "[",
    "]",
    "[{",
    "}]",
    "true",
    "false",
    "null",
    "nul",
    "tr",
    "0",
    "1",
    "12",
    "3.14",
    "-",
    "e+",
    "E",
    ".",
    " ",
    "  ",
    "\n",
    "\n  ",
    "\t",
    "\\",
    "\\n",
    "\\u00",
    "\\\"",
    "\\u",
    "e9",
    "name",
    "\"name\"",
    "value",
    "\"",
    "\"\"",
    "\xc3\xa9",
    "\xc3",
    "\xa9",
    "\xe6\x97\xa5\xe6\x9c\xac",
    "\xe6\x97",
    "\xa5",
    "\xf0\x9f\x99\x82",
    "\xf0\x9f",
    "\x99\x82",
    "\xc0\x80",
    "\xed\xa0\x80",
    "a",
    "b",
    "ab",
    "x",
    "y",
    "hello",
    " the",
    "\x7f",
    "\x01",
    "(",
    ")",
    "((",
    "))",
    "+",
};
#define N_PIECES ((int)(sizeof(pieces) / sizeof(pieces[0])))

/* 256 single bytes, the pieces (one twice), 2000 random strings of them, two
 * empty tokens, and two end tokens (one empty, one with bytes). */
static int synthetic_vocab(struct test_vocab *v) {
    char err[256];
    uint64_t x = 0x243F6A8885A308D3ull;
    v->n = 256 + N_PIECES + 1 + 2000 + 4;
    v->bytes = calloc((size_t)v->n, sizeof(*v->bytes));
    v->lengths = calloc((size_t)v->n, sizeof(*v->lengths));
    if (!v->bytes || !v->lengths) return -1;
    int id = 0;
    for (; id < 256; id++) vocab_set(v, id, (char[]){(char)id}, 1);
    for (int i = 0; i < N_PIECES; i++, id++) vocab_set(v, id, pieces[i], strlen(pieces[i]));
    vocab_set(v, id++, "{", 1); /* the same bytes as another token */
    for (int i = 0; i < 2000; i++, id++) {
        char text[64];
        size_t n = 0;
        for (int k = (int)(next_random(&x) % 3) + 1; k > 0; k--) {
            const char *p = pieces[next_random(&x) % N_PIECES];
            strcpy(text + n, p);
            n += strlen(p);
        }
        vocab_set(v, id, text, n);
    }
    vocab_set(v, id++, "", 0);
    vocab_set(v, id++, "", 0);
    v->end[0] = id;
    vocab_set(v, id++, "", 0);
    v->end[1] = id;
    vocab_set(v, id++, "</s>", 4);
    v->n_end = 2;
    int rc = grammar_vocab_create(&v->trie, v->n, (const char *const *)v->bytes, v->lengths, v->end,
                                  v->n_end, err, sizeof(err));
    CHECK_MSG(rc == 0, "vocab: %s", err);
    return rc;
}

/* The vocabulary of the shared tiny model; -1 (after a message) if absent. */
static int shared_vocab(struct test_vocab *v) {
    char path[512], err[256];
    test_shared_path(path, sizeof(path), "models/kjv2m-q8_0.gguf");
    if (!test_require_file(path)) return -1;
    struct tokenizer *tok = test_load_vocabulary(path);
    if (!tok) return -1;
    v->n = tokenizer_vocab_size(tok);
    v->bytes = calloc((size_t)v->n, sizeof(*v->bytes));
    v->lengths = calloc((size_t)v->n, sizeof(*v->lengths));
    for (int t = 0; v->bytes && v->lengths && t < v->n; t++) {
        size_t n;
        const char *b = tokenizer_token_bytes(tok, t, &n);
        vocab_set(v, t, b, n);
    }
    v->end[0] = tokenizer_eos(tok);
    v->n_end = v->end[0] >= 0;
    tokenizer_free(tok);
    int rc = grammar_vocab_create(&v->trie, v->n, (const char *const *)v->bytes, v->lengths, v->end,
                                  v->n_end, err, sizeof(err));
    CHECK_MSG(rc == 0, "vocab: %s", err);
    return rc;
}

static void vocab_free(struct test_vocab *v) {
    for (int i = 0; v->bytes && i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->lengths);
    grammar_vocab_free(v->trie);
}

static int is_end(const struct test_vocab *v, int t) {
    for (int k = 0; k < v->n_end; k++)
        if (v->end[k] == t) return 1;
    return 0;
}

/* The reference mask: every token tried on a copy of s. */
static int brute_mask(const struct grammar_state *s, const struct test_vocab *v, uint8_t *out) {
    int count = 0;
    for (int t = 0; t < v->n; t++) {
        if (is_end(v, t)) {
            out[t] = (uint8_t)grammar_can_end(s);
        } else if (v->lengths[t] == 0) {
            out[t] = 0;
        } else {
            struct grammar_state *c = grammar_state_copy(s);
            out[t] = c && grammar_accept(c, v->bytes[t], v->lengths[t]) == 0;
            grammar_state_free(c);
        }
        count += out[t];
    }
    return count;
}

/* Compares mask (count from grammar_mask) with the reference; 1 if equal. */
static int same_mask(const uint8_t *mask, int count, const uint8_t *ref, int ref_count,
                     const struct test_vocab *v, const char *what, int step) {
    if (count == ref_count && !memcmp(mask, ref, (size_t)v->n)) return 1;
    int t = 0;
    while (t < v->n && mask[t] == ref[t]) t++;
    CHECK_MSG(0, "%s, step %d: %d allowed, reference %d; token %d (\"%.*s\") %d, reference %d",
              what, step, count, ref_count, t, t < v->n ? (int)v->lengths[t] : 0,
              t < v->n ? v->bytes[t] : "", t < v->n ? mask[t] : -1, t < v->n ? ref[t] : -1);
    return 0;
}

static long masks_compared, allowed_total; /* for the summary line */

/* The walk's three states: memo on, memo off, memo nearly full. */
struct walk_states {
    struct grammar_state *s[3];
};

/* Random walks over g: at every step, each state's mask must equal the
 * reference; then a random allowed token is taken. */
static void check_masks(const char *gbnf, const struct test_vocab *v, int walks, int steps,
                        uint64_t seed) {
    static const size_t limits[3] = {GRAMMAR_MEMO_BYTES, 0, 6000};
    struct grammar *g = compile(gbnf);
    uint8_t *mask = malloc((size_t)v->n), *ref = malloc((size_t)v->n);
    int *choices = malloc((size_t)v->n * sizeof(int)), failures = test_failures;
    for (int w = 0; g && mask && ref && choices && w < walks && failures == test_failures; w++) {
        struct walk_states ws;
        for (int k = 0; k < 3; k++) {
            ws.s[k] = grammar_state_create(g);
            grammar_state_set_memo_limit(ws.s[k], limits[k]);
        }
        for (int step = 0; step < steps && failures == test_failures; step++) {
            int ref_count = brute_mask(ws.s[0], v, ref), n_choices = 0;
            masks_compared++;
            allowed_total += ref_count;
            for (int k = 0; k < 3; k++) {
                int count = grammar_mask(ws.s[k], v->trie, mask);
                if (!same_mask(mask, count, ref, ref_count, v, gbnf, step)) break;
            }
            for (int t = 0; t < v->n; t++)
                if (ref[t]) choices[n_choices++] = t;
            if (n_choices == 0) break;
            int t = choices[next_random(&seed) % (uint64_t)n_choices];
            if (is_end(v, t)) break;
            for (int k = 0; k < 3; k++)
                CHECK(grammar_accept(ws.s[k], v->bytes[t], v->lengths[t]) == 0);
        }
        for (int k = 0; k < 3; k++) grammar_state_free(ws.s[k]);
    }
    free(mask);
    free(ref);
    free(choices);
    grammar_free(g);
}

static const char *const mask_grammars[] = {
    json_gbnf,
    "root ::= [A-Z] [a-z ,.]* \".\" | \"(\" root \")\"",
    "root ::= ([\xc3\xa0-\xc3\xbf] | [\xe6\x97\xa5-\xe6\x9c\xac] | [a-e])+ \"\\n\"?",
    "root ::= (\"hello\" | \"x\"{2,4} | [^\\x00-\\x7F]) (\" \" root)?",
    "root ::= \"\\\"\" [^\"\\\\]{0,12} \"\\\"\"",
    "root ::= b\nb ::= b # matches nothing",
};

static void test_mask_synthetic(void) {
    struct test_vocab v = {0};
    long before = masks_compared;
    if (synthetic_vocab(&v) == 0)
        for (size_t i = 0; i < sizeof(mask_grammars) / sizeof(mask_grammars[0]); i++)
            check_masks(mask_grammars[i], &v, 6, 40, 0x9E3779B97F4A7C15ull + i);
    printf("synthetic vocabulary (%d tokens): %ld masks compared\n", v.n, masks_compared - before);
    vocab_free(&v);
}

static void test_mask_shared_vocab(void) {
    struct test_vocab v = {0};
    long before = masks_compared;
    if (shared_vocab(&v) == 0) {
        for (size_t i = 0; i < sizeof(mask_grammars) / sizeof(mask_grammars[0]); i++)
            check_masks(mask_grammars[i], &v, 4, 40, 0xD1B54A32D192ED03ull + i);
        printf("kjv2m vocabulary (%d tokens): %ld masks compared\n", v.n, masks_compared - before);
    } else {
        printf("skip: the mask over the shared model's vocabulary (model absent)\n");
    }
    vocab_free(&v);
}

/* End tokens: allowed exactly when the state can end; empty tokens never. */
static void test_end_tokens(void) {
    const char *bytes[] = {"a", "", "b", "", "ab"};
    size_t lengths[] = {1, 0, 1, 0, 2};
    int end[] = {3};
    char err[256];
    struct grammar_vocab *v = NULL;
    struct grammar *g = compile("root ::= \"a\" \"b\"?");
    CHECK(grammar_vocab_create(&v, 5, bytes, lengths, end, 1, err, sizeof(err)) == 0);
    if (!g || !v) return;
    CHECK(grammar_vocab_size(v) == 5);
    struct grammar_state *s = grammar_state_create(g);
    uint8_t mask[5];
    CHECK(grammar_mask(s, v, mask) == 2);
    CHECK(mask[0] && !mask[1] && !mask[2] && !mask[3] && mask[4]);
    CHECK(grammar_accept(s, "a", 1) == 0);
    CHECK(grammar_mask(s, v, mask) == 2);
    CHECK(!mask[0] && !mask[1] && mask[2] && mask[3] && !mask[4]);
    CHECK(grammar_accept(s, "b", 1) == 0);
    CHECK(grammar_mask(s, v, mask) == 1);
    CHECK(mask[3] && !mask[0] && !mask[2]);
    grammar_state_free(s);
    grammar_vocab_free(v);
    grammar_free(g);
    /* refusals */
    int out_of_range[] = {5};
    CHECK(grammar_vocab_create(&v, 5, bytes, lengths, out_of_range, 1, err, sizeof(err)) == -1);
    CHECK_MSG(!strcmp(err, "end token 5 is out of range (a vocabulary of 5 tokens)"), "%s", err);
    size_t long_lengths[] = {1, 0, GRAMMAR_MAX_TOKEN_BYTES + 1, 0, 2};
    char *big = calloc(GRAMMAR_MAX_TOKEN_BYTES + 1, 1);
    const char *with_big[] = {"a", "", big, "", "ab"};
    CHECK(grammar_vocab_create(&v, 5, with_big, long_lengths, end, 1, err, sizeof(err)) == -1);
    CHECK_MSG(!strcmp(err, "token 2 is 4097 bytes long; the limit is 4096"), "%s", err);
    free(big);
}

/* ------------------------------------------------------------ threads */

/* What a thread of test_shared_memo does. */
struct memo_thread {
    struct grammar_state *s;    /* a copy sharing the memo */
    const struct test_vocab *v; /* the vocabulary */
    const char *path;           /* tokens to take, as text */
    int mismatches;             /* masks unlike the reference */
};

static void *memo_thread_run(void *arg) {
    struct memo_thread *t = arg;
    uint8_t *mask = malloc((size_t)t->v->n), *ref = malloc((size_t)t->v->n);
    for (int round = 0; mask && ref && round < 20; round++) {
        int count = grammar_mask(t->s, t->v->trie, mask);
        int ref_count = brute_mask(t->s, t->v, ref);
        t->mismatches += count != ref_count || memcmp(mask, ref, (size_t)t->v->n) != 0;
        char c = t->path[round % strlen(t->path)];
        if (grammar_accept(t->s, &c, 1) != 0) t->mismatches++;
    }
    free(mask);
    free(ref);
    return NULL;
}

/* Two threads mask copies of one state, which share its memo. */
static void test_shared_memo(void) {
    struct test_vocab v = {0};
    struct grammar *g = compile("root ::= [a-z]*");
    if (synthetic_vocab(&v) == 0 && g) {
        struct grammar_state *s = grammar_state_create(g);
        uint8_t *mask = malloc((size_t)v.n);
        CHECK(grammar_mask(s, v.trie, mask) > 0); /* makes the memo the copies share */
        struct memo_thread threads[2] = {{grammar_state_copy(s), &v, "abc", 0},
                                         {grammar_state_copy(s), &v, "xyzw", 0}};
        pthread_t ids[2];
        for (int i = 0; i < 2; i++) pthread_create(&ids[i], NULL, memo_thread_run, &threads[i]);
        for (int i = 0; i < 2; i++) pthread_join(ids[i], NULL);
        for (int i = 0; i < 2; i++) {
            CHECK_MSG(threads[i].mismatches == 0, "thread %d: %d mismatches", i,
                      threads[i].mismatches);
            grammar_state_free(threads[i].s);
        }
        free(mask);
        grammar_state_free(s);
    }
    grammar_free(g);
    vocab_free(&v);
}

int main(void) {
    test_compile_errors();
    test_size_limits();
    test_literals_and_classes();
    test_repetitions();
    test_rules();
    test_json();
    test_split_characters();
    test_can_end_and_done();
    test_end_tokens();
    test_mask_synthetic();
    test_mask_shared_vocab();
    test_shared_memo();
    printf("masks compared with the reference: %ld (%ld tokens allowed in all)\n", masks_compared,
           allowed_total);
    return test_status("test_grammar");
}
