// PSN arithmetic modulo 2^24 (IBA 9.7.1): wrap-around, distance, before/after.
#include <catch2/catch.hpp>

#include "rocev2/types.h"

namespace rrdma::rocev2 {
namespace {

TEST_CASE("PSN: construction keeps 24 bits", "[psn]") {
  CHECK(Psn(0x1234567).value() == 0x234567);
  CHECK(Psn(0xFFFFFFFF).value() == 0xFFFFFF);
}

TEST_CASE("PSN: addition and subtraction wrap at 2^24", "[psn]") {
  CHECK((Psn(0xFFFFFF) + 1) == Psn(0));
  CHECK((Psn(0xFFFFFE) + 5) == Psn(3));
  CHECK((Psn(2) - 3) == Psn(0xFFFFFF));
  Psn p(0xFFFFFF);
  ++p;
  CHECK(p == Psn(0));
  p += 0x1000000;
  CHECK(p == Psn(0));
}

TEST_CASE("PSN: forward distance is modulo 2^24", "[psn]") {
  CHECK(Psn(5).distance_from(Psn(3)) == 2);
  CHECK(Psn(1).distance_from(Psn(0xFFFFFF)) == 2);
  CHECK(Psn(3).distance_from(Psn(5)) == 0xFFFFFE);
  CHECK(Psn(7).distance_from(Psn(7)) == 0);
}

TEST_CASE("PSN: before/after is a half-window comparison across the wrap", "[psn]") {
  CHECK(Psn(0xFFFFFF).before(Psn(0)));
  CHECK(Psn(0).after(Psn(0xFFFFFF)));
  CHECK(Psn(0xFFFFF0).before(Psn(0x10)));
  CHECK_FALSE(Psn(0x10).before(Psn(0xFFFFF0)));
  CHECK_FALSE(Psn(5).before(Psn(5)));
  CHECK_FALSE(Psn(5).after(Psn(5)));
  // Exactly half the space apart, (a - b) mod 2^24 == 2^23 both ways, so each is "before"
  // the other: the rule is ambiguous there, and a window must stay below 2^23 (IBA 9.7.1).
  CHECK(Psn(0).before(Psn(0x800000)));
  CHECK(Psn(0x800000).before(Psn(0)));
  // Just inside the window either way.
  CHECK(Psn(0x7FFFFF).after(Psn(0)));
  CHECK(Psn(0).before(Psn(0x7FFFFF)));
}

TEST_CASE("PSN: for any a and d in (0, 2^23), a before a+d and a+d after a", "[psn]") {
  for (std::uint32_t a : {0u, 1u, 0x7FFFFFu, 0x800000u, 0xFFFFFEu, 0xFFFFFFu, 0x123456u})
    for (std::uint32_t d : {1u, 2u, 1000u, 0x7FFFFFu}) {
      INFO("a " << a << " d " << d);
      CHECK(Psn(a).before(Psn(a) + d));
      CHECK((Psn(a) + d).after(Psn(a)));
      CHECK_FALSE((Psn(a) + d).before(Psn(a)));
      CHECK((Psn(a) + d).distance_from(Psn(a)) == d);
    }
}

}  // namespace
}  // namespace rrdma::rocev2
