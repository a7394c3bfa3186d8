#include <catch2/catch.hpp>

#include "vnic/report.h"
#include "vnic/runtime.h"

using namespace rrdma;
using namespace rrdma::vnic;
using nlohmann::json;

namespace {

VnicConfig sample_config() {
  UpArguments args;
  args.name = "rv0";
  args.ip = "10.66.0.10/24";
  args.bridge = "br0";
  args.gateway = "10.66.0.1";
  args.mac = "02:00:00:aa:bb:cc";
  return *validate(args).config;
}

}  // namespace

TEST_CASE("status JSON has exactly the documented fields and types", "[vnic][report]") {
  const auto config = sample_config();
  stack::ArpEntry neighbour{*stack::Ipv4Address::parse("10.66.0.20"),
                            *stack::MacAddress::parse("02:11:22:33:44:55"), std::chrono::milliseconds(7500)};
  const json status = status_json(StatusReport{config, 4242, std::chrono::seconds(90), {neighbour}});
  CHECK(status.size() == 16);
  CHECK(status["netdev"].is_null());  // a TAP vnic: `up --netdev` names the interface here
  // The daemon's network namespace ("dev:inode" of /proc/self/ns/net): here the test's own.
  CHECK(status["netns"] == network_namespace_id());
  CHECK(status["netns"].get<std::string>().find(':') != std::string::npos);
  CHECK(status["quotas_per_user"].is_object());
  CHECK(status["processes"] == json::array());
  CHECK(status["descriptors"].is_object());
  CHECK(status["quotas"].is_object());
  CHECK(status["quota_use"] == json::array());
  CHECK(status["name"] == "rv0");
  CHECK(status["mac"] == "02:00:00:aa:bb:cc");
  CHECK(status["ip"] == "10.66.0.10/24");
  CHECK(status["mtu"] == 1500);
  CHECK(status["bridge"] == "br0");
  CHECK(status["gateway"] == "10.66.0.1");
  CHECK(status["pid"] == 4242);
  CHECK(status["uptime_s"] == 90);
  CHECK(status["uptime_s"].is_number_integer());
  REQUIRE(status["neighbours"].size() == 1);
  CHECK(status["neighbours"][0] == json{{"ip", "10.66.0.20"}, {"mac", "02:11:22:33:44:55"}, {"age_s", 7}});
}

TEST_CASE("status JSON lists each verbs client with its objects and QPs", "[vnic][report]") {
  const auto config = sample_config();
  verbs::ClientListing client;
  client.client = {3, 777, 1000};
  client.contexts = {1};
  client.pds = {2, 5};
  client.mrs = 4;
  client.cqs = {3};
  client.qps = {{6, rocev2::Qpn(17), rocev2::QpType::Rc, IBV_QPS_RTS}, {7, rocev2::Qpn(18), rocev2::QpType::Ud, IBV_QPS_INIT}};
  const json status = status_json(StatusReport{config, 1, {}, {}, {client}});
  REQUIRE(status["processes"].size() == 1);
  const json& p = status["processes"][0];
  CHECK(p["pid"] == 777);
  CHECK(p["uid"] == 1000);
  CHECK(p["contexts"] == 1);
  CHECK(p["pds"] == 2);
  CHECK(p["mrs"] == 4);
  CHECK(p["cqs"] == 1);
  CHECK(p["srqs"] == 0);
  REQUIRE(p["qps"].size() == 2);
  CHECK(p["qps"][0] == json{{"handle", 6}, {"qpn", 17}, {"type", "RC"}, {"state", "RTS"}});
  CHECK(p["qps"][1]["type"] == "UD");
  CHECK(p["qps"][1]["state"] == "INIT");
  const std::string text = format_status(status);
  CHECK(text.find("pid 777 (uid 1000): 1 contexts, 2 PDs, 4 MRs, 1 CQs, 0 SRQs, 0 AHs, 2 QPs") != std::string::npos);
  CHECK(text.find("QP 17  RC  RTS") != std::string::npos);
}

TEST_CASE("status JSON: absent bridge and gateway are null, neighbours an empty array", "[vnic][report]") {
  UpArguments args;
  args.name = "rv1";
  args.ip = "192.168.5.5/16";
  const auto config = *validate(args).config;
  const json status = status_json(StatusReport{config, 1, {}, {}});
  CHECK(status["bridge"].is_null());
  CHECK(status["gateway"].is_null());
  CHECK(status["ip"] == "192.168.5.5/16");
  CHECK(status["neighbours"].is_array());
  CHECK(status["neighbours"].empty());
  // Round trip through text, as the CLI and the system tests see it.
  CHECK(json::parse(status.dump()) == status);
}

TEST_CASE("stats JSON: every layer present, counters under their layer", "[vnic][report]") {
  LoopCounters loop;
  loop.tap_rx_frames = 7;
  loop.tx_queue_drops = 2;
  const std::vector<stack::Counter> counters{{"ethernet", "rx_frames", 11},
                                             {"icmp", "rx_echo_requests", 3},
                                             {"ethernet", "drop_too_short", 1}};
  const json stats = stats_json(counters, loop);
  for (const char* layer : {"ethernet", "arp", "ipv4", "icmp", "udp", "daemon"}) {
    INFO(layer);
    CHECK(stats[layer].is_object());
  }
  CHECK(stats.size() == 6);
  CHECK(stats["ethernet"] == json{{"rx_frames", 11}, {"drop_too_short", 1}});
  CHECK(stats["icmp"]["rx_echo_requests"] == 3);
  CHECK(stats["arp"].empty());
  CHECK(stats["daemon"]["tap_rx_frames"] == 7);
  CHECK(stats["daemon"]["tx_queue_drops"] == 2);
  CHECK(stats["daemon"].size() == named(loop).size());
  for (const auto& [name, value] : stats["daemon"].items()) {
    INFO(name);
    CHECK(value.is_number_unsigned());
  }
}

TEST_CASE("human status shows every field and each neighbour", "[vnic][report]") {
  const auto config = sample_config();
  stack::ArpEntry neighbour{*stack::Ipv4Address::parse("10.66.0.20"),
                            *stack::MacAddress::parse("02:11:22:33:44:55"), std::chrono::seconds(3)};
  const auto text = format_status(status_json(StatusReport{config, 99, std::chrono::seconds(5), {neighbour}}));
  CHECK_THAT(text, Catch::Contains("name:     rv0"));
  CHECK_THAT(text, Catch::Contains("ip:       10.66.0.10/24"));
  CHECK_THAT(text, Catch::Contains("bridge:   br0"));
  CHECK_THAT(text, Catch::Contains("pid:      99"));
  CHECK_THAT(text, Catch::Contains("10.66.0.20  02:11:22:33:44:55  age 3 s"));
  const auto line = format_list_line(status_json(StatusReport{config, 99, {}, {}}));
  CHECK(line == "rv0  02:00:00:aa:bb:cc  10.66.0.10/24  mtu 1500  bridge br0  pid 99");
}

TEST_CASE("status JSON: descriptors, quotas and each process's use against them", "[vnic][report]") {
  const auto config = sample_config();
  verbs::Quotas quotas;
  for (verbs::ResourceKind kind : verbs::kAllResourceKinds) quotas.of(kind) = 10;
  quotas.of(verbs::ResourceKind::Qp) = 729;
  quotas.ring_bytes = 1 << 20;
  verbs::QuotaUse use;
  use.pid = 777;
  use.uid = 1000;
  use.connections = 2;
  use.of(verbs::ResourceKind::Qp) = 729;
  use.of(verbs::ResourceKind::Cq) = 1;
  use.of(verbs::ResourceKind::Context) = 2;
  use.ring_bytes = 4096;
  const json status = status_json(
      StatusReport{config, 1, {}, {}, {}, DescriptorReport{20000, 20000, 2500, 123}, quotas, {use}});
  CHECK(status["descriptors"] == json{{"limit", 20000}, {"hard_limit", 20000}, {"reserved", 2500}, {"open", 123}});
  CHECK(status["quotas"]["qps"] == 729);
  CHECK(status["quotas"]["mrs"] == 10);
  CHECK(status["quotas"]["ring_bytes"] == 1 << 20);
  REQUIRE(status["quota_use"].size() == 1);
  const json& u = status["quota_use"][0];
  CHECK(u["pid"] == 777);
  CHECK(u["connections"] == 2);
  CHECK(u["qps"] == 729);
  CHECK(u["cqs"] == 1);
  CHECK(u["ring_bytes"] == 4096);
  CHECK(u["descriptors"] == 729 * 3 + 2 + 2 * 4);  // QPs, one CQ, two contexts
  const std::string text = format_status(status);
  CHECK(text.find("descriptors: 123 open, limit 20000 (hard 20000), 2500 kept from every process's quota") !=
        std::string::npos);
  CHECK(text.find("729/729 qps") != std::string::npos);
  CHECK(text.find("pid 777 (uid 1000, 2 connections, 2197 descriptors):") != std::string::npos);
  CHECK(text.find("quotas per process: 10 ahs, 10 contexts, 10 cqs, 10 mrs, 10 pds, 729 qps, 1048576 ring_bytes, 10 srqs") !=
        std::string::npos);
}

TEST_CASE("stats: quota refusals by what was exhausted", "[vnic][report]") {
  verbs::QuotaRefusals refusals;
  refusals.of(verbs::ResourceKind::Qp) = 3;
  refusals.ring_bytes = 2;
  const auto named_refusals = named(refusals);
  REQUIRE(named_refusals.size() == verbs::kResourceKinds + 1);
  CHECK(named_refusals[3] == std::pair<std::string, std::uint64_t>{"refused_qps", 3});
  CHECK(named_refusals.back() == std::pair<std::string, std::uint64_t>{"refused_ring_bytes", 2});
}
