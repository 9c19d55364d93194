# test_comm_mpi.cmake -- the mpi backend test: test_comm_mpi runs
# comm_mpi_rank (one rank of a job, tests/comm_mpi_rank.c) under mpirun.
# Without MPI the test is still built and reports "skipped" (77).
if(TARGET MPI::MPI_C AND MPIEXEC_EXECUTABLE)
  add_executable(comm_mpi_rank ${CMAKE_CURRENT_SOURCE_DIR}/comm_mpi_rank.c)
  target_link_libraries(comm_mpi_rank PRIVATE lockstep_comm)
  target_compile_definitions(${name} PRIVATE
    COMM_MPI_RANK="$<TARGET_FILE:comm_mpi_rank>"
    COMM_MPIRUN="${MPIEXEC_EXECUTABLE}")
  add_dependencies(${name} comm_mpi_rank)
endif()
add_test(NAME ${name} COMMAND ${name})
