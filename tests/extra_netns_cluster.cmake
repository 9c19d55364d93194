# extra_netns_cluster.cmake -- netns_cluster: three "hosts" (network
# namespaces on a bridge) under one gateway: live moves and a lost host
# under streaming load with no failed request (tests/netns_cluster.sh).
# Skipped (77) without root, iproute2, curl or Open MPI.
if(TARGET MPI::MPI_C AND MPIEXEC_EXECUTABLE)
  add_test(NAME netns_cluster COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/netns_cluster.sh $<TARGET_FILE:lockstep>)
  set_tests_properties(netns_cluster PROPERTIES ENVIRONMENT "MPIRUN=${MPIEXEC_EXECUTABLE}")
else()
  add_test(NAME netns_cluster COMMAND sh -c "echo 'skip: lockstep was built without MPI'; exit 77")
endif()
set_tests_properties(netns_cluster PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
