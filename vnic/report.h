// The JSON the daemon answers with, and its rendering for humans. Pure: the shapes are
// a contract with the system tests and the demo script.
//   status: {"name","mac","ip","mtu","bridge"|null,"netdev"|null,"gateway"|null,"pid","uptime_s",
//            "neighbours":[{"ip","mac","age_s"}],
//            "processes":[{"pid","uid","client","contexts","pds","mrs","cqs","srqs","ahs",
//                          "qps":[{"handle","qpn","type","state"}]}],
//            "descriptors":{"limit","hard_limit","reserved","open"},
//            "quotas":{"contexts","pds","cqs","qps","srqs","ahs","mrs","ring_bytes"},
//            "quota_use":[{"pid","uid","connections","contexts",...,"mrs","ring_bytes",
//                          "descriptors"}]}   (per process, not per connection)
//   stats:  {"ethernet":{...},"arp":{...},"ipv4":{...},"icmp":{...},"udp":{...},
//            "daemon":{...},"roce":{...},"engine":{...},"gsi":{...},"verbs":{...},"dma":{...},
//            "quotas":{"refused_contexts",...,"refused_mrs","refused_ring_bytes"}}
//            layer -> counter name -> number
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocev2/engine/engine.h"
#include "stack/interface.h"
#include "verbs/device/nic.h"
#include "vnic/config.h"
#include "vnic/event_loop.h"

namespace rrdma::vnic {

// The daemon's own descriptors: RLIMIT_NOFILE as raised at start, the part no process's
// quota may reach into, and how many are open now.
struct DescriptorReport {
  std::uint64_t limit = 0;
  std::uint64_t hard_limit = 0;
  std::uint64_t reserved = 0;
  // What the verbs objects of every process together may hold: the limit less the reserve.
  std::uint64_t usable() const { return limit > reserved ? limit - reserved : 0; }
  std::uint64_t open = 0;
};

struct StatusReport {
  const VnicConfig& config;
  pid_t pid;
  Duration uptime;
  std::vector<stack::ArpEntry> neighbours;
  std::vector<verbs::ClientListing> processes = {};  // the verbs clients, by connection
  DescriptorReport descriptors = {};
  verbs::Quotas quotas = {};
  std::vector<verbs::QuotaUse> quota_use = {};  // per process
  verbs::Quotas user_quotas = {};               // one uid's processes together
};

using NamedCounters = std::vector<std::pair<std::string_view, std::uint64_t>>;

nlohmann::json status_json(const StatusReport& report);

// The five stack layers always appear, even with no counter yet, so a reader can index
// stats["icmp"] without checking.
nlohmann::json stats_json(const std::vector<stack::Counter>& stack_counters,
                          const LoopCounters& loop_counters);

std::vector<std::pair<std::string, std::uint64_t>> named(const LoopCounters& counters);
NamedCounters named(const rocev2::EngineCounters& counters);
NamedCounters named(const verbs::NicCounters& counters);
NamedCounters named(const verbs::DmaCounters& counters);
// "refused_<kind>s" for each kind, "refused_ring_bytes".
std::vector<std::pair<std::string, std::uint64_t>> named(const verbs::QuotaRefusals& refusals);
// Adds (or replaces) one layer of counters in a stats object.
void add_layer(nlohmann::json& stats, std::string_view layer, const NamedCounters& counters);

std::string format_status(const nlohmann::json& status);
std::string format_stats(const nlohmann::json& stats);
std::string format_list_line(const nlohmann::json& status);

}  // namespace rrdma::vnic
