// The JSON the daemon answers with, and its rendering for humans. Pure: the shapes are
// a contract with the system tests and the demo script.
//   status: {"name","mac","ip","mtu","bridge"|null,"gateway"|null,"pid","uptime_s",
//            "neighbours":[{"ip","mac","age_s"}]}
//   stats:  {"ethernet":{...},"arp":{...},"ipv4":{...},"icmp":{...},"udp":{...},
//            "daemon":{...}}   layer -> counter name -> number
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stack/interface.h"
#include "vnic/config.h"
#include "vnic/event_loop.h"

namespace rrdma::vnic {

struct StatusReport {
  const VnicConfig& config;
  pid_t pid;
  Duration uptime;
  std::vector<stack::ArpEntry> neighbours;
};

nlohmann::json status_json(const StatusReport& report);

// The five stack layers always appear, even with no counter yet, so a reader can index
// stats["icmp"] without checking.
nlohmann::json stats_json(const std::vector<stack::Counter>& stack_counters,
                          const LoopCounters& loop_counters);

std::vector<std::pair<std::string, std::uint64_t>> named(const LoopCounters& counters);

std::string format_status(const nlohmann::json& status);
std::string format_stats(const nlohmann::json& stats);
std::string format_list_line(const nlohmann::json& status);

}  // namespace rrdma::vnic
