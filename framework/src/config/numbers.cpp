// Numeric comparison and equality across Boost.JSON's three number kinds.
#include "internal.hpp"

#include <algorithm>
#include <cmath>

namespace plexus::config::detail {

namespace {

template <typename T>
int three_way(T a, T b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// Exact for any mix of int64 and uint64.
int compare_integers(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_int64() && b.is_int64()) return three_way(a.get_int64(), b.get_int64());
  if (a.is_uint64() && b.is_uint64()) return three_way(a.get_uint64(), b.get_uint64());
  if (a.is_int64()) {  // a signed, b unsigned
    return a.get_int64() < 0 ? -1 : three_way(static_cast<std::uint64_t>(a.get_int64()), b.get_uint64());
  }
  return -compare_integers(b, a);
}

long double widen(const boost::json::value& v) {
  if (v.is_int64()) return static_cast<long double>(v.get_int64());
  if (v.is_uint64()) return static_cast<long double>(v.get_uint64());
  return static_cast<long double>(v.get_double());
}

}  // namespace

int compare_numbers(const boost::json::value& a, const boost::json::value& b) {
  if (!a.is_double() && !b.is_double()) return compare_integers(a, b);
  // Mixed with a double: long double holds every int64/uint64 exactly on
  // x86-64 and AArch64 Linux, the platforms Plexus targets.
  return three_way(widen(a), widen(b));
}

bool json_equal(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  if (a.is_array()) {
    const auto& x = a.get_array();
    const auto& y = b.get_array();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!json_equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    const auto& x = a.get_object();
    const auto& y = b.get_object();
    if (x.size() != y.size()) return false;
    return std::all_of(x.begin(), x.end(), [&](const auto& kv) {
      const boost::json::value* other = y.if_contains(kv.key());
      return other != nullptr && json_equal(kv.value(), *other);
    });
  }
  return a == b;
}

namespace {

bool contains_non_finite(const boost::json::value& v) {
  if (v.is_double()) return !std::isfinite(v.get_double());
  if (v.is_array()) {
    for (const auto& item : v.get_array()) {
      if (contains_non_finite(item)) return true;
    }
  }
  if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (contains_non_finite(kv.value())) return true;
    }
  }
  return false;
}

}  // namespace

std::optional<std::string> find_non_finite(const boost::json::value& v, const std::string& path) {
  // Paths are only built along the branch that holds the bad number, so the
  // common all-finite case costs one allocation-free walk.
  if (!contains_non_finite(v)) return std::nullopt;
  if (v.is_array()) {
    const auto& arr = v.get_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
      if (contains_non_finite(arr[i])) return find_non_finite(arr[i], index_path(path, i));
    }
  }
  if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (contains_non_finite(kv.value())) return find_non_finite(kv.value(), join_path(path, kv.key()));
    }
  }
  return path;
}

}  // namespace plexus::config::detail
