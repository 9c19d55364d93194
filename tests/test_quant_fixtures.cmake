# test_quant_fixtures.cmake -- the fixtures' continuations on every
# instruction set of this build's architecture: as it runs (the best the
# machine has), and capped by LOCKSTEP_ISA to each lower set and to the
# scalar reference (a set the machine lacks leaves the best in use).
add_test(NAME ${name} COMMAND ${name})
set(capped_isas ${LOCKSTEP_ISAS})
list(POP_BACK capped_isas)
foreach(isa ${capped_isas} scalar)
  add_test(NAME ${name}_${isa} COMMAND ${name})
  set_tests_properties(${name}_${isa} PROPERTIES ENVIRONMENT LOCKSTEP_ISA=${isa} SKIP_RETURN_CODE 77 TIMEOUT 600)
endforeach()
