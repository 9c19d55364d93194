# extra_comm_mpi.cmake -- bench/comm_bench (not a test): all-reduce latency
# of src/comm's backends, and of a bare MPI_Allreduce when MPI is found.
add_executable(comm_bench ${CMAKE_SOURCE_DIR}/bench/comm_bench.c)
target_link_libraries(comm_bench PRIVATE lockstep_comm)
if(TARGET MPI::MPI_C AND LOCKSTEP_MPI)
  target_compile_definitions(comm_bench PRIVATE LOCKSTEP_HAVE_MPI=1)
endif()
