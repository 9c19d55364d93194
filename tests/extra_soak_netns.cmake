# extra_soak_netns.cmake -- soak_netns_short: bench/soak's part (n) for two
# minutes on three hosts in network namespaces (tests/soak_netns_short.sh):
# no failed or wrong request through live moves and a lost host. Skipped
# (77) without root, iproute2 or Open MPI.
find_program(BASH_FOR_SOAK bash)
if(BASH_FOR_SOAK)
  add_test(NAME soak_netns_short
    COMMAND ${BASH_FOR_SOAK} ${CMAKE_CURRENT_SOURCE_DIR}/soak_netns_short.sh
      $<TARGET_FILE:lockstep> $<TARGET_FILE:soak_tool>)
  set_tests_properties(soak_netns_short PROPERTIES LABELS soak TIMEOUT 400 SKIP_RETURN_CODE 77)
endif()
