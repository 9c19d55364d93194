# test_json_schema.cmake -- the JSON Schema converter's test is built with
# the validator it holds the grammars against (tests/json_schema_check.c).
target_sources(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/json_schema_check.c)
add_test(NAME ${name} COMMAND ${name})
