# extra_man.cmake -- man_page: every subcommand and every option the lockstep
# command's help texts print is in the manual page docs/lockstep.1, and groff
# reads the page without a warning (tests/man_page.sh).
find_program(BASH_EXECUTABLE bash)
if(BASH_EXECUTABLE)
  add_test(NAME man_page
    COMMAND ${BASH_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/man_page.sh $<TARGET_FILE:lockstep>
      ${CMAKE_SOURCE_DIR}/docs/lockstep.1)
else()
  add_test(NAME man_page COMMAND sh -c "echo 'man_page: skipped, bash not found'; exit 77")
endif()
set_tests_properties(man_page PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
