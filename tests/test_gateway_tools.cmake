# test_gateway_tools.cmake -- validates the calls' arguments with the JSON
# Schema checker the converter's own test uses (tests/json_schema_check.c).
target_sources(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/json_schema_check.c)
add_test(NAME ${name} COMMAND ${name})
