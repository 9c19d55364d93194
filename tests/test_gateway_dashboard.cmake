# test_gateway_dashboard.cmake -- compares the embedded dashboard with its
# sources, so it needs to know where they are.
target_compile_definitions(${name} PRIVATE
  LOCKSTEP_DASHBOARD_DIR="${CMAKE_SOURCE_DIR}/src/gateway/http/dashboard")
add_test(NAME ${name} COMMAND ${name})
