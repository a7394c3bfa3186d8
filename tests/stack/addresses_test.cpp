// Text forms of MAC and IPv4 addresses and CIDR prefixes, as the CLI hands them over.
#include <catch2/catch.hpp>

#include "stack/addresses.h"

namespace rrdma::stack {

TEST_CASE("MAC addresses parse and format", "[addresses]") {
  const auto mac = MacAddress::parse("02:00:5e:AA:bb:0c");
  REQUIRE(mac);
  CHECK(mac->bytes == std::array<std::uint8_t, 6>{0x02, 0x00, 0x5e, 0xaa, 0xbb, 0x0c});
  CHECK(mac->to_string() == "02:00:5e:aa:bb:0c");
  CHECK_FALSE(mac->is_multicast());
  CHECK(MacAddress::parse("ff:ff:ff:ff:ff:ff")->is_broadcast());
  CHECK(MacAddress::parse("01:00:5e:00:00:01")->is_multicast());
  for (const char* bad : {"", "02:00:5e:aa:bb", "02:00:5e:aa:bb:0c:", "02-00-5e-aa-bb-0c",
                          "02:00:5e:aa:bb:0g", "2:00:5e:aa:bb:0c0", "+2:00:5e:aa:bb:0c"}) {
    INFO(bad);
    CHECK_FALSE(MacAddress::parse(bad));
  }
}

TEST_CASE("IPv4 addresses parse and format", "[addresses]") {
  CHECK(Ipv4Address::parse("10.0.0.1")->value == 0x0a000001);
  CHECK(Ipv4Address::parse("255.255.255.255")->value == 0xffffffff);
  CHECK(Ipv4Address::parse("0.0.0.0")->value == 0);
  CHECK(Ipv4Address{0xc0a80a01}.to_string() == "192.168.10.1");
  for (const char* bad : {"", "10.0.0", "10.0.0.1.", "10.0.0.256", "10..0.1", "010.0.0.1",
                          "1.2.3.4 ", "a.b.c.d", "1.2.3.-4", "1234.1.1.1"}) {
    INFO(bad);
    CHECK_FALSE(Ipv4Address::parse(bad));
  }
}

TEST_CASE("CIDR prefixes parse and contain", "[addresses]") {
  const auto cidr = Ipv4Cidr::parse("10.66.0.10/24");
  REQUIRE(cidr);
  CHECK(cidr->address.value == 0x0a42000a);
  CHECK(cidr->prefix_len == 24);
  CHECK(cidr->contains(*Ipv4Address::parse("10.66.0.255")));
  CHECK_FALSE(cidr->contains(*Ipv4Address::parse("10.66.1.1")));
  CHECK(Ipv4Cidr::parse("0.0.0.0/0")->contains(Ipv4Address{0xdeadbeef}));
  CHECK(Ipv4Cidr::parse("10.0.0.1/32")->contains(Ipv4Address{0x0a000001}));
  CHECK_FALSE(Ipv4Cidr::parse("10.0.0.1/32")->contains(Ipv4Address{0x0a000002}));
  for (const char* bad : {"10.0.0.1", "10.0.0.1/", "10.0.0.1/33", "10.0.0.1/024", "/24",
                          "10.0.0.1/2x"}) {
    INFO(bad);
    CHECK_FALSE(Ipv4Cidr::parse(bad));
  }
}

}  // namespace rrdma::stack
