# extra_chaos.cmake -- chaos_short: bench/chaos with short phases (about two
# minutes in all) on a small random model that tests/chaos_short.sh writes
# into the build tree. It must show 0 failed, wrong or late requests, every
# output equal to its fault-free reference, every fault recovered and no
# process left behind (issue 6). Label "chaos".
find_program(BASH_EXECUTABLE bash)
if(BASH_EXECUTABLE)
  add_test(NAME chaos_short
    COMMAND ${BASH_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/chaos_short.sh
      $<TARGET_FILE:lockstep> $<TARGET_FILE:chaos_tool> ${CMAKE_CURRENT_BINARY_DIR}/chaos_short)
else()
  add_test(NAME chaos_short COMMAND sh -c "echo 'chaos_short: skipped, bash not found'; exit 77")
endif()
set_tests_properties(chaos_short PROPERTIES LABELS chaos TIMEOUT 400 SKIP_RETURN_CODE 77)
