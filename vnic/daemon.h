// The daemon: the composition root that makes a process into the NIC. It owns the TAP,
// the links it changed, the io_uring loop, the stack's Interface, the verbs device, the
// link monitor and the control socket, and undoes all of it on the way out.
//
// Runs in the daemon process only: the child that `up` forked and detached, or the CLI's
// own process under `up --foreground` (vnic/lifecycle.h makes either and calls this).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vnic/config.h"
#include "vnic/runtime.h"

namespace rrdma::vnic {

// One line in the daemon's log (its stderr: NAME.log when detached), with a time stamp
// and the pid.
void log_line(const std::string& line);

class Daemon {
 public:
  // Sets the vnic up, in order: stale state of the name undone, bridge and uplink, TAP,
  // loop and stack, verbs device, link monitor, signals, control socket, pid. Throws with
  // the reason when it cannot (having undone what it did); `notes` gets what is worth
  // telling the user either way.
  Daemon(const VnicConfig& config, PidFileLock lock, std::vector<std::string>& notes);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Until SIGTERM/SIGINT/SIGHUP or a `down` request. Throws on a fatal error.
  void run();
  // Keeps NAME.log when the daemon goes (after a fatal error, for the user to read).
  void keep_log();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrdma::vnic
