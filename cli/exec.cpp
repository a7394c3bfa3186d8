// `rrdma-vnic exec` / `env`: our libibverbs.so.1 and its stand-in providers live in
// lib/rrdma-ibverbs/ next to the rrdma libraries, never over the system's libibverbs; a
// program finds them first because LD_LIBRARY_PATH names that directory first, and sees only
// the chosen vnic because RRDMA_DEVICES names it (docs/IBVERBS.md). The rdma_cm shim
// librrdma_ucma.so, in the same directory, is appended to LD_PRELOAD: Debian's librdmacm
// then reaches the vnic's daemon instead of the kernel (docs/RDMA_CM.md). `exec` also gives
// the program the sysfs view of the vnics (cli/exec_sysfs.h); a shell set up by `env` cannot
// have it.
#include "cli/exec.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string_view>

#include "cli/exec_sysfs.h"
#include "vnic/config.h"
#include "vnic/lifecycle.h"
#include "vnic/runtime.h"

namespace rrdma::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kExecFooter = R"(Examples:
  # the only vnic rv0, as device rv0 (GID index 0 is its IPv4 address, RoCE v2)
  rrdma-vnic exec --dev rv0 -- ibv_devinfo -v
  # a ping-pong between two vnics: the server on one host or namespace, the client on another
  rrdma-vnic exec --dev rv0 -- ibv_rc_pingpong -d rv0 -g 0
  rrdma-vnic exec --dev rv1 -- ibv_rc_pingpong -d rv1 -g 0 10.66.0.10
  rrdma-vnic exec --dev rv1 -- ib_write_bw -d rv1 -x 0 10.66.0.10
  # an rdma_cm program (librdmacm, through the preloaded shim)
  rrdma-vnic exec --dev rv0 -- rping -s -a 10.66.0.10
Without --dev the program sees every running vnic. Exits with the program's status, or
127 when PROGRAM is not found (126 when it cannot be run), as a shell does.
The program also sees the vnics in sysfs, as software built on rdma-core (UCX, libfabric)
reads them: /sys/class/infiniband/NAME (node GUID, port 1 state, rate, GIDs with their
RoCE v2 type and netdev) and /sys/class/infiniband_verbs/uverbsN, values as of the start.
It gets a mount namespace of its own for that (and, when not run by root, a user namespace
mapping the caller's own uid and gid); the host's mounts do not change. Where that cannot
be done, a line on stderr says so and the program runs without the view
(docs/IBVERBS.md "The sysfs view").)";

constexpr const char* kEnvFooter = R"text(Example:
  eval "$(rrdma-vnic env --dev rv0)"; ibv_devinfo
Prints `export` lines: LD_LIBRARY_PATH with our libibverbs.so.1 first, LD_PRELOAD with our
rdma_cm shim (librrdma_ucma.so) appended, and RRDMA_DEVICES. Programs started from that
shell do not see the vnics in sysfs (stderr says so): use `exec` for those that read it.)text";

constexpr const char* kShimName = "librrdma_ucma.so";

// lib/rrdma-ibverbs/ relative to this executable (bin/ installed, cli/ in a build tree),
// or $RRDMA_IBVERBS_DIR.
std::optional<fs::path> library_dir() {
  if (const char* dir = std::getenv("RRDMA_IBVERBS_DIR"); dir != nullptr && *dir != '\0') return fs::path(dir);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  for (const char* libdir : {RRDMA_INSTALL_LIBDIR, "lib"}) {
    const fs::path candidate = exe.parent_path() / ".." / libdir / "rrdma-ibverbs";
    if (fs::exists(candidate / "libibverbs.so.1", ec)) return fs::weakly_canonical(candidate, ec);
  }
  return std::nullopt;
}

// The error for a --dev that is not a running vnic; empty when it is one.
std::string check_device(const std::string& name) {
  if (name.empty()) return {};
  if (!vnic::is_valid_interface_name(name)) return "'" + name + "' is not a vnic name";
  const vnic::Observation observation = vnic::observe(name);
  if (observation.socket_denied) return vnic::socket_denied_message(name);
  switch (vnic::assess(observation)) {
    case vnic::Liveness::kRunning: return {};
    case vnic::Liveness::kStarting: return "vnic " + name + " is not answering yet";
    case vnic::Liveness::kStale: return "vnic " + name + " is not running (its daemon died; `rrdma-vnic down " + name + "` cleans up)";
    case vnic::Liveness::kAbsent: break;
  }
  return "no vnic named " + name + " (`rrdma-vnic list` shows the running ones)";
}

struct Variables {
  std::string library_path;
  std::string preload;
  std::string devices;  // empty: every vnic
};

// The loader splits LD_PRELOAD at spaces and colons: a path holding either cannot be named.
bool preloadable(const std::string& path) { return path.find_first_of(" :") == std::string::npos; }

// LD_PRELOAD with `shim` appended, unless an entry names it already (an `exec` inside an
// `eval "$(rrdma-vnic env)"` shell): the application's own preloads keep coming first.
std::string preload_with(const std::string& shim, const char* existing) {
  if (existing == nullptr || *existing == '\0') return shim;
  std::string_view rest = existing;
  while (!rest.empty()) {
    const auto end = rest.find_first_of(" :");
    if (rest.substr(0, end) == shim) return existing;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return std::string(existing) + ":" + shim;
}

// The shim in our libraries' directory; nullopt, with the reason on stderr, when it is not
// there or its path cannot be preloaded.
std::optional<std::string> shim_beside(const fs::path& dir) {
  const std::string shim = (dir / kShimName).string();
  std::error_code ec;
  if (!preloadable(shim)) {
    std::cerr << "rrdma-vnic: the rdma_cm shim " << shim << " cannot go in LD_PRELOAD (a space or colon in its path)\n";
    return std::nullopt;
  }
  if (!fs::exists(shim, ec)) {
    std::cerr << "rrdma-vnic: the rdma_cm shim " << shim << " is not installed next to our libibverbs.so.1\n";
    return std::nullopt;
  }
  return shim;
}

std::optional<Variables> variables_for(const ExecCommands& commands) {
  if (const std::string error = check_device(commands.device); !error.empty()) {
    std::cerr << "rrdma-vnic: " << error << "\n";
    return std::nullopt;
  }
  const auto dir = library_dir();
  if (!dir) {
    std::cerr << "rrdma-vnic: our libibverbs.so.1 is not installed next to this program "
                 "(looked for ../" RRDMA_INSTALL_LIBDIR "/rrdma-ibverbs; set RRDMA_IBVERBS_DIR)\n";
    return std::nullopt;
  }
  const auto shim = shim_beside(*dir);
  if (!shim) return std::nullopt;
  Variables vars;
  vars.library_path = dir->string();
  vars.preload = preload_with(*shim, std::getenv("LD_PRELOAD"));
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    vars.library_path += std::string(":") + old;
  vars.devices = commands.device;
  return vars;
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// RRDMA_INTERFACES for the shim (verbs/app/ucma/interfaces.h): "NAME=A.B.C.D/LEN" per vnic of
// the view, ';' between them, from each daemon's status. A vnic whose status does not answer
// is left out.
std::string interfaces_variable(const std::vector<verbs::sysfs::DeviceValues>& vnics) {
  std::string text;
  for (const auto& vnic : vnics) {
    const auto status = vnic::query_vnic(vnic.name, "status");
    if (!status.reply || !status.reply->contains("ip") || !(*status.reply)["ip"].is_string()) continue;
    // A --netdev device's addresses are the kernel's interface's: getifaddrs has them already.
    if (status.reply->value("netdev", nlohmann::json()).is_string()) continue;
    if (!text.empty()) text += ';';
    text += vnic.name + "=" + (*status.reply)["ip"].get<std::string>();
  }
  return text;
}

}  // namespace

void add_exec_commands(CLI::App& app, ExecCommands& commands) {
  commands.exec = app.add_subcommand("exec", "Run an unmodified verbs or rdma_cm program (ibv_*, perftest, rping...) on a vnic");
  commands.exec->footer(kExecFooter);
  commands.exec->add_option("--dev", commands.device, "The vnic the program sees as its only RDMA device");
  commands.exec->add_flag("--no-sysfs-view", commands.no_sysfs_view,
                          "Run the program in the host's mount namespace, without the vnics in /sys/class");
  commands.exec->add_option("command", commands.command, "PROGRAM [ARGS...], after --")->required();

  commands.env = app.add_subcommand("env", "Print the shell variables that make verbs and rdma_cm programs use vnics");
  commands.env->footer(kEnvFooter);
  commands.env->add_option("--dev", commands.device, "The vnic programs see as their only RDMA device");
}

int run_exec(const ExecCommands& commands) {
  const auto vars = variables_for(commands);
  if (!vars) return 1;
  ::unsetenv("RRDMA_INTERFACES");
  if (!commands.no_sysfs_view) {
    const auto vnics = query_vnics(commands.device);
    if (const std::string error = enter_sysfs_view(verbs::sysfs::build_view(vnics)); !error.empty()) {
      std::cerr << "rrdma-vnic: the program runs without the vnics in /sys/class (" << error
                << "): software that reads sysfs (UCX, libfabric) sees no RoCE GID types or netdevs\n";
    } else if (const std::string interfaces = interfaces_variable(vnics); !interfaces.empty()) {
      ::setenv("RRDMA_INTERFACES", interfaces.c_str(), 1);
    }
  }
  ::setenv("LD_LIBRARY_PATH", vars->library_path.c_str(), 1);
  ::setenv("LD_PRELOAD", vars->preload.c_str(), 1);
  if (vars->devices.empty()) {
    ::unsetenv("RRDMA_DEVICES");
  } else {
    ::setenv("RRDMA_DEVICES", vars->devices.c_str(), 1);
  }
  std::vector<char*> argv;
  for (const auto& word : commands.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int error = errno;
  if (error == ENOENT) {
    std::cerr << "rrdma-vnic: " << commands.command[0] << ": command not found\n";
    return 127;
  }
  std::cerr << "rrdma-vnic: " << commands.command[0] << ": " << std::strerror(error) << "\n";
  return 126;
}

int run_env(const ExecCommands& commands) {
  const auto vars = variables_for(commands);
  if (!vars) return 1;
  std::cerr << "rrdma-vnic: programs started from this shell do not see the vnics in /sys/class (UCX, for one, "
               "then finds no RoCE v2 GID type and takes RoCE v1); run those with `rrdma-vnic exec`\n";
  std::cout << "export LD_LIBRARY_PATH=" << shell_quote(vars->library_path) << "\n";
  std::cout << "export LD_PRELOAD=" << shell_quote(vars->preload) << "\n";
  if (vars->devices.empty()) {
    std::cout << "unset RRDMA_DEVICES\n";
  } else {
    std::cout << "export RRDMA_DEVICES=" << shell_quote(vars->devices) << "\n";
  }
  return 0;
}

}  // namespace rrdma::cli
