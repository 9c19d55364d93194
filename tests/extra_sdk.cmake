# extra_sdk.cmake -- openai_sdk: tests/sdk/run.sh drives `lockstep serve` with
# the official openai npm SDK (tests/sdk/openai_sdk.test.mjs, run by
# `node --test`) on a small random model written into the build tree.
# scripts/setup.sh installs node and the SDK; without them (npm could not
# reach its registry) the test reports "skipped" (77) and says why.
find_program(BASH_EXECUTABLE bash)
if(BASH_EXECUTABLE)
  add_test(NAME openai_sdk
    COMMAND ${BASH_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/sdk/run.sh
      $<TARGET_FILE:lockstep> ${CMAKE_CURRENT_BINARY_DIR}/openai_sdk)
else()
  add_test(NAME openai_sdk COMMAND sh -c "echo 'openai_sdk: skipped, bash not found'; exit 77")
endif()
set_tests_properties(openai_sdk PROPERTIES LABELS sdk TIMEOUT 300 SKIP_RETURN_CODE 77)
