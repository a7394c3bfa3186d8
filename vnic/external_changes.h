// What a daemon changed outside its own process (a bridge it created, an uplink it
// enslaved), recorded in NAME.state (vnic/runtime.h), and how it is undone. Runs in both
// processes: the daemon records its changes and undoes them on its way out; the next
// command of that name (`up` in the new daemon, `down` in the CLI) undoes what a daemon
// that died (SIGKILL, a crash) left behind.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vnic/link.h"

namespace rrdma::vnic {

struct ExternalChanges {
  std::optional<std::string> created_bridge;
  std::optional<std::string> enslaved_uplink;

  // {"pid", "created_bridge": BR or null, "enslaved_uplink": IF or null}
  nlohmann::json to_json(pid_t pid) const;
  // Tolerates a missing or mistyped field: the file may be a dead daemon's last write.
  static ExternalChanges from_json(const nlohmann::json& state);
};

// Releases the uplink we enslaved, then deletes the bridge we created. `up --create-bridge`
// promises that `down` takes the bridge away again, so it goes even if other interfaces
// (a namespace's veth, say) were plugged into it since: the kernel detaches them, and they
// are named in a note so that nobody wonders where their bridge went.
void undo(LinkControl& links, const ExternalChanges& changes, std::vector<std::string>& notes);

// The same for a dead daemon's changes, seen by `up` of its name: a bridge it created that
// has ports other than its own TAP (vnics and veths that joined since) is kept, with the
// uplink it enslaved, so that restarting a crashed vnic never cuts off its neighbours. What
// was kept is returned, for the new daemon to adopt.
ExternalChanges undo_stale(LinkControl& links, const ExternalChanges& changes, const std::string& own_tap,
                           std::vector<std::string>& notes);

// Called with NAME's pid file locked: whatever else exists under the name (socket, state
// file) is a dead daemon's, and goes; the changes its state file records are undone (by
// `down`), or by `up` (`for_up`) as undo_stale does: returned is what was kept.
ExternalChanges clean_stale(const std::string& name, std::vector<std::string>& notes, bool for_up = false);

}  // namespace rrdma::vnic
