// A daemon's life seen from the CLI: starting one (fork, detach, the start-up report),
// stopping it, querying it, listing them all. The calls `rrdma-vnic` makes.
//
// Runs in the CLI's process, with two exceptions: between fork() and the daemon's set-up,
// the detached child runs this code too (it becomes the daemon, vnic/daemon.h), and
// `up --foreground` makes the CLI's own process the daemon.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vnic/config.h"

namespace rrdma::vnic {

struct Outcome {
  bool ok = false;
  std::string message;             // the error when !ok, a summary line when ok
  std::vector<std::string> notes;  // things worth telling the user either way
};

// nullopt when this process may configure network interfaces; else why it may not.
std::optional<std::string> missing_net_admin();

// `rrdma-vnic up`. In the foreground it returns when the vnic is stopped; otherwise it
// returns once the detached daemon answers on its control socket (or failed to start).
Outcome start_vnic(const VnicConfig& config, bool foreground);

// `rrdma-vnic down`: asks the daemon to stop and waits until it is gone; cleans up the
// state a dead daemon left behind.
Outcome stop_vnic(const std::string& name);

// Sends {"cmd": cmd} to a running vnic: its reply, or an error.
struct QueryResult {
  std::optional<nlohmann::json> reply;
  std::string error;
};
QueryResult query_vnic(const std::string& name, const std::string& cmd);

// The status of every running vnic under the runtime directory, sorted by name, and
// notes about names whose daemon died.
struct Listing {
  std::vector<nlohmann::json> running;
  std::vector<std::string> notes;
};
Listing list_vnics();

}  // namespace rrdma::vnic
