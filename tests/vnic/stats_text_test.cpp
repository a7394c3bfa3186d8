// The text of `rrdma-vnic stats` (cli/stats.h): zeros left out and counted, --all, and the
// rates --watch shows, computed from two replies without any clock.
#include <catch2/catch.hpp>

#include "cli/stats.h"

using nlohmann::json;
using rrdma::cli::counter_rates;
using rrdma::cli::format_stats_text;
using rrdma::cli::StatsView;

namespace {

// The daemon's shape (vnic/report.h, vnic/roce_stats.h) in small: flat layers, the opcode
// table, a QP with a nested part (printed in the order of the keys: JSON objects sort them). 11 counters are 0: ethernet 1, arp 3, the opcode row of
// zeros 5 (its columns; "opcode" is the row's number, not a column), QP 17 one plain and
// one in its drops.
json sample_stats() {
  return json::parse(R"({
    "ethernet": {"rx_frames": 5, "drop_multicast": 0, "tx_frames": 12},
    "arp": {"requests_answered": 0, "replies_sent": 0, "queue_overflow": 0},
    "roce_opcodes": {
      "rc_send_only": {"opcode": 4, "tx_packets": 2, "tx_bytes": 64, "tx_retransmitted": 0,
                       "rx_packets": 0, "rx_bytes": 0},
      "rc_send_first": {"opcode": 0, "tx_packets": 0, "tx_bytes": 0, "tx_retransmitted": 0,
                        "rx_packets": 0, "rx_bytes": 0}},
    "roce_decisions": {},
    "qps": {"17": {"state": "RTS", "tx_packets": 4, "rx_packets": 0, "decisions": {"acked": 3},
                   "drops": {"bad_psn": 0}}}
  })");
}

}  // namespace

TEST_CASE("stats text shows the counters that are not 0 and counts the zeros it left out", "[cli][stats]") {
  const auto result = format_stats_text(sample_stats());
  CHECK(result.zeros_omitted == 11);
  CHECK(result.text ==
        "ethernet: rx_frames 5  tx_frames 12\n"
        "qp 17: state RTS  tx_packets 4\n"
        "  decisions: acked 3\n"
        "roce_opcodes:\n"
        "  opcode                                   tx_packets     tx_bytes tx_retrans rx_packets     rx_bytes\n"
        "  rc_send_only                                      2           64          0          0            0\n"
        "(11 counters at 0 not shown; --all shows them)\n");
}

TEST_CASE("stats text of nothing but zeros is the line that counts them", "[cli][stats]") {
  const auto result = format_stats_text(json::parse(R"({"arp": {"a": 0}, "icmp": {}, "qps": {}})"));
  CHECK(result.zeros_omitted == 1);
  CHECK(result.text == "(1 counter at 0 not shown; --all shows them)\n");
}

TEST_CASE("stats text with --all shows every counter and omits nothing", "[cli][stats]") {
  const auto result = format_stats_text(sample_stats(), StatsView{.all = true});
  CHECK(result.zeros_omitted == 0);
  CHECK(result.text ==
        "arp: queue_overflow 0  replies_sent 0  requests_answered 0\n"
        "ethernet: drop_multicast 0  rx_frames 5  tx_frames 12\n"
        "qp 17: rx_packets 0  state RTS  tx_packets 4\n"
        "  decisions: acked 3\n"
        "  drops: bad_psn 0\n"
        "roce_decisions:\n"
        "roce_opcodes:\n"
        "  opcode                                   tx_packets     tx_bytes tx_retrans rx_packets     rx_bytes\n"
        "  rc_send_first                                     0            0          0          0            0\n"
        "  rc_send_only                                      2           64          0          0            0\n");
}

TEST_CASE("stats text wraps a long layer before column 90, 4 spaces in", "[cli][stats]") {
  json stats;
  for (int i = 10; i < 22; ++i) stats["daemon"]["counter_number_" + std::to_string(i)] = 1000000;
  const auto text = format_stats_text(stats).text;
  CHECK(text ==
        "daemon: counter_number_10 1000000  counter_number_11 1000000  counter_number_12 1000000\n"
        "    counter_number_13 1000000  counter_number_14 1000000  counter_number_15 1000000\n"
        "    counter_number_16 1000000  counter_number_17 1000000  counter_number_18 1000000\n"
        "    counter_number_19 1000000  counter_number_20 1000000  counter_number_21 1000000\n");
}

TEST_CASE("counter rates: growth per second of the counters both replies have", "[cli][stats]") {
  const auto before = json::parse(R"({"ethernet": {"rx_frames": 100, "tx_frames": 7, "gone": 1},
                                      "daemon": {"restarted": 50}, "qps": {"17": {"state": "RTS", "tx_packets": 1}}})");
  const auto now = json::parse(R"({"ethernet": {"rx_frames": 130, "tx_frames": 7, "new": 9},
                                   "daemon": {"restarted": 3}, "qps": {"17": {"state": "RTS", "tx_packets": 5}}})");
  const auto rates = counter_rates(before, now, 2.0);
  CHECK(rates == json::parse(R"({"ethernet": {"rx_frames": 15.0, "tx_frames": 0.0}, "daemon": {},
                                 "qps": {"17": {"tx_packets": 2.0}}})"));
  CHECK(counter_rates(before, now, 0.0) == json::object());
  CHECK(counter_rates(json::parse(R"({"a": 5})"), json::parse(R"({"a": 8})"), 0.5) == json::parse(R"({"a": 6.0})"));
}

TEST_CASE("stats text with rates shows each one beside its total", "[cli][stats]") {
  const auto before = sample_stats();
  auto now = sample_stats();
  now["ethernet"]["rx_frames"] = 45;
  now["roce_opcodes"]["rc_send_only"]["tx_packets"] = 2002;
  const auto rates = counter_rates(before, now, 4.0);
  const auto result = format_stats_text(now, StatsView{.rates = &rates});
  CHECK(result.text.find("ethernet: rx_frames 45 (10/s)  tx_frames 12 (0.0/s)\n") != std::string::npos);
  CHECK(result.text.find("qp 17: state RTS  tx_packets 4 (0.0/s)\n") != std::string::npos);
  CHECK(result.text.find("rx_bytes  tx_pkts/s  rx_pkts/s\n") != std::string::npos);
  CHECK(result.text.find("            0      500/s      0.0/s\n") != std::string::npos);
  CHECK(result.zeros_omitted == 11);
}
