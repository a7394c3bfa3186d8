#include "vnic/external_changes.h"

#include <filesystem>
#include <system_error>

#include "vnic/runtime.h"

namespace rrdma::vnic {

nlohmann::json ExternalChanges::to_json(pid_t pid) const {
  return {{"pid", pid},
          {"created_bridge", created_bridge ? nlohmann::json(*created_bridge) : nullptr},
          {"enslaved_uplink", enslaved_uplink ? nlohmann::json(*enslaved_uplink) : nullptr}};
}

ExternalChanges ExternalChanges::from_json(const nlohmann::json& state) {
  ExternalChanges changes;
  if (auto it = state.find("created_bridge"); it != state.end() && it->is_string()) {
    changes.created_bridge = it->get<std::string>();
  }
  if (auto it = state.find("enslaved_uplink"); it != state.end() && it->is_string()) {
    changes.enslaved_uplink = it->get<std::string>();
  }
  return changes;
}

void undo(LinkControl& links, const ExternalChanges& changes, std::vector<std::string>& notes) {
  if (changes.enslaved_uplink) {
    if (auto uplink = links.find(*changes.enslaved_uplink); uplink && uplink->master != 0) {
      links.change(uplink->name, LinkChange::master_of(0, false));
    }
  }
  if (changes.created_bridge) {
    if (auto bridge = links.find(*changes.created_bridge)) {
      std::string others;
      for (const std::string& port : links.ports_of(bridge->ifindex)) others += " " + port;
      links.remove(bridge->name);
      if (!others.empty()) notes.push_back("removed bridge " + bridge->name + "; detached its other ports:" + others);
    }
  }
}

ExternalChanges undo_stale(LinkControl& links, const ExternalChanges& changes, const std::string& own_tap,
                           std::vector<std::string>& notes) {
  if (changes.created_bridge) {
    if (auto bridge = links.find(*changes.created_bridge)) {
      std::string others;
      for (const std::string& port : links.ports_of(bridge->ifindex)) {
        if (port != own_tap) others += " " + port;
      }
      if (!others.empty()) {
        notes.push_back("kept bridge " + bridge->name + " that a vnic " + own_tap +
                        " which died had created: other ports use it:" + others);
        return changes;
      }
    }
  }
  undo(links, changes, notes);
  return {};
}

ExternalChanges clean_stale(const std::string& name, std::vector<std::string>& notes, bool for_up) {
  const auto paths = RuntimePaths::of(name);
  std::error_code ec;
  const bool socket_left = std::filesystem::exists(paths.socket, ec);
  const auto state = read_state_file(paths.state_file);
  if (!socket_left && !state) return {};
  const auto old_pid = read_pid_file(paths.pid_file);
  ExternalChanges kept;
  if (state) {
    LinkControl links;
    const ExternalChanges changes = ExternalChanges::from_json(*state);
    if (for_up) {
      kept = undo_stale(links, changes, name, notes);
    } else {
      undo(links, changes, notes);
    }
  }
  std::filesystem::remove(paths.socket, ec);
  std::filesystem::remove(paths.state_file, ec);
  notes.push_back("cleaned up the state of a vnic " + name + " that died" +
                  (old_pid ? " (pid " + std::to_string(*old_pid) + ")" : std::string()));
  return kept;
}

}  // namespace rrdma::vnic
