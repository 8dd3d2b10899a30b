// Reading rank and world size from the launcher's environment (mpirun, srun, RANK/WORLD_SIZE),
// and naming the variable when it is malformed; plus the JSON differences the start-up config
// check reports.
#define BOOST_TEST_MODULE launch_env
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <map>
#include <string>

#include "plexus/core/distributed/launch_env.hpp"
#include "plexus/core/distributed/runtime.hpp"

using plexus::distributed::LaunchEnv;

namespace {

LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return LaunchEnv::detect([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    detect(vars);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(no_launcher_is_one_process) {
  const LaunchEnv env = detect({});
  BOOST_TEST(env.launcher == "none");
  BOOST_TEST(env.rank == 0);
  BOOST_TEST(env.world_size == 1);
  BOOST_TEST(env.describe() == "a single process");
}

BOOST_AUTO_TEST_CASE(openmpi) {
  const LaunchEnv env = detect({{"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  BOOST_TEST(env.launcher == "mpirun");
  BOOST_TEST(env.rank == 3);
  BOOST_TEST(env.world_size == 4);
  BOOST_TEST(env.local_rank == 1);
  BOOST_TEST(env.local_world_size == 2);
  BOOST_TEST(env.describe() == "rank 3 of 4 (local rank 1, from mpirun)");
}

BOOST_AUTO_TEST_CASE(hydra) {
  const LaunchEnv env = detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}});
  BOOST_TEST(env.launcher == "mpirun");
  BOOST_TEST(env.rank == 1);
  BOOST_TEST(env.local_rank == 1);
}

BOOST_AUTO_TEST_CASE(srun_only_inside_a_job_step) {
  const std::map<std::string, std::string> batch_script{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}};
  BOOST_TEST(detect(batch_script).launcher == "none");  // sbatch's script is one task, not rank 0 of 8
  auto step = batch_script;
  step["SLURM_STEP_ID"] = "0";
  step["SLURM_PROCID"] = "5";
  step["SLURM_LOCALID"] = "1";
  step["SLURM_NTASKS_PER_NODE"] = "4(x2)";  // Slurm's own notation: not read
  const LaunchEnv env = detect(step);
  BOOST_TEST(env.launcher == "srun");
  BOOST_TEST(env.rank == 5);
  BOOST_TEST(env.world_size == 8);
  BOOST_TEST(env.local_rank == 1);
  BOOST_TEST(env.local_world_size == 0);  // unknown
}

BOOST_AUTO_TEST_CASE(rank_world_size_convention) {
  const LaunchEnv env = detect({{"RANK", "2"},
                                {"WORLD_SIZE", "4"},
                                {"LOCAL_RANK", "0"},
                                {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "29500"}});
  BOOST_TEST(env.launcher == "env");
  BOOST_TEST(env.rank == 2);
  BOOST_TEST(env.world_size == 4);
  BOOST_TEST(env.master_addr == "10.0.0.1");
  BOOST_TEST(env.master_port == "29500");
}

BOOST_AUTO_TEST_CASE(agreeing_leftover_rank_is_fine) {
  const LaunchEnv env = detect(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
  BOOST_TEST(env.launcher == "mpirun");
}

BOOST_AUTO_TEST_CASE(malformed_and_contradictory_variables_are_named) {
  BOOST_TEST(
      error_of({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}).find("RANK='x1' is not a non-negative integer") !=
      std::string::npos);
  BOOST_TEST(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}).find("RANK='-1'") != std::string::npos);
  BOOST_TEST(error_of({{"RANK", "1"}}).find("RANK is set but WORLD_SIZE is not") != std::string::npos);
  BOOST_TEST(error_of({{"WORLD_SIZE", "2"}}).find("WORLD_SIZE is set but RANK is not") != std::string::npos);
  BOOST_TEST(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is not a rank of WORLD_SIZE=2") !=
             std::string::npos);
  BOOST_TEST(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0") != std::string::npos);
  BOOST_TEST(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}})
                 .find("LOCAL_RANK=3 is not below LOCAL_WORLD_SIZE=2") != std::string::npos);
  const std::string two_jobs = error_of(
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "4"}});
  BOOST_TEST(two_jobs.find("two different jobs: mpirun says rank 0 of 2, RANK/WORLD_SIZE say 1 of 4") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(json_differences_name_the_keys) {
  const auto a = boost::json::parse(R"({"train": {"steps": 10, "lr": 1}, "plugins": ["a", "b"], "x": 1})");
  const auto b = boost::json::parse(R"({"train": {"steps": 20, "lr": 1}, "plugins": ["a", "c"], "y": 2})");
  const auto d = plexus::distributed::json_differences(a, b, 10);
  BOOST_TEST_REQUIRE(d.size() == 4u);
  BOOST_TEST(d[0] == "train.steps: 10 vs 20");
  BOOST_TEST(d[1] == "plugins[1]: \"b\" vs \"c\"");
  BOOST_TEST(d[2] == "x: 1 vs (absent)");
  BOOST_TEST(d[3] == "y: (absent) vs 2");
  BOOST_TEST(plexus::distributed::json_differences(a, b, 2).size() == 2u);
  BOOST_TEST(plexus::distributed::json_differences(a, a, 10).empty());
}
