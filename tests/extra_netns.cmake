# extra_netns.cmake -- netns_tp: two MPI ranks on two "hosts" (network
# namespaces joined by a veth pair) generate the tokens of a local run
# (tests/netns_tp.sh). Skipped (77) without root, iproute2 or Open MPI.
if(TARGET MPI::MPI_C AND MPIEXEC_EXECUTABLE)
  add_test(NAME netns_tp COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/netns_tp.sh $<TARGET_FILE:lockstep>)
  set_tests_properties(netns_tp PROPERTIES ENVIRONMENT "MPIRUN=${MPIEXEC_EXECUTABLE}")
else()
  add_test(NAME netns_tp COMMAND sh -c "echo 'skip: lockstep was built without MPI'; exit 77")
endif()
set_tests_properties(netns_tp PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
