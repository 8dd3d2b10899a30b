// "Did you mean" suggestions for misspelt keys and names.
#include "internal.hpp"

#include <algorithm>

namespace plexus::config {

namespace {

// Keys longer than this are not real typos (e.g. garbage from a broken file);
// skipping them keeps the quadratic distance computation bounded.
constexpr std::size_t max_suggest_length = 256;

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// Optimal string alignment distance (Levenshtein plus adjacent
// transpositions, the most common typing error), case-insensitive.
std::size_t osa_distance(std::string_view a, std::string_view b) {
  const std::size_t m = b.size();
  std::vector<std::size_t> before(m + 1);  // row i-2
  std::vector<std::size_t> prev(m + 1);    // row i-1
  std::vector<std::size_t> cur(m + 1);     // row i
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0U : 1U)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], before[j - 2] + 1);
      }
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

}  // namespace

std::optional<std::string> nearest(std::string_view key, const std::vector<std::string>& candidates) {
  if (key.size() > max_suggest_length) return std::nullopt;
  const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    // The length difference is a lower bound on the distance: cheap pruning.
    const std::size_t diff =
        candidate.size() > key.size() ? candidate.size() - key.size() : key.size() - candidate.size();
    if (diff >= best_distance || candidate.size() > max_suggest_length) continue;
    const std::size_t d = osa_distance(key, candidate);
    // d < candidate length: replacing (nearly) every character of a short
    // key is not a typo ("xy" is not a misspelling of "lr").
    if (d < best_distance && d < candidate.size()) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace plexus::config
