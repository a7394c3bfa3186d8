// The privilege crossing of issue 16, as a hostile group member would try it, on one vnic:
//
//   victim (an unprivileged uid): opens the vnic, registers a page at address A with remote
//     read and write, connects two RC QPs to the prober's, then forks. Its child keeps the
//     connection; the victim itself execs a setuid-root program (rrdma_exec_target, made
//     setuid by setuid.sh) that maps its own page at A and fills it with a secret byte.
//   prober (root, this process): WRITEs over QP 1 and READs over QP 2 at A with the
//     victim's R_Key. Before the fix the daemon, which is root, did both to the setuid
//     program's memory by pid.
//
// Exit 0 when neither reached the setuid program: the WRITE and the READ completed with an
// error (printed, as a program sees it), the READ brought no secret byte back, and the
// program's page still holds only the secret. Exit 1 otherwise, 2 when the scene could not
// be set up. Every child is killed and reaped.
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "verbs/app/api.h"

namespace rv = rrdma::verbs;

namespace {

constexpr std::size_t kPage = 4096;
constexpr int kSecret = 0x53;   // what the setuid program fills its page with
constexpr int kVictim = 0x56;   // what the victim registered
constexpr int kWritten = 0x58;  // what the prober tries to write

struct Options {
  std::string device;
  std::string target;
  uid_t uid = 65534;
  gid_t gid = 65534;
  // Set in the victim, which is this program exec'd again as the victim's uid (a process
  // that only setuid()'d is not dumpable, and may not open its own /proc/self/mem).
  std::vector<int> victim_fds;
};

// One line over a pipe, as the two sides tell each other endpoints and buffers.
void send_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) ::_exit(2);
}
std::string receive_line(int fd) {
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

struct Side {
  rv::Context context;
  rv::ProtectionDomain pd;
  rv::CompletionQueue cq;
  rv::QueuePair write_qp;
  rv::QueuePair read_qp;
  explicit Side(const std::string& device)
      : context(rv::Context::open(device)),
        pd(context.alloc_pd()),
        cq(context.create_cq(16)),
        write_qp(pd.create_qp(rv::QpType::Rc, cq)),
        read_qp(pd.create_qp(rv::QpType::Rc, cq)) {}
  void connect(int out, int in) {
    for (rv::QueuePair* qp : {&write_qp, &read_qp}) {
      qp->to_init();
      send_line(out, qp->local_endpoint().encode());
    }
    for (rv::QueuePair* qp : {&write_qp, &read_qp}) {
      const auto peer = rv::Endpoint::decode(receive_line(in));
      if (!peer) throw std::runtime_error("malformed endpoint");
      qp->to_rtr(*peer);
      qp->to_rts();
    }
  }
};

void drop_privileges(const Options& options) {
  const gid_t groups[] = {options.gid};
  if (::setgroups(1, groups) != 0 || ::setresgid(options.gid, options.gid, options.gid) != 0 ||
      ::setresuid(options.uid, options.uid, options.uid) != 0) {
    std::perror("setuid_probe: dropping privileges");
    ::_exit(2);
  }
}

// The victim's side, run as the victim's uid; never returns. `to_prober`/`from_prober` carry
// endpoints and buffers, `go` tells the prober that the setuid program is in place.
[[noreturn]] void victim(const Options& options, int to_prober, int from_prober, int go) {
  ::alarm(120);
  try {
    Side side(options.device);
    void* page = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) ::_exit(2);
    std::memset(page, kVictim, kPage);
    rv::MemoryRegion mr = side.pd.register_memory(
        std::span(static_cast<std::byte*>(page), kPage),
        rv::access::kLocalWrite | rv::access::kRemoteWrite | rv::access::kRemoteRead);
    side.connect(to_prober, from_prober);
    send_line(to_prober, mr.remote().encode());
    int ready[2];
    if (::pipe(ready) != 0) ::_exit(2);
    if (::fork() == 0) {
      // The child keeps the connection (and with it the QPs and the MR) open.
      ::close(ready[1]);
      char said[8] = {};
      if (::read(ready[0], said, 5) != 5) ::_exit(2);
      send_line(go, "go " + std::to_string(::getpid()));
      ::pause();
      ::_exit(0);
    }
    // The registering process becomes the setuid program, same pid, its page at the MR's address.
    ::munmap(page, kPage);
    ::dup2(ready[1], STDOUT_FILENO);
    const std::string at = std::to_string(reinterpret_cast<std::uintptr_t>(page));
    const std::string fill = std::to_string(kSecret);
    ::execl(options.target.c_str(), options.target.c_str(), at.c_str(), fill.c_str(), static_cast<char*>(nullptr));
    std::perror("setuid_probe: exec");
  } catch (const std::exception& error) {
    std::cerr << "setuid_probe (victim): " << error.what() << "\n";
  }
  ::_exit(2);
}

std::vector<std::uint8_t> peek(pid_t pid, std::uint64_t address) {
  std::vector<std::uint8_t> bytes(kPage);
  const iovec local{bytes.data(), bytes.size()};
  const iovec remote{reinterpret_cast<void*>(address), bytes.size()};
  if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kPage)) return {};
  return bytes;
}

bool all_of(const std::vector<std::uint8_t>& bytes, int value) {
  return !bytes.empty() && std::all_of(bytes.begin(), bytes.end(), [&](std::uint8_t b) { return b == value; });
}

// Posts one work request and reports how it completed; true when it failed.
bool failed(Side& side, rv::QueuePair& qp, const rv::SendWorkRequest& wr, const char* what) {
  qp.post_send(wr);
  const auto wc = side.cq.wait(std::chrono::seconds(20));
  if (!wc) {
    std::cout << what << ": no completion within 20 s\n";
    return false;
  }
  std::cout << what << ": completion status " << wc->status_string() << "\n";
  return wc->status() != rv::WcStatus::Success;
}

// The victim's child, which holds the connection: ended by main() with the victim.
pid_t holder_pid = -1;

int prober(const Options& options, pid_t victim_pid, int from_victim, int to_victim, int go) {
  Side side(options.device);
  side.connect(to_victim, from_victim);
  const auto remote = rv::RemoteBuffer::decode(receive_line(from_victim));
  const std::string said = receive_line(go);
  if (said.rfind("go ", 0) == 0) holder_pid = static_cast<pid_t>(std::stol(said.substr(3)));
  if (!remote || holder_pid <= 0) {
    std::cerr << "setuid_probe: the victim did not get ready\n";
    return 2;
  }
  if (!all_of(peek(victim_pid, remote->addr), kSecret)) {
    std::cerr << "setuid_probe: the setuid program's page is not at the registered address\n";
    return 2;
  }
  std::cout << "setuid program (pid " << victim_pid << ") holds its secret at the registered address 0x"
            << std::hex << remote->addr << std::dec << "\n";
  std::vector<std::uint8_t> outgoing(kPage, kWritten);
  std::vector<std::uint8_t> incoming(kPage, 0);
  rv::MemoryRegion out_mr = side.pd.register_memory(std::span(outgoing));
  rv::MemoryRegion in_mr = side.pd.register_memory(std::span(incoming), rv::access::kLocalWrite);
  const rv::Sge source = out_mr.sge();
  const rv::Sge target = in_mr.sge();
  bool ok = failed(side, side.write_qp, rv::SendWorkRequest::write(1, std::span(&source, 1), *remote), "RDMA WRITE");
  ok = failed(side, side.read_qp, rv::SendWorkRequest::read(2, std::span(&target, 1), *remote), "RDMA READ") && ok;
  if (std::count(incoming.begin(), incoming.end(), kSecret) != 0) {
    std::cout << "RDMA READ brought the setuid program's secret back\n";
    ok = false;
  }
  if (!all_of(peek(victim_pid, remote->addr), kSecret)) {
    std::cout << "RDMA WRITE changed the setuid program's memory\n";
    ok = false;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"issue 16's setuid probe: DMA must not reach a setuid program exec'd at a registered pid"};
  app.add_option("--dev", options.device, "the vnic")->required();
  app.add_option("--target", options.target, "a setuid-root copy of rrdma_exec_target")->required();
  app.add_option("--uid", options.uid, "the victim's uid (a member of the vnic's group)");
  app.add_option("--gid", options.gid, "the victim's gid (the vnic's group)");
  app.add_option("--victim-fds", options.victim_fds, "(internal) run as the victim on these pipe ends")->expected(3);
  CLI11_PARSE(app, argc, argv);
  if (!options.victim_fds.empty()) victim(options, options.victim_fds[0], options.victim_fds[1], options.victim_fds[2]);

  int to_prober[2];
  int to_victim[2];
  int go[2];
  if (::pipe(to_prober) != 0 || ::pipe(to_victim) != 0 || ::pipe(go) != 0) return 2;
  const pid_t pid = ::fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    drop_privileges(options);
    const std::vector<std::string> args{"--dev", options.device, "--target", options.target, "--victim-fds",
                                        std::to_string(to_prober[1]), std::to_string(to_victim[0]),
                                        std::to_string(go[1])};
    std::vector<char*> argv_victim{argv[0]};
    for (const std::string& arg : args) argv_victim.push_back(const_cast<char*>(arg.c_str()));
    argv_victim.push_back(nullptr);
    ::execv("/proc/self/exe", argv_victim.data());
    std::perror("setuid_probe: exec as the victim");
    ::_exit(2);
  }
  ::close(to_prober[1]);
  ::close(to_victim[0]);
  ::close(go[1]);
  int status = 2;
  try {
    status = prober(options, pid, to_prober[0], to_victim[1], go[0]);
  } catch (const std::exception& error) {
    std::cerr << "setuid_probe: " << error.what() << "\n";
  }
  // The victim (now the setuid program) and its child, which is not ours to reap.
  if (holder_pid > 0) ::kill(holder_pid, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return status;
}
