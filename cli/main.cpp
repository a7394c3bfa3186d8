// rrdma-vnic: parses the command line and calls vnic/'s API; nothing else lives here.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/capture.h"
#include "cli/exec.h"
#include "cli/stats.h"
#include "cli/trace.h"
#include "vnic/config.h"
#include "vnic/lifecycle.h"
#include "vnic/report.h"

namespace {

using rrdma::vnic::Outcome;

constexpr const char* kExamples = R"(Examples:
  rrdma-vnic up --name rr0 --netdev eth0          # as any user: RDMA on eth0's own address
  rrdma-vnic up --name rv0 --ip 10.66.0.10/24 --bridge br-rdma --create-bridge
  rrdma-vnic status rv0
  rrdma-vnic stats rv0 --json
  rrdma-vnic list
  rrdma-vnic exec --dev rv0 -- ibv_devinfo -v
  rrdma-vnic trace rv0 --layer roce --layer qp
  rrdma-vnic capture rv0 -w rv0.pcap
  rrdma-vnic down rv0
Run `rrdma-vnic SUBCOMMAND --help` for the options of each subcommand.)";

constexpr const char* kUpExamples = R"(Examples:
  # RDMA on eth0, as an ordinary user: RoCE v2 through the kernel's UDP on eth0's addresses
  rrdma-vnic up --name rr0 --netdev eth0
  # a vnic on a new bridge br-rdma, detached; returns once the vnic answers
  rrdma-vnic up --name rv0 --ip 10.66.0.10/24 --bridge br-rdma --create-bridge
  # on an existing bridge, with the physical uplink eth1 added to it and a gateway
  rrdma-vnic up --name rv0 --ip 192.168.7.20/24 --bridge br0 --uplink eth1 --gateway 192.168.7.1
  # jumbo frames, a fixed MAC, in the foreground (Ctrl-C stops it)
  rrdma-vnic up --name rv1 --ip 10.66.0.11/24 --mtu 9000 --mac 02:00:00:00:00:11 --foreground
  # one program may hold up to 5000 QPs (each costs the daemon 3 descriptors)
  rrdma-vnic up --name rv2 --ip 10.66.0.12/24 --max-qps-per-process 5000
Two kinds of device:
  --netdev IF  RDMA as a second personality of IF: the kernel does ARP, routing and IP, TCP
               and RDMA share IF's addresses (GIDs), the port follows IF's state and MTU.
               Needs no privilege, only that UDP port 4791 is free (no rdma_rxe here).
  --ip ...     a host of its own behind a TAP (add --bridge to join a bridge): its own MAC
               and address; the kernel's side of the TAP is only a bridge port. Needs
               CAP_NET_ADMIN.
State lives in /run/rrdma (root), else $XDG_RUNTIME_DIR/rrdma or /tmp/rrdma-UID (0700), or
$RRDMA_RUN_DIR: NAME.{pid,sock,state,log}.)";

// Digits (and, with a unit, a size suffix after them). CLI11 alone would wrap "-3" into a
// huge unsigned number, and its own range check prints its limits as doubles.
CLI::Validator whole_number(bool unit_allowed) {
  return CLI::Validator(
      [unit_allowed](std::string& text) -> std::string {
        const auto digits = std::find_if_not(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits != text.begin() && (digits == text.end() || unit_allowed)) return {};
        return "expected a whole number" + std::string(unit_allowed ? " of bytes (a unit may follow)" : "") +
               ", got '" + text + "'";
      },
      "");
}

// --max-cm-*: the rdma_cm device's bounds per channel, process and user (`status` shows them).
void add_cm_limit_options(CLI::App& up, rrdma::vnic::CmLimitOverrides& limits) {
  constexpr const char* kGroup = "rdma_cm limits (see `status`)";
  for (const auto& option : rrdma::vnic::cm_limit_options()) {
    up.add_option(option.flag, limits[static_cast<std::size_t>(option.limit)],
                  std::string(option.help) + ", 1.." + std::to_string(option.max))
        ->check(whole_number(false))
        ->group(kGroup);
  }
}

// --max-KIND-per-process: left out, the daemon derives each from its descriptor limit, so
// that no process can take more than a quarter of what it has (`status` shows the numbers).
void add_quota_options(CLI::App& up, rrdma::vnic::QuotaOverrides& quotas) {
  constexpr const char* kGroup = "Quotas per process (default: derived from the daemon's descriptor limit; see `status`)";
  for (const auto& option : rrdma::vnic::quota_options()) {
    up.add_option(option.flag, quotas.of(option.kind),
                  std::string("Most ") + option.objects + " one process may hold at once, 1.." + std::to_string(option.max))
        ->check(whole_number(false))
        ->group(kGroup);
  }
  up.add_option(rrdma::vnic::kRingBytesFlag, quotas.ring_bytes,
                "Most bytes of queue rings (shared memory the daemon maps) one process may hold, e.g. 512MiB, 1GiB")
      ->transform(CLI::AsSizeValue(false))
      ->transform(whole_number(true))  // transforms run newest first: this one before the unit's
      ->group(kGroup);
}

// --max-KIND-per-user: one user's processes together; left out, twice the per-process quota
// (one user holds at most half of what the daemon has).
void add_user_quota_options(CLI::App& up, rrdma::vnic::QuotaOverrides& quotas) {
  constexpr const char* kGroup = "Quotas per user, all its processes together (default: twice the per-process quota; see `status`)";
  for (const auto& option : rrdma::vnic::quota_options()) {
    up.add_option(option.user_flag, quotas.of(option.kind),
                  std::string("Most ") + option.objects + " one user's processes may hold together, 1.." +
                      std::to_string(option.max))
        ->check(whole_number(false))
        ->group(kGroup);
  }
  up.add_option(rrdma::vnic::kUserRingBytesFlag, quotas.ring_bytes,
                "Most bytes of queue rings one user's processes may hold together, e.g. 1GiB")
      ->transform(CLI::AsSizeValue(false))
      ->transform(whole_number(true))
      ->group(kGroup);
}

int finish(const Outcome& outcome) {
  for (const auto& note : outcome.notes) std::cerr << "rrdma-vnic: " << note << "\n";
  if (!outcome.ok) {
    std::cerr << "rrdma-vnic: " << outcome.message << "\n";
    return 1;
  }
  if (!outcome.message.empty()) std::cout << outcome.message << "\n";
  return 0;
}

int run_up(const rrdma::vnic::UpArguments& args, bool foreground) {
  const auto validated = rrdma::vnic::validate(args);
  if (!validated.config) {
    std::cerr << "rrdma-vnic: " << validated.error << "\n";
    return 2;
  }
  return finish(rrdma::vnic::start_vnic(*validated.config, foreground));
}

int run_query(const std::string& name, const std::string& cmd, bool json) {
  const auto result = rrdma::vnic::query_vnic(name, cmd);
  if (!result.reply) {
    std::cerr << "rrdma-vnic: " << result.error << "\n";
    return 1;
  }
  if (json) {
    std::cout << result.reply->dump(2) << "\n";
  } else {
    std::cout << (cmd == "status" ? rrdma::vnic::format_status(*result.reply)
                                  : rrdma::vnic::format_stats(*result.reply));
  }
  return 0;
}

int run_list(bool json) {
  const auto listing = rrdma::vnic::list_vnics();
  for (const auto& note : listing.notes) std::cerr << "rrdma-vnic: " << note << "\n";
  if (json) {
    std::cout << nlohmann::json(listing.running).dump(2) << "\n";
  } else {
    for (const auto& status : listing.running) std::cout << rrdma::vnic::format_list_line(status) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rrdma-vnic: a software RDMA NIC. `up --bridge` creates a TAP interface behind which a daemon\n"
               "answers ARP, ICMP and RoCE v2 as a host of its own on your bridge (root); `up --netdev`\n"
               "gives an interface you already have RDMA beside its TCP/IP, as rdma_rxe does (any user).",
               "rrdma-vnic"};
  app.footer(kExamples);
  app.require_subcommand(1);

  rrdma::vnic::UpArguments up_args;
  bool foreground = false;
  auto* up = app.add_subcommand("up", "Create a vnic and start its daemon");
  up->footer(kUpExamples);
  up->add_option("--name", up_args.name, "The RDMA device's name (1-15 chars); with --ip also its TAP's")->required();
  auto* netdev = up->add_option("--netdev", up_args.netdev,
                                "RDMA on this existing interface, through the kernel's UDP (no TAP, no privilege)");
  auto* ip = up->add_option("--ip", up_args.ip, "The vnic's IPv4 address and prefix length, e.g. 10.66.0.10/24 (its RoCE v2 GID)");
  ip->excludes(netdev);
  up->callback([ip, netdev] {
    if (ip->count() == 0 && netdev->count() == 0) throw CLI::RequiredError("--ip or --netdev");
  });
  up->add_option("--mac", up_args.mac, "The vnic's MAC (default: a stable locally administered MAC derived from NAME)");
  auto* mtu = up->add_option("--mtu", up_args.mtu, "IP MTU of the vnic and its TAP, 576..9000")->capture_default_str();
  auto* bridge = up->add_option("--bridge", up_args.bridge, "Bridge to attach the TAP to as a port");
  up->add_flag("--create-bridge", up_args.create_bridge, "Create BR if it does not exist (removed again by `down`)")->needs(bridge);
  up->add_option("--uplink", up_args.uplink, "Interface to add to BR as well, e.g. a physical NIC")->needs(bridge);
  up->add_option("--gateway", up_args.gateway, "Default gateway for addresses outside the subnet");
  up->add_option("--group", up_args.group, "Members of GROUP may use the NIC and read status and stats (control socket 0660 root:GROUP; default root only); down, capture and trace stay root's");
  up->add_option("--busy-poll-us", up_args.busy_poll_us,
                 "After its last piece of work the daemon keeps looking for the next one this long (0..1000 us) "
                 "before sleeping, but only while some CPU is idle: lower latency on a machine with spare CPUs, "
                 "nothing gained on a busy one")
      ->capture_default_str();
  auto* dma_wait = up->add_option("--dma-wait-ms", up_args.dma_wait_ms,
                 "How long the daemon waits for one read or write of a client's memory (0..60000 ms) before it "
                 "gives up on that client, whose memory never answers (a FUSE file it serves, say): others keep "
                 "going. 0 makes those calls on the daemon's loop itself, without a bound: faster, not safe from "
                 "such memory. Default: 1000 with --group (other users share the NIC), else 0 (only its owner "
                 "uses it)");
  up->add_flag("--no-udp-offload", up_args.no_udp_offload,
               "With --netdev: send each datagram on its own, with UDP checksum 0 as rdma_rxe does, instead of "
               "runs of datagrams in one call (UDP GSO, with checksums) and receiving them whole (UDP GRO): "
               "slower, for comparing or for a path that mishandles UDP GSO")
      ->needs(netdev);
  up->add_flag("--foreground", foreground, "Stay in the foreground, log to stderr; SIGINT/SIGTERM stop it");
  add_quota_options(*up, up_args.quotas);
  add_user_quota_options(*up, up_args.user_quotas);
  add_cm_limit_options(*up, up_args.cm_limits);

  std::string name;
  bool json = false;
  auto* down = app.add_subcommand("down", "Stop a vnic: removes its TAP, the bridge it created, its state");
  down->footer("Example:\n  rrdma-vnic down rv0");
  down->add_option("name", name, "The vnic's name")->required();

  auto* list = app.add_subcommand("list", "One line per running vnic");
  list->footer("Example:\n  rrdma-vnic list");
  list->add_flag("--json", json, "Print a JSON array of status objects");

  auto* status = app.add_subcommand("status", "Name, MAC, IP/LEN, MTU, bridge, gateway, uptime, pid, neighbours");
  status->footer("Examples:\n  rrdma-vnic status rv0\n  rrdma-vnic status rv0 --json");
  status->add_option("name", name, "The vnic's name")->required();
  status->add_flag("--json", json, "Print the daemon's JSON reply");

  rrdma::cli::StatsCommand stats_command;
  rrdma::cli::add_stats_command(app, stats_command);

  rrdma::cli::ExecCommands exec_commands;
  rrdma::cli::add_exec_commands(app, exec_commands);
  rrdma::cli::CaptureCommand capture_command;
  rrdma::cli::add_capture_command(app, capture_command);
  rrdma::cli::TraceCommand trace_command;
  rrdma::cli::add_trace_command(app, trace_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& done) {
    return app.exit(done);  // --help: prints the help, exit code 0
  } catch (const CLI::ParseError& error) {
    // One line, like every other error of this tool (CLI11 would add a second).
    std::cerr << "rrdma-vnic: " << error.what() << " (see --help)\n";
    return 2;
  }

  if (up->parsed()) {
    up_args.mtu_given = mtu->count() > 0;
    up_args.dma_wait_given = dma_wait->count() > 0;
    return run_up(up_args, foreground);
  }
  if (down->parsed()) return finish(rrdma::vnic::stop_vnic(name));
  if (list->parsed()) return run_list(json);
  if (status->parsed()) return run_query(name, "status", json);
  if (stats_command.app->parsed()) return rrdma::cli::run_stats(stats_command);
  if (trace_command.app->parsed()) return rrdma::cli::run_trace(trace_command);
  if (capture_command.app->parsed()) return rrdma::cli::run_capture(capture_command);
  if (exec_commands.exec->parsed()) return rrdma::cli::run_exec(exec_commands);
  if (exec_commands.env->parsed()) return rrdma::cli::run_env(exec_commands);
  return 1;
}
