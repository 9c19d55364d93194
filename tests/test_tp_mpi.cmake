# test_tp_mpi.cmake -- test_tp_mpi runs `lockstep generate` under mpirun when
# Open MPI was found (lockstep then has the mpi backend); without it the
# test reports "skipped" (77).
if(TARGET MPI::MPI_C AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(${name} PRIVATE TEST_MPIRUN="${MPIEXEC_EXECUTABLE}")
endif()
add_test(NAME ${name} COMMAND ${name})
