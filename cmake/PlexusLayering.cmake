# The dependency rule of docs/architecture.md, checked on the build's own target graph every time
# CMake configures, so a change that breaks it fails where it is made instead of in review:
#
#   plexus_check_layering(ROOT <source dir> DIRECTORIES <dir>... FORBIDDEN <dir>...)
#
# Every target defined under one of DIRECTORIES (relative to ROOT, subdirectories included) must
# not link a target defined under one of FORBIDDEN, take an include directory from there, or
# compile a source file from there. All violations are listed, then configuring stops.
# The top-level CMakeLists.txt checks sdk/, libs/, framework/ and apps/ against plugins/;
# tests/abi/layering/ proves that the check fails when it should (ctest abi.layering).

# The names inside one link item that could be targets. An item is a target name, a path or flag,
# or a generator expression around them ($<LINK_ONLY:x> for a static library's private links,
# $<$<CONFIG:Debug>:x>, ...): every name-like token is returned, so a condition never hides a link.
function(_plexus_layering_link_names item out)
  if(NOT item MATCHES "\\$<")
    set(${out} "${item}" PARENT_SCOPE)
    return()
  endif()
  # '::' belongs to namespaced names (CUDA::cudart); a single ':' separates a generator expression's
  # condition from its value.
  string(REPLACE "::" "@@" item "${item}")
  string(REGEX MATCHALL "[A-Za-z0-9_.+@-]+" tokens "${item}")
  list(TRANSFORM tokens REPLACE "@@" "::")
  set(${out} "${tokens}" PARENT_SCOPE)
endfunction()

# Appends to <out> every build-system target defined in <dir> or below.
function(_plexus_layering_targets dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _plexus_layering_targets("${sub}" sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} "${targets}" PARENT_SCOPE)
endfunction()

# <out> is the FORBIDDEN directory (relative to ROOT) that contains <path>, or empty.
function(_plexus_layering_forbidden_home path out)
  set(${out} "" PARENT_SCOPE)
  foreach(dir IN LISTS _plexus_forbidden_abs)
    cmake_path(IS_PREFIX dir "${path}" NORMALIZE inside)
    if(inside)
      cmake_path(RELATIVE_PATH path BASE_DIRECTORY "${_plexus_layering_root}" OUTPUT_VARIABLE rel)
      set(${out} "${rel}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

function(plexus_check_layering)
  cmake_parse_arguments(ARG "" "ROOT" "DIRECTORIES;FORBIDDEN" ${ARGN})
  if(NOT ARG_ROOT OR NOT ARG_DIRECTORIES OR NOT ARG_FORBIDDEN)
    message(FATAL_ERROR "plexus_check_layering: ROOT, DIRECTORIES and FORBIDDEN are required")
  endif()
  set(_plexus_layering_root "${ARG_ROOT}")
  set(_plexus_forbidden_abs "")
  foreach(dir IN LISTS ARG_FORBIDDEN)
    list(APPEND _plexus_forbidden_abs "${ARG_ROOT}/${dir}")
  endforeach()

  set(problems "")
  set(checked 0)
  foreach(dir IN LISTS ARG_DIRECTORIES)
    if(NOT IS_DIRECTORY "${ARG_ROOT}/${dir}")
      message(FATAL_ERROR "plexus_check_layering: '${ARG_ROOT}/${dir}' is not a directory")
    endif()
    _plexus_layering_targets("${ARG_ROOT}/${dir}" targets)
    foreach(target IN LISTS targets)
      math(EXPR checked "${checked} + 1")
      get_target_property(target_dir ${target} SOURCE_DIR)
      cmake_path(RELATIVE_PATH target_dir BASE_DIRECTORY "${ARG_ROOT}" OUTPUT_VARIABLE where)
      set(who "target '${target}' (${where})")

      # Links, direct or as part of the target's interface.
      set(items "")
      foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
        get_target_property(value ${target} ${property})
        if(value)
          list(APPEND items ${value})
        endif()
      endforeach()
      set(reported "")
      foreach(item IN LISTS items)
        _plexus_layering_link_names("${item}" names)
        foreach(name IN LISTS names)
          if(NOT TARGET "${name}" OR name IN_LIST reported)
            continue()
          endif()
          get_target_property(real "${name}" ALIASED_TARGET)
          if(NOT real)
            set(real "${name}")
          endif()
          get_target_property(imported "${real}" IMPORTED)
          if(imported)
            continue()  # an external package, not part of this tree
          endif()
          get_target_property(dep_dir "${real}" SOURCE_DIR)
          _plexus_layering_forbidden_home("${dep_dir}" home)
          if(home)
            list(APPEND reported "${name}")
            list(APPEND problems "${who} links '${name}', defined in ${home}")
          endif()
        endforeach()
      endforeach()

      # Include directories (a header from there is as much a dependency as a library).
      foreach(property INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES)
        get_target_property(value ${target} ${property})
        if(NOT value)
          continue()
        endif()
        foreach(entry IN LISTS value)
          foreach(forbidden IN LISTS _plexus_forbidden_abs)
            string(FIND "${entry}/" "${forbidden}/" at)
            if(at GREATER_EQUAL 0)
              list(APPEND problems "${who} has the include directory '${entry}'")
              break()
            endif()
          endforeach()
        endforeach()
      endforeach()

      # Sources compiled into it.
      get_target_property(sources ${target} SOURCES)
      if(sources)
        foreach(source IN LISTS sources)
          if(source MATCHES "\\$<")
            continue()
          endif()
          cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${target_dir}" NORMALIZE OUTPUT_VARIABLE path)
          _plexus_layering_forbidden_home("${path}" home)
          if(home)
            list(APPEND problems "${who} compiles ${home}")
          endif()
        endforeach()
      endif()
    endforeach()
  endforeach()

  list(JOIN ARG_DIRECTORIES "/, " lower)
  list(JOIN ARG_FORBIDDEN "/, " upper)
  if(problems)
    list(JOIN problems "\n  " listed)
    message(FATAL_ERROR
      "dependency rule broken (docs/architecture.md): ${lower}/ must not depend on ${upper}/:\n"
      "  ${listed}\n"
      "A library that both the core and plugins need belongs in libs/ (see libs/README.md).")
  endif()
  message(STATUS "Dependency rule: ${checked} targets under ${lower}/ depend on nothing under ${upper}/")
endfunction()
