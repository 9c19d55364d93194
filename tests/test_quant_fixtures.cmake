# test_quant_fixtures.cmake -- the fixtures' continuations on every
# instruction set this machine has: as it runs, and capped by LOCKSTEP_ISA to
# AVX2 and to the scalar references (a set above the machine's is ignored).
add_test(NAME ${name} COMMAND ${name})
add_test(NAME ${name}_avx2 COMMAND ${name})
set_tests_properties(${name}_avx2 PROPERTIES ENVIRONMENT LOCKSTEP_ISA=avx2 SKIP_RETURN_CODE 77 TIMEOUT 600)
add_test(NAME ${name}_scalar COMMAND ${name})
set_tests_properties(${name}_scalar PROPERTIES ENVIRONMENT LOCKSTEP_ISA=scalar SKIP_RETURN_CODE 77 TIMEOUT 600)
