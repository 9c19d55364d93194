# test_tp_faults.cmake -- test_tp_faults also runs `lockstep generate` under
# mpirun when Open MPI was found (lockstep then has the mpi backend); without
# it only the local parts run.
if(TARGET MPI::MPI_C AND MPIEXEC_EXECUTABLE)
  target_compile_definitions(${name} PRIVATE TEST_MPIRUN="${MPIEXEC_EXECUTABLE}")
endif()
add_test(NAME ${name} COMMAND ${name})
