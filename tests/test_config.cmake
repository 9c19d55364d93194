# test_config.cmake -- the test reads the packaged example configuration
# (packaging/lockstep.conf) from the source tree.
target_compile_definitions(${name} PRIVATE LOCKSTEP_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME ${name} COMMAND ${name})
