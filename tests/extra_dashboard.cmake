# extra_dashboard.cmake -- dashboard: tests/dashboard/run.sh starts
# `lockstep serve --cluster` on two local hosts and drives its dashboard
# (GET /) in Debian's headless chromium with puppeteer-core
# (tests/dashboard/dashboard.test.mjs): the page matches GET /v1/cluster,
# "move" moves the instance, the chat box streams. scripts/setup.sh installs
# node, chromium and puppeteer-core; without them the test reports "skipped"
# (77) and says why.
find_program(BASH_EXECUTABLE bash)
if(BASH_EXECUTABLE)
  add_test(NAME dashboard
    COMMAND ${BASH_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/run.sh
      $<TARGET_FILE:lockstep> ${CMAKE_CURRENT_BINARY_DIR}/dashboard)
else()
  add_test(NAME dashboard COMMAND sh -c "echo 'dashboard: skipped, bash not found'; exit 77")
endif()
set_tests_properties(dashboard PROPERTIES LABELS dashboard TIMEOUT 300 SKIP_RETURN_CODE 77)
