# The project's warnings on Plexus's own code. Applied per target (never globally) so
# third-party code compiled in tests is not held to our flags.
#
# The warnings are always on; whether they stop the build is PLEXUS_WARNINGS_AS_ERRORS. It is OFF
# by default because a user's compiler may be newer or older than the ones the code is checked
# with, and a warning new to it (or a compiler's false positive) must not keep anyone from building
# a release. Development and CI turn it ON (scripts/test.sh does), where every warning is fixed.
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
option(PLEXUS_WARNINGS_AS_ERRORS "Treat compiler warnings in Plexus's own code as errors" OFF)

function(plexus_strict_warnings target)
  set(cxx -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wconversion -Wno-sign-conversion)
  set(c -Wall -Wextra -Wpedantic)
  # .cu files: the host compiler gets -Wall -Wextra only (not -Wpedantic/-Wconversion: nvcc's
  # generated host code would trip them).
  set(cuda -Xcompiler=-Wall,-Wextra)
  if(PLEXUS_WARNINGS_AS_ERRORS)
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
