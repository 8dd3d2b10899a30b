# The main build of each of the README's two commands, in one place: scripts/quickstart.sh's and
# scripts/test.sh's first build are the same build, so that test.sh run after quickstart.sh (or
# the other way round) compiles nothing again. tests/integration/build_agreement_test.sh runs both
# into a scratch directory and checks exactly that.
#
# They agree because PLEXUS_WARNINGS_AS_ERRORS defaults to AUTO (cmake/PlexusWarnings.cmake): on
# with the compilers the code is checked with (g++ 12, clang++ 14), which is what test.sh's ON
# asks for. With another compiler quickstart.sh builds without -Werror (a new compiler's new
# warnings must not stop a user) and test.sh with it, so there the second one recompiles.
#
# Both take the directory from PLEXUS_BUILD_DIR, the type from PLEXUS_BUILD_TYPE (default
# Release) and pass their arguments on to CMake (scripts/build.sh).

# quickstart.sh's build: what a user builds.
plexus_quickstart_build() {
  "$root/scripts/build.sh" "$@"
}

# test.sh's first build: the same, with warnings as errors demanded whatever the compiler.
plexus_test_build() {
  "$root/scripts/build.sh" -DPLEXUS_WARNINGS_AS_ERRORS=ON "$@"
}
