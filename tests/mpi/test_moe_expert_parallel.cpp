// Expert parallelism is not built yet: an MoE model under mpirun with an "ep" group of 2 ranks
// stops before its first step on every rank, the MoE layer saying that expert parallelism is
// not built yet (it is created before the trainer's own check of the groups). Real processes,
// real plugins. Reported skipped where there is no mpirun or no MPI comm backend.
#define BOOST_TEST_MODULE moe_expert_parallel
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <string>

#include "mpi_launch.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"

using Corpus = plexus::test::TrainCorpus;

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the MPI comm backend (libplexus_comm_mpi.so)")

BOOST_AUTO_TEST_CASE(an_ep_group_of_two_is_refused_as_not_built) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "ep2";
  const auto r = plexus::test::run_process(
      plexus::test::mpirun_command(2, 120) +
      corpus.train(out.string(), "--set model.moe.layer_freq=1 --set model.moe.options.num_moe_experts=4"
                                 " --set distributed.topology.options.ep=2 --set distributed.timeout_s=60"));
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("moe.layer: expert parallelism (an \"ep\" group of 2 ranks) is not built yet") !=
                 std::string::npos,
             r.output);
  BOOST_TEST(!std::filesystem::exists(out / "checkpoints"));
}
