# test_gateway_arch_move.cmake -- the arm64 lockstep binary the test runs
# under qemu-aarch64: LOCKSTEP_ARM64_BIN in ctest's environment, or this
# cache variable (cmake -DLOCKSTEP_ARM64_BIN=$PWD/build/arm64/lockstep).
# Without either the test is skipped (77); scripts/arm64.sh runs it.
set(LOCKSTEP_ARM64_BIN "" CACHE FILEPATH
  "an arm64 lockstep binary for test_gateway_arch_move (run under qemu-aarch64)")
add_test(NAME ${name} COMMAND ${name})
if(LOCKSTEP_ARM64_BIN)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "LOCKSTEP_ARM64_BIN=${LOCKSTEP_ARM64_BIN}")
endif()
