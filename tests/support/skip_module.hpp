// Skipping a whole test executable honestly: when a prerequisite (a GPU, torch, numpy) is
// missing, exit with 77 before any test runs, which tests/CMakeLists.txt maps to ctest's
// "Skipped" (SKIP_RETURN_CODE). A Boost.Test precondition alone exits 0 and shows as "Passed".
#pragma once

#include <cstdio>
#include <cstdlib>

#include <boost/test/unit_test.hpp>

#define PLEXUS_SKIP_MODULE_UNLESS(available, reason)                  \
  namespace {                                                         \
  struct PlexusSkipModuleCheck {                                      \
    PlexusSkipModuleCheck() {                                         \
      if (!(available)) {                                             \
        std::printf("SKIPPED: %s\n", reason);                         \
        std::fflush(stdout);                                          \
        std::_Exit(77);                                               \
      }                                                               \
    }                                                                 \
  };                                                                  \
  }                                                                   \
  BOOST_TEST_GLOBAL_FIXTURE(PlexusSkipModuleCheck);
