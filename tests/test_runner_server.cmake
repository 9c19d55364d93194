# test_runner_server.cmake -- the runner as a process: once with local
# threads, once under mpirun (-np 2) when Open MPI was found.
add_test(NAME ${name} COMMAND ${name} local)
if(TARGET MPI::MPI_C AND MPIEXEC_EXECUTABLE)
  add_test(NAME ${name}_mpi COMMAND ${name} mpi ${MPIEXEC_EXECUTABLE})
  # not under ThreadSanitizer: Open MPI's own locks are not instrumented
  # and it reports their order as races of ours
  set_tests_properties(${name}_mpi PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS "")
endif()
