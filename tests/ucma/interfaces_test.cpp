// The shim's vnic interfaces (verbs/app/ucma/interfaces.h): RRDMA_INTERFACES parsed as hostile
// input, and the entries getifaddrs appends, as a program reads them.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <string>

#include "verbs/app/ucma/interfaces.h"

using rrdma::ucma_shim::VnicInterface;
using rrdma::ucma_shim::is_vnic_entry;
using rrdma::ucma_shim::make_entries;
using rrdma::ucma_shim::parse_interfaces;

namespace {

std::string address_of(const sockaddr* address) {
  char text[INET_ADDRSTRLEN] = {};
  REQUIRE(address->sa_family == AF_INET);
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  return text;
}

}  // namespace

TEST_CASE("interfaces: well-formed entries are taken in order", "[ucma][interfaces]") {
  const auto vnics = parse_interfaces("rv0=10.66.0.10/24;rv_1.b-2=192.168.7.1/32");
  REQUIRE(vnics.size() == 2);
  CHECK(std::string(vnics[0].name) == "rv0");
  CHECK(vnics[0].address == 0x0A42000A);
  CHECK(vnics[0].prefix_len == 24);
  CHECK(std::string(vnics[1].name) == "rv_1.b-2");
  CHECK(vnics[1].address == 0xC0A80701);
  CHECK(vnics[1].prefix_len == 32);
}

TEST_CASE("interfaces: every malformed entry is left out, the good ones kept", "[ucma][interfaces]") {
  for (const char* bad : {"", ";", "rv0", "rv0=", "rv0=10.0.0.1", "rv0=10.0.0.1/", "rv0=10.0.0.1/0", "rv0=10.0.0.1/33",
                          "rv0=10.0.0.1/240", "rv0=10.0.0/24", "rv0=10.0.0.1.5/24", "rv0=10.0.0.256/24",
                          "rv0=10..0.1/24", "rv0=10.0.0.1a/24", "=10.0.0.1/24", "0123456789abcdef=10.0.0.1/24",
                          "r v=10.0.0.1/24", "rv/0=10.0.0.1/24", "rv0=10.0.0.1/24/8", "rv0=+10.0.0.1/24",
                          "rv0=10.0.0.1/-4", "rv0=0010.0.0.1/24"}) {
    INFO(bad);
    CHECK(parse_interfaces(bad).empty());
    const auto mixed = parse_interfaces(std::string(bad) + ";ok=1.2.3.4/8");
    REQUIRE(mixed.size() == 1);
    CHECK(std::string(mixed[0].name) == "ok");
  }
  // The longest name an interface may have: 15 characters.
  CHECK(parse_interfaces("0123456789abcde=10.0.0.1/24").size() == 1);
}

TEST_CASE("interfaces: at most kMaxInterfaces entries", "[ucma][interfaces]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "v" + std::to_string(i) + "=10.0.0." + std::to_string(i) + "/24;";
  CHECK(parse_interfaces(text).size() == rrdma::ucma_shim::kMaxInterfaces);
}

TEST_CASE("interfaces: the appended entries read as getifaddrs entries, in one block", "[ucma][interfaces]") {
  CHECK(make_entries({}) == nullptr);
  ifaddrs* list = make_entries(parse_interfaces("rv0=10.66.0.10/24;rv1=172.16.5.9/12"));
  REQUIRE(list != nullptr);
  CHECK(is_vnic_entry(list));
  CHECK(std::string(list->ifa_name) == "rv0");
  CHECK(list->ifa_flags == (IFF_UP | IFF_RUNNING | IFF_BROADCAST));
  CHECK(address_of(list->ifa_addr) == "10.66.0.10");
  CHECK(address_of(list->ifa_netmask) == "255.255.255.0");
  CHECK(address_of(list->ifa_broadaddr) == "10.66.0.255");
  ifaddrs* second = list->ifa_next;
  REQUIRE(second != nullptr);
  CHECK(is_vnic_entry(second));
  CHECK(std::string(second->ifa_name) == "rv1");
  CHECK(address_of(second->ifa_netmask) == "255.240.0.0");
  CHECK(address_of(second->ifa_broadaddr) == "172.31.255.255");
  CHECK(second->ifa_next == nullptr);
  // The C library's own entries are not ours.
  ifaddrs* system = nullptr;
  REQUIRE(getifaddrs(&system) == 0);
  for (ifaddrs* entry = system; entry != nullptr; entry = entry->ifa_next) CHECK_FALSE(is_vnic_entry(entry));
  freeifaddrs(system);
  std::free(list);  // one block, as glibc's freeifaddrs frees its own list (ASan checks it)
}
