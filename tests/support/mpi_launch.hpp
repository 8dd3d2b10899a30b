// Starting real multi-process jobs from a test: the mpirun command line (allowed as root, more
// ranks than cores), a job in the background whose ranks the test can find and signal, and
// "skipped" when this machine has no mpirun.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace plexus::test {

inline bool have_mpirun() {
  return std::system("command -v mpirun > /dev/null 2>&1") == 0;
}

// Whether this build has the MPI comm backend (a build without MPI has none to test).
inline bool comm_mpi_built() {
  return std::filesystem::exists(std::filesystem::path(PLEXUS_BUILD_DIR) /
                                 "lib/plexus/plugins/libplexus_comm_mpi.so");
}

// `mpirun -np N` with what a CI container needs: root allowed, oversubscription for more ranks
// than cores. `timeout` bounds the whole job so that a broken test cannot hang CI.
inline std::string mpirun_command(int ranks, int limit_seconds = 300) {
  return "timeout -s KILL " + std::to_string(limit_seconds) +
         " env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1"
         " mpirun --oversubscribe -np " +
         std::to_string(ranks) + " ";
}

// A command running in the background (through /bin/sh, in its own process group), its output
// going to a file.
class BackgroundJob {
 public:
  BackgroundJob(const std::string& command, std::filesystem::path log) : log_(std::move(log)) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const std::string full = "exec " + command + " > '" + log_.string() + "' 2>&1";
      ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    start_ = std::chrono::steady_clock::now();
  }
  ~BackgroundJob() {
    if (pid_ > 0 && !status_) {
      ::kill(-pid_, SIGKILL);
      int raw = 0;
      ::waitpid(pid_, &raw, 0);
    }
  }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  pid_t pid() const noexcept { return pid_; }
  // The exit status (128 + signal when killed), or nothing if it still runs after `limit`.
  std::optional<int> wait_for(std::chrono::duration<double> limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!status_) {
      int raw = 0;
      const pid_t done = ::waitpid(pid_, &raw, WNOHANG);
      if (done == pid_) {
        status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        end_ = std::chrono::steady_clock::now();
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status_;
  }
  double seconds_since(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double>(end_ - t).count();
  }
  std::string output() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::chrono::steady_clock::time_point start_, end_;
};

// The pid of the process of `rank` among the descendants of `root` (mpirun's children carry
// OMPI_COMM_WORLD_RANK in their environment), or -1.
inline pid_t find_rank(pid_t root, int rank) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    bool match = false;
    for (std::size_t at = 0; at < env.size();) {
      const std::size_t end = env.find('\0', at);
      if (env.compare(at, (end == std::string::npos ? env.size() : end) - at, wanted) == 0) match = true;
      if (end == std::string::npos) break;
      at = end + 1;
    }
    if (!match) continue;
    // Walk up the parents to make sure it belongs to this job.
    for (pid_t p = std::stoi(name); p > 1;) {
      if (p == root) return std::stoi(name);
      std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
      std::string skip;
      pid_t parent = 0;
      char state = 0;
      stat >> skip;
      // the command field may hold spaces: read up to ')'
      while (!skip.empty() && skip.back() != ')' && stat >> skip) {
      }
      stat >> state >> parent;
      if (!stat) break;
      p = parent;
    }
  }
  return -1;
}

}  // namespace plexus::test
