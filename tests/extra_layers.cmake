# extra_layers.cmake -- layers: every include of src/ against the layer
# order of docs/DESIGN.md (scripts/check_layers.sh); layers_refusals: that
# check refuses each way of breaking the order (tests/check_layers_test.sh).
find_program(BASH_FOR_LAYERS bash)
if(BASH_FOR_LAYERS)
  add_test(NAME layers COMMAND ${BASH_FOR_LAYERS} ${CMAKE_SOURCE_DIR}/scripts/check_layers.sh)
  add_test(NAME layers_refusals COMMAND ${BASH_FOR_LAYERS} ${CMAKE_CURRENT_SOURCE_DIR}/check_layers_test.sh)
  set_tests_properties(layers layers_refusals PROPERTIES LABELS lint TIMEOUT 120)
endif()
