// The sysfs view's files (verbs/app/sysfs_view.h) against what a real rdma_rxe device shows
// (tests/data/rxe_sysfs.txt, made by tests/interop/capture_rxe_sysfs.sh): the same values
// give the same bytes, file by file.
#include "verbs/app/sysfs_view.h"

#include "stack/addresses.h"
#include "verbs/device/device_caps.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace {

using rrdma::verbs::Gid;
using rrdma::verbs::PortAttributes;
namespace sysfs = rrdma::verbs::sysfs;

// The reference as path -> bytes ("== PATH" then the content lines; "->" links and
// "!! unreadable" entries are kept as written).
std::map<std::string, std::string> reference() {
  std::ifstream in(std::string(RRDMA_TEST_DATA_DIR) + "/rxe_sysfs.txt");
  REQUIRE(in.good());
  std::map<std::string, std::string> files;
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.starts_with("#")) continue;
    if (line.starts_with("== ")) {
      path = line.substr(3);
      files[path];
    } else if (!path.empty()) {
      files[path] += line + "\n";
    }
  }
  return files;
}

std::map<std::string, std::string> files_of(const std::vector<sysfs::Entry>& entries) {
  std::map<std::string, std::string> files;
  for (const auto& entry : entries)
    if (entry.kind == sysfs::Entry::Kind::File) files["/sys/class/" + entry.path] = entry.content;
  return files;
}

// The rxe device of the reference (its MAC and address are in the file's `ip` lines), as a
// vnic with that MAC and address reports it: the daemon's GUID from the MAC (as rxe
// derives it), port active, the IPv4-mapped GID (rxe's index 1) at our index 0.
sysfs::DeviceValues rxe_like() {
  sysfs::DeviceValues device;
  device.name = "rxe0";
  device.node_guid = rrdma::verbs::caps::node_guid(*rrdma::stack::MacAddress::parse("02:52:44:9d:0a:e9"));
  device.port.state = 4;
  device.port.link_layer = 2;
  device.port.gid_tbl_len = 2;
  device.gids = {Gid::parse("::ffff:10.146.161.2"), std::nullopt};
  return device;
}

}  // namespace

TEST_CASE("sysfs view: rxe's bytes for the same values", "[sysfs]") {
  const auto rxe = reference();
  const auto ours = files_of(sysfs::build_view({rxe_like()}));
  const std::string dev = "/sys/class/infiniband/rxe0";
  for (const char* file : {"/node_type", "/node_guid", "/sys_image_guid", "/ports/1/state",
                           "/ports/1/phys_state", "/ports/1/link_layer", "/ports/1/rate", "/ports/1/lid",
                           "/ports/1/sm_lid", "/ports/1/lid_mask_count", "/ports/1/sm_sl", "/ports/1/pkeys/0",
                           "/ports/1/gid_attrs/types/0"}) {
    INFO(file);
    REQUIRE(rxe.count(dev + file) == 1);
    REQUIRE(ours.count(dev + file) == 1);
    CHECK(ours.at(dev + file) == rxe.at(dev + file));
  }
  // The netdev: rxe's eth0 under the device rxe0; a vnic is its own netdev (the TAP).
  CHECK(rxe.at(dev + "/parent") == "eth0\n");
  CHECK(rxe.at(dev + "/ports/1/gid_attrs/ndevs/1") == "eth0\n");
  CHECK(ours.at(dev + "/parent") == "rxe0\n");
  CHECK(ours.at(dev + "/ports/1/gid_attrs/ndevs/0") == "rxe0\n");
  // rxe's index 1 is our index 0: its link-local fe80:: GID (index 0) we do not have.
  CHECK(ours.at(dev + "/ports/1/gids/0") == rxe.at(dev + "/ports/1/gids/1"));
  // Our empty index shows zeros as rxe's does, and no type or netdev (rxe: unreadable).
  CHECK(ours.at(dev + "/ports/1/gids/1") == rxe.at(dev + "/ports/1/gids/2"));
  CHECK(rxe.at(dev + "/ports/1/gid_attrs/types/2") == "!! unreadable\n");
  CHECK(ours.count(dev + "/ports/1/gid_attrs/types/1") == 0);
  CHECK(ours.count(dev + "/ports/1/gid_attrs/ndevs/1") == 0);
  CHECK(ours.at("/sys/class/infiniband_verbs/uverbs0/ibdev") == rxe.at("/sys/class/infiniband_verbs/uverbs0/ibdev"));
  // Same shape, another value: rxe sets IB_PORT_CM_SUP, our ibv_query_port reports no bits.
  CHECK(ours.at(dev + "/ports/1/cap_mask") == "0x00000000\n");
  CHECK(rxe.at(dev + "/ports/1/cap_mask").size() == ours.at(dev + "/ports/1/cap_mask").size());
}

TEST_CASE("sysfs view: port down, and the formats' other values", "[sysfs]") {
  sysfs::DeviceValues device = rxe_like();
  device.port.state = 1;
  const auto ours = files_of(sysfs::build_view({device}));
  CHECK(ours.at("/sys/class/infiniband/rxe0/ports/1/state") == "1: DOWN\n");
  CHECK(ours.at("/sys/class/infiniband/rxe0/ports/1/phys_state") == "3: Disabled\n");
  CHECK(sysfs::port_state_text(9) == "9: UNKNOWN\n");
  CHECK(sysfs::phys_state_text(8) == "8: <unknown>\n");
  CHECK(sysfs::link_layer_text(1) == "InfiniBand\n");
  CHECK(sysfs::link_layer_text(0) == "Unknown\n");
  CHECK(sysfs::rate_text(2, 4) == "40 Gb/sec (4X QDR)\n");
  CHECK(sysfs::rate_text(1, 32) == "25 Gb/sec (1X EDR)\n");
  CHECK(sysfs::rate_text(16, 2) == "10 Gb/sec (2X DDR)\n");
  CHECK(sysfs::rate_text(1, 3) == "2.5 Gb/sec (1X SDR)\n");  // an unknown speed shows as SDR
  CHECK(sysfs::rate_text(3, 1).empty());                     // an unknown width: no file
  CHECK(sysfs::guid_text(0x0123456789abcdefull) == "0123:4567:89ab:cdef\n");
}

TEST_CASE("sysfs view: every vnic, uverbs numbers in the given order, parents first", "[sysfs]") {
  sysfs::DeviceValues a = rxe_like(), b = rxe_like();
  a.name = "rva";
  b.name = "rvb";
  b.gids = {};  // a daemon that answered no GID: zeros, no type
  const auto entries = sysfs::build_view({a, b});
  const auto files = files_of(entries);
  CHECK(files.at("/sys/class/infiniband_verbs/uverbs0/ibdev") == "rva\n");
  CHECK(files.at("/sys/class/infiniband_verbs/uverbs1/ibdev") == "rvb\n");
  CHECK(files.at("/sys/class/infiniband/rva/ports/1/gid_attrs/ndevs/0") == "rva\n");
  CHECK(files.count("/sys/class/infiniband/rvb/ports/1/gid_attrs/types/0") == 0);
  CHECK(files.at("/sys/class/infiniband/rvb/ports/1/gids/0") == "0000:0000:0000:0000:0000:0000:0000:0000\n");
  // Each entry's directory is made before it: the layout can create them in order.
  std::vector<std::string> made;
  for (const auto& entry : entries) {
    const auto slash = entry.path.rfind('/');
    if (slash != std::string::npos) {
      INFO(entry.path);
      CHECK(std::find(made.begin(), made.end(), entry.path.substr(0, slash)) != made.end());
    }
    if (entry.kind == sysfs::Entry::Kind::Directory) made.push_back(entry.path);
  }
  CHECK(sysfs::device_path("rva") == "/sys/class/infiniband/rva");
  CHECK(sysfs::uverbs_path(3) == "/sys/class/infiniband_verbs/uverbs3");
}

TEST_CASE("sysfs view: a --netdev device's GIDs and parent name the interface it runs on", "[sysfs][netdev]") {
  sysfs::DeviceValues device = rxe_like();
  const auto tap = files_of(sysfs::build_view({device}));
  CHECK(tap.at("/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0") == "rxe0\n");
  device.netdev = "eth0";
  const auto ours = files_of(sysfs::build_view({device}));
  CHECK(ours.at("/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0") == "eth0\n");
  CHECK(ours.at("/sys/class/infiniband/rxe0/parent") == "eth0\n");
}
