#include "verbs/app/sysfs_view.h"

#include <cstdio>

namespace rrdma::verbs::sysfs {
namespace {

const std::string& netdev_of(const DeviceValues& device) { return device.netdev.empty() ? device.name : device.netdev; }

// rxe's values for what a RoCE port has no use for: no LID and no subnet manager (IBA
// 14.2.5.6 PortInfo), the default full-membership P_Key at index 0 (IBA 10.9.1.2).
constexpr const char* kNoLid = "0x0\n";
constexpr const char* kZero = "0\n";
constexpr const char* kDefaultPkey = "0xffff\n";
// gid_attrs/types/N of a RoCE v2 GID: the kernel's ib_cache_gid_type_str().
constexpr const char* kRoceV2Type = "RoCE v2\n";

class Builder {
 public:
  void directory(std::string path) { entries_.push_back({std::move(path), Entry::Kind::Directory, {}}); }
  void file(std::string path, std::string content) {
    entries_.push_back({std::move(path), Entry::Kind::File, std::move(content)});
  }
  std::vector<Entry> take() { return std::move(entries_); }

 private:
  std::vector<Entry> entries_;
};

std::string hex_word(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "%04x", value & 0xFFFFu);
  return text;
}

// The GID table as ports/1/gids/N (every index below gid_tbl_len, zeros where empty, as the
// kernel shows them) and gid_attrs/types|ndevs/N (only where a GID is: reading them fails
// for an empty index on rxe, and a missing file fails the same read).
void add_gids(Builder& out, const std::string& port, const DeviceValues& device) {
  out.directory(port + "/gids");
  out.directory(port + "/gid_attrs");
  out.directory(port + "/gid_attrs/types");
  out.directory(port + "/gid_attrs/ndevs");
  for (std::size_t index = 0; index < device.port.gid_tbl_len; ++index) {
    const std::string n = std::to_string(index);
    const std::optional<Gid> gid = index < device.gids.size() ? device.gids[index] : std::nullopt;
    out.file(port + "/gids/" + n, gid_text(gid.value_or(Gid{})));
    if (!gid) continue;
    out.file(port + "/gid_attrs/types/" + n, kRoceV2Type);
    out.file(port + "/gid_attrs/ndevs/" + n, netdev_of(device) + "\n");
  }
}

void add_port(Builder& out, const std::string& dir, const DeviceValues& device) {
  const PortExtras extras = port_extras(device.port);
  const std::string port = dir + "/ports/1";
  out.directory(dir + "/ports");
  out.directory(port);
  out.file(port + "/state", port_state_text(device.port.state));
  out.file(port + "/phys_state", phys_state_text(extras.phys_state));
  out.file(port + "/link_layer", link_layer_text(device.port.link_layer));
  out.file(port + "/rate", rate_text(extras.active_width, extras.active_speed));
  out.file(port + "/lid", kNoLid);
  out.file(port + "/sm_lid", kNoLid);
  out.file(port + "/lid_mask_count", kZero);
  out.file(port + "/sm_sl", kZero);
  char mask[16];
  std::snprintf(mask, sizeof mask, "0x%08x\n", extras.port_cap_flags);
  out.file(port + "/cap_mask", mask);
  out.directory(port + "/pkeys");
  out.file(port + "/pkeys/0", kDefaultPkey);
  add_gids(out, port, device);
}

void add_device(Builder& out, const DeviceValues& device) {
  const std::string dir = std::string(kDeviceClass) + "/" + device.name;
  out.directory(dir);
  out.file(dir + "/node_type", "1: CA\n");  // node_type_show: RDMA_NODE_IB_CA
  out.file(dir + "/node_guid", guid_text(device.node_guid));
  out.file(dir + "/sys_image_guid", guid_text(device.node_guid));  // one node, as rxe
  out.file(dir + "/node_desc", "rrdma-vnic\n");  // rxe: its driver's name
  out.file(dir + "/parent", netdev_of(device) + "\n");  // rxe's: the netdev it runs on
  add_port(out, dir, device);
}

}  // namespace

std::string guid_text(std::uint64_t guid) {
  return hex_word(static_cast<unsigned>(guid >> 48)) + ":" + hex_word(static_cast<unsigned>(guid >> 32)) + ":" +
         hex_word(static_cast<unsigned>(guid >> 16)) + ":" + hex_word(static_cast<unsigned>(guid)) + "\n";
}

std::string gid_text(const Gid& gid) {
  std::string text;
  for (std::size_t i = 0; i < gid.bytes.size(); i += 2) {
    if (i != 0) text += ':';
    text += hex_word(static_cast<unsigned>(gid.bytes[i]) << 8 | gid.bytes[i + 1]);
  }
  return text + "\n";
}

std::string port_state_text(std::uint32_t state) {
  // ib_port_state_str(): IBA 14.2.5.6 PortState.
  static constexpr const char* kNames[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  const char* name = state < std::size(kNames) ? kNames[state] : "UNKNOWN";
  return std::to_string(state) + ": " + name + "\n";
}

std::string phys_state_text(std::uint32_t phys) {
  // phys_state_to_str(): IBA 14.2.5.6 PortPhysicalState.
  static constexpr const char* kNames[] = {"<unknown>", "Sleep", "Polling", "Disabled", "PortConfigurationTraining",
                                           "LinkUp", "LinkErrorRecovery", "Phy Test"};
  const char* name = phys < std::size(kNames) ? kNames[phys] : "<unknown>";
  return std::to_string(phys) + ": " + name + "\n";
}

std::string link_layer_text(std::uint32_t link_layer) {
  // IBV_LINK_LAYER_INFINIBAND 1, IBV_LINK_LAYER_ETHERNET 2 (verbs.h).
  if (link_layer == 1) return "InfiniBand\n";
  if (link_layer == 2) return "Ethernet\n";
  return "Unknown\n";
}

std::string rate_text(std::uint8_t active_width, std::uint8_t active_speed) {
  struct Speed {
    std::uint8_t code;
    int deci_gbps;  // per lane
    const char* name;
  };
  // ibv_port_attr.active_speed codes and their per-lane rates (IBA 14.2.5.6, verbs.h).
  static constexpr Speed kSpeeds[] = {{2, 50, "DDR"},   {4, 100, "QDR"},  {8, 100, "FDR10"}, {16, 140, "FDR"},
                                      {32, 250, "EDR"}, {64, 500, "HDR"}, {128, 1000, "NDR"}};
  Speed speed{1, 25, "SDR"};  // sysfs.c shows anything else as SDR too
  for (const Speed& row : kSpeeds)
    if (row.code == active_speed) speed = row;
  int lanes = 0;  // ib_width_enum_to_int: 1X 4X 8X 12X 2X
  switch (active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return "";  // the kernel's read fails (EINVAL)
  }
  const int rate = speed.deci_gbps * lanes;
  return std::to_string(rate / 10) + (rate % 10 != 0 ? ".5" : "") + " Gb/sec (" + std::to_string(lanes) + "X " +
         speed.name + ")\n";
}

PortExtras port_extras(const PortAttributes& port) {
  PortExtras extras;
  extras.phys_state = port.active() ? 5 : 3;  // IBA 14.2.5.6: 5 LinkUp, 3 Disabled
  return extras;
}

std::string device_path(std::string_view name) {
  return std::string(kClassRoot) + "/" + std::string(kDeviceClass) + "/" + std::string(name);
}

std::string uverbs_path(std::size_t index) {
  return std::string(kClassRoot) + "/" + std::string(kVerbsClass) + "/uverbs" + std::to_string(index);
}

std::vector<Entry> build_view(const std::vector<DeviceValues>& devices) {
  Builder out;
  out.directory(std::string(kDeviceClass));
  out.directory(std::string(kVerbsClass));
  for (std::size_t index = 0; index < devices.size(); ++index) {
    add_device(out, devices[index]);
    const std::string uverbs = std::string(kVerbsClass) + "/uverbs" + std::to_string(index);
    out.directory(uverbs);
    out.file(uverbs + "/ibdev", devices[index].name + "\n");
  }
  return out.take();
}

}  // namespace rrdma::verbs::sysfs
