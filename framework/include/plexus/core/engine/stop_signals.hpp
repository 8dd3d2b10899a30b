// A graceful stop on SIGTERM, SIGINT and SIGHUP: the first one is only noted, so that the trainer
// can finish its step and write a checkpoint (TrainerEvents::stop_signal polls it); a second one
// stops the process at once, by the signal's default action, as if nothing had been installed.
//
// Schedulers (Slurm, Kubernetes) send SIGTERM some seconds before SIGKILL; Ctrl-C sends SIGINT;
// a closed terminal or ssh session sends SIGHUP (whose default action would end the run without a
// checkpoint). After a SIGHUP, SIGPIPE is ignored too: the reader of the output is likely gone,
// and a write to its pipe must fail (EPIPE) rather than kill the process before its checkpoint.
// The handler only stores the signal number in a lock-free atomic (async-signal-safe) and, on
// the second signal, restores the default disposition and re-raises. It is installed with
// SA_RESTART, so a signal arriving during a checkpoint write does not make a write() or fsync()
// fail with EINTR: the checkpoint being written is completed, never torn.
//
// A signal the process was started with ignored (SIGINT of a job a shell script put in the
// background, SIGHUP under nohup) stays ignored. Signal dispositions belong to the process, so the
// application installs this (plexus-train does, just before training), not the library.
#pragma once

#include <csignal>

#include <string>

namespace plexus {

class StopSignals {
 public:
  // Installs the handler for SIGTERM, SIGINT and SIGHUP and clears what an earlier installation
  // noted.
  // With `announce`, the first signal is acknowledged on stderr at once ("SIGINT received:
  // finishing the current step, then writing a checkpoint; ..."), so that a person who pressed
  // Ctrl-C during a long step knows it was heard (one rank of a job announces, not every one).
  // One at a time: throws std::logic_error when one is installed already, std::system_error
  // when sigaction fails.
  explicit StopSignals(bool announce = true);
  // Restores the dispositions found at installation (SIGPIPE's included).
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received since installation (SIGTERM, SIGINT or SIGHUP), or 0.
  static int received() noexcept;

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
  struct sigaction previous_hup_ {};
  struct sigaction previous_pipe_ {};
};

// "SIGTERM", "SIGINT", ...; "signal N" for a number without a name.
std::string signal_name(int signal);

}  // namespace plexus
