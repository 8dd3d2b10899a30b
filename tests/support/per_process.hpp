// One object per test process, for the MPI tests: MPI starts once per process, so the runtime
// (and what is built on it) is made on first use by any test case and destroyed after the last,
// by a Boost.Test global fixture: `using StopAtTheEnd = plexus::test::DestroyAtTheEnd<Started>;`
// then `BOOST_TEST_GLOBAL_FIXTURE(StopAtTheEnd);`.
#pragma once

#include <memory>

namespace plexus::test {

template <class T>
std::unique_ptr<T>& per_process_slot() {
  static std::unique_ptr<T> slot;
  return slot;
}

template <class T>
T& per_process() {
  std::unique_ptr<T>& slot = per_process_slot<T>();
  if (!slot) slot = std::make_unique<T>();
  return *slot;
}

template <class T>
struct DestroyAtTheEnd {
  ~DestroyAtTheEnd() { per_process_slot<T>().reset(); }
};

}  // namespace plexus::test
