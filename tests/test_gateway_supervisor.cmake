# test_gateway_supervisor.cmake -- the supervisor layer against
# tests/fake_runner, a stand-in for `lockstep runner` that links only the
# runner protocol and src/base: the test starts it by its path.
add_executable(fake_runner ${CMAKE_CURRENT_SOURCE_DIR}/fake_runner.c)
target_link_libraries(fake_runner PRIVATE lockstep_protocol lockstep_base)
add_dependencies(${name} fake_runner)
target_compile_definitions(${name} PRIVATE FAKE_RUNNER_PATH="$<TARGET_FILE:fake_runner>")
add_test(NAME ${name} COMMAND ${name})
