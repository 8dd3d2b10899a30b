# In-tree plugins use the same helper the SDK installs for out-of-tree ones, and land in
# build/lib/plexus/plugins.
include("${PROJECT_SOURCE_DIR}/sdk/cmake/PlexusPluginHelpers.cmake")

function(plexus_add_intree_plugin name)
  plexus_add_plugin(${name} OUTPUT_DIRECTORY "${PLEXUS_PLUGIN_OUTPUT_DIR}" ${ARGN})
  plexus_strict_warnings(${name})
  install(TARGETS ${name} LIBRARY DESTINATION "${PLEXUS_PLUGIN_SUBDIR}")
endfunction()

# Makes every test executable whose target name matches one of the regular expressions after
# `plugin` depend on the plugin, so building a test (e.g. `--target unit_test_mamba_gradcheck`)
# builds the plugin it loads first. tests/CMakeLists.txt creates the tests after the plugins'
# directories, so the dependencies are added once every directory has been processed (a deferred
# call in the top directory; its arguments are fixed now, since a deferred call would otherwise
# expand them later, in a scope where they no longer exist).
function(plexus_plugin_tests plugin)
  if(NOT PLEXUS_BUILD_TESTS)
    return()
  endif()
  set(_args "[[${plugin}]]")
  foreach(pattern IN LISTS ARGN)
    string(APPEND _args " [[${pattern}]]")
  endforeach()
  cmake_language(EVAL CODE
    "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]] CALL _plexus_plugin_test_dependencies ${_args})")
endfunction()

function(_plexus_plugin_test_dependencies plugin)
  get_property(_targets DIRECTORY "${PROJECT_SOURCE_DIR}/tests" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS _targets)
    foreach(pattern IN LISTS ARGN)
      if(t MATCHES "${pattern}")
        add_dependencies(${t} ${plugin})
        break()
      endif()
    endforeach()
  endforeach()
endfunction()
