/* json_schema_check.h -- a JSON Schema validator and a strict JSON syntax
 * check, for tests.
 *
 * It covers the subset that grammar_from_json_schema (src/grammar) turns
 * into grammars: type, properties, required, additionalProperties, items,
 * minItems, maxItems, minLength, maxLength, format (date, time, date-time,
 * uuid), enum, const, anyOf, oneOf, $ref to a local JSON pointer, boolean
 * schemas, and annotations (ignored). Every keyword applies on its own (as
 * the specification says), so combinations the converter refuses are
 * still judged right. It shares no code with the converter: each checks the
 * other. A member name that occurs twice in an object is invalid when the
 * schema declares it; additional members are judged one by one. */
#ifndef LOCKSTEP_JSON_SCHEMA_CHECK_H
#define LOCKSTEP_JSON_SCHEMA_CHECK_H

#include <cjson/cJSON.h>

#include <stddef.h>

/* 0 if doc is valid under schema; -1 with err saying where (a JSON pointer
 * into doc) and why it is not, or which keyword the check does not know. */
int json_schema_check(const cJSON *schema, const cJSON *doc, char *err, size_t errlen);

/* 0 if the n bytes at text are exactly one JSON value by RFC 8259 (with
 * valid UTF-8, no lone surrogate escape, whitespace allowed around
 * tokens); -1 with err giving the offset of the first fault. */
int json_text_check(const char *text, size_t n, char *err, size_t errlen);

#endif
