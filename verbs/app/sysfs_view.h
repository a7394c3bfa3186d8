// The sysfs view of vnics (docs/IBVERBS.md "The sysfs view"): the files under /sys/class
// that software built on rdma-core reads about an RDMA device (UCX: gid_attrs/types/N and
// ndevs/N; libfabric, ibstat: node_guid, ports/1/state...), built from the values a vnic's
// daemon reports, in the formats of the kernel's drivers/infiniband/core/sysfs.c as an
// rdma_rxe device shows them (tests/data/rxe_sysfs.txt). Pure: `rrdma-vnic exec` lays the
// entries out on a tmpfs (cli/exec.cpp); our libibverbs names the same paths
// (ibv_device.ibdev_path, dev_path).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verbs/app/api.h"

namespace rrdma::verbs::sysfs {

// Under /sys/class: infiniband/NAME and infiniband_verbs/uverbsN, as the kernel names them.
inline constexpr std::string_view kClassRoot = "/sys/class";
inline constexpr std::string_view kDeviceClass = "infiniband";
inline constexpr std::string_view kVerbsClass = "infiniband_verbs";

// One vnic as its daemon reported it at `exec` time (a snapshot: later changes are seen
// through ibv_query_port, not here).
struct DeviceValues {
  std::string name;             // the vnic, also its netdev (the TAP) and the device's name
  std::string netdev;           // `up --netdev`: the interface it runs on (empty: `name`)
  std::uint64_t node_guid = 0;  // as ibv_query_device's node_guid, host order of its bytes
  PortAttributes port;          // port 1
  std::vector<std::optional<Gid>> gids;  // index = GID index; nullopt: no GID there
};

struct Entry {
  enum class Kind { Directory, File };
  std::string path;  // relative to /sys/class, no leading '/'
  Kind kind = Kind::File;
  std::string content;  // files only
};

// The whole view for `devices`, uverbs numbers in the order given (the caller sorts by name
// so that the numbering is stable). Directories come before what they hold.
std::vector<Entry> build_view(const std::vector<DeviceValues>& devices);

// The file formats, one each (sysfs.c's show functions; each ends in '\n').
std::string guid_text(std::uint64_t guid);        // "0252:44ff:fe01:0203\n"
std::string gid_text(const Gid& gid);             // "0000:0000:0000:0000:0000:ffff:0a42:000a\n"
std::string port_state_text(std::uint32_t state); // "4: ACTIVE\n"
std::string phys_state_text(std::uint32_t phys);  // "5: LinkUp\n"
std::string link_layer_text(std::uint32_t link_layer);  // "Ethernet\n"
// rate_show: deci-Gb/s of the speed code times the width, "2.5 Gb/sec (1X SDR)\n".
std::string rate_text(std::uint8_t active_width, std::uint8_t active_speed);

// The port values our libibverbs reports beyond PortAttributes (ibv_query_port: 1X SDR,
// phys_state LinkUp/Disabled, no capability bits); one place for both it and the view.
struct PortExtras {
  std::uint8_t active_width = 1;  // IBV_WIDTH_1X
  std::uint8_t active_speed = 1;  // IBV_SPEED_SDR
  std::uint8_t phys_state = 3;
  std::uint32_t port_cap_flags = 0;
};
PortExtras port_extras(const PortAttributes& port);

// Paths a program sees: /sys/class/infiniband/NAME and /sys/class/infiniband_verbs/uverbsN.
std::string device_path(std::string_view name);
std::string uverbs_path(std::size_t index);

}  // namespace rrdma::verbs::sysfs
