#pragma once
// JSON text as a person writes it. Boost.JSON prints doubles in its own exponent form
// (0.9 as "9E-1", 0.002 as "2E-3"), which is valid JSON but not what anyone types into a
// config. Everything Plexus shows or writes as JSON (config show, metrics, checkpoint state)
// goes through this instead.
#include <boost/json/value.hpp>

#include <string>

namespace plexus {

// `value` as JSON text. Doubles are printed in their shortest form that reads back to the same
// bits (0.9, 0.002, 1e-08, 3.0: an integral double keeps its ".0" so it reads back as a double,
// not an integer). indent == 0 gives one line with no spaces (metrics.jsonl); indent > 0 gives
// one key or element per line, nested objects and arrays indented by `indent` spaces more.
std::string json_text(const boost::json::value& value, int indent = 0);

// One double as above.
std::string json_number_text(double value);

}  // namespace plexus
