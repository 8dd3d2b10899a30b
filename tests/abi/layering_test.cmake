# ctest abi.layering: cmake/PlexusLayering.cmake, the configure-time check of the dependency rule,
# on the miniature tree in layering/. The good case must configure; every other case breaks the
# rule one way and must stop the configure step with a message naming the offending target and
# what it depends on. (The real tree is checked by every configure of Plexus itself.)
#
#   cmake -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch dir> -P layering_test.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "layering_test.cmake: -D${var}=... is required")
  endif()
endforeach()

set(fixture "${SOURCE_DIR}/tests/abi/layering")
# case | text the refusal must contain
set(cases
  "good|"
  "core_links_plugin_helper|target 'core' (framework) links 'plugin_helper', defined in plugins"
  "core_links_plugin_helper_alias|target 'core' (framework) links 'Fixture::plugin_helper', defined in plugins"
  "core_links_plugin_helper_conditionally|target 'core' (framework) links 'plugin_helper', defined in plugins"
  "core_links_plugin_helper_later|target 'core' (framework) links 'plugin_helper', defined in plugins"
  "libs_links_plugin_helper|target 'shared_kernels' (libs) links 'plugin_helper', defined in plugins"
  "core_includes_plugin_headers|target 'core' (framework) has the include directory '${fixture}/plugins/include'"
  "core_compiles_plugin_source|target 'core' (framework) compiles plugins/helper.c")

set(failures 0)
foreach(entry IN LISTS cases)
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 case)
  list(LENGTH fields n)
  set(expected "")
  if(n GREATER 1)
    list(GET fields 1 expected)
  endif()
  set(build "${WORK_DIR}/${case}")
  file(REMOVE_RECURSE "${build}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${fixture}" -B "${build}"
      "-DPLEXUS_LAYERING_MODULE=${SOURCE_DIR}/cmake/PlexusLayering.cmake" "-DLAYERING_CASE=${case}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # CMake wraps long message lines; join them back before searching.
  string(REGEX REPLACE "\n *" " " flat "${out}${err}")
  if(case STREQUAL "good")
    if(rc EQUAL 0 AND flat MATCHES "Dependency rule: [0-9]+ targets")
      message(STATUS "${case}: configures, check ran")
    else()
      message(STATUS "FAIL ${case}: expected a clean configure with the check's status line (exit ${rc}):\n${out}${err}")
      math(EXPR failures "${failures} + 1")
    endif()
    continue()
  endif()
  string(FIND "${flat}" "${expected}" at)
  if(rc EQUAL 0)
    message(STATUS "FAIL ${case}: configured although it breaks the rule")
    math(EXPR failures "${failures} + 1")
  elseif(at LESS 0 OR NOT flat MATCHES "dependency rule broken")
    message(STATUS "FAIL ${case}: refused, but the message lacks \"${expected}\":\n${out}${err}")
    math(EXPR failures "${failures} + 1")
  else()
    message(STATUS "${case}: refused naming it")
  endif()
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} layering case(s) failed")
endif()
