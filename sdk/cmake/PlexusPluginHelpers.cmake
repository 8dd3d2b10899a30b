# plexus_add_plugin(<name> [OUTPUT_DIRECTORY <dir>] SOURCES <src>...)
#
# Builds libplexus_<name>.so: a MODULE library against the Plexus SDK that
#  - exports only plexus_plugin_entry_v1 (version script), so plugins never clash,
#  - links with --no-undefined, so it cannot depend on symbols of the host's core library
#    (everything from the host comes through the plx_host_api table),
#  - needs nothing but the C and C++ runtime at load time.
set(_PLEXUS_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/plexus_plugin.map")

function(plexus_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "plexus_add_plugin(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE PlexusSDK::sdk)
  set_target_properties(${name} PROPERTIES
    OUTPUT_NAME "plexus_${name}"
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
  target_link_options(${name} PRIVATE
    "LINKER:--version-script=${_PLEXUS_PLUGIN_MAP}" "LINKER:--no-undefined")
  set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${_PLEXUS_PLUGIN_MAP}")
endfunction()
