# In-tree plugins use the same helper the SDK installs for out-of-tree ones, and land in
# build/lib/plexus/plugins.
include("${PROJECT_SOURCE_DIR}/sdk/cmake/PlexusPluginHelpers.cmake")

function(plexus_add_intree_plugin name)
  plexus_add_plugin(${name} OUTPUT_DIRECTORY "${PLEXUS_PLUGIN_OUTPUT_DIR}" ${ARGN})
  plexus_strict_warnings(${name})
  install(TARGETS ${name} LIBRARY DESTINATION "${PLEXUS_PLUGIN_SUBDIR}")
endfunction()
