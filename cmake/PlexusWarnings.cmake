# The project's warnings on Plexus's own code. Applied per target (never globally) so
# third-party code compiled in tests is not held to our flags.
#
# The warnings are always on; whether they stop the build is PLEXUS_WARNINGS_AS_ERRORS:
#   AUTO (the default): ON with the compilers the code is checked with, g++ 12 and clang++ 14
#        (Debian 12's, scripts/test.sh's two builds), which give no warning on it; OFF with any
#        other, newer or older, whose new warnings (or false positives) must not keep anyone from
#        building a release;
#   ON:  always (scripts/test.sh, CI: every warning is fixed, whatever the compiler);
#   OFF: never.
# Why AUTO and not OFF: -Werror is part of every compile line, so a build configured without it
# and then with it recompiles everything. With AUTO, the README's scripts/quickstart.sh (no flag)
# and scripts/test.sh (ON) make the same build on the checked compilers, and test.sh after
# quickstart.sh rebuilds nothing (tests/integration/build_agreement_test.sh proves it).
#
# A known false positive: GCC 12 at -O3 (Release) reports -Wrestrict ("accessing
# 9223372036854775810 or more bytes ... may overlap") inside libstdc++ for a one-character string
# literal prepended to a temporary std::string, as in "[" + std::to_string(i). The code is correct
# (g++ at -O2 and clang do not warn); write the character as a char, '[' + std::to_string(i), which
# takes another overload, and leave -Wrestrict on for everything else.
#
# Not a warning about the code: clang reports -Wpass-failed ("loop not vectorized: the optimizer was
# unable to perform the requested transformation") when it cannot vectorize a loop marked
# `#pragma omp simd`. The kernels' loops are written and measured for g++, which vectorizes them
# and, like the OpenMP standard, treats the pragma as permission rather than a demand; clang 14
# cannot vectorize a few of them (floating-point max reductions, which it vectorizes only when
# NaNs are ruled out; loops calling libm's exp in the float64 kernels; AdamW's update). Those run
# scalar in a clang build, with the same results. So in clang's optimizing builds (the only ones
# that vectorize) this one diagnostic is off; every other stays on.
set(PLEXUS_WARNINGS_AS_ERRORS AUTO CACHE STRING
  "Treat compiler warnings in Plexus's own code as errors (AUTO: with g++ 12 and clang++ 14|ON|OFF)")
set_property(CACHE PLEXUS_WARNINGS_AS_ERRORS PROPERTY STRINGS AUTO ON OFF)
if(PLEXUS_WARNINGS_AS_ERRORS STREQUAL "AUTO")
  string(REGEX MATCH "^[0-9]+" _plexus_cxx_major "${CMAKE_CXX_COMPILER_VERSION}")
  if((CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND _plexus_cxx_major STREQUAL "12") OR
     (CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND _plexus_cxx_major STREQUAL "14"))
    set(_plexus_werror ON)
  else()
    set(_plexus_werror OFF)
  endif()
  message(STATUS "Plexus: warnings as errors ${_plexus_werror} (PLEXUS_WARNINGS_AS_ERRORS=AUTO, "
                 "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}; on for GNU 12 and Clang 14)")
elseif(PLEXUS_WARNINGS_AS_ERRORS)
  set(_plexus_werror ON)
else()
  set(_plexus_werror OFF)
endif()
# What AUTO resolved to, for the build-agreement test and anyone reading the cache.
set(PLEXUS_WARNINGS_AS_ERRORS_IN_EFFECT ${_plexus_werror} CACHE INTERNAL "warnings as errors, as resolved")

function(plexus_strict_warnings target)
  set(cxx -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wconversion -Wno-sign-conversion)
  set(c -Wall -Wextra -Wpedantic)
  # .cu files: the host compiler gets -Wall -Wextra only (not -Wpedantic/-Wconversion: nvcc's
  # generated host code would trip them).
  set(cuda -Xcompiler=-Wall,-Wextra)
  if(PLEXUS_WARNINGS_AS_ERRORS_IN_EFFECT)
    list(APPEND cxx -Werror)
    list(APPEND c -Werror)
    list(APPEND cuda -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${cxx}>"
    "$<$<COMPILE_LANGUAGE:C>:${c}>"
    "$<$<COMPILE_LANGUAGE:CUDA>:${cuda}>"
    "$<$<AND:$<COMPILE_LANG_AND_ID:CXX,Clang>,$<NOT:$<CONFIG:Debug>>>:-Wno-pass-failed>")
endfunction()
