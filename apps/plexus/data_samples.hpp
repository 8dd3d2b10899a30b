// plexus data samples: what a run config's data section serves, without training: the datasets,
// each split's share of their sequences, samples and epochs, whether the indices came from the
// cache, and the first samples of a split as text or token ids (--json: as lists of ids, the form
// the Megatron comparison test reads).
#pragma once

#include <string>
#include <vector>

namespace plexus::cli {

int data_samples(const std::vector<std::string>& args);

}  // namespace plexus::cli
