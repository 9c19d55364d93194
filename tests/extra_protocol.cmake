# extra_protocol.cmake -- CTest tests that model-check the step protocol with
# spin: docs/protocol/check.sh runs each check in a temporary directory and
# reads pan's verdicts (docs/protocol/README.md explains the models).
# Without spin (Debian package "spin") the tests report "skipped" (77).
find_program(SPIN_EXECUTABLE spin)
find_program(BASH_EXECUTABLE bash)
set(protocol_checks overlap_deadlocks overlap_fixed lockstep_safe lockstep_live lockstep_mutants
  pipeline_safe pipeline_live pipeline_deadlocks pipeline_mutants)
foreach(check ${protocol_checks})
  if(SPIN_EXECUTABLE AND BASH_EXECUTABLE)
    add_test(NAME protocol_${check}
      COMMAND ${BASH_EXECUTABLE} ${CMAKE_SOURCE_DIR}/docs/protocol/check.sh
        --source ${CMAKE_SOURCE_DIR} --spin ${SPIN_EXECUTABLE} --cc ${CMAKE_C_COMPILER}
        ${check})
  else()
    add_test(NAME protocol_${check}
      COMMAND sh -c "echo 'protocol_${check}: skipped, spin or bash not found (Debian package spin)'; exit 77")
  endif()
  set_tests_properties(protocol_${check} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS protocol)
endforeach()
