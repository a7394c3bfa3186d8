// The rdma_cm shim (librrdma_ucma.so) as an application meets it, without a vnic and without
// root: this test plays the daemon (a fake listening on $RRDMA_RUN_DIR/fake0.sock that
// answers the ucma frames of verbs/contract/ucma_protocol.h, and the verbs OpenDevice our
// libibverbs sends for the node GUID) and runs ucma_probe with the shim preloaded. The probe
// checks what the application sees; the test checks what the daemon was sent, and drives the
// events (markers) at the points the probe's commands mark.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "verbs/contract/control_protocol.h"
#include "verbs/contract/ucma_protocol.h"

using namespace rrdma;
namespace ucma = rrdma::verbs::ucma;
namespace control = rrdma::verbs::control;

namespace {

// Long enough for a loaded 2-core machine; nothing waits this long when all goes well.
constexpr auto kPatience = std::chrono::seconds(120);
constexpr std::uint64_t kNodeGuid = 0x0252'44ff'fe01'0203;
constexpr std::uint64_t kFirstToken = 0x7000'0000'0000'0001;  // 64 bits on the wire
// enum rdma_cm_event_type (rdma_cma.h, which cannot be included beside rdma_user_cm.h).
constexpr std::uint32_t kEstablished = 9;
constexpr std::uint32_t kDisconnected = 10;

template <typename T>
std::vector<std::uint8_t> bytes_of(const T& value) {
  std::vector<std::uint8_t> bytes(sizeof value);
  std::memcpy(bytes.data(), &value, sizeof value);
  return bytes;
}

template <typename T>
T body_as(const ucma::Frame& frame) {
  T value{};
  std::memcpy(&value, frame.body.data(), std::min(sizeof value, frame.body.size()));
  return value;
}

// One command frame the daemon received, with what it answered.
struct Seen {
  int connection = 0;  // command connections in accept order, from 1
  ucma::Frame frame;
  std::uint32_t status = 0;
  std::uint32_t assigned_id = 0;  // CREATE_ID: the id answered
};

class FakeDaemon {
 public:
  FakeDaemon() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rrdma-ucma-test-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    listener_ = listen_on(dir_ / "fake0.sock");
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeDaemon() {
    die();
    for (auto& thread : servers_) thread.join();
    for (int fd : connections_) ::close(fd);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::filesystem::path& dir() const { return dir_; }

  // A socket file whose daemon is gone: connect() is refused, as after a crash.
  void leave_stale_socket(const std::string& name) { ::close(bound_socket(dir_ / (name + ".sock"))); }

  // The first command seen that `match` accepts, waiting for it.
  Seen wait_command(const std::function<bool(const Seen&)>& match) {
    std::unique_lock lock(mutex_);
    std::optional<Seen> found;
    const bool arrived = changed_.wait_for(lock, kPatience, [&] {
      for (const auto& seen : seen_)
        if (match(seen)) return found.emplace(seen), true;
      return false;
    });
    REQUIRE(arrived);
    return *found;
  }
  // Waits until `count` commands seen match.
  void wait_count(const std::function<bool(const Seen&)>& match, int count) {
    std::unique_lock lock(mutex_);
    REQUIRE(changed_.wait_for(lock, kPatience, [&] {
      int matched = 0;
      for (const auto& seen : seen_) matched += match(seen);
      return matched >= count;
    }));
  }
  Seen wait_command(std::uint32_t command) {
    return wait_command([command](const Seen& seen) { return seen.frame.command == command; });
  }
  std::vector<Seen> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  void wait_channels(std::size_t count) {
    std::unique_lock lock(mutex_);
    REQUIRE(changed_.wait_for(lock, kPatience, [&] { return channels_answered_ >= count; }));
  }

  // An event for GET_EVENT on `token`, announced by one marker.
  void queue_event(std::uint64_t token, const rdma_ucm_event_resp& event) {
    std::lock_guard lock(mutex_);
    events_[token].push_back(event);
    REQUIRE(::send(channels_.at(token), "m", 1, MSG_NOSIGNAL) == 1);
  }
  // A marker with no event behind it, as DESTROY_ID leaves when it purges one.
  void write_stale_marker(std::uint64_t token) {
    std::lock_guard lock(mutex_);
    REQUIRE(::send(channels_.at(token), "m", 1, MSG_NOSIGNAL) == 1);
  }

  // True once the application's last descriptor of the channel is closed (EOF on ours).
  bool closed_by_application(std::uint64_t token) {
    int fd = -1;
    {
      std::lock_guard lock(mutex_);
      fd = channels_.at(token);
    }
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd watch{fd, POLLIN, 0};
      if (::poll(&watch, 1, 1000) < 0) return false;
      char byte = 0;
      if (::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) return true;
    }
    return false;
  }

  // The daemon goes away: no listener, every connection and channel end closed.
  void die() {
    if (dead_) return;
    dead_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    std::lock_guard lock(mutex_);
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
    for (auto& [token, fd] : channels_) ::close(fd);
    channels_.clear();
  }

 private:
  static sockaddr_un address_of(const std::filesystem::path& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    return address;
  }
  static int bound_socket(const std::filesystem::path& path) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    const sockaddr_un address = address_of(path);
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    return fd;
  }
  static int listen_on(const std::filesystem::path& path) {
    const int fd = bound_socket(path);
    REQUIRE(::listen(fd, 16) == 0);
    return fd;
  }

  void accept_loop() {
    for (int number = 1;; ++number) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard lock(mutex_);
      connections_.push_back(fd);
      servers_.emplace_back([this, fd, number] { serve(fd, number); });
    }
  }

  // The control socket carries both protocols, told apart by the magic.
  void serve(int fd, int connection) {
    for (;;) {
      std::uint8_t magic[4];
      if (::recv(fd, magic, sizeof magic, MSG_PEEK) != static_cast<ssize_t>(sizeof magic)) return;
      const bool served = ucma::is_ucma_frame(ByteSpan(magic, sizeof magic)) ? serve_ucma(fd, connection) : serve_verbs(fd);
      if (!served) return;
    }
  }

  // Our libibverbs opens the device once to learn its GUID (ibv_get_device_guid).
  static bool serve_verbs(int fd) {
    control::Received received = control::receive_message(fd);
    if (received.error != control::IoError::None) return false;
    control::Message reply = control::make_reply(received.message.type(), received.message.request_id, 0);
    if (received.message.type() == control::MessageType::OpenDevice) {
      reply.words[control::field::kContextHandle] = 1;
      reply.words[control::field::kNodeGuid] = kNodeGuid;
    }
    return control::send_message(fd, reply, {}) == control::IoError::None;
  }

  bool serve_ucma(int fd, int connection) {
    ucma::Received received = ucma::receive_frame(fd);
    if (received.error != control::IoError::None) return false;
    const bool creates = received.frame.kind == ucma::Kind::CreateChannel;
    Seen seen{connection, received.frame, 0, 0};
    int application_end = -1;
    ucma::Frame reply = creates ? create_channel(application_end) : answer(received.frame, seen);
    reply.kind = received.frame.kind;
    reply.reply = true;
    reply.request_id = received.frame.request_id;
    const bool sent = ucma::send_frame(fd, reply, application_end) == control::IoError::None;
    if (application_end >= 0) ::close(application_end);
    record(creates, std::move(seen));
    return sent;
  }

  // Made known to the test only once answered, so that what the test does next (die()) cannot
  // cut the reply off.
  void record(bool created_channel, Seen seen) {
    std::lock_guard lock(mutex_);
    if (created_channel) {
      ++channels_answered_;
    } else {
      seen_.push_back(std::move(seen));
    }
    changed_.notify_all();
  }

  // As the daemon does: the pair is made here, the application's end goes with the reply.
  ucma::Frame create_channel(int& application_end) {
    int ends[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) == 0);
    const int daemon_end = ends[0];
    application_end = ends[1];
    std::lock_guard lock(mutex_);
    ucma::Frame reply;
    reply.channel = kFirstToken + next_channel_++;
    channels_[reply.channel] = daemon_end;
    return reply;
  }

  // What the kernel would answer, reduced to what the probes look at.
  ucma::Frame answer(const ucma::Frame& request, Seen& seen) {
    std::lock_guard lock(mutex_);
    ucma::Frame reply;
    switch (request.command) {
      case RDMA_USER_CM_CMD_CREATE_ID: {
        seen.assigned_id = next_id_++;
        reply.body = bytes_of(rdma_ucm_create_id_resp{seen.assigned_id});
        break;
      }
      case RDMA_USER_CM_CMD_DESTROY_ID:
        reply.body = bytes_of(rdma_ucm_destroy_id_resp{delivered_[body_as<rdma_ucm_destroy_id>(request).id]});
        break;
      case RDMA_USER_CM_CMD_BIND:  // the AF_IB probe, refused as the daemon will
        reply.status = EAFNOSUPPORT;
        break;
      case RDMA_USER_CM_CMD_GET_EVENT: reply = next_event(request.channel); break;
      case RDMA_USER_CM_CMD_MIGRATE_ID: reply.body = bytes_of(rdma_ucm_migrate_resp{3}); break;
      case RDMA_USER_CM_CMD_QUERY_ROUTE: {
        rdma_ucm_query_route_resp route{};
        route.node_guid = kNodeGuid;
        reply.body = bytes_of(route);
        break;
      }
      default: break;
    }
    seen.status = reply.status;
    return reply;
  }

  ucma::Frame next_event(std::uint64_t token) {
    ucma::Frame reply;
    auto& queue = events_[token];
    if (queue.empty()) {
      reply.status = EAGAIN;
      return reply;
    }
    reply.body = bytes_of(queue.front());
    ++delivered_[queue.front().id];
    queue.erase(queue.begin());
    return reply;
  }

  std::filesystem::path dir_;
  int listener_ = -1;
  bool dead_ = false;
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> connections_;
  std::vector<std::thread> servers_;
  std::map<std::uint64_t, int> channels_;  // token -> the daemon's end
  std::uint64_t next_channel_ = 0;
  std::size_t channels_answered_ = 0;
  std::map<std::uint64_t, std::vector<rdma_ucm_event_resp>> events_;
  std::map<std::uint32_t, std::uint32_t> delivered_;  // id -> events answered
  std::vector<Seen> seen_;
  std::uint32_t next_id_ = 77;
};

// In a -DRRDMA_SANITIZE=ON build the preloaded shim comes before the probe's own ASan runtime
// in the library list, which ASan refuses unless told it is fine.
std::string sanitizer_options() {
  const char* inherited = std::getenv("ASAN_OPTIONS");
  const std::string options = inherited != nullptr && *inherited != '\0' ? std::string(inherited) + ":" : "";
  return "ASAN_OPTIONS=" + options + "verify_asan_link_order=0";
}

// ucma_probe with the shim preloaded; killed if the test gives up on it.
class Probe {
 public:
  Probe(const std::string& mode, const FakeDaemon& daemon, const std::vector<std::string>& extra_env) {
    std::vector<std::string> env = {"LD_PRELOAD=" RRDMA_UCMA_SHIM, "RRDMA_RUN_DIR=" + daemon.dir().string(),
                                    sanitizer_options()};
    if (const char* ubsan = std::getenv("UBSAN_OPTIONS")) env.push_back(std::string("UBSAN_OPTIONS=") + ubsan);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& entry : env) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::string program = RRDMA_UCMA_PROBE;
    std::string argument = mode;
    char* argv[] = {program.data(), argument.data(), nullptr};
    REQUIRE(::posix_spawn(&pid_, program.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
  }
  ~Probe() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // The exit status; -1 if it did not exit normally (a signal: SIGPIPE, SIGSEGV...).
  int wait_exit() {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = 0;
};

rdma_ucm_event_resp event(std::uint64_t uid, std::uint32_t id, std::uint32_t type, const char* private_data) {
  rdma_ucm_event_resp resp{};
  resp.uid = uid;
  resp.id = id;
  resp.event = type;
  resp.param.conn.private_data_len = static_cast<std::uint8_t>(std::strlen(private_data));
  std::memcpy(resp.param.conn.private_data, private_data, resp.param.conn.private_data_len);
  resp.param.conn.responder_resources = 1;
  resp.param.conn.initiator_depth = 2;
  return resp;
}

bool is_command(const Seen& seen, std::uint32_t command, std::uint32_t id) {
  return seen.frame.command == command && body_as<rdma_ucm_destroy_id>(seen.frame).id == id;
}

}  // namespace

TEST_CASE("ucma: the shim carries raw ucma commands, events and closes to the daemon", "[ucma]") {
  FakeDaemon daemon;
  // The first listed vnic whose daemon answers, as our libibverbs shows them.
  Probe probe("raw", daemon, {"RRDMA_DEVICES=nosuch,fake0"});

  // Nothing the shim refuses locally reached the daemon: CREATE_ID is the first command.
  const Seen created = daemon.wait_command(RDMA_USER_CM_CMD_CREATE_ID);
  CHECK(daemon.seen().front().frame.command == RDMA_USER_CM_CMD_CREATE_ID);
  const std::uint64_t first = created.frame.channel;
  const auto create = body_as<rdma_ucm_create_id>(created.frame);
  CHECK(created.frame.body.size() == sizeof(rdma_ucm_create_id));
  CHECK(create.uid == 0x1122334455667788);
  CHECK(create.ps == RDMA_PS_TCP);
  CHECK(create.qp_type == 2);
  CHECK(created.assigned_id == 77);

  // After LISTEN: a stale marker (answered EAGAIN), then the event the probe waits for.
  const auto listen = body_as<rdma_ucm_listen>(daemon.wait_command(RDMA_USER_CM_CMD_LISTEN).frame);
  CHECK((listen.id == 77 && listen.backlog == 3));
  daemon.write_stale_marker(first);
  daemon.wait_command([](const Seen& seen) { return seen.frame.command == RDMA_USER_CM_CMD_GET_EVENT && seen.status == EAGAIN; });
  daemon.queue_event(first, event(0x1122334455667788, 77, kEstablished, "hello"));

  // SET_OPTION carries the value behind optval; then an event for the probe's poll().
  const Seen option = daemon.wait_command(RDMA_USER_CM_CMD_SET_OPTION);
  REQUIRE(option.frame.body.size() == sizeof(rdma_ucm_set_option) + 1);
  CHECK(option.frame.body.back() == 0x20);
  const auto set = body_as<rdma_ucm_set_option>(option.frame);
  CHECK((set.id == 77 && set.level == RDMA_OPTION_ID && set.optname == RDMA_OPTION_ID_TOS && set.optlen == 1));
  daemon.queue_event(first, event(0x1122334455667788, 77, kDisconnected, ""));

  // One thread waits in GET_EVENT (past a stale marker: EAGAIN), another sends DISCONNECT on
  // the same channel; only then comes the waiter's event. Channels are numbered in open order.
  const std::uint64_t second = first + 1;
  daemon.wait_command(RDMA_USER_CM_CMD_NOTIFY);
  daemon.write_stale_marker(first);
  const auto stale = [](const Seen& seen) { return seen.frame.command == RDMA_USER_CM_CMD_GET_EVENT && seen.status == EAGAIN; };
  daemon.wait_count(stale, 2);
  daemon.write_stale_marker(second);  // tells the probe the waiter is past its EAGAIN
  const Seen disconnect = daemon.wait_command(RDMA_USER_CM_CMD_DISCONNECT);
  CHECK(disconnect.frame.channel == first);
  daemon.queue_event(first, event(0x1122334455667788, 77, kEstablished, "again"));

  // MIGRATE_ID on the second channel names the first by token.
  const Seen migrate = daemon.wait_command(RDMA_USER_CM_CMD_MIGRATE_ID);
  CHECK(migrate.frame.channel == second);
  CHECK(migrate.frame.aux_channel == first);
  CHECK(migrate.frame.body.size() == sizeof(rdma_ucm_migrate_id));

  // The dup'ed descriptor is the same channel; the forked child has its own connection.
  const Seen on_dup = daemon.wait_command([](const Seen& seen) { return seen.assigned_id == 78; });
  CHECK(on_dup.frame.channel == first);
  const Seen from_child = daemon.wait_command([](const Seen& seen) { return is_command(seen, RDMA_USER_CM_CMD_DESTROY_ID, 78); });
  CHECK(from_child.frame.channel == first);
  CHECK(from_child.connection != created.connection);
  const Seen destroyed = daemon.wait_command([](const Seen& seen) { return is_command(seen, RDMA_USER_CM_CMD_DESTROY_ID, 77); });
  CHECK(destroyed.connection == created.connection);

  // Closing the descriptors ends both channels; the probe then opens a third and waits in
  // GET_EVENT while the daemon dies under it.
  CHECK(daemon.closed_by_application(second));
  CHECK(daemon.closed_by_application(first));
  daemon.wait_channels(3);
  daemon.die();
  CHECK(probe.wait_exit() == 0);

  // Three GET_EVENTs answered events, two EAGAIN (stale markers); those under O_NONBLOCK with
  // no marker never left the process.
  int get_events = 0;
  for (const auto& seen : daemon.seen()) get_events += seen.frame.command == RDMA_USER_CM_CMD_GET_EVENT;
  CHECK(get_events == 5);
}

#ifdef RRDMA_HAVE_LIBRDMACM
TEST_CASE("ucma: Debian's librdmacm runs over the shim: AF_IB probe, create_id, an event, destroy", "[ucma]") {
  FakeDaemon daemon;
  daemon.leave_stale_socket("a-dead");  // sorted first, skipped: its daemon is gone
  Probe probe("librdmacm", daemon, {"LD_LIBRARY_PATH=" RRDMA_IBVERBS_BUILD_DIR});

  // ucma_init's AF_IB probe: a sync id on its own channel, BIND refused, destroyed, closed.
  const Seen probe_id = daemon.wait_command(RDMA_USER_CM_CMD_CREATE_ID);
  CHECK(body_as<rdma_ucm_create_id>(probe_id.frame).ps == RDMA_PS_IB);
  const Seen bind = daemon.wait_command(RDMA_USER_CM_CMD_BIND);
  CHECK(bind.frame.channel == probe_id.frame.channel);
  CHECK(bind.status == EAFNOSUPPORT);
  daemon.wait_command([&](const Seen& seen) { return is_command(seen, RDMA_USER_CM_CMD_DESTROY_ID, probe_id.assigned_id); });
  CHECK(daemon.closed_by_application(probe_id.frame.channel));

  // The program's own id: its uid is librdmacm's pointer, echoed in the event.
  const Seen created = daemon.wait_command([](const Seen& seen) {
    return seen.frame.command == RDMA_USER_CM_CMD_CREATE_ID && body_as<rdma_ucm_create_id>(seen.frame).ps == RDMA_PS_TCP;
  });
  const auto create = body_as<rdma_ucm_create_id>(created.frame);
  CHECK(create.uid != 0);
  CHECK(create.qp_type == 2);
  CHECK(created.frame.channel != probe_id.frame.channel);
  daemon.queue_event(created.frame.channel, event(create.uid, created.assigned_id, kEstablished, "rrdma"));

  daemon.wait_command([&](const Seen& seen) { return is_command(seen, RDMA_USER_CM_CMD_DESTROY_ID, created.assigned_id); });
  CHECK(daemon.closed_by_application(created.frame.channel));
  CHECK(probe.wait_exit() == 0);
}
#endif

// As the kernel's GET_EVENT (a wait in write()): EINTR after a handler without SA_RESTART,
// restarted under SA_RESTART, so that a restarted wait sends nothing to the daemon until
// its marker comes.
TEST_CASE("ucma: a blocking GET_EVENT ends with EINTR after a signal without SA_RESTART and sleeps on under SA_RESTART", "[ucma]") {
  FakeDaemon daemon;
  Probe probe("signals", daemon, {});
  daemon.wait_channels(1);
  const Seen cue = daemon.wait_command(RDMA_USER_CM_CMD_NOTIFY);
  daemon.queue_event(cue.frame.channel, event(0x1122334455667788, 77, kEstablished, "tick"));
  CHECK(probe.wait_exit() == 0);
  daemon.wait_command(RDMA_USER_CM_CMD_GET_EVENT);  // recorded just after its answer went out
  int get_events = 0;
  for (const auto& seen : daemon.seen()) get_events += seen.frame.command == RDMA_USER_CM_CMD_GET_EVENT;
  CHECK(get_events == 1);
}

TEST_CASE("ucma: without a running vnic the device cannot be opened (ENODEV)", "[ucma]") {
  FakeDaemon daemon;
  daemon.die();
  Probe probe("nodaemon", daemon, {});
  CHECK(probe.wait_exit() == 0);
  CHECK(daemon.seen().empty());
}
